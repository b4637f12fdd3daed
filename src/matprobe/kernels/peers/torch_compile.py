"""``torch.compile``: Inductor's own generated code for the spec's op — a peer, not ours.

The builder writes the op the way a PyTorch model would (``alpha·(A@B) + beta·C0 +
bias`` on the spec's layout views — a 2-D ``mm`` when batch = 1, as a linear layer
is, else ``bmm`` — epilogue in fp32, one cast back; ``F.rms_norm`` first for an
``rmsnorm=ε`` spec) and compiles
it once per built kernel with ``torch.compile(fn, mode="max-autotune-no-cudagraphs",
dynamic=False)``: Inductor autotunes its Triton GEMM templates against the ATen
(cuBLAS) choice for this exact shape and fuses the epilogue where it can. No
CUDA graphs of its own: the harness captures its own graph around ``run``.

Compilation and autotuning happen on the first call (the harness's first
validation trial, never inside a graph capture). Each built kernel gets its own
copy of the function's code object, so Dynamo caches one entry per build and a
worker that builds many specs never reaches Dynamo's recompile limit (past it,
Dynamo would silently fall back to eager).

``run(inputs, out)`` calls the compiled function, which returns a fresh tensor,
and copies it into ``out``: that copy (one more small kernel) is counted in this
family's time.

CUDA only: on the CPU Inductor generates C++ and needs a C++ compiler, and
max-autotune compiles for minutes — not a useful peer there.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from matprobe.measure.variants import KernelFn, VariantFamily, variant_family
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

NAME = "torch.compile"
MODE = "max-autotune-no-cudagraphs"
CPU_REASON = (
    "Inductor on the CPU generates C++ (needs a C++ compiler) and max-autotune "
    "compiles for minutes: CUDA only"
)

_builds = itertools.count()


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if device.kind != "cuda":
        return CPU_REASON
    return None


def make_fn(
    *,
    alpha: float,
    beta: float,
    has_c0: bool,
    has_bias: bool,
    ta: bool,
    tb: bool,
    two_d: bool,
    norm_eps: float | None = None,
    swiglu_n0: int | None = None,
) -> Callable[[Any, Any, Any, Any, Any], Any]:
    """The eager function Inductor compiles: ``(a, b, c0, bias, gain) -> out`` with a and b
    in their *stored* layouts (the transposes are part of the graph, so Inductor sees
    the real strides). The product stays in the input dtype (cuBLAS/the templates
    accumulate in fp32); alpha, beta·C0 and the bias are applied in fp32 and the
    result is cast back once. ``norm_eps``: an RMSNorm of a first (``F.rms_norm``
    with ``gain``, as a model writes it; Inductor fuses it into one kernel).
    ``swiglu_n0``: ``matmul_swiglu``, gate and up in one product (W stacked), then
    ``silu(gate)·up`` in fp32, cast once (the epilogue Inductor fuses). A fresh
    code object per call: see the module doc."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own spelling

    def matmul_epilogue(a: Any, b: Any, c0: Any, bias: Any, gain: Any) -> Any:
        a_mk = a.transpose(-1, -2) if ta else a
        if norm_eps is not None:
            a_mk = F.rms_norm(a_mk, (a_mk.shape[-1],), gain, norm_eps)
        b_kn = b.transpose(-1, -2) if tb else b
        # batch 1: a 2-D mm, as a model's linear layer is (Inductor's mm templates).
        prod = (a_mk[0] @ b_kn[0]).unsqueeze(0) if two_d else torch.bmm(a_mk, b_kn)
        if swiglu_n0 is not None:
            gate, up = prod[..., :swiglu_n0].float(), prod[..., swiglu_n0:].float()
            return (F.silu(gate) * up).to(prod.dtype)
        y = prod.float()
        if alpha != 1.0:
            y = y * alpha
        if has_c0:
            y = y + beta * c0.float()
        if has_bias:
            y = y + bias.float()
        return y.to(prod.dtype)

    code = matmul_epilogue.__code__
    fresh = code.replace(co_name=f"{code.co_name}_{next(_builds)}")
    return types.FunctionType(
        fresh, matmul_epilogue.__globals__, fresh.co_name, None, matmul_epilogue.__closure__
    )


@variant_family(
    name=NAME,
    ops=("matmul", "matmul_bias_add", "matmul_alpha_beta", "matmul_swiglu"),
    devices=("cuda",),
    supports=_supports,
    dtypes=("f32", "f16", "bf16"),
    peer=True,
    requires=("torch",),
    prologues=("rmsnorm",),
)
def TORCH_COMPILE(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Inductor (max-autotune-no-cudagraphs) on α·(A@B) + β·C0 + bias, SwiGLU, RMSNorm."""
    import torch

    has_c0, has_bias = spec.reads_c0, spec.has_bias
    fn = make_fn(
        alpha=spec.alpha_value,
        beta=spec.beta_value,
        has_c0=has_c0,
        has_bias=has_bias,
        ta=bool(spec.tA),
        tb=bool(spec.tB),
        two_d=spec.batch == 1,
        norm_eps=spec.rmsnorm,
        swiglu_n0=spec.n0 if spec.is_swiglu else None,
    )
    compiled = torch.compile(fn, mode=MODE, dynamic=False)

    def run(inputs: MatmulInputs, out: Any) -> None:
        if inputs.ta != bool(spec.tA) or inputs.tb != bool(spec.tB):
            raise ValueError(
                f"{NAME}: inputs are stored tA={int(inputs.ta)} tB={int(inputs.tb)}, "
                f"the kernel was compiled for tA={int(bool(spec.tA))} tB={int(bool(spec.tB))}"
            )
        if (inputs.c0 is not None) != has_c0:
            raise ValueError(f"{NAME}: C0 {'missing' if has_c0 else 'given but beta=0'}")
        if (inputs.bias is not None) != has_bias:
            raise ValueError(f"{NAME}: bias {'missing' if has_bias else 'given, spec has none'}")
        if (inputs.gain is not None) != (spec.rmsnorm is not None):
            raise ValueError(f"{NAME}: the norm's gain given exactly when the spec has rmsnorm")
        out.copy_(compiled(inputs.a, inputs.b, inputs.c0, inputs.bias, inputs.gain))

    return run


FAMILIES: tuple[VariantFamily, ...] = (TORCH_COMPILE,)
