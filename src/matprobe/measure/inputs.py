"""Deterministic inputs for a spec, and the float64 reference on them.

Scaling (why sums stay O(1)): A and C₀ are uniform in [-1, 1), B is uniform
in [-1, 1) / √K, the bias uniform in [-0.5, 0.5). Each output is then a sum of
K terms of variance ~1/(9K), so outputs are O(1) whatever K is — no overflow
in fp16 at K = 4864, and tolerances can be stated relative to O(1) values.
Uniform draws are never exactly zero (zeros hide unwritten outputs).

Layouts follow DESIGN.md §2 (row-major): A is stored ``[batch, k, m]`` when tA,
else ``[batch, m, k]``; B ``[batch, n, k]`` when tB (the weight layout), else
``[batch, k, n]``. The reference is computed in float64 from the *same rounded*
values the kernel sees.

Q8_0 specs (``dtype=q8_0``): the weight is drawn as above, then quantized
(:mod:`matprobe.quant`, GGUF's rounding) into the split layout fast kernels read
— ``b`` int8 quants ``[batch, n, k]`` and ``scales`` fp16 ``[batch, n, k/32]``,
blocks along K whatever the spec's tB says (the profile's ``loader=`` names the
engine's packing; the numbers are the same). Activations, bias, C₀ and the
output are fp16. The reference is made from the dequantized weights ``d·q``,
exact in float64: the kernel is judged on the matmul, the quantization on its
own (bit for bit against gguf, tests/test_quant.py). A kernel may round each
``d·q`` once to fp16 (dequantize-then-matmul does), so a second reference is
made from those rounded weights and every output is judged against the nearer
(:meth:`Operands64.rounded_answer`; why: ``measure.validate``'s module doc).

RMSNorm specs (``rmsnorm=ε``): a gain ``[k]`` uniform in (0.5, 1.5) is drawn
too; A is the raw ``x`` (the residual stream), and the op computes with
``x̂ = x / √(mean(x²) + ε) ⊙ gain``, row by row. The reference normalises in
float64; a kernel may round x̂ once to the activation dtype (the eager
``F.rms_norm`` then matmul does), so the second reference holds that rounding.

SwiGLU specs (``op=matmul_swiglu``): W is gate and up stacked, ``[batch, n0 + n1,
k]`` (rows ``j`` and ``n0 + j`` make output ``j``; Q8_0 quantizes the stacked W),
and the output is ``y = silu(g) ⊙ u`` with ``g = x·W_gateᵀ``, ``u = x·W_upᵀ``,
``[batch, m, n0]``. The reference is that, in float64; its scale is derived in
:func:`reference_scale`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from matprobe.errors import SpecError
from matprobe.spec import Q8_0_ACTIVATION_DTYPE, Q8_0_BLOCK, MatmulSpec

if TYPE_CHECKING:
    import torch

TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def activation_dtype(spec: MatmulSpec) -> str:
    """The dtype of A, the bias, C₀ and the output: the spec's, fp16 for Q8_0 weights."""
    if spec.dtype == "q8_0":
        return Q8_0_ACTIVATION_DTYPE
    return spec.dtype or "f32"


def torch_dtype(name: str) -> torch.dtype:
    import torch

    try:
        return getattr(torch, TORCH_DTYPES[name])
    except KeyError:
        raise SpecError(f"dtype {name!r} has no dense torch equivalent") from None


@dataclass
class MatmulInputs:
    """One input set. ``a``/``b`` are in their stored layouts (see module doc)."""

    a: Any  # torch.Tensor
    b: Any
    bias: Any | None  # [n]
    c0: Any | None  # [batch, m, n], present when β ≠ 0
    alpha: float
    beta: float
    ta: bool = False  # a is stored [batch, k, m]
    tb: bool = False  # b is stored [batch, n, k]
    #: Q8_0: fp16 scales [batch, n, k/32] of the int8 quants in ``b`` (see module doc)
    scales: Any | None = None
    #: ``matmul_swiglu``: ``b`` holds gate and up stacked; the op is silu(gate)·up
    swiglu: bool = False
    #: RMSNorm prologue (``rmsnorm=ε`` specs): the gain ``[k]``, and ε; the op's A is
    #: then x̂ = a / √(mean(a²) + ε) ⊙ gain, each row of ``a`` normalised over K
    gain: Any | None = None
    norm_eps: float | None = None

    def tensors(self) -> list[Any]:
        held = (self.a, self.b, self.bias, self.c0, self.scales, self.gain)
        return [t for t in held if t is not None]

    @property
    def quantized(self) -> bool:
        return self.scales is not None

    def weight_kn(self, dtype: Any) -> Any:
        """B as logical ``[batch, k, n]`` values in ``dtype`` (Q8_0: dequantized, ``d·q``)."""
        if self.scales is None:
            return self.b_kn().to(dtype)
        from matprobe.quant import dequantize_q8_0

        return dequantize_q8_0(self.b, self.scales, dtype).transpose(-1, -2)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def a_mk(self) -> Any:
        """A as a logical ``[batch, m, k]`` view (no copy)."""
        return self.a.transpose(-1, -2) if self.ta else self.a

    def b_kn(self) -> Any:
        """B as a logical ``[batch, k, n]`` view (no copy)."""
        return self.b.transpose(-1, -2) if self.tb else self.b


def shapes(spec: MatmulSpec) -> dict[str, tuple[int, ...]]:
    batch, m, n, k = spec.batch, spec.m, spec.n_total, spec.k
    if batch is None or m is None or n is None or k is None:
        raise SpecError(f"spec has unknown dimensions: {spec.key()}")
    for problem in (spec.swiglu_problem(), spec.norm_problem()):
        if problem is not None:
            raise SpecError(problem)
    quantized = spec.dtype == "q8_0"
    n_out = spec.n_out or 0  # n0 for SwiGLU (n is both halves), else n
    return {
        "a": (batch, k, m) if spec.tA else (batch, m, k),
        "b": (batch, n, k) if spec.tB or quantized else (batch, k, n),
        "scales": (batch, n, k // Q8_0_BLOCK),
        "bias": (n,),
        "c0": (batch, m, n),
        "out": (batch, m, n_out),
        "gain": (k,),
    }


#: Each tensor of an input set draws its own stream (:mod:`~matprobe.measure.draws`).
STREAMS = {"a": 1, "b": 2, "bias": 3, "c0": 4, "gain": 5}


def make_inputs(spec: MatmulSpec, seed: int, device: Any = "cpu") -> MatmulInputs:
    """Seeded inputs in the spec's dtype on ``device``: the same values on every
    device (:mod:`~matprobe.measure.draws`), drawn where they are wanted — on a GPU
    in milliseconds, which the LM head's 136 M weights need. (Timing's many sets:
    :func:`make_input_sets`.)"""
    from matprobe.measure.draws import uniform

    dims = shapes(spec)
    return _inputs_from(spec, lambda name: uniform(dims[name], seed, STREAMS[name], device))


def make_input_sets(spec: MatmulSpec, seed: int, count: int, device: Any) -> list[MatmulInputs]:
    """``count`` input sets for timing, each in storage of its own, drawn all at once by
    the device's generator (seeded with ``seed``): the hundreds of small sets cold-L2
    timing rotates over cost a few launches a tensor, not a few per set; only the
    distribution matters there (validation draws with :func:`make_inputs`)."""
    if count < 1:
        return []
    stacked = _bulk_draws(spec, seed, count, device)
    if count == 1:
        return [_unstack(stacked, 0)]
    sets = [_unstack(stacked, i) for i in range(count)]
    fresh = [replace_tensors(one, [t.new_empty(t.shape) for t in one.tensors()]) for one in sets]
    copy_all(
        [t for one in fresh for t in one.tensors()], [t for one in sets for t in one.tensors()]
    )
    return fresh


def refill_sets(sets: Sequence[MatmulInputs], spec: MatmulSpec, seed: int) -> None:
    """Overwrite every tensor of ``sets`` in place with new values (same storage):
    a kernel that memoises its answer by input pointer, or that baked the inputs
    into a captured graph, now answers the old problem."""
    stacked = _bulk_draws(spec, seed, len(sets), sets[0].a.device)
    news = [_unstack(stacked, i) for i in range(len(sets))]
    copy_all([t for one in sets for t in one.tensors()], [t for one in news for t in one.tensors()])


def copy_all(dsts: Sequence[Any], srcs: Sequence[Any]) -> None:
    """``dst.copy_(src)`` for every pair, in a few multi-tensor launches."""
    import torch

    torch._foreach_copy_(list(dsts), list(srcs))


def _bulk_draws(spec: MatmulSpec, seed: int, count: int, device: Any) -> MatmulInputs:
    """``count`` sets' tensors stacked along a leading axis (bias ``[count, n]``)."""
    import torch

    dims = shapes(spec)
    gen = torch.Generator(device=device).manual_seed(seed)
    return _inputs_from(
        spec,
        lambda name: torch.rand((count, *dims[name]), generator=gen, device=device).mul_(2).sub_(1),
    )


def _unstack(stacked: MatmulInputs, i: int) -> MatmulInputs:
    return replace_tensors(stacked, [t[i] for t in stacked.tensors()])


def replace_tensors(inputs: MatmulInputs, tensors: Sequence[Any]) -> MatmulInputs:
    """``inputs`` with its tensors (in :meth:`MatmulInputs.tensors` order) replaced."""
    new = iter(tensors)

    def take(old: Any) -> Any:
        return None if old is None else next(new)

    return replace(
        inputs,
        a=take(inputs.a),
        b=take(inputs.b),
        bias=take(inputs.bias),
        c0=take(inputs.c0),
        scales=take(inputs.scales),
        gain=take(inputs.gain),
    )


def _inputs_from(spec: MatmulSpec, draws: Callable[[str], torch.Tensor]) -> MatmulInputs:
    """The input set from ``draws(name)``: float32 uniforms in (−1, 1) of that tensor's
    shape (with any leading axes), scaled and rounded to the spec's dtype."""
    import numpy as np

    dtype = torch_dtype(activation_dtype(spec))
    k = spec.k or 1

    def draw(name: str, scale: float) -> torch.Tensor:
        # One float32 multiply (the scale rounded to float32 first), then one
        # rounding to the dtype: correctly rounded, so equal on every device.
        return draws(name) * float(np.float32(scale))

    a = draw("a", 1.0).to(dtype)
    scales = None
    if spec.dtype == "q8_0":
        from matprobe.quant import quantize_q8_0

        b, scales = quantize_q8_0(draw("b", 1.0 / k**0.5))
    else:
        b = draw("b", 1.0 / k**0.5).to(dtype)
    bias = draw("bias", 0.5).to(dtype) if spec.has_bias else None
    c0 = draw("c0", 1.0).to(dtype) if spec.reads_c0 else None
    # A gain in (0.5, 1.5), as trained norms' are near 1: u/2 is exact, + 1 one
    # correctly rounded float32 addition, so the same on every device.
    gain = (draw("gain", 0.5) + 1.0).to(dtype) if spec.rmsnorm is not None else None
    named = {"a": a, "b": b, "bias": bias, "c0": c0, "scales": scales, "gain": gain}
    return assemble_inputs(spec, {name: t for name, t in named.items() if t is not None})


def assemble_inputs(spec: MatmulSpec, tensors: dict[str, Any]) -> MatmulInputs:
    """The input set of ``spec`` made of ``tensors`` by name (``a``, ``b``, and
    whichever of ``bias``, ``c0``, ``scales``, ``gain`` the spec has; the names of
    :func:`named_tensors`): the layout flags and scalars come from the spec."""
    scales = tensors.get("scales")
    tb = bool(spec.tB) or scales is not None
    return MatmulInputs(
        tensors["a"], tensors["b"], tensors.get("bias"), tensors.get("c0"), spec.alpha_value,
        spec.beta_value, ta=bool(spec.tA), tb=tb, scales=scales, swiglu=spec.is_swiglu,
        gain=tensors.get("gain"), norm_eps=spec.rmsnorm,
    )  # fmt: skip


def named_tensors(inputs: MatmulInputs) -> dict[str, Any]:
    """The tensors of ``inputs`` by name (those it holds): what
    :func:`assemble_inputs` takes back."""
    held = {
        "a": inputs.a, "b": inputs.b, "bias": inputs.bias, "c0": inputs.c0,
        "scales": inputs.scales, "gain": inputs.gain,
    }  # fmt: skip
    return {name: t for name, t in held.items() if t is not None}


def float64_device(device: Any) -> Any:
    """Where float64 can be computed for tensors on ``device``: the device itself,
    except MPS (Metal has no float64), whose references are computed on the CPU."""
    import torch

    return "cpu" if torch.device(device).type == "mps" else device


def fresh_x(inputs: MatmulInputs, seed: int) -> torch.Tensor:
    """A new ``x`` (A, in its stored layout and dtype) for ``inputs``, drawn as
    :func:`make_inputs` draws it, under ``seed``: the same values on every device."""
    from matprobe.measure.draws import uniform

    a = inputs.a
    return uniform(tuple(a.shape), seed, STREAMS["a"], a.device).to(a.dtype)


def x64(inputs: MatmulInputs, x: torch.Tensor) -> torch.Tensor:
    """``x`` (stored like ``inputs.a``) as logical ``[…, m, k]`` float64 on the device
    where the references of ``inputs`` are computed."""
    logical = x.transpose(-1, -2) if inputs.ta else x
    return logical.detach().to(float64_device(inputs.a.device), torch_float64())


def fresh_copy(inputs: MatmulInputs, device: Any) -> MatmulInputs:
    """Copies of every tensor on ``device`` (always new storage, even on the same
    device): a kernel that writes into its inputs changes neither the cached
    originals nor what the next variant is given."""

    return replace_tensors(inputs, [t.to(device, copy=True) for t in inputs.tensors()])


def torch_float64() -> torch.dtype:
    import torch

    return torch.float64
