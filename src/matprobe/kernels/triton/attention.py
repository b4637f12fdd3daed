"""``triton.attn_bmv``: one launch for the attention-shaped batched GEMVs of decode.

``out[b, 0, :] = alpha * (A[b, 0, :] @ B[b]) + beta * C0[b, 0, :] + bias`` for
m = 1 and every batch entry b (a query head) at once, B at its own strides:

* tB = 1 — scores ``Q·Kᵀ``: B is the K cache stored ``[batch, L, head_dim]``
  (n = L, k = head_dim). Program grid ``(cdiv(L, BLOCK_N), batch)``: each
  program loads a ``[BLOCK_N, BLOCK_K]`` K tile and the query once.
* tB = 0 — values ``P·V``: B is the V cache stored ``[batch, L, head_dim]``
  (k = L, n = head_dim). Program grid ``(cdiv(head_dim, BLOCK_N),
  cdiv(L, BLOCK_K), batch)``: each program loads ONE ``[BLOCK_K, BLOCK_N]``
  V tile; when L spans several chunks the last program to finish a column
  block sums the fp32 partials (in chunk order: deterministic) and writes the
  output — split-K within one launch, through a workspace and arrival
  counters allocated by the builder and reset by the kernel itself.

The layout is chosen from the spec at build time (one kernel per layout).
Plain and bias-add GEMVs with rows up to 4096 (the QKV projection, W stored
``[k, n]``) run through the same kernels.
head_dim (k for scores, n for values) is a compile-time constant; the context
length L stays a run-time argument, so the kernels are not recompiled per L.

Parameters: ``bn`` output columns per program (keys for scores, head_dim
columns for values), ``bk`` reduction rows per tile (a head_dim chunk for
scores, context rows per program for values — so it sets the split of L), ``w``
warps. Both blocks are clamped to the next power of two of their dimension
(at least 16), so no program loads a mostly masked tile; ``bk=1024`` thus means
"the whole context in one V tile" (no split) up to L = 1024. A clamped tile of
more than 128 elements per thread is refused (it would spill registers).

Importing this module never imports triton or torch: the kernels live in
``_attention_kernels`` and are imported by the builder only; their
source text is read from the file into the family's fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from matprobe.kernels.triton import _common as common
from matprobe.measure.variants import KernelFn, VariantFamily
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

NAME = "triton.attn_bmv"

#: Longest row (head_dim or context L) the design takes, along k and along n.
MAX_ROW = 4096

#: The smallest block along any dimension (masked lanes beyond a short row).
MIN_BLOCK = 16

#: Most tile elements one thread may hold: beyond it the fp32 products spill.
MAX_PER_THREAD = 128

#: The kernels' source, read without importing it (part of the fingerprint).
KERNELS_SOURCE: str = common.kernels_source(__file__, "_attention_kernels.py")


def _next_pow2(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


def block(param: int, extent: int) -> int:
    """The block actually used: ``param`` clamped to the row's next power of two (>= 16)."""
    return min(param, max(MIN_BLOCK, _next_pow2(extent)))


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if spec.m != 1:
        return "needs m=1 (one query row per head: a batched GEMV)"
    batch, n, k = spec.batch or 0, spec.n_total or 0, spec.k or 0
    if k > MAX_ROW or n > MAX_ROW:
        return (
            f"needs k <= {MAX_ROW} and n <= {MAX_ROW} (got k={k}, n={n}): built for attention "
            "rows (head_dim, context L) that a few tiles cover; a GEMV/GEMM family fits better"
        )
    bn, bk, warps = params.get("bn"), params.get("bk"), params.get("w")
    reason = common.tile_reason(bn, bk, warps, min_bn=MIN_BLOCK, min_bk=MIN_BLOCK)
    if reason is None:
        reason = common.flag_reason(params, "pdl")
    if reason is None and params.get("pdl"):
        reason = _pdl_unsupported(spec, device)
    if reason is not None:
        return reason
    # tile_reason checked them: the assert narrows the types
    assert common.is_pow2(bn) and common.is_pow2(bk) and common.is_pow2(warps)
    tile = block(bn, n) * block(bk, k)  # the blocks this spec actually gets
    if tile > MAX_PER_THREAD * 32 * warps:
        return (
            f"tile of {block(bn, n)}×{block(bk, k)} (bn×bk clamped to n={n}, k={k}) is "
            f"{tile // (32 * warps)} elements per thread over w={warps} warps, "
            f"> {MAX_PER_THREAD}: registers would spill (raise w, or lower bn or bk)"
        )
    return common.interpreter_too_large(device, batch, n, k)


def _pdl_unsupported(spec: MatmulSpec, device: DeviceInfo) -> str | None:
    """pdl=1 reads B before the preceding kernel has finished: sound only for
    weights (the QKV projection), never for a KV cache the previous kernel wrote."""
    reason = common.pdl_device_reason(device)
    if reason is not None:
        return reason
    if spec.tB:
        return "pdl=1 is built into the tB=0 kernel only (W stored [k, n], the QKV projection)"
    if spec.batch != 1 or spec.op not in ("matmul", "matmul_bias_add"):
        return (
            "pdl=1 prefetches B before the preceding kernel ends: weights only "
            "(batch=1 matmul), never a KV cache"
        )
    return None


@common.triton_family(
    name=NAME,
    # Any small batched GEMV, not only attention: the tB=0 kernel (one tile a
    # program, split-K finished by the last program) also serves the fused QKV
    # projection (n=1152, k=896, W stored [k, n]) better than a K-walking loop.
    ops=common.MATMUL_OPS,
    supports=_supports,
    # H100 sweep (BENCHMARKS.md): bn64 never won; bk1024 (no split) wins at L ≥ 130.
    # pdl=1 applies to the QKV projection only (see _pdl_unsupported).
    grid={"bn": (16, 32), "bk": (64, 1024), "w": (4,), "pdl": (0, 1)},
    early_launch_param="pdl",  # pdl=1: programmatic dependent launch
    dtypes=("f32", "f16", "bf16"),
)
def ATTN_BMV(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Batched strided GEMV for attention (m=1): all heads in one launch, either B layout."""

    from matprobe.kernels.triton._attention_kernels import (
        attn_scores_kernel,
        attn_values_kernel,
    )

    kernel = attn_scores_kernel if spec.tB else attn_values_kernel
    row = common.row_gemv(NAME, kernel, spec, device)
    batch, n, k = row.batch, row.n, row.k
    block_n = block(int(params["bn"]), n)
    block_k = block(int(params["bk"]), k)
    constants: dict[str, Any] = {
        **row.epilogue_constants,
        "BLOCK_N": block_n,
        "BLOCK_K": block_k,
        "num_warps": int(params["w"]),
    }
    n_blocks = -(-n // block_n)
    if row.tb:
        launch = kernel[(n_blocks, batch)]
        constants["K"] = k
        sizes: tuple[Any, ...] = (n,)  # the scores kernel's arguments after the operands
    else:
        split = -(-k // block_k)
        launch = kernel[(n_blocks, split, batch)]
        constants.update(N=n, SPLIT_P2=_next_pow2(split), MASK_N=n % block_n != 0)
        if params.get("pdl"):
            constants.update(common.PDL_CONSTANTS)
        sizes = (*_split_state(batch * n_blocks, split, block_n, row.where), k, split)

    def run(inputs: MatmulInputs, out: Any) -> None:
        a, b, c0, bias = row.operands(inputs, out)
        launch(
            a, b, (c0, bias, out), *sizes,
            *common.row_strides(a, b),
            common.epilogue_args(inputs, c0, bias, out),
            **constants,
        )  # fmt: skip

    return run


def _split_state(slots: int, split: int, block_n: int, where: Any) -> tuple[Any, Any]:
    """The values kernel's split-K state for ``slots`` (head, column block) pairs,
    allocated once by the builder and reused by every run: the fp32 partials (only
    read when ``split`` > 1) and the arrival counters, which the last program of
    each block sets back to 0."""
    import torch

    partials = slots * _next_pow2(split) * block_n if split > 1 else 1
    workspace = torch.empty((partials,), dtype=torch.float32, device=where)
    counters = torch.zeros((slots,), dtype=torch.int32, device=where)
    return workspace, counters


FAMILIES: tuple[VariantFamily, ...] = (ATTN_BMV,)
