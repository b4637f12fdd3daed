"""``triton.gemv_stream``: a persistent row GEMV for the weight GEMVs of decode.

``y = alpha * (W @ x) + beta * C0 + bias`` for m = 1, batch = 1, W stored
``[n, k]`` (tB = 1). ``p`` programs per SM (not one per row block) each stream
row blocks of ``bn`` rows through registers, the next block's loads issued
before the current one is reduced; x is loaded once per program, the whole K
row being one tile (``BLOCK_K`` = the next power of two ≥ k).

``pf=1`` also hints every later block of a program into L2 (``prefetch.global.L2``)
at its start, so the whole weight stream is requested at once.

``pdl=1`` launches with programmatic dependent launch (Hopper+): each program
reads its first W block before waiting on the previous kernel, which is sound
because no kernel of a decode step writes weights; x, C0, the bias and the
output are touched only after the wait. The report's figures for pdl=1 come
from back-to-back replays of the kernel itself, so they include the overlap
of one GEMV's start with the previous one's end (BENCHMARKS.md says how much).

Importing this module never imports triton or torch: the kernel lives in
``_gemv_stream_kernels`` and is imported by the builder only; its source
text (and the shared epilogue's) is part of the family's fingerprint.
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

NAME = "triton.gemv_stream"

#: Longest K: the whole row is one register tile (x held, one W block in flight).
MAX_K = 16384

#: Most W-tile elements per thread: two tiles are live (current and next), so
#: beyond this the registers spill.
MAX_PER_THREAD = 64

#: The kernel's source, read without importing it (part of the fingerprint).
KERNELS_SOURCE: str = common.kernels_source(__file__, "_gemv_stream_kernels.py")


def block_k(k: int) -> int:
    """The K tile: the next power of two ≥ k (at least 16)."""
    return max(16, 1 << max(k - 1, 0).bit_length())


def programs(n_blocks: int, sm_count: int, per_sm: int) -> int:
    """The grid: ``per_sm`` programs on each SM, never more than the row blocks.
    Without SMs (the interpreter) ``per_sm`` programs, so each loops over many blocks."""
    return max(1, min(n_blocks, max(sm_count, 1) * per_sm))


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if (reason := common.gemv_layout_reason(spec, tb=True)) is not None:
        return reason
    if spec.batch != 1:
        # pdl=1 would prefetch a batched B — a KV cache the previous kernel may
        # have written — and the persistent grid is laid out for one matrix.
        return "needs batch=1: built for weight matrices (attention has triton.attn_bmv)"
    n, k = spec.n_total or 0, spec.k or 0
    if k > MAX_K:
        return f"needs k <= {MAX_K}: the whole K row is one register tile (k={k})"
    bn, per_sm, warps = params.get("bn"), params.get("p"), params.get("w")
    if not common.is_pow2(bn):
        return f"bn={bn!r}: BLOCK_N must be a power of two"
    if not isinstance(per_sm, int) or isinstance(per_sm, bool) or not 1 <= per_sm <= 32:
        return f"p={per_sm!r}: programs per SM, 1 to 32"
    if not common.is_pow2(warps) or warps > 32:
        return f"w={warps!r}: num_warps must be a power of two <= 32"
    reason = common.flag_reason(params, "pdl") or common.flag_reason(params, "pf")
    if reason is not None:
        return reason
    if params.get("pf") and device.kind != "cuda":
        return "pf=1 issues prefetch.global.L2 (PTX): a CUDA GPU only"
    per_thread = bn * block_k(k) // (32 * warps)
    if per_thread > MAX_PER_THREAD:
        return (
            f"a {bn}×{block_k(k)} W tile over w={warps} warps is {per_thread} elements per "
            f"thread, > {MAX_PER_THREAD}: two live tiles would spill registers "
            "(raise w or lower bn)"
        )
    if params.get("pdl"):
        reason = common.pdl_device_reason(device)
    return reason or common.interpreter_too_large(device, 1, n, k)


@common.triton_family(
    name=NAME,
    ops=common.MATMUL_OPS,
    supports=_supports,
    # H100 sweep (BENCHMARKS.md): gate_up bn8_p4_w8_pdl1, down bn2_p2_w8/16_pdl1.
    # pf=1 (L2 prefetch) lost on every shape (gate_up 7.1 → 8.4 µs, the LM head
    # 3.5× slower: its 272 MB evict each other from L2), so it is off by default.
    grid={"bn": (2, 8), "p": (2, 4), "w": (8,), "pdl": (0, 1), "pf": (0,)},
    early_launch_param="pdl",  # pdl=1: programmatic dependent launch
    dtypes=("f32", "f16", "bf16"),
)
def GEMV_STREAM(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Persistent Triton GEMV: p programs per SM stream bn-row blocks, x held in registers."""

    from matprobe.kernels.triton._gemv_stream_kernels import gemv_stream_kernel

    row = common.row_gemv(NAME, gemv_stream_kernel, spec, device)
    n, k = row.n, row.k
    bn, warps, pdl = int(params["bn"]), int(params["w"]), bool(params["pdl"])
    bk = block_k(k)
    n_blocks = -(-n // bn)
    launch = gemv_stream_kernel[(programs(n_blocks, device.sm_count, int(params["p"])),)]
    constants: dict[str, Any] = {
        **row.epilogue_constants,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "EVEN_K": k == bk,
        "num_warps": warps,
    }
    if pdl:
        constants.update(common.PDL_CONSTANTS)
    if params.get("pf", 0):
        line_elems = 128 // row.dtype.itemsize  # elements in one 128-byte line
        constants.update(PREFETCH=True, LINE_ELEMS=line_elems, LINES=max(1, bk // line_elems))

    def run(inputs: MatmulInputs, out: Any) -> None:
        x, w, c0, bias = row.operands(inputs, out)
        launch(
            x, w, (c0, bias, out),
            n, k, n_blocks,
            x.stride(2),
            w.stride(1), w.stride(2),
            (c0.stride(-1), bias.stride(-1), out.stride(2),
             float(inputs.alpha), float(inputs.beta)),
            **constants,
        )  # fmt: skip

    return run


FAMILIES: tuple[VariantFamily, ...] = (GEMV_STREAM,)
