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
    """np.matmul in float32 on float32 copies of the inputs, rounded to the spec's dtype."""
    import numpy as np
    import torch

    def run(inputs: MatmulInputs, out: Any) -> None:
        a = inputs.a_mk().numpy().astype(np.float32)
        b = inputs.b_kn().numpy().astype(np.float32)
        result = np.float32(inputs.alpha) * np.matmul(a, b)
        if inputs.c0 is not None:
            result += np.float32(inputs.beta) * inputs.c0.numpy().astype(np.float32)
        if inputs.bias is not None:
            result += inputs.bias.numpy().astype(np.float32)
        out.copy_(torch.from_numpy(result))

    return run


FAMILIES: tuple[VariantFamily, ...] = (numpy_matmul,)
