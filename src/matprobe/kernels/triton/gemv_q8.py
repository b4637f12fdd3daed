"""``triton.gemv_q8``: a Triton GEMV on Q8_0 weights (decode: m = 1).

``y[b, 0, :] = alpha * (W[b] @ x[b, 0, :]) + beta * C0[b, 0, :] + bias`` with W in
the split layout (int8 quants ``[batch, n, k]`` + fp16 scales ``[batch, n, k/32]``,
see :mod:`matprobe.quant`), dequantized in registers: 34/32 bytes a weight
instead of fp16's 2, so a memory-bound GEMV can take ~0.53× the fp16 time.

Importing this module never imports triton or torch (the kernel lives in
``_gemv_q8_kernels``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from matprobe.kernels.triton import _common as common
from matprobe.measure.variants import KernelFn, VariantFamily
from matprobe.spec import Q8_0_BLOCK, MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

NAME = "triton.gemv_q8"

KERNELS_SOURCE: str = common.kernels_source(__file__, "_gemv_q8_kernels.py")


def q8_gemv_reason(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    """Why a row-blocked Q8_0 GEMV (this family's kernel, or another taking its
    ``bn``/``bk``/``w`` grid and its launch) cannot run ``spec`` at ``params``."""
    k = spec.k or 0
    bn, bk, warps = params.get("bn"), params.get("bk"), params.get("w")
    reason = common.gemv_layout_reason(spec) or common.q8_k_reason(k)
    if reason := reason or common.tile_reason(
        bn, bk, warps, min_bk=Q8_0_BLOCK, bk_note=" (whole blocks)"
    ):
        return reason
    # tile_reason checked them: the assert narrows the types
    assert common.is_pow2(bn) and common.is_pow2(bk) and common.is_pow2(warps)
    return (
        common.spill_reason(bn, bk, warps)
        or common.unroll_reason(k, bk, common.MAX_UNROLLED_TILES)
        or common.interpreter_too_large(device, spec.batch or 0, spec.n_total or 0, k)
    )


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if (reason := common.flag_reason(params, "blk")) is not None:
        return reason
    return q8_gemv_reason(spec, params, device)


def q8_gemv_launcher(
    name: str,
    kernel: Any,
    spec: MatmulSpec,
    params: Mapping[str, Any],
    device: DeviceInfo,
    extra: Mapping[str, Any] | None = None,
) -> KernelFn:
    """The ``run`` of a row-blocked Q8_0 GEMV ``kernel`` whose arguments are
    :func:`~matprobe.kernels.triton._gemv_q8_kernels.gemv_q8_kernel`'s: a
    (cdiv(n, bn), batch) grid, the operands checked against the spec (naming the
    one that is wrong) before each launch. ``extra``: the kernel's own constexprs."""
    import torch

    from matprobe.measure.inputs import shapes

    common.check_mode(name, kernel, device)
    dims = shapes(spec)
    batch, _, n = dims["out"]
    k = spec.k or 0
    where = common.target(device)
    bn, bk, warps = common.tile_params(params)
    has_c0, has_bias = spec.reads_c0, spec.has_bias
    launch = kernel[(-(-n // bn), batch)]
    constants: dict[str, Any] = {
        "HAS_C0": has_c0,
        "HAS_BIAS": has_bias,
        **common.unrolled_tile_constants(n, k, bn, bk),
        "NB": bk // Q8_0_BLOCK,
        **(extra or {}),
        "num_warps": warps,
    }

    def run(inputs: MatmulInputs, out: Any) -> None:
        x, q, c0, bias = common.row_gemv_operands(
            name, inputs, out, batch=batch, n=n, k=k, dtype=torch.float16, where=where,
            has_c0=has_c0, has_bias=has_bias, weight_dtype=torch.int8,
        )  # fmt: skip
        d: Any = inputs.scales
        common.check_tensor(name, d, "scales", (batch, n, k // Q8_0_BLOCK), torch.float16, where)
        if q.stride(2) != 1 or d.stride(2) != 1:
            raise ValueError(f"{name}: quants and scales must be contiguous along K")
        launch(
            x, q, d, (c0, bias, out),
            n, k,
            x.stride(0), x.stride(2),
            q.stride(0), q.stride(1),
            d.stride(0), d.stride(1),
            common.epilogue_args(inputs, c0, bias, out),
            **constants,
        )  # fmt: skip

    return run


@common.triton_family(
    name=NAME,
    ops=common.MATMUL_OPS,
    supports=_supports,
    grid={"bn": (1, 2, 4), "bk": (512, 1024), "w": (4, 8), "blk": (0, 1)},
    dtypes=("q8_0",),
)
def GEMV_Q8(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Q8_0 GEMV: BLOCK_N rows of int8 W + fp16 block scales per program, dequantized in fp32."""
    from matprobe.kernels.triton._gemv_q8_kernels import gemv_q8_kernel

    blockwise = {"BLOCKWISE": bool(params.get("blk", 0))}
    return q8_gemv_launcher(NAME, gemv_q8_kernel, spec, params, device, blockwise)


FAMILIES: tuple[VariantFamily, ...] = (GEMV_Q8,)
