"""Is a mode's token right? Its logits against a float64 computation of the same step.

The reference is the same :class:`~matprobe.token.step.DecodeStep` over the same
weights upcast to float64 (every rounded value kept, nothing redrawn), with the
weight matmuls in float64 too: it differs from a mode only by that mode's
roundings.

A whole token rounds hundreds of times (every elementwise op rounds its output
to the token's dtype), so a single-matmul bound (one rounding, u) does not fit.
The bound is the baseline's own error, measured in the same run:

* the baseline (eager PyTorch with cuBLAS) must itself be within
  :func:`baseline_bound` of float64 — ``8·√(layers + 1)`` roundings plus an fp32
  accumulation term ``2·√k_max·2⁻²⁴``, norm-wise (4× that for the worst logit).
  On the CPU eager PyTorch measured ≈ 1.3·√layers roundings in f16 and bf16
  (2.1 u at 2 layers, 6.4 u at 24) and ≈ 27 u in f32 at 24 layers, where the
  accumulation term is 140 u: the bound leaves a wide margin, while TF32 in an
  f32 token (≈ 2⁻¹¹ a matmul) or a broken library does not pass;
* every other mode must be within :data:`NORM_FACTOR` × the baseline's
  norm-wise error ‖out − ref‖/‖ref‖ and :data:`MAX_FACTOR` × its worst logit
  error (|out − ref| relative to the logits' RMS, so a logit near zero is not
  judged by its own tiny size), floored at :data:`NORM_FLOOR` and
  :data:`MAX_FLOOR` roundings for a baseline that happens to be very exact. An
  honest implementation rounds as often as the baseline (a kernel that rounds
  once per matmul measured 0.9–1.2× the baseline's error at 24 layers; Inductor,
  fusing elementwise ops in fp32, rounds less), while one layer's down
  projection left out measured 10× (bf16) to 100× (f16) at 24 layers, and a
  dropped K tail 40×;
* any NaN or Inf fails.

Errors are taken over every validation trial (fresh token embeddings), the
worst one kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from matprobe.measure.hooks import refuse_if_hooked

#: unit roundoff of the token's dtype (half an ulp at 1.0)
#: (q8_0: its activations' fp16; the dequantized weights' one rounding each in the
#: baseline is one more rounding a matmul, within the bound's 8·√(layers + 1))
UNIT_ROUNDOFF: dict[str, float] = {
    "f32": 2.0**-24,
    "f16": 2.0**-11,
    "bf16": 2.0**-8,
    "q8_0": 2.0**-11,
}
FP32_ROUNDOFF = 2.0**-24

NORM_FACTOR = 2.0
MAX_FACTOR = 3.0
NORM_FLOOR = 2.0  # roundings
MAX_FLOOR = 8.0
BASELINE_ROUNDINGS = 8.0  # × √(layers + 1), norm-wise
BASELINE_ACCUMULATION = 2.0  # × √k_max · 2⁻²⁴
#: The worst logit may be this many times the norm-wise bound.
MAX_OVER_NORM = 4.0


@dataclass(frozen=True)
class LogitError:
    """How far a token's logits are from the float64 ones."""

    norm_rel: float  # ‖out − ref‖₂ / ‖ref‖₂
    max_rel: float  # max |out − ref| / RMS(ref)
    nonfinite: int  # NaN or Inf logits

    def to_dict(self) -> dict[str, Any]:
        """JSON form (a figure that is not finite — NaN logits — is null)."""

        def finite(value: float) -> float | None:
            return value if math.isfinite(value) else None

        return {
            "norm_rel": finite(self.norm_rel),
            "max_rel": finite(self.max_rel),
            "nonfinite": self.nonfinite,
        }


def logit_error(out: torch.Tensor, ref: torch.Tensor) -> LogitError:
    refuse_if_hooked()  # no verdict through a torch mode or tracer (measure.hooks)
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"logits {tuple(out.shape)} != reference {tuple(ref.shape)}")
    got = out.detach().to(device="cpu", dtype=torch.float64)
    want = ref.detach().to(device="cpu", dtype=torch.float64)
    nonfinite = int((~torch.isfinite(got)).sum())
    if nonfinite:
        return LogitError(math.inf, math.inf, nonfinite)
    diff = got - want
    scale = float(want.pow(2).mean().sqrt()) or 1.0
    return LogitError(
        norm_rel=float(diff.norm() / (want.norm() or 1.0)),
        max_rel=float(diff.abs().max()) / scale,
        nonfinite=0,
    )


def worst(errors: Iterable[LogitError]) -> LogitError:
    """The largest of each figure over several trials."""
    items = list(errors)
    if not items:
        raise ValueError("no errors")
    return LogitError(
        norm_rel=max(e.norm_rel for e in items),
        max_rel=max(e.max_rel for e in items),
        nonfinite=max(e.nonfinite for e in items),
    )


@dataclass(frozen=True)
class Tolerance:
    """Bounds on :class:`LogitError`, with where they came from."""

    norm_rel: float
    max_rel: float
    basis: str

    def failure(self, error: LogitError) -> str | None:
        """Why ``error`` fails, or None when it passes."""
        if error.nonfinite:
            return f"{error.nonfinite} logits NaN/Inf"
        # as many digits as tell the figure from its bound (measure.validate's way)
        from matprobe.measure.validate import distinct_digits

        if not error.norm_rel <= self.norm_rel:
            shown, bound = distinct_digits(error.norm_rel, self.norm_rel)
            return f"norm-wise error {shown} > {bound} ({self.basis})"
        if not error.max_rel <= self.max_rel:
            shown, bound = distinct_digits(error.max_rel, self.max_rel)
            return f"worst logit off by {shown} > {bound} ({self.basis})"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"norm_rel": self.norm_rel, "max_rel": self.max_rel, "basis": self.basis}


def accumulation_error(k_max: int) -> float:
    """What the order of an fp32 sum of ``k_max`` products may move a result by: two
    honest kernels summing in different orders differ by about this much."""
    return BASELINE_ACCUMULATION * math.sqrt(k_max) * FP32_ROUNDOFF


def baseline_bound(dtype: str, layers: int, k_max: int) -> Tolerance:
    """What the baseline itself must meet (see the module doc)."""
    u = UNIT_ROUNDOFF[dtype]
    norm = BASELINE_ROUNDINGS * math.sqrt(layers + 1) * u + accumulation_error(k_max)
    return Tolerance(norm, MAX_OVER_NORM * norm, f"{dtype} bound for {layers} layers")


def relative_to_baseline(baseline: LogitError, dtype: str, k_max: int) -> Tolerance:
    """The bound of every other mode: a multiple of the baseline's own error, floored
    at a few roundings and, as the baseline's own bound is, at the fp32
    accumulation term: in f32 two honest sums in different orders differ by about
    √k·2⁻²⁴ each, so a baseline that happened to be exact at one input (the test
    model's new key at layer 1: 3.9 u against an honest 10 u) fails no honest kernel."""
    u = UNIT_ROUNDOFF[dtype]
    accumulation = accumulation_error(k_max)
    norm_floor = max(NORM_FLOOR * u, accumulation)
    return Tolerance(
        norm_rel=max(NORM_FACTOR * baseline.norm_rel, norm_floor),
        max_rel=max(MAX_FACTOR * baseline.max_rel, MAX_FLOOR * u, MAX_OVER_NORM * accumulation),
        basis=f"{NORM_FACTOR:g}×/{MAX_FACTOR:g}× the baseline's error",
    )
