
"""A kernel engineer's own families."""
from collections.abc import Mapping
from typing import Any

import torch

from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import variant_family

ALL_OPS = ("matmul", "matmul_bias_add", "matmul_alpha_beta")


def exact(inputs: MatmulInputs) -> torch.Tensor:
    """The right answer, computed in float64 from the inputs (x normalised first
    when the spec has an RMSNorm prologue)."""
    a = inputs.a_mk().to(torch.float64)
    if inputs.gain is not None:
        a = a * torch.rsqrt(a.square().mean(-1, keepdim=True) + (inputs.norm_eps or 0.0))
        a = a * inputs.gain.to(torch.float64)
    b = inputs.b_kn().to(torch.float64)
    result = inputs.alpha * (a @ b)
    if inputs.c0 is not None:
        result = result + inputs.beta * inputs.c0.to(torch.float64)
    if inputs.bias is not None:
        result = result + inputs.bias.to(torch.float64)
    return result


@variant_family(name="plug.exact", ops=ALL_OPS, devices=("cpu", "cuda"))
def mine_exact(spec, params: Mapping[str, Any], device):
    """Correct: float64 math, rounded once."""

    def run(inputs, out):
        out.copy_(exact(inputs))

    return run


@variant_family(name="plug.zeros", ops=ALL_OPS)
def mine_zeros(spec, params, device):
    """Cheats: writes zeros."""

    def run(inputs, out):
        out.zero_()

    return run


FAMILIES = (mine_exact, mine_zeros)

from matprobe.measure.variants import SHIPPED_FACTORY as _SHIPPED
from matprobe.measure.variants import resolve_factory as _resolve
_shipped = _resolve(_SHIPPED)

@variant_family(name="plug.cublas", ops=("matmul",), devices=("cuda",))
def mine_cublas(spec, params, device):
    def run(inputs, out):
        torch.matmul(inputs.a_mk(), inputs.b_kn(), out=out)
    return run

def _wrap(variant_id):
    def build(spec, params, device):
        return _shipped.variant(variant_id).build(spec, device)
    return build

mine_gemv4 = variant_family(name="plug.gemv_bn4", ops=("matmul",), devices=("cuda",))(
    _wrap("triton.gemv_decode/bn4_bk512_w4"))
mine_gemv1 = variant_family(name="plug.gemv_bn1", ops=("matmul",), devices=("cuda",))(
    _wrap("triton.gemv_decode/bn1_bk1024_w8"))
FAMILIES = (mine_exact, mine_zeros, mine_cublas, mine_gemv4, mine_gemv1)
