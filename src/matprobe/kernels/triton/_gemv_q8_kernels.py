"""Triton kernel of the ``triton.gemv_q8`` family (imported only by its builder).

``y[b, 0, :] = alpha * (W[b] @ x[b, 0, :]) + beta * C0[b, 0, :] + bias`` with W
in Q8_0's split layout: int8 quants ``[batch, n, k]`` and fp16 scales
``[batch, n, k/32]`` (one per 32 weights along K; ``w = d·q``). Each program
computes BLOCK_N outputs, walking K in BLOCK_K tiles (a multiple of 32); the
quants are loaded as int8 (1 byte a weight). BLOCKWISE (constexpr) picks how
the scales meet them:

* 0 — each lane gathers its own scale from the row's scales (32 lanes read
  one fp16: one L1 line serves them), dequantizes in fp32 — exact, an 11-bit
  scale times an 8-bit quant — and multiplies by x; products pile up in a
  [BLOCK_N, BLOCK_K] fp32 tile reduced once at the end.
* 1 — q·x is summed within each 32-weight block first (a reshape to
  [BLOCK_N, BLOCK_K/32, 32]), then scaled once per block by the scales loaded
  as [BLOCK_N, BLOCK_K/32]: 1/32 of the scale loads and multiplies.

Both sum in fp32 and end in the shared epilogue.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import epilogue_store, row_block, row_ptrs


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def gemv_q8_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [batch, 1, k] fp16 activations
    q_ptr,  # [batch, n, k] int8 quants
    d_ptr,  # [batch, n, k/32] fp16 scales
    epilogue_ptrs,  # (C0, bias, out): C0 read only when HAS_C0, the bias when HAS_BIAS
    n,
    k,
    stride_xb,
    stride_xk,
    stride_qb,
    stride_qn,
    stride_db,
    stride_dn,
    epilogue_args,  # their strides, alpha, beta
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803 - a multiple of 32 (whole Q8_0 blocks)
    K_TILES: tl.constexpr,  # noqa: N803 - cdiv(k, BLOCK_K): the loop is unrolled
    EVEN_K: tl.constexpr,  # noqa: N803 - k % BLOCK_K == 0: no K masks
    EVEN_N: tl.constexpr,  # noqa: N803 - n % BLOCK_N == 0: no row masks
    NB: tl.constexpr,  # noqa: N803 - BLOCK_K // 32: Q8_0 blocks in a tile
    BLOCKWISE: tl.constexpr = False,  # noqa: N803 - sum each 32-block, then scale it once
) -> None:
    pid_b, row0, rows, offs_n, mask_n = row_block(n, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    x_base = x_ptr + pid_b * stride_xb
    q_rows = row_ptrs(q_ptr, pid_b, row0, rows, stride_qb, stride_qn)
    d_rows = row_ptrs(d_ptr, pid_b, row0, rows, stride_db, stride_dn)

    offs_b = tl.arange(0, NB)
    if BLOCKWISE:
        acc2 = tl.zeros([BLOCK_N, NB], dtype=tl.float32)
    else:
        acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for t in tl.static_range(K_TILES):
        ks = t * BLOCK_K + offs_k
        # (an if block, not a conditional expression: Triton folds it on the constexpr)
        if BLOCKWISE:  # noqa: SIM108
            ds = d_rows + (t * NB + offs_b)[None, :]
        else:
            ds = d_rows + (ks // 32)[None, :]
        if EVEN_K:
            x = tl.load(x_base + ks * stride_xk).to(tl.float32)
            if EVEN_N:
                q = tl.load(q_rows + ks[None, :])
                d = tl.load(ds)
            else:
                q = tl.load(q_rows + ks[None, :], mask=mask_n[:, None], other=0)
                d = tl.load(ds, mask=mask_n[:, None], other=0.0)
        else:
            mask_k = ks < k
            x = tl.load(x_base + ks * stride_xk, mask=mask_k, other=0.0).to(tl.float32)
            q = tl.load(q_rows + ks[None, :], mask=mask_n[:, None] & mask_k[None, :], other=0)
            if BLOCKWISE:
                mask_b = (t * NB + offs_b) * 32 < k
                d = tl.load(ds, mask=mask_n[:, None] & mask_b[None, :], other=0.0)
            else:
                d = tl.load(ds, mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        if BLOCKWISE:
            products = tl.reshape(q.to(tl.float32) * x[None, :], [BLOCK_N, NB, 32])
            acc2 += tl.sum(products, axis=2) * d.to(tl.float32)
        else:
            acc2 += (q.to(tl.float32) * d.to(tl.float32)) * x[None, :]
    acc = tl.sum(acc2, axis=1)
    epilogue_store(acc, pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS)
