"""``triton.gemv_q8_int8dot``: a Q8_0 GEMV the llama.cpp way — int8 activations too.

``y[b, 0, :] = alpha * (W[b] @ x̂[b, 0, :]) + beta * C0[b, 0, :] + bias`` (decode:
m = 1), W in the split layout (int8 quants + fp16 block scales), x̂ the activations
quantized to int8 per 32-element block inside the kernel, the dot products
int8 × int8 in int32 per block, scaled by ``d_w·d_x`` in fp32 — llama.cpp's CUDA
mmvq (Q8_0 weights × Q8_1 activations). See ``_gemv_q8_kernels`` (INT8DOT)
for the steps and why each program quantizes x itself.

Quantizing x is an approximation the plain Q8_0 tolerance refuses (an
undeclared int8-activation kernel fails validation): this family *declares* it
(``activation_quant="int8_block32"``), and the harness allows the error derived
for it (``matprobe.measure.validate``, module doc) — for this family only. The
grid and the launch are ``triton.gemv_q8``'s, so the two compare point for point.

Importing this module never imports triton or torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from matprobe.kernels.triton import _common as common
from matprobe.kernels.triton.gemv_q8 import q8_gemv_launcher, q8_gemv_reason
from matprobe.measure.variants import KernelFn, VariantFamily
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo

NAME = "triton.gemv_q8_int8dot"

#: What the kernels do to x, declared to the harness (``measure.validate.ACTIVATION_QUANTS``).
ACTIVATION_QUANT = "int8_block32"

KERNELS_SOURCE: str = common.kernels_source(__file__, "_gemv_q8_kernels.py")


@common.triton_family(
    name=NAME,
    ops=common.MATMUL_OPS,
    supports=q8_gemv_reason,
    grid={"bn": (1, 2, 4), "bk": (512, 1024), "w": (4, 8)},
    dtypes=("q8_0",),
    activation_quant=ACTIVATION_QUANT,
)
def GEMV_Q8_INT8DOT(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Q8_0 GEMV, x quantized to int8 per 32-block: int8·int8 dots in int32 (llama.cpp's mmvq)."""
    from matprobe.kernels.triton._gemv_q8_kernels import gemv_q8_kernel

    return q8_gemv_launcher(NAME, gemv_q8_kernel, spec, params, device, {"INT8DOT": True})


FAMILIES: tuple[VariantFamily, ...] = (GEMV_Q8_INT8DOT,)
