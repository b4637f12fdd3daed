"""Triton kernel of the ``triton.gemv_stream`` family (imported only by its builder).

``y = alpha * (W @ x) + beta * C0 + bias`` for m = 1, batch = 1, W stored
``[n, k]`` (tB = 1). A fixed number of programs (a few per SM) each stream
row blocks ``pid, pid + G, pid + 2G, …`` through registers: x is loaded once
per program and held (the whole K row is one tile), each W block is reduced
and stored before the next. Fewer, longer-lived programs than one per row block
cut the block-scheduling cost that dominates a short GEMV (BENCHMARKS.md:
4864 empty programs take 3.7 µs on an H100 versus 1.0 µs for 132).

With PDL (programmatic dependent launch, Hopper+) each program reads its
first W block before waiting on the previous kernel (weights are never written
by it), so the next GEMV's first G blocks stream in while this one finishes.
With PREFETCH each program also hints all its later blocks into L2 before the
wait (``prefetch.global.L2``, as CUTLASS's weight-prefetch GEMM does with TMA).
Kept in its own module so that importing the family never imports triton, and
so that the family can fingerprint this file's text.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import epilogue_store


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def _load_block(  # type: ignore[no-untyped-def]
    w_ptr,
    rb,
    n,
    k,
    stride_wn,
    stride_wk,
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
    EVEN_K: tl.constexpr,  # noqa: N803
):
    """Row block ``rb`` of W as a [BLOCK_N, BLOCK_K] tile, zeros past n and k.
    Rows past n are masked, so a block past the end costs no memory traffic."""
    rows = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # int64 row offsets: n · k may pass 2**31 elements (the LM head is 136 M).
    ptrs = w_ptr + rows.to(tl.int64)[:, None] * stride_wn + offs_k[None, :] * stride_wk
    if EVEN_K:
        return tl.load(ptrs, mask=(rows < n)[:, None], other=0.0)
    return tl.load(ptrs, mask=(rows < n)[:, None] & (offs_k < k)[None, :], other=0.0)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def _prefetch_block_l2(  # type: ignore[no-untyped-def]
    w_ptr,
    rb,
    n,
    k,
    stride_wn,
    stride_wk,
    BLOCK_N: tl.constexpr,  # noqa: N803
    LINES: tl.constexpr,  # noqa: N803 - 128-byte lines per row tile
    LINE_ELEMS: tl.constexpr,  # noqa: N803 - elements in one 128-byte line
) -> None:
    """``prefetch.global.L2`` of every 128-byte line of row block ``rb``: a hint,
    nothing comes back and nothing waits. Lanes past n or k hint W's first line."""
    rows = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, LINES) * LINE_ELEMS
    inside = (rows < n)[:, None] & (cols < k)[None, :]
    ptrs = w_ptr + rows.to(tl.int64)[:, None] * stride_wn + cols[None, :] * stride_wk
    ptrs = tl.where(inside, ptrs, w_ptr)
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0", "=r,l", [ptrs.to(tl.int64)],
                              dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def gemv_stream_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [k] activations (A's single row)
    w_ptr,  # [n, k] weights
    epilogue_ptrs,  # (C0, bias, out), each [n]: C0 read only when HAS_C0, the bias when HAS_BIAS
    n,
    k,
    n_blocks,  # cdiv(n, BLOCK_N)
    stride_xk,
    stride_wn,
    stride_wk,
    epilogue_args,  # (C0's, the bias's and out's strides, alpha, beta)
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803 - next power of two >= k: the whole row is one tile
    EVEN_K: tl.constexpr,  # noqa: N803 - k == BLOCK_K: no K masks
    PDL: tl.constexpr = False,  # noqa: N803 - launched with programmatic dependent launch
    PREFETCH: tl.constexpr = False,  # noqa: N803 - hint all later blocks into L2 up front
    LINES: tl.constexpr = 1,  # noqa: N803 - 128-byte lines in a row of the tile
    LINE_ELEMS: tl.constexpr = 64,  # noqa: N803 - elements in one 128-byte line
) -> None:
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs_k = tl.arange(0, BLOCK_K)
    zero = tl.zeros([], dtype=tl.int64)  # batch index for the shared epilogue (batch = 1)
    stride_cn, stride_bias, stride_on, alpha, beta = epilogue_args
    # The shared epilogue's arguments of a batch of one: no batch strides.
    row_args = (0, stride_cn, stride_bias, 0, stride_on, alpha, beta)

    if PDL:
        # Every program has started: the next kernel in the stream may launch.
        tl.extra.cuda.gdc_launch_dependents()
    # The first block is read before the wait: weights, never written by the
    # previous kernel. x (its output) is read, and out written, after it.
    w = _load_block(w_ptr, pid, n, k, stride_wn, stride_wk, BLOCK_N, BLOCK_K, EVEN_K)
    if PREFETCH:
        # Every later block of this program goes to L2 now: the whole weight
        # stream is requested at once (and, with PDL, while the previous
        # kernel still runs); the loop's loads then hit L2.
        rb_ahead = pid + programs
        while rb_ahead < n_blocks:
            _prefetch_block_l2(w_ptr, rb_ahead, n, k, stride_wn, stride_wk, BLOCK_N, LINES,
                               LINE_ELEMS)  # fmt: skip
            rb_ahead += programs
    if PDL:
        tl.extra.cuda.gdc_wait()
    if EVEN_K:
        x = tl.load(x_ptr + offs_k * stride_xk).to(tl.float32)
    else:
        x = tl.load(x_ptr + offs_k * stride_xk, mask=offs_k < k, other=0.0).to(tl.float32)

    rb = pid
    while rb < n_blocks:
        # The next block's loads go out before this block is reduced and stored,
        # so each program keeps a tile in flight while it computes.
        w_next = _load_block(w_ptr, rb + programs, n, k, stride_wn, stride_wk, BLOCK_N, BLOCK_K,
                             EVEN_K)  # fmt: skip
        acc = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
        offs_n = rb * BLOCK_N + tl.arange(0, BLOCK_N)
        epilogue_store(acc, zero, offs_n, offs_n < n, epilogue_ptrs, row_args, HAS_C0, HAS_BIAS)
        w = w_next
        rb += programs
