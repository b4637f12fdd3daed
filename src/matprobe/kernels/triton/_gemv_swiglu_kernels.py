"""Triton kernels of the ``triton.gemv_swiglu`` family (imported only by its builder).

``y[b, 0, j] = silu(g_j) · u_j`` with ``g_j = W[b, j, :] · x[b, 0, :]`` and
``u_j = W[b, n0 + j, :] · x[b, 0, :]``: W holds gate and up stacked,
``[batch, n0 + n1, k]`` (n0 == n1). Each program computes BLOCK_N outputs and
reads, for each, the gate row j and the up row n0 + j — the two halves of a
decode MLP's first matmul in one pass over x, with the activation applied in
registers instead of in a second (eager) kernel that re-reads both halves.

Both sums stay fp32 across every K tile (a half-precision running sum is what
the tolerance refuses), silu and the product are fp32 too, and the result is
cast once, on store (``_blocks.store_out`` with no C₀ and no bias).

* :func:`gemv_swiglu_kernel` — f16/bf16 W: products pile up in two
  [BLOCK_N, BLOCK_K] fp32 tiles, reduced once after the last K tile.
* :func:`gemv_swiglu_q8_kernel` — Q8_0 W in the split layout (int8 quants
  ``[batch, n0 + n1, k]``, fp16 scales ``[batch, n0 + n1, k/32]``), as
  ``_gemv_q8_kernels`` reads it blockwise: q·x summed within each
  32-weight block, then scaled once per block, in fp32.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import row_block, row_ptrs, rows_below, silu_mul, store_out


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def gemv_swiglu_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [batch, 1, k] activations
    w_ptr,  # [batch, n0 + n1, k] gate rows, then up rows
    out_ptr,  # [batch, 1, n0]
    n0,
    k,
    stride_xb,
    stride_xk,
    stride_wb,
    stride_wn,
    stride_wk,
    stride_ob,
    stride_on,
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
    K_TILES: tl.constexpr,  # noqa: N803 - cdiv(k, BLOCK_K): the loop is unrolled
    EVEN_K: tl.constexpr,  # noqa: N803 - k % BLOCK_K == 0: no K masks
    EVEN_N: tl.constexpr,  # noqa: N803 - n0 % BLOCK_N == 0: no row masks
) -> None:
    pid_b, row0, rows, offs_n, mask_n = row_block(n0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    x_base = x_ptr + pid_b * stride_xb
    g_rows = row_ptrs(w_ptr, pid_b, row0, rows, stride_wb, stride_wn)
    u_rows = rows_below(g_rows, row0, n0, stride_wn)  # the up row of output j: n0 + j

    acc_g = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for t in tl.static_range(K_TILES):
        ks = t * BLOCK_K + offs_k
        if EVEN_K and EVEN_N:
            x = tl.load(x_base + ks * stride_xk).to(tl.float32)
            g = tl.load(g_rows + ks[None, :] * stride_wk).to(tl.float32)
            u = tl.load(u_rows + ks[None, :] * stride_wk).to(tl.float32)
        else:
            mask_k = ks < k
            mask = mask_n[:, None] & mask_k[None, :]
            x = tl.load(x_base + ks * stride_xk, mask=mask_k, other=0.0).to(tl.float32)
            g = tl.load(g_rows + ks[None, :] * stride_wk, mask=mask, other=0.0).to(tl.float32)
            u = tl.load(u_rows + ks[None, :] * stride_wk, mask=mask, other=0.0).to(tl.float32)
        acc_g += g * x[None, :]
        acc_u += u * x[None, :]
    y = silu_mul(tl.sum(acc_g, axis=1), tl.sum(acc_u, axis=1))
    store_out(y, 0.0, 0.0, 1.0, out_ptr + pid_b * stride_ob + offs_n * stride_on, mask_n)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def gemv_swiglu_q8_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [batch, 1, k] fp16 activations
    q_ptr,  # [batch, n0 + n1, k] int8 quants, gate rows then up rows
    d_ptr,  # [batch, n0 + n1, k/32] fp16 scales
    out_ptr,  # [batch, 1, n0]
    n0,
    k,
    stride_xb,
    stride_xk,
    stride_qb,
    stride_qn,
    stride_db,
    stride_dn,
    stride_ob,
    stride_on,
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803 - a multiple of 32 (whole Q8_0 blocks)
    K_TILES: tl.constexpr,  # noqa: N803 - cdiv(k, BLOCK_K): the loop is unrolled
    EVEN_K: tl.constexpr,  # noqa: N803 - k % BLOCK_K == 0: no K masks
    EVEN_N: tl.constexpr,  # noqa: N803 - n0 % BLOCK_N == 0: no row masks
    NB: tl.constexpr,  # noqa: N803 - BLOCK_K // 32: Q8_0 blocks in a tile
) -> None:
    pid_b, row0, rows, offs_n, mask_n = row_block(n0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_b = tl.arange(0, NB)

    x_base = x_ptr + pid_b * stride_xb
    qg_rows = row_ptrs(q_ptr, pid_b, row0, rows, stride_qb, stride_qn)
    dg_rows = row_ptrs(d_ptr, pid_b, row0, rows, stride_db, stride_dn)
    qu_rows = rows_below(qg_rows, row0, n0, stride_qn)  # the up row of output j: n0 + j
    du_rows = rows_below(dg_rows, row0, n0, stride_dn)

    acc_g = tl.zeros([BLOCK_N, NB], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_N, NB], dtype=tl.float32)
    for t in tl.static_range(K_TILES):
        ks = t * BLOCK_K + offs_k
        blocks = t * NB + offs_b
        if EVEN_K and EVEN_N:
            x = tl.load(x_base + ks * stride_xk).to(tl.float32)
            qg = tl.load(qg_rows + ks[None, :])
            qu = tl.load(qu_rows + ks[None, :])
            dg = tl.load(dg_rows + blocks[None, :])
            du = tl.load(du_rows + blocks[None, :])
        else:
            mask_k = ks < k
            mask = mask_n[:, None] & mask_k[None, :]
            # k is whole blocks (Q8_0), so a block is either all inside or all past k.
            mask_d = mask_n[:, None] & (blocks * 32 < k)[None, :]
            x = tl.load(x_base + ks * stride_xk, mask=mask_k, other=0.0).to(tl.float32)
            qg = tl.load(qg_rows + ks[None, :], mask=mask, other=0)
            qu = tl.load(qu_rows + ks[None, :], mask=mask, other=0)
            dg = tl.load(dg_rows + blocks[None, :], mask=mask_d, other=0.0)
            du = tl.load(du_rows + blocks[None, :], mask=mask_d, other=0.0)
        # Σ q·x per 32-weight block (exact enough in fp32: 8-bit q, 11-bit x), then
        # one multiply by that block's scale.
        pg = tl.reshape(qg.to(tl.float32) * x[None, :], [BLOCK_N, NB, 32])
        pu = tl.reshape(qu.to(tl.float32) * x[None, :], [BLOCK_N, NB, 32])
        acc_g += tl.sum(pg, axis=2) * dg.to(tl.float32)
        acc_u += tl.sum(pu, axis=2) * du.to(tl.float32)
    y = silu_mul(tl.sum(acc_g, axis=1), tl.sum(acc_u, axis=1))
    store_out(y, 0.0, 0.0, 1.0, out_ptr + pid_b * stride_ob + offs_n * stride_on, mask_n)
