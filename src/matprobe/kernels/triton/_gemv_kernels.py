"""Triton kernel of the ``triton.gemv_nt`` family (imported only by its builder).

``y[b, 0, :] = alpha * (W[b] @ x[b, 0, :]) + beta * C0[b, 0, :] + bias`` with W
stored ``[batch, n, k]`` (the weight layout, tB = 1). Each program computes
BLOCK_N outputs of one batch entry, walking K in BLOCK_K tiles; products are
summed in fp32; the shared epilogue (``_blocks``) runs in fp32 before one
cast on store.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import epilogue_store, row_block, row_ptrs


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def masked_tiles(x_base, w_rows, ks, k, mask_n, stride_xk, stride_wk):  # type: ignore[no-untyped-def]
    """``(x, w)`` in fp32 at K indices ``ks``: x's ``[len(ks)]`` and the rows'
    ``[BLOCK_N, len(ks)]`` tile, zeros past ``k`` and on the rows ``mask_n``
    leaves out — a ragged K tile, unrolled or in the K loop."""
    mask_k = ks < k
    x = tl.load(x_base + ks * stride_xk, mask=mask_k, other=0.0).to(tl.float32)
    w = tl.load(w_rows + ks[None, :] * stride_wk, mask=mask_n[:, None] & mask_k[None, :],
                other=0.0).to(tl.float32)  # fmt: skip
    return x, w


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def gemv_nt_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [batch, 1, k] activations (A viewed as [batch, m, k])
    w_ptr,  # [batch, n, k] weights
    epilogue_ptrs,  # (C0, bias, out): C0 read only when HAS_C0, the bias when HAS_BIAS
    n,
    k,
    stride_xb,
    stride_xk,
    stride_wb,
    stride_wn,
    stride_wk,
    epilogue_args,  # their strides, alpha, beta
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
    K_TILES: tl.constexpr,  # noqa: N803 - cdiv(k, BLOCK_K): the shape is fixed per spec
    EVEN_K: tl.constexpr,  # noqa: N803 - k % BLOCK_K == 0: no K masks
    EVEN_N: tl.constexpr,  # noqa: N803 - n % BLOCK_N == 0: no row masks
    UNROLL: tl.constexpr,  # noqa: N803 - unroll the K loop so every tile's loads issue up front
    PDL: tl.constexpr = False,  # noqa: N803 - launched with programmatic dependent launch
) -> None:
    pid_b, row0, rows, offs_n, mask_n = row_block(n, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    x_base = x_ptr + pid_b * stride_xb
    w_rows = row_ptrs(w_ptr, pid_b, row0, rows, stride_wb, stride_wn)

    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    if PDL:
        # Programmatic dependent launch (Hopper+). The next kernel in the stream
        # may launch as soon as every program of this one has started; this one's
        # weights are read before waiting on the previous kernel, because weights
        # are never written by it. x (the previous kernel's output) is read, and
        # out written, only after the wait. The whole row block is one tile
        # (K_TILES == 1): its loads are all in flight before the wait.
        tl.extra.cuda.gdc_launch_dependents()
        if EVEN_K:
            if EVEN_N:
                w = tl.load(w_rows + offs_k[None, :] * stride_wk)
            else:
                w = tl.load(w_rows + offs_k[None, :] * stride_wk, mask=mask_n[:, None], other=0.0)
            tl.extra.cuda.gdc_wait()
            x = tl.load(x_base + offs_k * stride_xk).to(tl.float32)
        else:
            mask_k = offs_k < k
            w = tl.load(
                w_rows + offs_k[None, :] * stride_wk,
                mask=mask_n[:, None] & mask_k[None, :],
                other=0.0,
            )
            tl.extra.cuda.gdc_wait()
            x = tl.load(x_base + offs_k * stride_xk, mask=mask_k, other=0.0).to(tl.float32)
        acc = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
    elif UNROLL:
        # A fixed, fully unrolled K loop: the compiler can hoist every tile's loads
        # ahead of the arithmetic, so all of a program's bytes are in flight at once.
        # Products pile up elementwise in a [BLOCK_N, BLOCK_K] fp32 tile and are
        # reduced across the threads once, after the last tile (a cross-warp
        # reduction per tile would serialize the program on shared memory).
        acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        for t in tl.static_range(K_TILES):
            ks = t * BLOCK_K + offs_k
            if EVEN_K:
                x = tl.load(x_base + ks * stride_xk).to(tl.float32)
                if EVEN_N:
                    w = tl.load(w_rows + ks[None, :] * stride_wk).to(tl.float32)
                else:
                    w = tl.load(
                        w_rows + ks[None, :] * stride_wk, mask=mask_n[:, None], other=0.0
                    ).to(tl.float32)
            else:
                x, w = masked_tiles(x_base, w_rows, ks, k, mask_n, stride_xk, stride_wk)
            acc2 += w * x[None, :]
        acc = tl.sum(acc2, axis=1)
    else:
        for k0 in range(0, k, BLOCK_K):
            x, w = masked_tiles(x_base, w_rows, k0 + offs_k, k, mask_n, stride_xk, stride_wk)
            acc += tl.sum(w * x[None, :], axis=1)

    epilogue_store(acc, pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS)
