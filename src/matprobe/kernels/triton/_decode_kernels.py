"""Triton kernel of the decode step's fused matmuls (imported only by its launcher,
``matprobe.kernels.triton.decode``).

One row GEMV (m = 1, batch 1, W stored ``[rows, k]``) with everything a decode
layer does around its matmuls folded in, each part a constexpr:

* ``NORM`` — RMSNorm prologue: the kernel reads the residual stream h, not a
  normalised copy. While it walks K it sums h² (it loads all of h anyway) and
  multiplies h by the norm's gain; the sums are scaled once by
  ``rsqrt(mean(h²) + eps)`` at the end — W·(g⊙h)·r = W·(r·g⊙h), so the norm
  costs no pass of its own and no normalised vector is written or re-read.
* ``Q8`` — W in Q8_0's split layout: int8 quants ``[rows, k]`` and fp16 scales
  ``[rows, k/32]``; q·x summed within each 32-weight block, then scaled once per
  block (``triton.gemv_q8``'s blockwise path, the faster one on an H100).
* ``SWIGLU`` — output j is ``silu(W[j]·x) · (W[up + j]·x)``: gate and up rows
  read in one pass (``triton.gemv_swiglu``), the activation applied in registers.
* the epilogue — ``alpha·acc + beta·C0 + bias`` (``_blocks``): with C0 the
  residual stream and beta = 1 this is the addmm residual of o_proj and down.

Every sum is fp32 and the result is cast once, on store.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import (
    epilogue_terms,
    row_block,
    row_ptrs,
    rows_below,
    silu_mul,
    store_out,
)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def load_tile(  # type: ignore[no-untyped-def]
    w_rows,  # [BLOCK_N, 1] pointers to the rows' first weight (quants when Q8)
    d_rows,  # [BLOCK_N, 1] pointers to the rows' first scale (Q8 only)
    ks,  # [BLOCK_K] K indices of this tile
    blocks,  # [NB] Q8_0 block indices of this tile
    mask_n,
    k,
    Q8: tl.constexpr,  # noqa: N803
    EVEN: tl.constexpr,  # noqa: N803 - no row or K masks needed
):
    """This tile's weights as stored: (W, W) dense, (quants, block scales) Q8_0."""
    if Q8:
        if EVEN:
            q = tl.load(w_rows + ks[None, :])
            d = tl.load(d_rows + blocks[None, :])
        else:
            q = tl.load(w_rows + ks[None, :], mask=mask_n[:, None] & (ks < k)[None, :], other=0)
            # k is whole Q8_0 blocks: a block is all inside k or all past it.
            mask_d = mask_n[:, None] & (blocks * 32 < k)[None, :]
            d = tl.load(d_rows + blocks[None, :], mask=mask_d, other=0.0)
    else:
        if EVEN:
            q = tl.load(w_rows + ks[None, :])
        else:
            q = tl.load(w_rows + ks[None, :], mask=mask_n[:, None] & (ks < k)[None, :],
                        other=0.0)  # fmt: skip
        d = q
    return q, d


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def tile_products(  # type: ignore[no-untyped-def]
    q,  # the tile's weights as :func:`load_tile` gives them
    d,
    x,  # [BLOCK_K] fp32 activations (already normalised and scaled when NORM)
    Q8: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    NB: tl.constexpr,  # noqa: N803
):
    """This tile's fp32 contribution: [BLOCK_N, NB] block sums already scaled (Q8),
    or [BLOCK_N, BLOCK_K] products (dense W), to be reduced after the last tile."""
    if Q8:
        sums = tl.sum(tl.reshape(q.to(tl.float32) * x[None, :], [BLOCK_N, NB, 32]), axis=2)
        products = sums * d.to(tl.float32)
    else:  # (an else, not an early return: compiled Triton would type both returns)
        products = q.to(tl.float32) * x[None, :]
    return products


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def decode_gemv_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [k] activations (h itself when NORM)
    w_ptr,  # [rows, k] weights, or int8 quants when Q8
    d_ptr,  # [rows, k/32] fp16 scales, read only when Q8
    gain_ptr,  # [k] RMSNorm gain, read only when NORM
    c0_ptr,  # [n] C0 (the residual), read only when HAS_C0
    bias_ptr,  # [n] bias, read only when HAS_BIAS
    out_ptr,  # [n]
    n,  # outputs
    k,
    up_row,  # first up row (SWIGLU): output j reads rows j and up_row + j
    stride_wn,
    stride_dn,
    alpha,
    beta,
    eps,
    Q8: tl.constexpr,  # noqa: N803
    NORM: tl.constexpr,  # noqa: N803
    SWIGLU: tl.constexpr,  # noqa: N803
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803 - a multiple of 32 when Q8 (whole blocks)
    K_TILES: tl.constexpr,  # noqa: N803 - cdiv(k, BLOCK_K): the loop is unrolled
    EVEN_K: tl.constexpr,  # noqa: N803 - k % BLOCK_K == 0: no K masks
    EVEN: tl.constexpr,  # noqa: N803 - EVEN_K and n % BLOCK_N == 0: no masks at all
    NB: tl.constexpr,  # noqa: N803 - BLOCK_K // 32 (Q8_0 blocks in a tile), else 1
    PDL: tl.constexpr = False,  # noqa: N803 - launched with programmatic dependent launch
) -> None:
    pid_b, row0, rows, offs_n, mask_n = row_block(n, BLOCK_N)  # a 1-D grid: pid_b = 0
    offs_k = tl.arange(0, BLOCK_K)
    blocks0 = tl.arange(0, NB)
    g_rows = row_ptrs(w_ptr, pid_b, row0, rows, 0, stride_wn)
    dg_rows = row_ptrs(d_ptr, pid_b, row0, rows, 0, stride_dn)
    u_rows = rows_below(g_rows, row0, up_row, stride_wn)
    du_rows = rows_below(dg_rows, row0, up_row, stride_dn)
    if PDL:
        # Programmatic dependent launch (Hopper+): the next kernel may launch once
        # every program here has started. The first tile's weights — never written
        # by any kernel — are read before waiting on the previous kernels; x, C0
        # (the residual stream they write) and everything else only after.
        tl.extra.cuda.gdc_launch_dependents()
        g_first, dg_first = load_tile(g_rows, dg_rows, offs_k, blocks0, mask_n, k, Q8, EVEN)
        if SWIGLU:
            u_first, du_first = load_tile(u_rows, du_rows, offs_k, blocks0, mask_n, k, Q8, EVEN)
        tl.extra.cuda.gdc_wait()
    # C0 and the bias load before the reduction: their latency overlaps it.
    c0_term, bias_term = epilogue_terms(
        c0_ptr + offs_n, mask_n, bias_ptr + offs_n, mask_n, beta, HAS_C0, HAS_BIAS
    )

    if Q8:
        acc_g = tl.zeros([BLOCK_N, NB], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_N, NB], dtype=tl.float32)
    else:
        acc_g = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for t in tl.static_range(K_TILES):
        ks = t * BLOCK_K + offs_k
        blocks = t * NB + blocks0
        if EVEN_K:
            x = tl.load(x_ptr + ks).to(tl.float32)
        else:
            x = tl.load(x_ptr + ks, mask=ks < k, other=0.0).to(tl.float32)
        if NORM:
            squares += x * x
            if EVEN_K:
                x = x * tl.load(gain_ptr + ks).to(tl.float32)
            else:
                x = x * tl.load(gain_ptr + ks, mask=ks < k, other=0.0).to(tl.float32)
        # With PDL the first tile was read before the wait. (PDL and t are constexprs:
        # the condition folds, and without PDL the branch that names g_first is never
        # compiled.)
        if PDL and t == 0:
            g_tile, dg_tile = g_first, dg_first
        else:
            g_tile, dg_tile = load_tile(g_rows, dg_rows, ks, blocks, mask_n, k, Q8, EVEN)
        acc_g += tile_products(g_tile, dg_tile, x, Q8, BLOCK_N, NB)
        if SWIGLU:
            if PDL and t == 0:
                u_tile, du_tile = u_first, du_first
            else:
                u_tile, du_tile = load_tile(u_rows, du_rows, ks, blocks, mask_n, k, Q8, EVEN)
            acc_u += tile_products(u_tile, du_tile, x, Q8, BLOCK_N, NB)
    rstd = 1.0
    if NORM:
        # the mean over the true k (masked lanes added zeros)
        rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / k + eps)
    y = tl.sum(acc_g, axis=1) * rstd
    if SWIGLU:
        y = silu_mul(y, tl.sum(acc_u, axis=1) * rstd)
    store_out(y, c0_term, bias_term, alpha, out_ptr + offs_n, mask_n)
