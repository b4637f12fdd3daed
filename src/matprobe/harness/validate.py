"""Correctness: every variant against a float64 reference, before any timing.

One tolerance table, by dtype, growing with √K (accumulation error grows like
√K for random-sign sums; the output's own rounding does not). A result passes
when, over every trial:

* no output is NaN or Inf — the output is poisoned with NaN before each
  checked call, so an element the kernel never wrote fails here;
* the norm-wise error ‖out − ref‖₂ / ‖ref‖₂ is within ``tol_norm``;
* every element's error relative to max(|ref|, floor) is within ``tol_rel``,
  where the floor is the larger of 1 % of the reference's RMS and that
  element's term scale (Σ|a·b| + |β·c₀| + |bias|)/√K — so elements whose
  terms cancel to nearly zero are judged against the size of what was summed
  instead of exploding (a floor of 1 would turn this into an absolute error in
  disguise). The norm-wise denominator is floored the same way, ‖scale‖/√K.

Bases (norm-wise, at K→0): f32 2e-6 — fp32 accumulation, so a kernel that
silently uses TF32 (~5e-4) fails; f16 1e-3 (≈ 2 units of fp16 rounding);
bf16 8e-3. Per-element bound: 16× the norm-wise one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from matprobe.harness.results import ErrorMetrics
from matprobe.spec import MatmulSpec

NORM_BASE: dict[str, float] = {"f32": 2e-6, "f16": 1e-3, "bf16": 8e-3}
ELEMENT_FACTOR = 16.0
K_SCALE = 32.0  # tolerance doubles at K = 32, triples at K = 128 …
REL_FLOOR_OF_RMS = 1e-2
DEFAULT_TRIALS = 3


def tolerance(dtype: str, k: int) -> tuple[float, float]:
    """(norm-wise, per-element relative) tolerance for ``dtype`` at depth ``k``."""
    base = NORM_BASE[dtype] * (1.0 + math.sqrt(max(k, 1)) / K_SCALE)
    return base, ELEMENT_FACTOR * base


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
            return f"norm-wise error {self.norm_rel:.2e} > {tol_norm:.1e}"
        if not self.max_rel <= tol_rel:
            return (f"element {list(self.worst_index)} off by {self.max_rel:.2e} relative "
                    f"> {tol_rel:.1e}")
        return None


def compare(out: Any, ref: Any, scale: Any | None = None, k: int = 1) -> Comparison:
    """Error figures of ``out`` (any dtype, any device) against a float64 ``ref``;
    ``scale`` (see :func:`~matprobe.harness.inputs.reference_scale`) floors the
    denominators where the terms of a sum cancel."""
    import torch

    got = out.detach().to("cpu", torch.float64)
    if got.shape != ref.shape:
        raise ValueError(f"output shape {tuple(got.shape)} != expected {tuple(ref.shape)}")
    finite = torch.isfinite(got)
    nonfinite = int((~finite).sum())
    diff = (got - ref).abs()
    diff = torch.where(finite, diff, torch.full_like(diff, math.inf))
    ref_norm = float(torch.linalg.vector_norm(ref))
    rms = ref_norm / math.sqrt(max(ref.numel(), 1))
    floor = ref.abs().clamp_min(max(REL_FLOOR_OF_RMS * rms, 1e-30))
    if scale is not None:
        term_scale = scale / math.sqrt(max(k, 1))
        floor = torch.maximum(floor, term_scale)
        ref_norm = max(ref_norm, float(torch.linalg.vector_norm(term_scale)))
    rel = diff / floor
    worst = int(torch.argmax(torch.nan_to_num(rel, nan=math.inf))) if rel.numel() else 0
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), ref.shape))
    finite_diff = (got - ref)[finite]
    norm_rel = (
        float(torch.linalg.vector_norm(finite_diff)) / ref_norm if ref_norm > 0 else math.inf
    )
    return Comparison(
        max_abs=float(diff.max()) if diff.numel() else 0.0,
        max_rel=float(rel.max()) if rel.numel() else 0.0,
        norm_rel=norm_rel if nonfinite == 0 else math.inf,
        nonfinite=nonfinite,
        worst_index=index,
    )


@dataclass(frozen=True)
class Validation:
    metrics: ErrorMetrics
    failure: str | None  # None: PASS

    @property
    def passed(self) -> bool:
        return self.failure is None


def validate(
    spec: MatmulSpec,
    run_trial: Callable[[int], tuple[Any, Any, Any]],
    trials: int = DEFAULT_TRIALS,
) -> Validation:
    """Run ``trials`` checks; ``run_trial(t)`` returns ``(out, ref, scale)`` for
    trial t (fresh inputs each time). All trials run; the worst figures are kept."""
    if spec.dtype is None or spec.k is None:
        raise ValueError("validate needs a complete spec with a dtype")
    tol_norm, tol_rel = tolerance(spec.dtype, spec.k)
    worst: Comparison | None = None
    failure: str | None = None
    for trial in range(trials):
        out, ref, scale = run_trial(trial)
        result = compare(out, ref, scale, spec.k)
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
