"""The Triton building blocks every family's kernels share.

* The epilogue — ``out = alpha·acc + beta·C0 + bias`` in fp32 (the order
  ``matprobe.measure.inputs.reference`` documents), one cast on store — as
  :func:`epilogue_terms` (load C0 and the bias, early if the caller likes, so
  their latency overlaps the reduction) plus :func:`store_out`, for any tile
  shape; for one output row (every GEMV) :func:`row_epilogue_terms`,
  :func:`row_out_ptrs`, :func:`row_store` and :func:`epilogue_store` build the pointers from the
  batch index and two tuple arguments every row GEMV kernel takes as they come
  from its launch: ``epilogue_ptrs`` (C0, bias, out) and ``epilogue_args``
  (their strides, alpha and beta: ``_common.epilogue_args``). Triton flattens
  the tuples, so the compiled kernel's parameters are those of the loose values.
* The row-block set-up of a GEMV program (m = 1, W stored ``[batch, rows, k]``):
  :func:`row_block` — which batch and which BLOCK_N outputs (:func:`block_outputs`,
  which a split-K grid, batch on axis 2, calls itself) — and
  :func:`row_ptrs` / :func:`rows_below`, the int64 row pointers of an operand
  (the quants, the scales, a stacked half).
* :func:`silu_mul`, SwiGLU's activation in fp32 (the SwiGLU and decode kernels').
* The split-K finish inside one launch: each program of a group adds its fp32
  partial sums, :func:`arrive_last` tells the program that arrived last, and
  :func:`take_sums` hands it the group's total and leaves the workspace zeroed
  for the next call (CUDA-graph replays need it zero).

The text of this module is part of each using family's fingerprint (the
kernels import it; see ``matprobe.measure.fingerprint``).
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._interpreter import patch_once

# Every kernel module imports this one: under the interpreter, the shared blocks'
# calls then cost no repeated patching of triton.language (see _interpreter).
patch_once()


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def epilogue_terms(  # type: ignore[no-untyped-def]
    c0_ptrs,  # C0 at the outputs (any tile shape), read only when HAS_C0
    c0_mask,
    bias_ptrs,  # the bias at the outputs' columns (broadcastable to the tile)
    bias_mask,
    beta,
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
):
    """(beta·C0, bias) in fp32, zeros when absent: loaded by the caller's choice
    of moment (before a reduction, their latency overlaps it)."""
    c0_term = tl.zeros(c0_ptrs.shape, dtype=tl.float32)
    bias_term = tl.zeros(bias_ptrs.shape, dtype=tl.float32)
    if HAS_C0:
        c0_term = beta * tl.load(c0_ptrs, mask=c0_mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        bias_term = tl.load(bias_ptrs, mask=bias_mask, other=0.0).to(tl.float32)
    return c0_term, bias_term


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def store_out(  # type: ignore[no-untyped-def]
    acc,  # fp32 sums of the products at the outputs
    c0_term,
    bias_term,
    alpha,
    out_ptrs,
    mask,
    MASK: tl.constexpr = True,  # noqa: N803 - False: every output is inside (no predicate)
) -> None:
    # alpha scaling, then beta·C0, then the bias — all fp32, one cast on store.
    res = acc * alpha + c0_term + bias_term
    out = res.to(out_ptrs.dtype.element_ty)
    if MASK:
        tl.store(out_ptrs, out, mask=mask)
    else:
        tl.store(out_ptrs, out)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def row_epilogue_terms(  # type: ignore[no-untyped-def]
    pid_b,  # int64 batch index
    offs_n,
    mask_n,
    epilogue_ptrs,  # (C0, bias, out) of a row GEMV: C0 and out [batch, 1, n], the bias [n]
    epilogue_args,  # their strides, alpha and beta (``_common.epilogue_args``)
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
):
    """:func:`epilogue_terms` for one output row (m = 1): outputs ``offs_n`` of batch ``pid_b``."""
    c0_ptr, bias_ptr, _ = epilogue_ptrs
    stride_cb, stride_cn, stride_bias, _, _, _, beta = epilogue_args
    return epilogue_terms(
        c0_ptr + pid_b * stride_cb + offs_n * stride_cn, mask_n,
        bias_ptr + offs_n * stride_bias, mask_n, beta, HAS_C0, HAS_BIAS,
    )  # fmt: skip


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def row_out_ptrs(pid_b, offs_n, epilogue_ptrs, epilogue_args):  # type: ignore[no-untyped-def]
    """Where outputs ``offs_n`` of batch ``pid_b`` of a row GEMV are stored."""
    _, _, _, stride_ob, stride_on, _, _ = epilogue_args
    return epilogue_ptrs[2] + pid_b * stride_ob + offs_n * stride_on


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def row_store(  # type: ignore[no-untyped-def]
    acc,
    c0_term,
    bias_term,
    out_ptrs,  # :func:`row_out_ptrs`
    mask_n,
    epilogue_args,
    MASK: tl.constexpr = True,  # noqa: N803 - False: every output is inside (no predicate)
) -> None:
    """:func:`store_out` with the alpha of a row GEMV's ``epilogue_args``."""
    _, _, _, _, _, alpha, _ = epilogue_args
    store_out(acc, c0_term, bias_term, alpha, out_ptrs, mask_n, MASK)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def epilogue_store(  # type: ignore[no-untyped-def]
    acc,  # [BLOCK_N] fp32 sums of x·W
    pid_b,  # int64 batch index
    offs_n,
    mask_n,
    epilogue_ptrs,  # (C0, bias, out), as :func:`row_epilogue_terms` takes them
    epilogue_args,
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
) -> None:
    """The whole epilogue of one output row after the reduction: load, combine, store."""
    c0_term, bias_term = row_epilogue_terms(
        pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS
    )
    out_ptrs = row_out_ptrs(pid_b, offs_n, epilogue_ptrs, epilogue_args)
    row_store(acc, c0_term, bias_term, out_ptrs, mask_n, epilogue_args)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def arrive_last(counter_ptr, arrivals):  # type: ignore[no-untyped-def]
    """Count this program in at ``counter_ptr``; true in the program that arrives
    last of ``arrivals``, which then sees every other program's earlier writes.

    Every thread's writes (the partial sums) precede the counter's release: the
    CTA barrier orders them before the single-thread acq_rel atomic, whose
    release is cumulative at GPU scope (the pattern of cooperative groups' grid
    sync). The acquire side makes the others' partials visible to the last one.
    """
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    return arrived == arrivals - 1


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def take_sums(ws_ptrs, mask):  # type: ignore[no-untyped-def]
    """The fp32 sums at ``ws_ptrs``, read from L2 (``.cg``: written by other SMs,
    never a stale L1 line), and zeros left in their place for the next call.
    The thread that zeroes an element need not be the one that read it: a
    barrier puts every read first."""
    total = tl.load(ws_ptrs, mask=mask, other=0.0, cache_modifier=".cg")
    tl.debug_barrier()
    tl.store(ws_ptrs, tl.zeros_like(total), mask=mask)
    return total


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def block_outputs(pid_n, n, BLOCK_N: tl.constexpr):  # type: ignore[no-untyped-def]  # noqa: N803
    """The outputs of block ``pid_n`` of BLOCK_N: ``(row0, rows, offs_n, mask_n)`` —
    the first, ``arange(BLOCK_N)`` (small int32 offsets local to the block), the
    output indices and which of them are below ``n``."""
    row0 = pid_n * BLOCK_N
    rows = tl.arange(0, BLOCK_N)
    offs_n = row0 + rows
    return row0, rows, offs_n, offs_n < n


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def row_block(n, BLOCK_N: tl.constexpr):  # type: ignore[no-untyped-def]  # noqa: N803
    """This program's outputs of a row-blocked GEMV launched on a (cdiv(n, BLOCK_N),
    batch) grid: ``(pid_b, row0, rows, offs_n, mask_n)`` — the batch index in int64
    (batch and row bases pass 2**31 elements for a large LM head), then
    :func:`block_outputs`. (A split-K grid, batch on axis 2, reads its program ids
    itself and calls :func:`block_outputs`.)"""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    row0, rows, offs_n, mask_n = block_outputs(pid_n, n, BLOCK_N)
    return pid_b, row0, rows, offs_n, mask_n


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def row_ptrs(ptr, pid_b, row0, rows, stride_b, stride_n):  # type: ignore[no-untyped-def]
    """``[BLOCK_N, 1]`` pointers to the starts of rows ``row0 + rows`` of batch
    ``pid_b`` of an operand stored ``[batch, rows, …]``; the bases in int64."""
    return ptr + pid_b * stride_b + row0.to(tl.int64) * stride_n + rows[:, None] * stride_n


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def rows_below(ptrs, row0, offset, stride_n):  # type: ignore[no-untyped-def]
    """``ptrs`` moved ``offset`` rows down, in int64 (the up half of a stacked W:
    ``offset`` = n0). The offset is made a tensor first: Triton passes an integer
    argument equal to 1 as a constexpr, which has no ``.to``."""
    return ptrs + (row0 * 0 + offset).to(tl.int64) * stride_n


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def silu_mul(g, u):  # type: ignore[no-untyped-def]
    """silu(g)·u in fp32: g·σ(g)·u. For g → −∞, exp(−g) overflows to inf and the
    quotient is −0, silu's limit (never a NaN)."""
    return g / (1.0 + tl.exp(-g)) * u


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def last_finishes(  # type: ignore[no-untyped-def]
    counter,  # int32 arrival counter of this program's group, zero between calls
    arrivals,  # programs in the group
    ws_ptrs,  # fp32 workspace where the group's programs added their partial sums
    pid_b,
    offs_n,
    mask_n,
    epilogue_ptrs,
    epilogue_args,
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
) -> None:
    """The one-launch split-K finish, called by every program of a group after
    adding its partial sums: the last to arrive (:func:`arrive_last`) takes the
    total (:func:`take_sums`), resets the counter — workspace and counter both
    zero again for the next call — and runs :func:`epilogue_store`."""
    if arrive_last(counter, arrivals):
        total = take_sums(ws_ptrs, mask_n)
        tl.store(counter, 0)  # no other program of the group touches it again this call
        epilogue_store(total, pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0,
                       HAS_BIAS)  # fmt: skip
