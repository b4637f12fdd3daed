"""MLX, the array library of Apple-silicon engines: ``mx.matmul`` / ``mx.addmm`` as an
MLX engine calls them (``mlx.nn.Linear`` is ``mx.addmm(bias, x, w.T)``), run on
MLX's CPU backend (``mx.cpu``) — a peer, reported and never crowned.

Numerics (MLX's CPU backend, measured with mlx 0.32.4 on x86-64 Linux): in f16
and bf16 every path — the fused GEMV for m = 1, the small-matrix SIMD GEMM, and
the f32 BLAS GEMM on converted copies for larger or batched problems —
accumulates in fp32 and rounds once; ``addmm`` applies α and β·C in fp32 before
that rounding. The outputs are bit-identical to "fp32 matmul, one rounding" at
every shape tried, so the family meets the one-rounding tolerances. Scaling
after the fact (``mx.matmul(a, b) * alpha``) would round twice (bf16: up to
2.3 u per element, over the 2 u bound), so α always goes through ``addmm``.
On macOS MLX's CPU backend hands f16/bf16 matmuls to Accelerate (BNNS) instead:
not measured here, the harness's validation there is the first word on it.

The harness hands tensors over as torch CPU tensors and MLX cannot alias their
memory: each call copies the inputs into MLX arrays (bit for bit: bf16 travels
as its 16-bit pattern, never through a wider type) and the result back into
``out``. Those copies are part of its wall time, so its CPU timings are an upper
bound on MLX's own matmul time. MLX is lazy; the call evaluates (``mx.eval``)
before it returns, so the wall clock times the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import KernelFn, VariantFamily, variant_family
from matprobe.spec import MatmulSpec

#: matprobe dtype → the name of MLX's dtype (``mx.float16`` …)
MLX_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


@lru_cache(maxsize=1)
def _backend_problem() -> str | None:
    """Why MLX's core does not load, or None. On Linux the ``mlx`` package alone has
    no backend library: ``mlx-cpu`` brings it (``pip install 'matprobe[mlx]'``)."""
    try:
        import mlx.core  # noqa: F401
    except (ImportError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return (
            f"mlx is installed but mlx.core does not load ({first}); on Linux install "
            f"its CPU backend too: pip install 'matprobe[mlx]'"
        )
    return None


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    return _backend_problem()


def to_mlx(tensor: Any) -> Any:
    """A torch CPU tensor as an MLX array of the same dtype and values (a copy).

    f32 and f16 go through NumPy; bf16, which NumPy lacks, as its bit pattern
    (int16) reinterpreted by MLX — no value is ever rounded on the way."""
    import mlx.core as mx
    import torch

    if tensor.dtype == torch.bfloat16:
        return mx.array(tensor.detach().view(torch.int16).numpy()).view(mx.bfloat16)
    return mx.array(tensor.detach().numpy())


def to_torch(array: Any) -> Any:
    """An evaluated MLX array as a torch CPU tensor of the same dtype (bf16 by its bits)."""
    import mlx.core as mx
    import numpy as np
    import torch

    if array.dtype == mx.bfloat16:
        return torch.from_numpy(np.asarray(array.view(mx.int16))).view(torch.bfloat16)
    return torch.from_numpy(np.asarray(array))


@variant_family(
    name="mlx.matmul",
    ops=("matmul", "matmul_bias_add", "matmul_alpha_beta"),
    devices=("cpu",),
    supports=_supports,
    peer=True,
    requires=("mlx", "torch"),  # torch: the harness hands tensors over as torch tensors
)
def mlx_matmul(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """mx.matmul / mx.addmm on MLX's CPU backend, in the spec's dtype."""
    import mlx.core as mx

    dtype = getattr(mx, MLX_DTYPES[spec.dtype or "f32"])
    alpha, beta = spec.alpha_value, spec.beta_value
    cpu = mx.cpu
    zero = mx.array(0.0, dtype=dtype)  # addmm's C when β = 0 (never read)

    def run(inputs: MatmulInputs, out: Any) -> None:
        # The stored layouts, transposed by MLX (a strided view its GEMM takes as is),
        # as an engine holding [n, k] weights writes x @ w.T.
        a, b = to_mlx(inputs.a), to_mlx(inputs.b)
        if inputs.ta:
            a = mx.swapaxes(a, -1, -2)
        if inputs.tb:
            b = mx.swapaxes(b, -1, -2)
        if inputs.c0 is not None:
            # α·A·B + β·C₀ in one call, one rounding; a bias on top is a second op.
            y = mx.addmm(to_mlx(inputs.c0), a, b, alpha=alpha, beta=beta, stream=cpu)
            if inputs.bias is not None:
                y = mx.add(y, to_mlx(inputs.bias), stream=cpu)
        elif inputs.bias is not None:  # mlx.nn.Linear's call
            y = mx.addmm(to_mlx(inputs.bias), a, b, alpha=alpha, beta=1.0, stream=cpu)
        elif alpha != 1.0:  # α inside the GEMM: one rounding
            y = mx.addmm(zero, a, b, alpha=alpha, beta=0.0, stream=cpu)
        else:
            y = mx.matmul(a, b, stream=cpu)
        mx.eval(y)
        out.copy_(to_torch(y).reshape(out.shape))

    return run


FAMILIES: tuple[VariantFamily, ...] = (mlx_matmul,)
