"""Triton kernels of the ``triton.gemv_splitk`` family (imported only by its builder).

``y[b, 0, :] = alpha * (W[b] @ x[b, 0, :]) + beta * C0[b, 0, :] + bias`` with W
stored ``[batch, n, k]`` (tB = 1). K is split into slices of TILES·BLOCK_K
columns; program (row block, slice, batch) sums BLOCK_N rows over its slice in
fp32. How the partial sums meet depends on MODE:

* 0 (``twopass``): plain stores into partials ``[slices, batch, n]``; the
  finalize kernel sums them in a fixed order (bitwise reproducible).
* 1 (``atomic``): relaxed fp32 atomic adds into a workspace ``[batch, n]``; the
  finalize kernel reads it, applies the epilogue and zeroes it again.
* 2 (``atomic_last``): as 1, then the program that arrives last at its (batch,
  row block) counter (``arrive_last``) takes the sums (``take_sums``: the
  workspace rows left zero), resets the counter, applies the epilogue and
  writes ``out``. One launch, no memset.

Workspace and counters are zero between calls (allocated zeroed, reset by the
program or kernel that consumes them), so CUDA-graph replays stay correct.
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
def splitk_partial_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [batch, 1, k] activations (A viewed as [batch, m, k])
    w_ptr,  # [batch, n, k] weights
    part_ptr,  # fp32: partials [slices, batch, n] (MODE 0) or workspace [batch, n]
    count_ptr,  # int32 [batch, row blocks], MODE 2 only (else never touched)
    epilogue_ptrs,  # (C0, bias, out), MODE 2 only (C0 with HAS_C0, the bias with HAS_BIAS)
    n,
    k,
    num_slices,  # programs along axis 1 (the last may hold fewer than TILES tiles)
    stride_xb,
    stride_xk,
    stride_wb,
    stride_wn,
    stride_wk,
    stride_ps,  # partials: slice stride (MODE 0)
    stride_pb,  # partials / workspace: batch stride (n stride is 1)
    stride_qb,  # counters: batch stride (row-block stride is 1)
    epilogue_args,  # their strides, alpha, beta
    MODE: tl.constexpr,  # noqa: N803 - 0 twopass, 1 atomic, 2 atomic_last
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
    TILES: tl.constexpr,  # noqa: N803 - BLOCK_K tiles per slice
    CHUNK: tl.constexpr,  # noqa: N803 - tiles per load (a power of two)
    NUM_CHUNKS: tl.constexpr,  # noqa: N803 - loads per slice, unrolled
    K_MODE: tl.constexpr,  # noqa: N803 - 0 slices all full, 1 last one slides back, 2 masks
    EVEN_N: tl.constexpr,  # noqa: N803 - n % BLOCK_N == 0 (else rows past n are clamped)
) -> None:
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    # Batch, row-block and slice bases in int64: batch · n · k may pass 2**31.
    pid_b = tl.program_id(2).to(tl.int64)
    row0, rows, offs_n, mask_n = block_outputs(pid_n, n, BLOCK_N)
    k_start = pid_s.to(tl.int64) * (TILES * BLOCK_K)
    k_off = k_start  # where this program's window of columns starts
    if K_MODE == 1:
        # The last slice is short: its window slides back to end at k (every
        # W load in bounds, none masked) and x is zero on the columns that
        # belong to the previous slice.
        k_off = tl.minimum(k_start, k - TILES * BLOCK_K)
    skip = k_start - k_off  # window columns owned by the previous slice
    k_lim = tl.minimum(k - k_start, TILES * BLOCK_K)  # K_MODE 2: columns to read

    x_base = x_ptr + pid_b * stride_xb + k_off * stride_xk
    w_base = w_ptr + pid_b * stride_wb + row0.to(tl.int64) * stride_wn + k_off * stride_wk
    if EVEN_N:
        w_rows = w_base + rows[:, None] * stride_wn
    else:
        # Rows past n re-read the last row (in bounds, unmasked); their sums
        # are never stored.
        w_rows = w_base + tl.minimum(rows, n - 1 - row0)[:, None] * stride_wn

    # A chunk (CHUNK consecutive tiles) is one [BLOCK_N, CHUNK·BLOCK_K] load,
    # all of it in flight before the first use. W is loaded before x: x's
    # change of layout costs a CTA barrier the W loads must not wait behind.
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    cols = tl.arange(0, CHUNK * BLOCK_K)
    for c in tl.static_range(NUM_CHUNKS):
        ks = c * (CHUNK * BLOCK_K) + cols  # offsets inside the window
        if K_MODE == 0:
            w = tl.load(w_rows + ks[None, :] * stride_wk)
            x = tl.load(x_base + ks * stride_xk)
        elif K_MODE == 1:
            w = tl.load(w_rows + ks[None, :] * stride_wk)
            x = tl.load(x_base + ks * stride_xk, mask=ks >= skip, other=0.0)
        else:
            mask_k = ks < k_lim
            w = tl.load(w_rows + ks[None, :] * stride_wk, mask=mask_k[None, :], other=0.0)
            x = tl.load(x_base + ks * stride_xk, mask=mask_k, other=0.0)
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)

    if MODE == 0:
        part = part_ptr + pid_s.to(tl.int64) * stride_ps + pid_b * stride_pb + offs_n
        tl.store(part, acc, mask=mask_n)
    else:
        ws = part_ptr + pid_b * stride_pb + offs_n
        # Relaxed: MODE 1 is ordered by the kernel boundary, MODE 2 by
        # arrive_last's barrier and acq_rel counter.
        tl.atomic_add(ws, acc, mask=mask_n, sem="relaxed", scope="gpu")
        if MODE == 2:
            # The last of this row block's slices finishes it.
            counter = count_ptr + pid_b * stride_qb + pid_n
            last_finishes(counter, num_slices, ws, pid_b, offs_n, mask_n, epilogue_ptrs,
                          epilogue_args, HAS_C0, HAS_BIAS)  # fmt: skip


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def splitk_finalize_kernel(  # type: ignore[no-untyped-def]
    part_ptr,  # fp32 partials [slices, batch, n] (twopass) or workspace [batch, n]
    epilogue_ptrs,
    n,
    num_slices,
    stride_ps,
    stride_pb,
    epilogue_args,  # their strides, alpha, beta
    RESET: tl.constexpr,  # noqa: N803 - the single-slice atomic workspace: zero it after reading
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_R: tl.constexpr,  # noqa: N803 - outputs per program
    BLOCK_S: tl.constexpr,  # noqa: N803 - slices loaded at once
) -> None:
    pid_b, _, _, offs_n, mask_n = row_block(n, BLOCK_R)
    base = part_ptr + pid_b * stride_pb + offs_n
    if RESET:
        # The atomic workspace [batch, n]: one slice, left zero for the next call.
        acc = take_sums(base, mask_n)
    else:
        sums = tl.zeros([BLOCK_S, BLOCK_R], dtype=tl.float32)
        for s0 in range(0, num_slices, BLOCK_S):
            ss = s0 + tl.arange(0, BLOCK_S)
            sums += tl.load(
                base[None, :] + ss[:, None].to(tl.int64) * stride_ps,
                mask=(ss < num_slices)[:, None] & mask_n[None, :],
                other=0.0,
            )
        acc = tl.sum(sums, axis=0)  # fixed order: the result is reproducible
    epilogue_store(acc, pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS)
