"""``triton.gemv_nt``: a plain Triton row-block GEMV for decode-shaped matmuls.

``y[b, 0, :] = alpha * (W[b] @ x[b, 0, :]) + beta * C0[b, 0, :] + bias`` for
m = 1 with W stored ``[batch, n, k]`` (tB = 1, the weight layout). With m = 1
A is ``[batch, 1, k]`` in memory whether tA is set or not, so either is taken.

Importing this module never imports triton or torch: the kernel lives in
``_gemv_kernels`` and is imported by the builder only. Its source text
is read from the file (not imported) into the family's fingerprint, so editing
the kernel re-runs exactly this family's pairs.

On the CPU the kernel runs in the Triton interpreter, which must be switched on
(``TRITON_INTERPRET=1``) before the kernels module is first imported; the
builder says so when it is not, and refuses the interpreter on a GPU.
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

NAME = "triton.gemv_nt"

#: K loops up to this many tiles are unrolled at compile time (the shape is fixed).
MAX_UNROLLED_TILES = 16

#: K tiles wider than this are for holding a long K whole (pdl=1 needs it).
WIDE_TILE = 1024

#: The kernel's source, read without importing it (part of the fingerprint).
KERNELS_SOURCE: str = common.kernels_source(__file__, "_gemv_kernels.py")


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if (reason := common.gemv_layout_reason(spec, tb=True)) is not None:
        return reason
    bn, bk, warps = params.get("bn"), params.get("bk"), params.get("w")
    if (reason := common.tile_reason(bn, bk, warps)) is not None:
        return reason
    # tile_reason checked them: the assert narrows the types
    assert common.is_pow2(bn) and common.is_pow2(bk) and common.is_pow2(warps)
    if (reason := common.spill_reason(bn, bk, warps)) is not None:
        return reason
    batch, n, k = spec.batch or 0, spec.n_total or 0, spec.k or 0
    if bk > WIDE_TILE and bk >= 2 * k:
        return (
            f"bk={bk} for k={k}: a tile wider than {WIDE_TILE} must hold data "
            "(bk < 2k); beyond k its lanes are only masked"
        )
    reason = common.flag_reason(params, "pdl")
    if reason is None and params.get("pdl"):
        reason = _pdl_unsupported(spec, bk, device)
    return reason or common.interpreter_too_large(device, batch, n, k)


def _pdl_unsupported(spec: MatmulSpec, bk: int, device: DeviceInfo) -> str | None:
    """pdl=1 reads W before the preceding kernel has finished: sound only for
    weights, which no kernel of a decode step writes."""
    reason = common.pdl_device_reason(device)
    if reason is not None:
        return reason
    if spec.batch != 1 or spec.op not in ("matmul", "matmul_bias_add"):
        return (
            "pdl=1 prefetches W before the preceding kernel ends: weights only "
            "(batch=1 matmul), never a KV cache"
        )
    k = spec.k or 0
    if not k <= bk < 2 * max(k, 8):
        return f"pdl=1 loads the whole K row as one tile: needs k ≤ bk < 2k (k={k}, bk={bk})"
    return None


@common.triton_family(
    name=NAME,
    ops=common.MATMUL_OPS,
    supports=_supports,
    # Measured on H100 (BENCHMARKS.md): 1–2 rows a program with K in 1024-wide
    # tiles win without PDL (bn1 w8 on the long-K down projection); with
    # pdl=1, 8 rows (fewer programs to schedule) for gate_up; bk=8192 holds
    # the down projection's K (4864) whole, which pdl=1 needs.
    grid={"bn": (1, 2, 8), "bk": (1024, 8192), "w": (4, 8), "pdl": (0, 1)},
    early_launch_param="pdl",  # pdl=1: programmatic dependent launch
    dtypes=("f32", "f16", "bf16"),
)
def GEMV_NT(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Plain Triton GEMV: BLOCK_N rows of W [n, k] per program, K in BLOCK_K tiles, fp32 sums."""

    from matprobe.kernels.triton._gemv_kernels import gemv_nt_kernel

    row = common.row_gemv(NAME, gemv_nt_kernel, spec, device)
    n, k = row.n, row.k
    bn, bk, warps = common.tile_params(params)
    pdl = bool(params.get("pdl", 0))
    launch = gemv_nt_kernel[(-(-n // bn), row.batch)]
    tiles = common.unrolled_tile_constants(n, k, bn, bk)
    constants: dict[str, Any] = {
        **row.epilogue_constants,
        **tiles,
        # Unrolled up to 16 tiles; beyond that the code grows for no gain.
        "UNROLL": tiles["K_TILES"] <= MAX_UNROLLED_TILES,
        "num_warps": warps,
    }
    if pdl:
        constants.update(common.PDL_CONSTANTS)

    def run(inputs: MatmulInputs, out: Any) -> None:
        x, w, c0, bias = row.operands(inputs, out)
        launch(
            x, w, (c0, bias, out),
            n, k,
            *common.row_strides(x, w),
            common.epilogue_args(inputs, c0, bias, out),
            **constants,
        )  # fmt: skip

    return run


FAMILIES: tuple[VariantFamily, ...] = (GEMV_NT,)
