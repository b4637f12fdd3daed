"""Triton kernels of the ``triton.gemv_tn`` family (imported only by its builder).

``y[b, 0, :] = alpha * (x[b, 0, :] @ W[b]) + beta * C0[b, 0, :] + bias`` with W
stored ``[batch, k, n]`` row-major (tB = 0: the fused QKV weight, the attention
V). A program owns BLOCK_N contiguous columns — each row of its tile is one
coalesced run along N, 16-byte loads where the stride and alignment allow — and
walks its rows of K in BLOCK_K steps, accumulating the ``[BLOCK_K, BLOCK_N]``
products in fp32 registers; one reduction over K at the end, no cross-thread
traffic inside the loop. Grid: (column blocks, K splits, batch).

MODE (constexpr) picks what a program does with its column sums:

* 0 — no split: the whole epilogue (alpha, beta·C0, bias, cast) and the store.
* 1 — split K, the last program finalizes: partial sums go into an fp32
  workspace ``[batch, n]`` by relaxed atomic adds; the program that arrives
  last at the column block's counter (``arrive_last``) takes the sums
  (``take_sums``: the workspace left zero), resets the counter — both zero
  again after every call (graph replay) — and runs the epilogue.
* 2 — split K, partial sums only; :func:`gemv_tn_finalize_kernel` (a second
  launch) applies the epilogue and zeroes the workspace.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import (
    block_outputs,
    epilogue_store,
    last_finishes,
    row_block,
    take_sums,
)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def gemv_tn_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [batch, 1, k] activations (A viewed as [batch, m, k])
    w_ptr,  # [batch, k, n] weights, N contiguous for coalesced loads
    epilogue_ptrs,  # (C0, bias, out): C0 read only when HAS_C0, the bias when HAS_BIAS
    ws_ptr,  # fp32 [batch, n] workspace, zero between calls (MODE 1, 2)
    cnt_ptr,  # int32 [batch, column blocks] counters, zero between calls (MODE 1)
    n,
    k,
    k_chunk,  # rows of K per split: a multiple of BLOCK_K
    stride_xb,
    stride_xk,
    stride_wb,
    stride_wk,
    stride_wn,
    epilogue_args,  # their strides, alpha, beta
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    MODE: tl.constexpr,  # noqa: N803 - 0 no split, 1 last program finalizes, 2 partials only
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
) -> None:
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    # Batch, row and column bases in int64: batch · k · n may pass 2**31 elements.
    pid_b = tl.program_id(2).to(tl.int64)
    col0, cols, offs_n, mask_n = block_outputs(pid_n, n, BLOCK_N)
    rows = tl.arange(0, BLOCK_K)
    k_start = pid_s * k_chunk
    k_end = tl.minimum(k_start + k_chunk, k)

    x_ptrs = x_ptr + pid_b * stride_xb + k_start.to(tl.int64) * stride_xk + rows * stride_xk
    w_ptrs = (
        w_ptr
        + pid_b * stride_wb
        + k_start.to(tl.int64) * stride_wk
        + col0.to(tl.int64) * stride_wn
        + rows[:, None] * stride_wk
        + cols[None, :] * stride_wn
    )

    acc = tl.zeros([BLOCK_K, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        mask_k = k0 + rows < k_end
        x = tl.load(x_ptrs, mask=mask_k, other=0.0).to(tl.float32)
        w = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
        acc += w * x[:, None]
        # Advance the pointers (64-bit) rather than growing an int32 offset.
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    col = tl.sum(acc, axis=0)

    if MODE == 0:
        epilogue_store(col, pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS)
    else:
        ws_ptrs = ws_ptr + pid_b * n + offs_n
        tl.atomic_add(ws_ptrs, col, mask=mask_n, sem="relaxed")
        if MODE == 1:
            # The last of this column block's splits finishes it.
            cnt = cnt_ptr + pid_b * tl.num_programs(0) + pid_n
            last_finishes(cnt, tl.num_programs(1), ws_ptrs, pid_b, offs_n, mask_n, epilogue_ptrs,
                          epilogue_args, HAS_C0, HAS_BIAS)  # fmt: skip


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def gemv_tn_finalize_kernel(  # type: ignore[no-untyped-def]
    ws_ptr,  # fp32 [batch, n] sums from gemv_tn_kernel (MODE 2); zeroed here
    epilogue_ptrs,
    n,
    epilogue_args,  # their strides, alpha, beta
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
) -> None:
    pid_b, _, _, offs_n, mask_n = row_block(n, BLOCK_N)
    ws_ptrs = ws_ptr + pid_b * n + offs_n
    total = take_sums(ws_ptrs, mask_n)
    epilogue_store(total, pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS)
