"""``triton.gemv_swiglu``: the decode MLP's gate/up GEMV with SwiGLU folded in.

``y[b, 0, j] = silu(W[b, j] · x[b, 0]) · (W[b, n0 + j] · x[b, 0])`` for m = 1,
W being gate and up stacked ``[batch, n0 + n1, k]`` (``op=matmul_swiglu``, see
``matprobe.spec``): one pass over the weights writes the n0 activations the
down projection reads, where an eager model runs two GEMVs (or one stacked
GEMV), a silu kernel and a multiply, each writing and re-reading its result.
f16, bf16 and Q8_0 weights (int8 quants + fp16 block scales, dequantized in
registers blockwise, as ``triton.gemv_q8`` does).

Importing this module never imports triton or torch (the kernels live in
``_gemv_swiglu_kernels``).
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

NAME = "triton.gemv_swiglu"

KERNELS_SOURCE: str = common.kernels_source(__file__, "_gemv_swiglu_kernels.py")


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    # The op's own conditions (n0 == n1, tB = 1, no epilogue) first: the builder
    # is called with this predicate only, so it re-states them.
    if (problem := spec.swiglu_problem()) is not None:
        return problem
    if (reason := common.gemv_layout_reason(spec)) is not None:
        return reason
    k = spec.k or 0
    if spec.dtype == "q8_0" and (reason := common.q8_k_reason(k)) is not None:
        return reason
    bn, bk, warps = params.get("bn"), params.get("bk"), params.get("w")
    if (reason := common.tile_reason(bn, bk, warps, min_bk=Q8_0_BLOCK)) is not None:
        return reason
    # tile_reason checked them: the assert narrows the types
    assert common.is_pow2(bn) and common.is_pow2(bk) and common.is_pow2(warps)
    return (
        common.spill_reason(bn, bk, warps, tiles="gate and up")
        or common.unroll_reason(k, bk, common.MAX_UNROLLED_TILES)
        or common.interpreter_too_large(device, spec.batch or 0, spec.n_total or 0, k)
    )


@common.triton_family(
    name=NAME,
    ops={"matmul_swiglu"},
    supports=_supports,
    # Two rows (gate and up) per output: bn outputs read 2·bn rows, so bn 1–4
    # spans the 2–8 rows a program of triton.gemv_nt / gemv_q8 wins with.
    grid={"bn": (1, 2, 4), "bk": (512, 1024), "w": (4, 8)},
    dtypes=("f16", "bf16", "q8_0"),
)
def GEMV_SWIGLU(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Fused gate/up GEMV with SwiGLU: BLOCK_N outputs a program, fp32 sums, one cast on store."""
    import torch

    from matprobe.kernels.triton._gemv_swiglu_kernels import (
        gemv_swiglu_kernel,
        gemv_swiglu_q8_kernel,
    )
    from matprobe.measure.inputs import activation_dtype, shapes, torch_dtype

    quantized = spec.dtype == "q8_0"
    kernel = gemv_swiglu_q8_kernel if quantized else gemv_swiglu_kernel
    common.check_mode(NAME, kernel, device)
    dims = shapes(spec)
    batch, _, n0 = dims["out"]
    n, k = dims["b"][1], dims["b"][2]  # n = n0 + n1 rows, stacked
    dtype = torch_dtype(activation_dtype(spec))
    where = common.target(device)
    bn, bk, warps = common.tile_params(params)
    launch = kernel[(-(-n0 // bn), batch)]
    constants: dict[str, Any] = {
        **common.unrolled_tile_constants(n0, k, bn, bk),
        "num_warps": warps,
    }
    if quantized:
        constants["NB"] = bk // Q8_0_BLOCK

    def run(inputs: MatmulInputs, out: Any) -> None:
        if not inputs.swiglu:
            raise ValueError(f"{NAME}: inputs are not a SwiGLU set (gate and up stacked)")
        if not inputs.tb:
            raise ValueError(f"{NAME}: W must be stored [batch, n0 + n1, k], got tb=False")
        x, w = inputs.a_mk(), inputs.b
        common.check_tensor(NAME, x, "A (as [batch, 1, k])", (batch, 1, k), dtype, where)
        w_dtype = torch.int8 if quantized else dtype
        common.check_tensor(NAME, w, "W (gate and up stacked)", (batch, n, k), w_dtype, where)
        common.check_tensor(NAME, out, "out", (batch, 1, n0), dtype, where)
        # No epilogue operands: inputs that carry C0 or a bias are refused.
        common.epilogue_operands(
            NAME, inputs, out, has_c0=False, has_bias=False, c0_shape=(batch, 1, n0), n=n0,
            dtype=dtype, where=where,
        )  # fmt: skip
        if where.type == "cuda":
            common.check_current_device(NAME, where)
        if quantized:
            d: Any = inputs.scales
            common.check_tensor(NAME, d, "scales", (batch, n, k // Q8_0_BLOCK), torch.float16,
                                where)  # fmt: skip
            if w.stride(2) != 1 or d.stride(2) != 1:
                raise ValueError(f"{NAME}: quants and scales must be contiguous along K")
            launch(
                x, w, d, out,
                n0, k,
                x.stride(0), x.stride(2),
                w.stride(0), w.stride(1),
                d.stride(0), d.stride(1),
                out.stride(0), out.stride(2),
                **constants,
            )  # fmt: skip
        else:
            launch(
                x, w, out,
                n0, k,
                x.stride(0), x.stride(2),
                w.stride(0), w.stride(1), w.stride(2),
                out.stride(0), out.stride(2),
                **constants,
            )  # fmt: skip

    return run


FAMILIES: tuple[VariantFamily, ...] = (GEMV_SWIGLU,)
