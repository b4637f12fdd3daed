"""The vendor baseline: PyTorch's own matmul calls (cuBLAS/cuBLASLt on CUDA, the
CPU BLAS on the CPU) — the figure every other variant is compared with.

For Q8_0 weights it is what a PyTorch user does: dequantize (``d·q`` into a
fresh fp16 weight, each call) and hand that to the same matmul. For
``matmul_swiglu`` it is a model's MLP in eager mode:
``F.silu(x @ W_gate.T) * (x @ W_up.T)`` — two matmuls, each output rounded to
the dtype, silu rounded, the product rounded (the tolerance counts these
roundings, see ``matprobe.measure.validate``). An RMSNorm prologue
(``rmsnorm=ε``) is ``F.rms_norm`` first (fp32 inside, x̂ rounded once to the
dtype: the second answer the reference allows), then the same matmul."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import KernelFn, VariantFamily, variant_family
from matprobe.spec import MatmulSpec


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if (
        device.kind == "cpu"
        and spec.dtype in ("f16", "bf16", "q8_0")
        and (spec.k or 0) * (spec.n_total or 0) * (spec.batch or 1) > 2**28
    ):
        return "too large for a half-precision matmul on the CPU"
    return None


@variant_family(
    name="torch.matmul",
    ops=("matmul", "matmul_bias_add", "matmul_alpha_beta", "matmul_swiglu"),
    devices=("cuda", "cpu", "mps"),
    supports=_supports,
    baseline=True,
    peer=True,
    dtypes=("f32", "f16", "bf16", "q8_0"),
    requires=("torch",),
    prologues=("rmsnorm",),
)
def torch_matmul(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """torch.matmul / addmm / baddbmm with out=: the call a PyTorch engine makes."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own spelling

    alpha, beta = spec.alpha_value, spec.beta_value
    two_d = spec.batch == 1
    swiglu, n0 = spec.is_swiglu, spec.n0 or 0
    eps, k = spec.rmsnorm, spec.k or 0

    def run(inputs: MatmulInputs, out: Any) -> None:
        a = inputs.a_mk()
        if eps is not None:
            a = F.rms_norm(a, (k,), inputs.gain, eps)
        b = inputs.weight_kn(a.dtype) if inputs.quantized else inputs.b_kn()
        if swiglu:
            # b is [batch, k, n0 + n1]: the gate's columns, then the up's.
            gate, up = b[..., :n0], b[..., n0:]
            torch.mul(F.silu(torch.matmul(a, gate)), torch.matmul(a, up), out=out)
        elif inputs.c0 is not None:
            # β·C₀ + α·A·B in one call; a bias on top is a second kernel.
            torch.baddbmm(inputs.c0, a, b, beta=beta, alpha=alpha, out=out)
            if inputs.bias is not None:
                out.add_(inputs.bias)
        elif inputs.bias is not None and alpha == 1.0:
            if two_d:  # cuBLASLt's bias epilogue
                torch.addmm(inputs.bias, a[0], b[0], out=out[0])
            else:
                torch.baddbmm(inputs.bias, a, b, out=out)
        elif inputs.bias is not None:
            torch.baddbmm(inputs.bias, a, b, beta=1.0, alpha=alpha, out=out)
        elif alpha != 1.0:
            torch.baddbmm(out, a, b, beta=0.0, alpha=alpha, out=out)  # β = 0: out not read
        elif two_d:
            torch.mm(a[0], b[0], out=out[0])
        else:
            torch.bmm(a, b, out=out)

    return run


FAMILIES: tuple[VariantFamily, ...] = (torch_matmul,)
