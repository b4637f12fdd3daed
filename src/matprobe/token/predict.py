"""Do per-shape figures hold in a token? The predicted matmul share beside the
measured one.

The prediction is Σ calls per token × per-shape µs over the token's weight
matmuls (the dispatch table's ``predict_matmul_us``: once with the baseline's
figures, once with the table's). The measured share is a mode's token minus its
matmul-less twin's, round by round. They differ when a kernel behaves otherwise
after the step's elementwise kernels than after the harness's producer (DESIGN.md
§7: PDL kernels predicted 0.61× and measured 0.85×), or when the per-shape
figures came from another card: a gap over :data:`TOLERANCE` is said in the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from matprobe.profile.models import ModelConfig, decode_specs
from matprobe.token.step import WEIGHT_SITES

#: Relative gap between predicted and measured share beyond which the report warns.
TOLERANCE = 0.10


def weight_calls(config: ModelConfig, *, context: int, dtype: str) -> dict[str, int]:
    """Calls per token of each weight matmul spec, by key (what the prediction sums)."""
    calls: dict[str, int] = {}
    for shape in decode_specs(config, context=context, dtype=dtype):
        if shape.role in WEIGHT_SITES:
            key = shape.spec.key()
            calls[key] = calls.get(key, 0) + shape.count
    return calls


@dataclass(frozen=True)
class PredictionCheck:
    """One predicted share beside the measured one."""

    label: str  # which kernels: "baseline" or "table"
    mode: str  # the mode whose share is measured
    predicted_us: float
    measured_us: float | None

    @property
    def gap(self) -> float | None:
        """(predicted − measured) / measured."""
        if self.measured_us is None or self.measured_us <= 0:
            return None
        return (self.predicted_us - self.measured_us) / self.measured_us

    @property
    def off(self) -> bool:
        gap = self.gap
        return gap is not None and abs(gap) > TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernels": self.label,
            "mode": self.mode,
            "predicted_us": self.predicted_us,
            "measured_us": self.measured_us,
            "gap": self.gap,
            "off_by_more_than_tolerance": self.off,
        }


#: Which measured shares each prediction is set beside.
MEASURED_BY: dict[str, tuple[str, ...]] = {
    "baseline": ("eager",),
    "table": ("eager+table", "compile+table"),
}


def check_predictions(
    predicted: Mapping[str, float], shares: Mapping[str, float | None]
) -> list[PredictionCheck]:
    """``predicted`` µs by kernels ("baseline", "table") beside the ``shares``
    (µs by mode) of the modes that ran those kernels."""
    checks = []
    for label, modes in MEASURED_BY.items():
        if label not in predicted:
            continue
        for mode in modes:
            if mode in shares:
                checks.append(PredictionCheck(label, mode, predicted[label], shares[mode]))
    return checks
