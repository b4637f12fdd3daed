"""The float64 side of an input set: the references every output is judged
against, and the seeded cases validation draws.

:class:`Operands64` holds a set's weights, bias and C₀ in float64 (Q8_0: the
dequantized weights, and the same rounded to fp16 — the second legitimate
answer), computed where the kernels run when that device has float64;
:class:`CallAnswers` the answers to every call of a timed replay (each call its
own ``x``, one stacked product for them all); :class:`SeededCase` a pristine,
seeded input set with its operands, cached per process; :func:`declared_x` the
rounding of x a family declares. Scaling and layouts: :mod:`matprobe.measure.inputs`.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from matprobe.measure.inputs import (
    MatmulInputs,
    float64_device,
    make_inputs,
    replace_tensors,
    torch_float64,
)
from matprobe.measure.outputs import bit_sums
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    import torch


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
    a: torch.Tensor = inputs.a_mk().detach().to(float64_device(device), torch_float64())
    return a


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
    #: RMSNorm prologue: the gain (float64, broadcastable over ``[…, batch, m, k]``)
    #: and ε; A is then x̂ = x / √(mean(x²) + ε) ⊙ gain (:meth:`normalised`)
    gain: Any | None = None
    eps: float = 0.0
    #: the activations' dtype, to which a kernel may round x̂ once (the eager
    #: ``F.rms_norm`` then matmul does): the second answer holds that rounding
    x_dtype: Any | None = None

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
            gain=None if inputs.gain is None else inputs.gain.detach().to(where, f64),
            eps=inputs.norm_eps or 0.0,
            x_dtype=inputs.a.dtype,
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

    def normalised(self, a: torch.Tensor) -> torch.Tensor:
        """What the matmul computes with for x = ``a``: x̂ = x / √(mean(x²) + ε) ⊙ gain
        along K, in float64, with an RMSNorm prologue; ``a`` itself without."""
        if self.gain is None:
            return a
        import torch

        x: torch.Tensor = a * torch.rsqrt(a.square().mean(-1, keepdim=True) + self.eps) * self.gain
        return x

    def answer(self, a: torch.Tensor) -> torch.Tensor:
        """The float64 result for A = ``a`` (logical ``[…, batch, m, k]``, float64; one
        more leading axis than the weights: one problem per index of it)."""
        return self._answer(self.normalised(a), self.w)

    def rounded_answer(self, a: torch.Tensor) -> torch.Tensor | None:
        """The other legitimate answer, where there is one: the float64 result with
        every rounding the eager path makes before its matmul — Q8_0's weights each
        rounded once to fp16 (:attr:`w_rounded`), an RMSNorm's x̂ rounded once to the
        activations' dtype; None when neither applies."""
        if not self.quantized and self.gain is None:
            return None
        x = self.normalised(a)
        if self.gain is not None:
            x = x.to(self.x_dtype).to(x.dtype)
        return self._answer(x, self.w_rounded if self.quantized else self.w)

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
        """The term scale for A = ``a`` (see :func:`reference_scale`).

        With an epilogue (β·C₀, a bias) it is at least √K·|α·A·B|, so that the
        floor an element is judged against (the scale ÷ √K) is at least the
        product's own size: the eager form rounds α·A·B to the dtype before adding
        (cuBLAS's GEMV with β = 1, ``x @ W + b``), an error of u·|α·A·B| that the
        output does not bound where the addend cancels the product — an honest
        ``fl(fl(x·W) + C₀)`` reached 3.5u of |out| at o_proj's 896 outputs,
        and cuBLAS's ``baddbmm`` failed so on an H100 (BENCHMARKS.md)."""
        import torch

        a = self.normalised(a)
        if self.swiglu:
            return _swiglu_scale(a, self.w, self.w_abs)
        scale = abs(self.alpha) * _matmul(a.abs(), self.w_abs)
        if self.c0 is None and self.bias is None:
            return scale
        product = abs(self.alpha) * _matmul(a, self.w).abs() * math.sqrt(a.shape[-1])
        if self.c0 is not None:
            scale = scale + abs(self.beta) * self.c0.abs()
        if self.bias is not None:
            scale = scale + self.bias.abs()
        return torch.maximum(scale, product)


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
    if stacked.gain is not None:  # likewise over the batch and rows
        stacked = replace(stacked, gain=stacked.gain.reshape(len(sets), 1, 1, -1))
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
        self._sums = bit_sums(self._held())

    def _held(self) -> list[Any]:
        """What every answer is made from: the float64 weights, C₀, bias and gain."""
        ops = self.operands
        return [t for t in (ops.w, ops.c0, ops.bias, ops.gain) if t is not None]

    def intact(self) -> bool:
        """Whether the operands still hold what was converted: a call that wrote into
        them — a store far past its output, or a kernel that found them (``gc``)
        and thinned the weights its later calls are judged against — changes their
        bit sums (the bench looks after the rounds and after the clocks)."""
        # a plain sum of bits: a swap of operands only poses another problem as hard
        return not bool((bit_sums(self._held()) != self._sums).any())

    def first(self, count: int) -> CallAnswers:
        """The answers for the first ``count`` sets alone (views of these operands)."""
        if count == self.count:
            return self
        part = copy.copy(self)
        ops = self.operands
        part.count = count
        part.operands = replace(
            ops,
            w=ops.w[:count],
            c0=None if ops.c0 is None else ops.c0[:count],
            bias=None if ops.bias is None else ops.bias[:count],
            _w_abs=None if ops._w_abs is None else ops._w_abs[:count],
            _w_rounded=None if ops._w_rounded is None else ops._w_rounded[:count],
            gain=None if ops.gain is None else ops.gain[:count],
        )
        part._sums = bit_sums(part._held())
        return part

    def answers(
        self, x_log: Any, activation_quant: str | None = None
    ) -> tuple[Any, Any, Any | None]:
        """``(references, scales, rounded)``, ``[calls, batch, m, n_out]``, for ``x_log``
        (``[calls, *a's stored shape]``, calls a multiple of the set count), x as a
        kernel that declares ``activation_quant`` computes with it; ``rounded``: the
        second legitimate answers (:meth:`Operands64.rounded_answer`: Q8_0's
        fp16-rounded weights, an RMSNorm's rounded x̂), else None."""
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


def _bit_sums(inputs: MatmulInputs) -> torch.Tensor | None:
    """Each tensor's bits summed as integers on a GPU (a fraction of a millisecond);
    None on the CPU, where no kernel writes past its buffers unnoticed."""
    if inputs.a.device.type != "cuda":
        return None
    sums: torch.Tensor = bit_sums(inputs.tensors())
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
