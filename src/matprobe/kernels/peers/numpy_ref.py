"""NumPy on the CPU: a second, independent CPU implementation (fp32 arithmetic)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import KernelFn, VariantFamily, variant_family
from matprobe.spec import MatmulSpec


@variant_family(
    name="numpy.matmul",
    ops=("matmul", "matmul_bias_add", "matmul_alpha_beta"),
    devices=("cpu",),
    dtypes=("f32", "f16"),  # NumPy has no bfloat16
    peer=True,
    requires=("torch",),  # the harness hands tensors over as torch CPU tensors
)
def numpy_matmul(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """np.matmul in float32 on float32 copies of the inputs, rounded to the spec's dtype.
    The copies are torch's (exact either way): NumPy's fp16 → fp32 conversion took
    1.3–1.5 s of the LM head's 136 M weights a call where torch's took 0.3–0.4 s
    (2-core VM), and the point of this peer is NumPy's arithmetic, not its casts."""
    import numpy as np
    import torch

    def float32(t: Any) -> Any:
        return t.float().numpy()

    def run(inputs: MatmulInputs, out: Any) -> None:
        product = np.matmul(float32(inputs.a_mk()), float32(inputs.b_kn()))
        result = np.float32(inputs.alpha) * product
        if inputs.c0 is not None:
            result += np.float32(inputs.beta) * float32(inputs.c0)
        if inputs.bias is not None:
            result += float32(inputs.bias)
        out.copy_(torch.from_numpy(result))

    return run


FAMILIES: tuple[VariantFamily, ...] = (numpy_matmul,)
