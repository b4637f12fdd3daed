"""Correctness: every variant against a float64 reference, before any timing.

One tolerance table, tied to what an honest kernel does: accumulate in fp32,
then round once to the output dtype. A result passes when, over every trial:

* no output is NaN or Inf, and an element the kernel never wrote fails the
  bounds below: every output is prefilled with fresh finite values before
  every call (``GuardedOutputs.prefill``), unrelated to its answer;
* the norm-wise error ‖out − ref‖₂ / ‖ref‖₂ is within ``tol_norm`` (Q8_0:
  each element's error against the nearer of two references, see below);
* every element's error relative to max(|ref|, floor) is within ``tol_rel``,
  where the floor is the larger of 1 % of the reference's RMS and that
  element's term scale (Σ|a·b| + |β·c₀| + |bias|)/√K — so elements whose
  terms cancel to nearly zero are judged against the size of what was summed
  instead of exploding (a floor of 1 would turn this into an absolute error in
  disguise). The norm-wise denominator is floored the same way, ‖scale‖/√K.

The bounds, with u the output dtype's unit roundoff (2⁻²⁴ f32, 2⁻¹¹ f16,
2⁻⁸ bf16) and u₃₂ = 2⁻²⁴ for the fp32 accumulator:

* rounding once to the output dtype moves an element by at most u relative
  (its RMS is ≈ 0.43 u): ``tol_norm = u`` and ``tol_rel = 2u`` leave an honest
  kernel a 2× margin while a kernel that keeps its running sum in fp16/bf16
  across K tiles (several roundings: 3–10 u per element at the Qwen2.5 shapes)
  or drops K columns fails;
* each addend of the epilogue (bias, β·C₀) may be added after a rounding of
  its own (eager PyTorch does ``x @ W + b`` in two kernels): + u per addend
  on the per-element bound, and the element's floor is at least |α·A·B|, the
  size of what was rounded (``Operands64.scale``): where the addend cancels the
  product, that rounding is u·|α·A·B|, not u·|out| (an honest
  ``fl(fl(x·W) + C₀)`` reached 3.5u of |out| at o_proj, and cuBLAS's
  ``baddbmm`` with β = 1 failed so on an H100; issue 23);
* an RMSNorm prologue (``rmsnorm=ε``): the reference normalises in float64; a
  kernel may round x̂ once to the activations' dtype (``F.rms_norm`` then the
  matmul, the baseline), so that is the second answer judged against, as Q8_0's
  rounded weights are (both at once for a Q8_0 spec with a norm). Rounding x̂
  twice (Hugging Face's ``Qwen2RMSNorm``: x·r, then ·g) reaches 3.5u per element
  over gate/up's outputs and fails, as a coarser x̂ (bf16) or another ε does;
* Q8_0 weights: a kernel may round each dequantized weight ``d·q`` (≤ 18
  significant bits) once to fp16 before multiplying — dequantize-then-matmul
  does, the baseline on every device included. That is no fixed number of u
  of an output: it moves output j by e_j = Σᵢ xᵢ·wᵢⱼ·δᵢⱼ (|δ| ≤ u), up to
  u·Σ|x·w| — √K times the floor Σ|x·w|/√K an element is judged against. The
  δ are independent, RMS u/√(8 ln 2) ≈ 0.42u (mantissas spread log-uniformly),
  so e_j is a random-sign sum of σ ≈ 0.42u·√Σ(x·w)² ≈ 0.42u × 4/3 ≈ 0.57u of
  that floor (rms/mean of the terms x·w: 4/3 for a product of uniforms), and
  its largest over many outputs lies far out: 2.6–3.2u over the LM head's
  151936 outputs (k = 896, measured σ 0.51u). The former allowance,
  one more u per element (3u with the output's rounding), failed the CPU
  baseline there (issue 21: 3.07u, its BLAS part within 1.0u); a constant
  covering 6σ (+3.5u) would let fp16 running sums (3–10u) through. So the
  rounding is in the reference instead, exactly: both legitimate answers are
  computed, from the exact weights and from the weights rounded to fp16
  (``inputs.Operands64.rounded_answer``), every output is judged against the
  nearer (its error, relative and in the norm, is that smaller one), and the
  bounds are the plain fp16 ones — no allowance for the weights (the CPU
  baseline then: ≤ 1.0u per element, 0.37u norm-wise). Rounding them
  any other way (bf16, the scales to fewer bits), an fp16 running sum, or
  quantizing the activations too (int8, ≈ 1/254 relative) is far from both
  answers and fails, unless the family declares the latter (the last item);
* SwiGLU (``matmul_swiglu``, y = silu(g)·u of the two halves' sums g and u):
  an honest fused kernel keeps g, u, silu and the product in fp32 and rounds
  once, so it meets the plain bound. The eager PyTorch form,
  ``silu(x @ W_gᵀ) * (x @ W_uᵀ)``, rounds three more times — g and u to the
  dtype, then silu(g) — before the product's own rounding. To first order
  δy/y = κ·δg/g + δu/u + δs/s + δy'/y with κ = |1 + g·(1 − σ(g))| silu's
  condition number, ≤ 1.3 for the |g| ≲ 1.5 the inputs reach (|g| ~ 1/3 by the
  scaling of :mod:`~matprobe.measure.inputs`). So + 3u per element (1.3 + 1 + 1
  rounded up to whole roundings, the addends' way: 5u in all, against a worst
  case of 4.3u the eager form reaches only when every rounding is at its worst
  and the same sign; measured ≤ 2.9u, Q8_0's against the nearer answer) and
  + u norm-wise: independent roundings add in quadrature,
  √(1.3² + 3) × 0.43u ≈ 0.92u RMS, inside 2u by 2.2× (measured ≤ 0.95u). Where
  g or u cancel, errors are judged against the propagated term scale
  |silu(g)|·Σ|x·w_u| + |silu′(g)|·|u|·Σ|x·w_g| (``inputs.reference_scale``).
  What fails: a dropped K tail (tens to thousands of u), and g and u kept as
  fp16/bf16 running sums across ≥ 14 K tiles (k = 896 in tiles of ≤ 64, a
  k = 4864 in tiles of ≤ 256: 5–9u per element, 1.2–2.5u norm-wise; Q8_0
  alike, its weights' rounding being in the reference). A running sum
  rounded across only a few tiles (7 at k = 896, BLOCK_K = 128: ≈ 4–5u) is
  within the eager form's own error and is not told apart: the eager
  baseline does four roundings of its own;
* fp32 accumulation grows like √K·u₃₂ for random-sign sums: that term keeps
  f32 results honest at large K and is negligible for f16/bf16 (there is no
  √K growth of the half-precision bounds), while a kernel that silently uses
  TF32 (≈ 3e-4) fails at every K;
* few outputs: the norm-wise bounds above hold for an RMS over many outputs;
  over n of them it is ``tol_norm + (tol_rel − tol_norm)/√n``, the per-element
  bound at n = 1 (:func:`few_outputs_norm`);
* quantized activations, for a family that *declares* them
  (``VariantFamily.activation_quant``; never otherwise — the same arithmetic
  undeclared fails, above): the reference applies exactly the declared rounding
  to x (``"int8_block32"``: llama.cpp's mmvq, ``matprobe.quant.quantize_x_int8_block32``)
  and the bound around it is the plain one — the kernel is judged on the
  arithmetic it declared, and nothing more is allowed (but the weights' one
  fp16 rounding, judged as above): a declared-int8 kernel that also requantizes
  its weights, or quantizes x to fewer bits, fails. (Until
  issue 20 the declaration widened the bound by a derived 3ε_a norm-wise and
  8ε_a per element, ε_a = 1/254, about 24× the plain bound: a kernel that also
  quantized W per row passed at ≈ 12u.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from matprobe.measure.hooks import refuse_if_hooked
from matprobe.measure.results import ErrorMetrics
from matprobe.spec import MatmulSpec

#: unit roundoff of each output dtype (half an ulp at 1.0)
UNIT_ROUNDOFF: dict[str, float] = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
#: the fp32 accumulator's unit roundoff
FP32_ROUNDOFF = 2.0**-24
#: roundings of the output allowed norm-wise and per element (an honest kernel: ≤ 1)
NORM_ROUNDINGS = 1.0
ELEMENT_ROUNDINGS = 2.0
#: multiples of √K·u₃₂ allowed for fp32 accumulation, norm-wise and per element
NORM_ACCUMULATION = 2.0
ELEMENT_ACCUMULATION = 8.0
#: SwiGLU's eager form rounds g, u and silu(g) before the product's rounding:
#: per element + 3u (counted like epilogue addends), norm-wise + u (see the module doc)
SWIGLU_ELEMENT_ROUNDINGS = 3
SWIGLU_NORM_ROUNDINGS = 1
#: Activation quantizations a family may declare (``VariantFamily.activation_quant``):
#: the reference applies exactly that rounding to x (``inputs.declared_x``)
ACTIVATION_QUANTS: dict[str, str] = {
    "int8_block32": "x quantized to int8 per 32-element block (d = max|x|/127 in fp32, "
    "half away from zero), as llama.cpp's mmvq",
}
#: Prologues a family may declare (``VariantFamily.prologues``): the reference
#: applies that work to x before the op (``references.Operands64.normalised``)
PROLOGUES: dict[str, str] = {
    "rmsnorm": "x̂ = x / √(mean(x²) + ε) ⊙ gain along K, for specs with rmsnorm=ε",
}
REL_FLOOR_OF_RMS = 1e-2
DEFAULT_TRIALS = 3
#: Outputs the validation trials judge at least, over as many trials as that takes.
#: A kernel whose error is a few u on average but spread (an fp16 running sum over
#: 38 K tiles at k = 4864: 1.6u median per element, 41 % of elements past the 2u
#: bound) passes three trials of one output by luck one time in five; over 32
#: outputs, about once in 10⁷. (More costs the CPU's interpreter: 64 made the
#: conformance suite's one-output cases 2 minutes longer.)
MIN_JUDGED_OUTPUTS = 32


def judged_trials(spec: MatmulSpec, trials: int) -> int:
    """``trials``, or more where that judges fewer than :data:`MIN_JUDGED_OUTPUTS`."""
    from matprobe.measure.inputs import shapes

    outputs = math.prod(shapes(spec)["out"])
    return max(trials, math.ceil(MIN_JUDGED_OUTPUTS / max(outputs, 1)))


def tolerance(
    dtype: str,
    k: int,
    addends: int = 0,
    *,
    truncated: bool = False,
    swiglu: bool = False,
) -> tuple[float, float]:
    """(norm-wise, per-element relative) tolerance for ``dtype`` at depth ``k``, for
    an op whose epilogue adds ``addends`` further terms (a bias, β·C₀).
    ``truncated``: the output is cast by truncation (round toward zero, up to one
    ulp = 2u), as Triton's interpreter casts fp32 to bf16 — the rounding bound
    doubles; on a GPU the cast rounds to nearest. ``swiglu``: the op is
    silu(g)·u, whose eager form rounds three intermediates (see the module doc)."""
    u = UNIT_ROUNDOFF[dtype] * (2.0 if truncated else 1.0)
    accumulation = math.sqrt(max(k, 1)) * FP32_ROUNDOFF
    norm_extra = SWIGLU_NORM_ROUNDINGS if swiglu else 0
    element_extra = SWIGLU_ELEMENT_ROUNDINGS if swiglu else 0
    return (
        (NORM_ROUNDINGS + norm_extra) * u + NORM_ACCUMULATION * accumulation,
        (ELEMENT_ROUNDINGS + addends + element_extra) * u + ELEMENT_ACCUMULATION * accumulation,
    )


#: Output dtypes that Triton's interpreter casts to by truncation (numpy has no
#: bfloat16; the interpreter drops the low 16 bits of the fp32 value).
INTERPRETER_TRUNCATES = frozenset({"bf16"})


def spec_tolerance(spec: MatmulSpec, *, interpreted: bool = False) -> tuple[float, float]:
    """:func:`tolerance` for a complete spec; ``interpreted``: the kernel runs in
    Triton's interpreter (see :data:`INTERPRETER_TRUNCATES`)."""
    if spec.dtype is None or spec.k is None:
        raise ValueError("a tolerance needs a complete spec with a dtype")
    # Q8_0: the references are made from the dequantized weights, exact and each
    # rounded to fp16, so what is left to judge is the matmul with fp16
    # activations and an fp16 output: fp16's bounds (see the module doc).
    output = "f16" if spec.dtype == "q8_0" else spec.dtype
    tol_norm, tol_rel = tolerance(
        output,
        spec.k,
        int(spec.has_bias) + int(spec.reads_c0),
        truncated=interpreted and output in INTERPRETER_TRUNCATES,
        swiglu=spec.is_swiglu,
    )
    from matprobe.measure.inputs import shapes

    return few_outputs_norm(tol_norm, tol_rel, math.prod(shapes(spec)["out"])), tol_rel


def few_outputs_norm(tol_norm: float, tol_rel: float, outputs: int) -> float:
    """The norm-wise bound over ``outputs`` elements: ``tol_norm`` is what the RMS of
    many honest roundings stays under, but over n outputs, each within the
    per-element bound, it wanders above its mean by ~1/√n of the gap — up to the
    per-element bound at n = 1, where the norm is that element's own error. So
    ``tol_norm + (tol_rel − tol_norm)/√n`` (an fp16 matmul's: 1u + 1u/√n, so 3 %
    above 1u at n = 1000, 0.3 % at the LM head's 151936).
    (Found when new input draws gave a single-output eager SwiGLU, Q8_0 at
    k = 96, a 3.3u error: inside its 6u per-element bound, outside 3u norm-wise.)"""
    return tol_norm + max(tol_rel - tol_norm, 0.0) / math.sqrt(max(outputs, 1))


@dataclass(frozen=True)
class Comparison:
    max_abs: float
    max_rel: float
    norm_rel: float
    nonfinite: int
    worst_index: tuple[int, ...]

    def failure(self, tol_norm: float, tol_rel: float) -> str | None:
        if self.nonfinite:
            return f"{self.nonfinite} outputs NaN/Inf (unwritten or overflowed)"
        if not self.norm_rel <= tol_norm:
            error, bound = distinct_digits(self.norm_rel, tol_norm)
            return f"norm-wise error {error} > {bound}"
        if not self.max_rel <= tol_rel:
            error, bound = distinct_digits(self.max_rel, tol_rel)
            return f"element {list(self.worst_index)} off by {error} relative > {bound}"
        return None


#: Significant digits a figure and its bound are printed with, at least and at most.
MIN_DIGITS, MAX_DIGITS = 3, 17


def distinct_digits(value: float, bound: float) -> tuple[str, str]:
    """``value`` and ``bound`` in scientific notation with the same number of
    significant digits, the fewest (at least :data:`MIN_DIGITS`) that tell them apart
    — a failure reads "1.5012e-03 > 1.4998e-03", never "1.50e-03 > 1.5e-03"
    (issue 21). Rounding is monotone, so a value above its bound prints above it."""
    digits = MIN_DIGITS
    while True:
        shown = f"{value:.{digits - 1}e}", f"{bound:.{digits - 1}e}"
        if shown[0] != shown[1] or digits >= MAX_DIGITS:
            return shown
        digits += 1


def compare(
    out: Any, ref: Any, scale: Any | None = None, k: int = 1, *, rounded: Any | None = None
) -> Comparison:
    """Error figures of ``out`` (any dtype, any device) against a float64 ``ref``;
    ``scale`` (see :func:`~matprobe.measure.inputs.reference_scale`) floors the
    denominators where the terms of a sum cancel. ``rounded``: Q8_0's second
    legitimate answer, from the weights rounded to fp16
    (:meth:`~matprobe.measure.inputs.Operands64.rounded_answer`): each element's
    error is against the nearer of the two (see the module doc)."""
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    return compare_many(
        out[None],
        ref[None],
        None if scale is None else scale[None],
        k,
        rounded=None if rounded is None else rounded[None],
    )[0]


def compare_many(
    outs: Any, refs: Any, scales: Any | None = None, k: int = 1, *, rounded: Any | None = None
) -> list[Comparison]:
    """:func:`compare` for many calls at once: ``outs``, ``refs`` (and ``scales``,
    ``rounded``) are ``[calls, *shape]``; every figure is per call (one call's error
    never hides in another's norm). Vectorized: a replay check covers hundreds of
    calls, and one small-tensor comparison at a time costs more than the replay
    itself."""
    figures, shape = _figures(outs, refs, scales, k, rounded)
    return [_comparison(row, shape) for row in figures.tolist()]


class Verdicts:
    """The verdicts on many calls (as :func:`compare_many` takes them), computed where
    the reference lives and left there; :meth:`describe` reads them
    (:func:`describe_first`: many at once). Slots: no attribute of its own can be
    given to one."""

    __slots__ = ("bad", "figures", "shape", "tolerances")

    def __init__(
        self,
        outs: Any,
        refs: Any,
        scales: Any,
        k: int,
        tol_norm: float,
        tol_rel: float,
        *,
        rounded: Any | None = None,
    ) -> None:
        self.figures, self.shape = _figures(outs, refs, scales, k, rounded)
        self.tolerances = (tol_norm, tol_rel)
        f = self.figures
        self.bad = (f[:, 3] > 0) | ~(f[:, 2] <= tol_norm) | ~(f[:, 1] <= tol_rel)

    def describe(self) -> tuple[int, str] | None:
        """(index, what is wrong) of the first failing call, else None (transfers)."""
        import torch

        found = torch.nonzero(self.bad)
        if found.numel() == 0:
            return None
        index = int(found[0, 0])
        problem = _comparison(self.figures[index].tolist(), self.shape).failure(*self.tolerances)
        assert problem is not None
        return index, problem


def describe_first(verdicts: Sequence[Verdicts], also: Any) -> tuple[int, int, str] | None:
    """(which of ``verdicts``, its failing row, what is wrong) for the first with a
    failing call; ``(len(verdicts), 0, "")`` when none fails but ``also`` (a bool
    tensor) is set; else None — one transfer for them all."""
    import torch

    flags = torch.stack([v.bad.any() for v in verdicts] + [also.reshape(())]).tolist()
    for index, bad in enumerate(flags[:-1]):
        if bad:
            found = verdicts[index].describe()
            assert found is not None
            return index, found[0], found[1]
    return (len(verdicts), 0, "") if flags[-1] else None


def _comparison(row: list[float], shape: tuple[int, ...]) -> Comparison:
    return Comparison(
        max_abs=row[0],
        max_rel=row[1],
        norm_rel=row[2],
        nonfinite=int(row[3]),
        worst_index=tuple(_unravel(int(row[4]), shape)),
    )


def _figures(
    outs: Any, refs: Any, scales: Any | None, k: int, rounded: Any | None = None
) -> tuple[Any, tuple[int, ...]]:
    """Per call: max |error|, max relative error, norm-wise error, non-finite count and
    the worst element's flat index, as a ``[calls, 5]`` float64 tensor; and the
    shape of one call's output. ``rounded`` (Q8_0): the answers from fp16-rounded
    weights; an element's error is then against the nearer answer (the floors stay
    those of ``refs``)."""
    import torch

    # No verdict through a plugin's torch mode or tracer (measure.hooks).
    refuse_if_hooked()
    # Computed where the reference lives (the GPU on a GPU run; the CPU elsewhere).
    got = outs.detach().to(refs.device, torch.float64)
    if got.shape != refs.shape:
        raise ValueError(f"output shape {tuple(got.shape)} != expected {tuple(refs.shape)}")
    calls, shape = refs.shape[0], tuple(refs.shape[1:])
    per_call = math.prod(shape)
    if per_call == 0:
        return torch.zeros((calls, 5), dtype=torch.float64), shape
    got, ref = got.reshape(calls, per_call), refs.reshape(calls, per_call)
    finite = torch.isfinite(got)
    nonfinite = (~finite).sum(dim=1)
    signed = torch.where(finite, got - ref, torch.zeros_like(ref))
    if rounded is not None:
        alternative = rounded.reshape(calls, per_call).to(ref.device)
        other = torch.where(finite, got - alternative, torch.zeros_like(ref))
        signed = torch.where(other.abs() < signed.abs(), other, signed)
    diff = torch.where(finite, signed.abs(), torch.full_like(ref, math.inf))
    ref_norm = torch.linalg.vector_norm(ref, dim=1)
    rms = ref_norm / math.sqrt(per_call)
    floor = torch.maximum(ref.abs(), (REL_FLOOR_OF_RMS * rms).clamp_min(1e-30)[:, None])
    if scales is not None:
        term_scale = scales.reshape(calls, per_call).to(ref.device) / math.sqrt(max(k, 1))
        floor = torch.maximum(floor, term_scale)
        ref_norm = torch.maximum(ref_norm, torch.linalg.vector_norm(term_scale, dim=1))
    rel = torch.nan_to_num(diff / floor, nan=math.inf)
    max_rel, worst = rel.max(dim=1)
    norm_rel = torch.where(
        (nonfinite == 0) & (ref_norm > 0),
        torch.linalg.vector_norm(signed, dim=1) / ref_norm.clamp_min(1e-300),
        torch.full_like(ref_norm, math.inf),
    )
    figures = torch.stack(
        [
            diff.max(dim=1).values,
            max_rel,
            norm_rel,
            nonfinite.to(torch.float64),
            worst.to(torch.float64),
        ],
        dim=1,
    )
    return figures, shape


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return index[::-1]


@dataclass(frozen=True)
class Validation:
    metrics: ErrorMetrics
    failure: str | None  # None: PASS

    @property
    def passed(self) -> bool:
        return self.failure is None


def validate(
    spec: MatmulSpec,
    run_trial: Callable[[int], tuple[Any, Any, Any, Any | None]],
    trials: int = DEFAULT_TRIALS,
    *,
    interpreted: bool = False,
) -> Validation:
    """Run ``trials`` checks (more for a spec of few outputs: :func:`judged_trials`);
    ``run_trial(t)`` returns ``(out, ref, scale, rounded)`` for trial t (fresh inputs
    each time; ``rounded``: Q8_0's answer from fp16-rounded weights, else None). All
    trials run; the worst figures are kept."""
    trials = judged_trials(spec, trials)
    tol_norm, tol_rel = spec_tolerance(spec, interpreted=interpreted)
    assert spec.k is not None
    worst: Comparison | None = None
    failure: str | None = None
    for trial in range(trials):
        out, ref, scale, rounded = run_trial(trial)
        result = compare(out, ref, scale, spec.k, rounded=rounded)
        problem = result.failure(tol_norm, tol_rel)
        if problem and failure is None:
            failure = f"trial {trial + 1}/{trials}: {problem}"
        if worst is None:
            worst = result
        else:
            worst = Comparison(
                max(worst.max_abs, result.max_abs),
                max(worst.max_rel, result.max_rel),
                max(worst.norm_rel, result.norm_rel),
                worst.nonfinite + result.nonfinite,
                worst.worst_index if worst.max_rel >= result.max_rel else result.worst_index,
            )
    assert worst is not None
    metrics = ErrorMetrics(
        max_abs=worst.max_abs,
        max_rel=worst.max_rel,
        norm_rel=worst.norm_rel,
        nonfinite=worst.nonfinite,
        tol_norm=tol_norm,
        tol_rel=tol_rel,
        trials=trials,
    )
    return Validation(metrics, failure)
