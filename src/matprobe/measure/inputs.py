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

SwiGLU specs (``op=matmul_swiglu``): W is gate and up stacked, ``[batch, n0 + n1,
k]`` (rows ``j`` and ``n0 + j`` make output ``j``; Q8_0 quantizes the stacked W),
and the output is ``y = silu(g) ⊙ u`` with ``g = x·W_gateᵀ``, ``u = x·W_upᵀ``,
``[batch, m, n0]``. The reference is that, in float64; its scale is derived in
:func:`reference_scale`.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
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

    def tensors(self) -> list[Any]:
        return [t for t in (self.a, self.b, self.bias, self.c0, self.scales) if t is not None]

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
    if (problem := spec.swiglu_problem()) is not None:
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
    }


#: Each tensor of an input set draws its own stream (:mod:`~matprobe.measure.draws`).
STREAMS = {"a": 1, "b": 2, "bias": 3, "c0": 4}


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
    tb = bool(spec.tB) or scales is not None
    return MatmulInputs(
        a, b, bias, c0, spec.alpha_value, spec.beta_value, ta=bool(spec.tA), tb=tb, scales=scales,
        swiglu=spec.is_swiglu,
    )  # fmt: skip


def float64_device(device: Any) -> Any:
    """Where float64 can be computed for tensors on ``device``: the device itself,
    except MPS (Metal has no float64), whose references are computed on the CPU."""
    import torch

    return "cpu" if torch.device(device).type == "mps" else device


def reference(inputs: MatmulInputs, device: Any = "cpu") -> torch.Tensor:
    """float64 result ``α·A·B + β·C₀ + bias`` on ``device`` (the CPU unless asked:
    a GPU's float64 is exact enough and much faster for the hundreds of input sets
    a replay check covers) from the rounded inputs.

    The bias is added after α scaling (``addmm`` semantics: ``β·C + α·(A·B)``
    with the bias as C when there is no C₀) — matmul_bias_add has α = 1, so the
    order only matters for specs that set both, and it is documented here.
    """
    return Operands64.of(inputs, device).answer(_a64(inputs, device))


def reference_scale(inputs: MatmulInputs, device: Any = "cpu") -> torch.Tensor:
    """|α|·|A|·|B| + |β|·|C₀| + |bias| in float64: the size of the terms each output
    sums. Where the terms cancel (a near-zero output, n = 1 with a bias …) this,
    divided by √K, is the scale rounding errors are judged against."""
    return Operands64.of(inputs, device).scale(_a64(inputs, device))


def _a64(inputs: MatmulInputs, device: Any) -> torch.Tensor:
    return inputs.a_mk().detach().to(float64_device(device), torch_float64())


@dataclass
class Operands64:
    """Everything of an input set but ``x`` (A), in float64 where the reference is
    computed: the weights (logical ``[…, batch, k, n]``, Q8_0 dequantized), C₀ and
    the bias, broadcastable over leading axes. Converted once, they answer for any
    number of ``x`` — every call of a timed replay has an ``x`` of its own.

    Q8_0 (``quantized``): two answers are legitimate, the one from the exact weights
    ``d·q`` (:meth:`answer`) and the one from each weight rounded once to fp16, as
    dequantize-then-matmul computes it (:meth:`rounded_answer`); the comparison
    judges every output against the nearer (``measure.validate``, module doc)."""

    w: Any
    c0: Any | None
    bias: Any | None
    alpha: float
    beta: float
    swiglu: bool
    _w_abs: Any | None = None
    #: Q8_0: ``w`` is ``d·q``, which a kernel may round once to fp16 (see the class doc)
    quantized: bool = False
    _w_rounded: Any | None = None

    @classmethod
    def of(cls, inputs: MatmulInputs, device: Any) -> Operands64:
        f64 = torch_float64()
        where = float64_device(device)
        return cls(
            w=inputs.weight_kn(f64).detach().to(where),
            c0=None if inputs.c0 is None else inputs.c0.detach().to(where, f64),
            bias=None if inputs.bias is None else inputs.bias.detach().to(where, f64),
            alpha=inputs.alpha,
            beta=inputs.beta,
            swiglu=inputs.swiglu,
            quantized=inputs.quantized,
        )

    @property
    def w_abs(self) -> Any:
        if self._w_abs is None:
            self._w_abs = self.w.abs()
        return self._w_abs

    @property
    def w_rounded(self) -> Any:
        """The weights each rounded once to fp16 (to nearest), in float64 — what
        ``dequantize_q8_0(q, d, float16)`` gives, bit for bit: ``d·q`` (an fp16 scale
        times an int8 quant, ≤ 18 significant bits) is exact in fp32, so the one
        rounding is fp32 → fp16's, which is IEEE's correctly rounded product."""
        if self._w_rounded is None:
            import torch

            self._w_rounded = self.w.to(torch.float32).to(torch.float16).to(self.w.dtype)
        return self._w_rounded

    def answer(self, a: torch.Tensor) -> torch.Tensor:
        """The float64 result for A = ``a`` (logical ``[…, batch, m, k]``, float64; one
        more leading axis than the weights: one problem per index of it)."""
        return self._answer(a, self.w)

    def rounded_answer(self, a: torch.Tensor) -> torch.Tensor | None:
        """Q8_0: the float64 result for A = ``a`` with every weight rounded once to fp16
        (:attr:`w_rounded`), the other legitimate answer; None for other weights."""
        return self._answer(a, self.w_rounded) if self.quantized else None

    def _answer(self, a: torch.Tensor, w: Any) -> torch.Tensor:
        if self.swiglu:
            import torch

            gate, up = _matmul(a, w).chunk(2, dim=-1)
            return torch.nn.functional.silu(gate) * up
        out = self.alpha * _matmul(a, w)
        if self.c0 is not None:
            out = out + self.beta * self.c0
        if self.bias is not None:
            out = out + self.bias
        return out

    def scale(self, a: torch.Tensor) -> torch.Tensor:
        """The term scale for A = ``a`` (see :func:`reference_scale`)."""
        if self.swiglu:
            return _swiglu_scale(a, self.w, self.w_abs)
        scale = abs(self.alpha) * _matmul(a.abs(), self.w_abs)
        if self.c0 is not None:
            scale = scale + abs(self.beta) * self.c0.abs()
        if self.bias is not None:
            scale = scale + self.bias.abs()
        return scale


def _matmul(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``a @ w``; where ``a`` has one more leading axis than ``w`` (``[r, *B, m, k]``
    against ``[*B, k, n]``: r problems on the same weights), the r problems become
    rows of one product instead of broadcasting ``w`` r times (which copies it r
    times: 22 GB for the LM head's 20 calls a replay)."""
    if a.dim() != w.dim() + 1:
        return a @ w
    r, m = a.shape[0], a.shape[-2]
    rows = a.movedim(0, -3).reshape(*a.shape[1:-2], r * m, a.shape[-1])
    product = rows @ w
    return product.view(*product.shape[:-2], r, m, product.shape[-1]).movedim(-3, 0)


#: float64 weight bytes one stacked reference computation may hold.
REFERENCE_CHUNK_BYTES = 1 << 29


def references(sets: Sequence[MatmulInputs], device: Any) -> list[tuple[Any, Any]]:
    """``(reference, reference_scale)`` of every set, computed stacked — a few launches
    in all where one set at a time took a few each (a replay check judges hundreds
    of sets) — in chunks of at most :data:`REFERENCE_CHUNK_BYTES` of float64 weights."""
    if not sets:
        return []
    step = max(1, REFERENCE_CHUNK_BYTES // (sets[0].b.numel() * 8))
    out: list[tuple[Any, Any]] = []
    for start in range(0, len(sets), step):
        stacked = _stack(sets[start : start + step])
        operands, a = Operands64.of(stacked, device), _a64(stacked, device)
        refs, scales = operands.answer(a), operands.scale(a)
        out += zip(refs.unbind(0), scales.unbind(0), strict=True)
    return out


def _stack(sets: Sequence[MatmulInputs]) -> MatmulInputs:
    """One set whose tensors have a leading axis over ``sets`` (the bias shaped to
    broadcast over the batch and rows, ``[S, 1, 1, n]``)."""
    import torch

    columns = zip(*(one.tensors() for one in sets), strict=True)
    stacked = replace_tensors(sets[0], [torch.stack(ts) for ts in columns])
    if stacked.bias is not None:
        stacked = replace(stacked, bias=stacked.bias.reshape(len(sets), 1, 1, -1))
    return stacked


def declared_x(a: Any, activation_quant: str | None) -> Any:
    """``a`` (float64 x, last axis k) as a kernel computes with it that declares
    ``activation_quant`` (a key of ``validate.ACTIVATION_QUANTS``; None: unchanged)."""
    if activation_quant is None:
        return a
    if activation_quant == "int8_block32":
        from matprobe.quant import quantize_x_int8_block32

        return quantize_x_int8_block32(a)
    raise ValueError(f"unknown activation quantization {activation_quant!r}")


class CallAnswers:
    """The float64 answers to the calls of a timed replay: call ``i`` uses the weights
    of set ``i mod S`` and an ``x`` of its own, row ``i`` of ``x_log`` (written fresh by
    every replay; see :mod:`matprobe.measure.bench`). The sets' weights are converted
    once; each judged replay costs one float64 matmul over them."""

    def __init__(self, sets: Sequence[MatmulInputs], device: Any) -> None:
        self.count = len(sets)
        self.ta = sets[0].ta
        self.operands = Operands64.of(_stack(sets), device)
        self.where = float64_device(device)

    def first(self, count: int) -> CallAnswers:
        """The answers for the first ``count`` sets alone (views of these operands)."""
        if count == self.count:
            return self
        part = copy.copy(self)
        ops = self.operands
        part.count = count
        part.operands = Operands64(
            w=ops.w[:count],
            c0=None if ops.c0 is None else ops.c0[:count],
            bias=None if ops.bias is None else ops.bias[:count],
            alpha=ops.alpha,
            beta=ops.beta,
            swiglu=ops.swiglu,
            _w_abs=None if ops._w_abs is None else ops._w_abs[:count],
            quantized=ops.quantized,
            _w_rounded=None if ops._w_rounded is None else ops._w_rounded[:count],
        )
        return part

    def answers(
        self, x_log: Any, activation_quant: str | None = None
    ) -> tuple[Any, Any, Any | None]:
        """``(references, scales, rounded)``, ``[calls, batch, m, n_out]``, for ``x_log``
        (``[calls, *a's stored shape]``, calls a multiple of the set count), x as a
        kernel that declares ``activation_quant`` computes with it; ``rounded``: Q8_0's
        references from fp16-rounded weights (:meth:`Operands64.rounded_answer`), else
        None."""
        x = x_log.detach().to(self.where, torch_float64())
        x = x.view(-1, self.count, *x.shape[1:])
        if self.ta:
            x = x.transpose(-1, -2)
        x = declared_x(x, activation_quant)
        refs, scales = self.operands.answer(x), self.operands.scale(x)
        rounded = self.operands.rounded_answer(x)
        return (
            refs.flatten(0, 1),
            scales.flatten(0, 1),
            None if rounded is None else rounded.flatten(0, 1),
        )


def _swiglu_scale(a: torch.Tensor, w: torch.Tensor, w_abs: torch.Tensor) -> torch.Tensor:
    """The term scale of ``y = silu(g)·u``: ``|silu(g)|·S_u + |silu′(g)|·|u|·S_g``.

    Why: a kernel's error in y comes from its errors in the two sums, δg and δu
    (fp32 accumulation, or a rounding of g and u to the dtype), carried through
    the product to first order: ``δy = silu(g)·δu + silu′(g)·u·δg``. Those
    errors scale with what each sum added up, ``S_g = Σ|x·w_gate|`` and
    ``S_u = Σ|x·w_up|`` (divided by √K in the comparison, as for any matmul), not
    with g or u, which may cancel to nearly zero. So where y is tiny because g
    or u cancelled, an honest kernel's error is still ~ this scale, and it is the
    floor the error is judged against (the comparison takes the larger of it and
    |y|). Where g and u did not cancel, |y| dominates and the relative bound
    applies unchanged. silu′(g) = σ(g)·(1 + g·(1 − σ(g))).
    """
    import torch

    gate, up = _matmul(a, w).chunk(2, dim=-1)
    scale_gate, scale_up = _matmul(a.abs(), w_abs).chunk(2, dim=-1)
    sig = torch.sigmoid(gate)
    dsilu = sig * (1 + gate * (1 - sig))
    result: torch.Tensor = (gate * sig).abs() * scale_up + dsilu.abs() * up.abs() * scale_gate
    return result


class SeededCase:
    """One seeded input set, pristine, where the kernels run (a CUDA card; the CPU
    for everything else), with its operands in float64 (:class:`Operands64`) —
    converted from the pristine inputs when first asked for, which validation does
    before a kernel runs on a copy. Validation gives each call its own ``x``
    (:func:`fresh_x`) and judges it against these operands."""

    def __init__(self, inputs: MatmulInputs) -> None:
        self.inputs = inputs
        self._bits = _bit_sums(inputs)
        self._operands: Operands64 | None = None

    @property
    def operands(self) -> Operands64:
        # Not kept with the case in the process-wide cache (float64 weights are four
        # times the inputs; the LM head's 1.1 GB): only the last case asked for.
        global _last_operands
        if _last_operands is None or _last_operands[0] is not self:
            _last_operands = (self, Operands64.of(self.inputs, self.inputs.a.device))
        return _last_operands[1]

    def intact(self) -> bool:
        """Whether the inputs still hold what was drawn: a kernel that wrote past its
        own buffers on the GPU may have hit these, and a later pair would be graded
        on inputs the reference was not computed from (a false FAIL)."""
        if self._bits is None:
            return True
        import torch

        now = _bit_sums(self.inputs)
        return now is not None and torch.equal(self._bits, now)


_last_operands: tuple[SeededCase, Operands64] | None = None


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


def _bit_sums(inputs: MatmulInputs) -> torch.Tensor | None:
    """Each tensor's bits summed as integers on a GPU (a fraction of a millisecond);
    None on the CPU, where no kernel writes past its buffers unnoticed."""
    import torch

    if inputs.a.device.type != "cuda":
        return None
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return torch.stack(
        [t.view(ints[t.element_size()]).sum(dtype=torch.int64) for t in inputs.tensors()]
    )


#: Elements a checksum batch stacks at once (as int64: 128 MB): the hundreds of
#: small sets a bench rotates over are summed a few launches a batch, not a few
#: launches a tensor (1300 attention sets took 0.13 s a pass on an H100, four
#: passes a pair: BENCHMARKS.md "Every timed call judged").
CHECKSUM_BATCH = 1 << 24


def checksums(tensors: Sequence[Any]) -> Any:
    """One int64 checksum per tensor, computed where it lives: its bits as integers,
    each times a weight from its position (so swapped or offsetting writes change it
    too), summed with wrap-around. A write into a tensor no kernel should write —
    an input set's weights, say — changes its checksum. Tensors of one size and
    element width are stacked and summed together, a batch at a time."""
    import torch

    if not tensors:
        return torch.zeros(0, dtype=torch.int64)
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    where = tensors[0].device
    groups: dict[tuple[int, int], list[int]] = {}
    for index, tensor in enumerate(tensors):
        groups.setdefault((tensor.element_size(), tensor.numel()), []).append(index)
    sums = torch.empty(len(tensors), dtype=torch.int64, device=where)
    for (size, numel), indices in groups.items():
        if numel > CHECKSUM_BATCH:  # one large tensor (an LM head), a slice at a time
            for i in indices:
                flat = tensors[i].detach().reshape(-1).view(ints[size])
                total = torch.zeros((), dtype=torch.int64, device=where)
                for start in range(0, numel, CHECKSUM_BATCH):
                    part = flat[start : start + CHECKSUM_BATCH].to(torch.int64)
                    at = torch.arange(start, start + part.numel(), device=where)
                    total += (part * (at % 65521 + 1)).sum()
                sums[i] = total
            continue
        weights = torch.arange(numel, device=where, dtype=torch.int64) % 65521 + 1
        step = max(1, CHECKSUM_BATCH // max(1, numel))
        for start in range(0, len(indices), step):
            batch = indices[start : start + step]
            rows = torch.stack([tensors[i].detach().reshape(-1) for i in batch])
            bits = rows.view(ints[size]).to(torch.int64)
            sums[torch.tensor(batch, device=where)] = (bits * weights).sum(dim=1)
    return sums


#: Memory the seeded cases of one process may hold (their inputs: a reference is
#: one output's size). A worker measures every variant of a family on the same
#: seeds (three validation trials and the timing set), and the next family on the
#: same specs again: every spec of a plan is kept where it fits — the fp16
#: Qwen2.5-0.5B plan's cases take ~1.2 GB (1.1 GB of them the LM head's four).
#: Beyond the budget the least recently used go; the newest case always stays.
CASE_CACHE_BYTES = 2 << 30
_cases: OrderedDict[tuple[str, int, str], SeededCase] = OrderedDict()


def case_device(device: Any) -> Any:
    """Where the seeded cases for kernels on ``device`` live: a CUDA card itself
    (drawn and referenced there in milliseconds), else the CPU (MPS has no float64)."""
    import torch

    where = torch.device(device)
    return where if where.type == "cuda" else torch.device("cpu")


def seeded_case(spec: MatmulSpec, seed: int, device: Any = "cpu") -> SeededCase:
    """``make_inputs(spec, seed)`` for kernels on ``device`` (see :func:`case_device`)
    with its reference and scale, computed once per (spec, seed) in this process and
    reused while intact."""
    where = case_device(device)
    key = (spec.key(), seed, str(where))
    case = _cases.get(key)
    if case is None or not case.intact():
        case = SeededCase(make_inputs(spec, seed, where))
        _cases[key] = case
        held = sum(kept.inputs.nbytes for kept in _cases.values())
        while len(_cases) > 1 and held > CASE_CACHE_BYTES:
            held -= _cases.popitem(last=False)[1].inputs.nbytes
    _cases.move_to_end(key)
    return case


def fresh_copy(inputs: MatmulInputs, device: Any) -> MatmulInputs:
    """Copies of every tensor on ``device`` (always new storage, even on the same
    device): a kernel that writes into its inputs changes neither the cached
    originals nor what the next variant is given."""

    return replace_tensors(inputs, [t.to(device, copy=True) for t in inputs.tensors()])


def torch_float64() -> torch.dtype:
    import torch

    return torch.float64


def empty_output(spec: MatmulSpec, device: Any) -> torch.Tensor:
    import torch

    dtype = torch_dtype(activation_dtype(spec))
    return torch.empty(shapes(spec)["out"], dtype=dtype, device=device)


#: Guard elements on each side of an output, at least (a whole output's worth when
#: larger: a kernel that pads rows or columns to its tile writes that far past).
GUARD_MIN_ELEMENTS = 4096
#: Sentinel elements after the last output, at least: a store past the guard
#: zone — 64 elements past it PASSed on an H100 (issue 20), landing in memory no
#: one checked — lands here (a megabyte or more of the buffer, compared at once).
TAIL_MIN_ELEMENTS = 1 << 20
#: What the guard zones hold: a finite value no kernel computes by accident.
GUARD_SENTINEL = -1234.5
#: Outputs are filled with uniform values in ±this before every call: the size of
#: the answers (O(1), see the module doc), so nothing about them stands out.
PREFILL_RANGE = 1.0


class GuardedOutputs:
    """``count`` outputs of a spec in one buffer, each between sentinel-filled
    guard zones, and a long sentinel tail after the last:
    ``[guard | out₀ | guard | out₁ | … | out₋₁ | tail]``. A kernel that writes
    past either end of its output (a tile not masked at n = 53, say), or far past
    the last one, changes a guard, which :meth:`breach` reports; the allocator's
    neighbours would have hidden it."""

    def __init__(self, spec: MatmulSpec, device: Any, count: int = 1) -> None:
        import torch

        shape = shapes(spec)["out"]
        self.numel = math.prod(shape)
        self.guard = max(GUARD_MIN_ELEMENTS, self.numel)
        self.tail = max(TAIL_MIN_ELEMENTS, self.guard)
        stride = self.numel + self.guard
        self.buffer = torch.full(
            (self.guard + count * stride - self.guard + self.tail,),
            GUARD_SENTINEL,
            dtype=torch_dtype(activation_dtype(spec)),
            device=device,
        )
        self.views = [
            self.buffer[self.guard + i * stride : self.guard + i * stride + self.numel].view(shape)
            for i in range(count)
        ]
        self._stride = stride
        # Which elements are guards (True) — compared all at once: one sync per check.
        offset = torch.arange(self.buffer.numel(), device=device) - self.guard
        self._is_guard = (offset < 0) | (offset >= count * stride) | (offset % stride >= self.numel)
        self._pristine = self.buffer.clone()

    @property
    def block(self) -> Any:
        """Every output at once, ``[count, *shape]`` (a strided view of the buffer)."""
        count = len(self.views)
        rows = self.buffer[self.guard : self.guard + count * self._stride].view(count, -1)
        return rows[:, : self.numel].view(count, *self.views[0].shape)

    def prefill(self) -> None:
        """Fresh finite values in every output, from the device's generator: new on
        every call (inside a recording, on every replay). An element the kernel never
        writes keeps a value unrelated to its answer and fails; no call can tell a
        judged call from another by what its output holds (NaN poison could)."""
        self.block.uniform_(-PREFILL_RANGE, PREFILL_RANGE)

    def changed_guards(self) -> Any:
        """Which guard elements no longer hold the sentinel (a bool tensor where the
        buffer lives: computed without a transfer)."""
        import torch

        size = self.buffer.element_size()
        changed = self.buffer.view(torch.uint8) != self._pristine.view(torch.uint8)
        return changed.view(-1, size).any(dim=1) & self._is_guard

    def breach(self) -> str | None:
        """None when every guard still holds the sentinel, else what was written where."""
        import torch

        changed = self.changed_guards()
        if not bool(changed.any()):
            return None
        first = int(torch.nonzero(changed)[0])
        count = len(self.views)
        zone = min(first // self._stride, count)  # guard i sits before output i; the tail last
        where = (
            "before output 0"
            if zone == 0
            else f"after output {zone - 1}"
            if zone == count
            else f"between outputs {zone - 1} and {zone}"
        )
        return (
            f"wrote outside its output: {int(changed.sum())} guard elements changed, "
            f"first in the guard zone {where} (element {first - zone * self._stride} "
            f"of {self.tail if zone == count else self.guard})"
        )
