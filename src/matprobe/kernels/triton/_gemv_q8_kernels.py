"""Triton kernel of the ``triton.gemv_q8`` and ``triton.gemv_q8_int8dot`` families
(imported only by their builders).

``y[b, 0, :] = alpha * (W[b] @ x[b, 0, :]) + beta * C0[b, 0, :] + bias`` with W
in Q8_0's split layout: int8 quants ``[batch, n, k]`` and fp16 scales
``[batch, n, k/32]`` (one per 32 weights along K; ``w = d·q``). Each program
computes BLOCK_N outputs, walking K in BLOCK_K tiles (a multiple of 32); the
quants are loaded as int8 (1 byte a weight). Two constexprs pick how the
scales (and x) meet them:

* neither — each lane gathers its own scale from the row's scales (32 lanes read
  one fp16: one L1 line serves them), dequantizes in fp32 — exact, an 11-bit
  scale times an 8-bit quant — and multiplies by x; products pile up in a
  [BLOCK_N, BLOCK_K] fp32 tile reduced once at the end.
* BLOCKWISE — q·x is summed within each 32-weight block first (a reshape to
  [BLOCK_N, BLOCK_K/32, 32]), then scaled once per block by the scales loaded
  as [BLOCK_N, BLOCK_K/32]: 1/32 of the scale loads and multiplies.
* INT8DOT — the ``triton.gemv_q8_int8dot`` family: x̂, the activations
  *quantized to int8 per 32-element block* — what llama.cpp's CUDA mmvq does
  with Q8_0 weights (its activations in Q8_1 blocks), the scales loaded as in
  BLOCKWISE:

  - x, per block of 32: ``d_x = max|x| / 127`` in fp32, ``q_x = round(x / d_x)``
    rounded half away from zero (:func:`quantize_blocks`, the steps of
    ``matprobe.quant.quantize_q8_0`` — 1/d_x and the quotient correctly rounded —
    without rounding d_x to fp16);
  - per block, ``Σ q_w·q_x`` of int8 × int8 in int32 (at most 32·127² = 516 128:
    exact, and exact again as an fp32);
  - that sum times ``d_w·d_x`` in fp32.

  Each program quantizes the x tiles it reads itself, in registers, rather than
  a separate kernel writing x̂ once: x is tiny (k ≤ a few thousand), so
  quantizing it costs every program O(k) work against its BLOCK_N·k weight
  products, while a second launch would cost a launch, a scratch buffer and a
  dependency between the two kernels — for one matmul, the most of those.
  (llama.cpp quantizes x once and shares it among the matmuls that read the
  same x; one matmul cannot.) Every program computes the same x̂: the steps are
  deterministic.

All sum in fp32 and end in the shared epilogue. One kernel serves both
families: a constexpr folds each mode away, so each compiles to what a kernel
of its own would.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import epilogue_store, row_block, row_ptrs


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def quantize_blocks(x, NB: tl.constexpr):  # type: ignore[no-untyped-def]  # noqa: N803
    """``(q, d)`` of fp32 ``x`` ``[NB·32]`` in int8 blocks of 32: ``d`` ``[NB]`` fp32
    ``max|x|/127`` and ``q`` ``[NB, 32]`` int32 in [-127, 127], ``round(x·(1/d))`` half
    away from zero as ``floor(a) + floor(2·(a − floor(a)))`` of a = |x|/d (exact in
    fp32 where ``floor(a + 0.5)`` may round up). A block of zeros has d = 0, q = 0."""
    blocks = tl.reshape(x, [NB, 32])
    d = tl.math.div_rn(tl.max(tl.abs(blocks), axis=1), 127.0)
    one = tl.full(d.shape, 1.0, tl.float32)
    inverse = tl.where(d == 0.0, 0.0, tl.math.div_rn(one, tl.where(d == 0.0, one, d)))
    scaled = blocks * inverse[:, None]
    magnitude = tl.abs(scaled)
    floored = tl.floor(magnitude)
    rounded = floored + tl.floor(2.0 * (magnitude - floored))
    q = tl.where(scaled < 0.0, -rounded, rounded).to(tl.int32)
    return q, d


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
    INT8DOT: tl.constexpr = False,  # noqa: N803 - x quantized too: int8 · int8 per 32-block
) -> None:
    pid_b, row0, rows, offs_n, mask_n = row_block(n, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    x_base = x_ptr + pid_b * stride_xb
    q_rows = row_ptrs(q_ptr, pid_b, row0, rows, stride_qb, stride_qn)
    d_rows = row_ptrs(d_ptr, pid_b, row0, rows, stride_db, stride_dn)

    offs_b = tl.arange(0, NB)
    if BLOCKWISE or INT8DOT:
        acc2 = tl.zeros([BLOCK_N, NB], dtype=tl.float32)
    else:
        acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for t in tl.static_range(K_TILES):
        ks = t * BLOCK_K + offs_k
        # (an if block, not a conditional expression: Triton folds it on the constexpr)
        if BLOCKWISE or INT8DOT:
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
            if BLOCKWISE or INT8DOT:
                # k is whole blocks (Q8_0): a block is all inside k or all past it, and
                # a block past it loads as zeros (and, quantized, as d_x = 0, q_x = 0).
                mask_b = (t * NB + offs_b) * 32 < k
                d = tl.load(ds, mask=mask_n[:, None] & mask_b[None, :], other=0.0)
            else:
                d = tl.load(ds, mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        if INT8DOT:
            qx, dx = quantize_blocks(x, NB)
            # int8 × int8 summed per 32-block in int32, then scaled by d_w·d_x in fp32.
            products = tl.reshape(q.to(tl.int32), [BLOCK_N, NB, 32]) * qx[None, :, :]
            sums = tl.sum(products, axis=2)
            acc2 += sums.to(tl.float32) * (d.to(tl.float32) * dx[None, :])
        elif BLOCKWISE:
            products = tl.reshape(q.to(tl.float32) * x[None, :], [BLOCK_N, NB, 32])
            acc2 += tl.sum(products, axis=2) * d.to(tl.float32)
        else:
            acc2 += (q.to(tl.float32) * d.to(tl.float32)) * x[None, :]
    acc = tl.sum(acc2, axis=1)
    epilogue_store(acc, pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS)
