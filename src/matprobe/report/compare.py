"""Two runs side by side: is B's device time of a pair really different from A's?

For every (spec, variant) timed in both runs, the ratio B ÷ A of the device time
per call comes from the raw samples (one per timing round, each the mean of
the calls replayed in it), as asv's and nvbench's robust comparisons do, not
from two medians:

* **estimate** — Hodges–Lehmann on the log scale: the median of all m·n
  differences log bⱼ − log aᵢ, exponentiated. It is the shift that best lines
  the two samples up, robust to the outliers timing data has (a preempted
  round, a clock change) and needs no normality;
* **interval** — the Mann–Whitney (Moses) confidence interval for that shift:
  the k-th smallest and k-th largest of those differences, k from the normal
  approximation of the U statistic's null distribution. Distribution-free and
  deterministic (no random seed).

The verdict (:class:`Verdict`) asks two questions of the data, each a test at
a stated level against a stated threshold (:class:`Thresholds`):

* **is there a change?** — the 99 % interval excludes 1 (a difference shown at
  the 1 % level: one comparison judges hundreds of pairs, and at 5 % one pair
  in twenty of an unchanged kernel would be called a change) *and* the
  estimate is beyond ``noise`` (2 %): smaller shifts are run-to-run noise
  (clocks, temperature), never reported as a change;
* **is it the same?** — the 90 % interval lies within ±``resolution`` (10 %):
  an equivalence test (two one-sided tests at 5 %) showing that no change
  larger than that is plausible. Between runs the device time of a 2 µs
  kernel moves by a few % (the interleaved ratio to the baseline, within a
  run, is far tighter); on the committed H100 run the widest such interval
  of a run compared with itself is ±7.8 %.

A pair that is neither is UNSURE: the data can neither show a change nor rule
one out (too few samples, or too noisy — CPU wall-clock times often are).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from statistics import NormalDist
from typing import Any

import numpy as np

from matprobe.measure.results import ClockStats, PairResult, Status
from matprobe.report.cells import short_label
from matprobe.report.model import Report
from matprobe.report.tables import md_table, plain_table
from matprobe.safetext import md_safe, term_safe


class Verdict(str, Enum):
    """What the ratio B ÷ A and its intervals say, checked in this order."""

    #: B is faster: the 99 % interval is below 1 and the estimate more than ``noise`` below
    FASTER = "FASTER"
    #: B is slower: the 99 % interval is above 1 and the estimate more than ``noise`` above
    SLOWER = "SLOWER"
    #: no change that matters: the 90 % interval lies within ±``resolution`` of 1 (it holds
    #: 1 and is narrow, or it excludes 1 but the estimate is within the noise threshold)
    SAME = "SAME"
    #: cannot tell: fewer than ``min_samples`` samples on a side, or intervals too wide
    #: to show a change or to rule one out
    UNSURE = "UNSURE"


@dataclass(frozen=True)
class Thresholds:
    noise: float = 0.02
    resolution: float = 0.10
    min_samples: int = 5
    #: of the interval that must exclude 1 for FASTER or SLOWER
    confidence: float = 0.99
    #: of the interval that must lie within ±resolution for SAME (TOST at 5 %)
    same_confidence: float = 0.90

    def describe(self) -> str:
        return (
            f"ratio = B ÷ A of the device time per call: Hodges–Lehmann estimate over the raw "
            f"samples with its {self.confidence:.0%} Mann–Whitney interval. FASTER/SLOWER: "
            f"that interval excludes 1 and the change exceeds the {self.noise:.0%} noise "
            f"threshold; SAME: the {self.same_confidence:.0%} interval lies within "
            f"±{self.resolution:.0%}; UNSURE: neither (or fewer than {self.min_samples} "
            f"samples on a side)"
        )


def ratio_interval(
    a_samples: Sequence[float], b_samples: Sequence[float], confidence: float = 0.99
) -> tuple[float, float, float]:
    """(estimate, lo, hi) of B ÷ A: Hodges–Lehmann with the Mann–Whitney interval,
    on the log scale (see the module's doc). Non-positive samples are dropped (a
    device time is positive; a producer subtraction lost in noise is not a time).
    With too few samples for the interval, lo and hi are the extreme ratios."""
    a = np.log(np.asarray([v for v in a_samples if v > 0], dtype=np.float64))
    b = np.log(np.asarray([v for v in b_samples if v > 0], dtype=np.float64))
    if a.size == 0 or b.size == 0:
        raise ValueError("no positive samples to compare")
    diffs = np.subtract.outer(b, a).ravel()
    m, n, total = a.size, b.size, diffs.size
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    k = math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12))
    estimate = float(np.median(diffs))
    if k < 1:
        lo, hi = float(diffs.min()), float(diffs.max())
    else:
        ordered = np.partition(diffs, (k - 1, total - k))
        lo, hi = float(ordered[k - 1]), float(ordered[total - k])
    return math.exp(estimate), math.exp(lo), math.exp(hi)


@dataclass(frozen=True)
class RatioEstimate:
    """B ÷ A with the two intervals the verdict reads."""

    ratio: float
    lo: float  # the change interval (Thresholds.confidence)
    hi: float
    same_lo: float  # the equivalence interval (Thresholds.same_confidence)
    same_hi: float

    @classmethod
    def of(cls, a: Sequence[float], b: Sequence[float], t: Thresholds) -> RatioEstimate:
        ratio, lo, hi = ratio_interval(a, b, t.confidence)
        _, same_lo, same_hi = ratio_interval(a, b, t.same_confidence)
        return cls(ratio, lo, hi, same_lo, same_hi)


def judge(est: RatioEstimate, n_a: int, n_b: int, t: Thresholds) -> Verdict:
    """The :class:`Verdict` of an estimate and its intervals (see there for each)."""
    if min(n_a, n_b) < t.min_samples:
        return Verdict.UNSURE
    if est.hi < 1.0 and est.ratio < 1.0 - t.noise:
        return Verdict.FASTER
    if est.lo > 1.0 and est.ratio > 1.0 + t.noise:
        return Verdict.SLOWER
    if est.same_lo >= 1.0 - t.resolution and est.same_hi <= 1.0 + t.resolution:
        return Verdict.SAME
    return Verdict.UNSURE


@dataclass(frozen=True)
class PairComparison:
    spec_key: str
    label: str  # the spec's short label
    variant_id: str
    a: ClockStats
    b: ClockStats
    estimate: RatioEstimate
    verdict: Verdict

    @property
    def ratio(self) -> float:
        return self.estimate.ratio

    @property
    def lo(self) -> float:
        return self.estimate.lo

    @property
    def hi(self) -> float:
        return self.estimate.hi

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_key": self.spec_key,
            "variant_id": self.variant_id,
            "a_median_us": self.a.median_us,
            "a_n": self.a.n,
            "b_median_us": self.b.median_us,
            "b_n": self.b.n,
            "ratio": self.ratio,
            "lo": self.lo,
            "hi": self.hi,
            "same_lo": self.estimate.same_lo,
            "same_hi": self.estimate.same_hi,
            "verdict": self.verdict.value,
        }


@dataclass(frozen=True)
class StatusChange:
    """A pair in both runs that is not timed in both: e.g. PASS in A, FAIL in B."""

    spec_key: str
    label: str
    variant_id: str
    a: str
    b: str
    reason: str  # B's reason, or A's when B passed


@dataclass(frozen=True)
class Comparison:
    a_name: str  # "run 3 of results.sqlite"
    b_name: str
    a: Report
    b: Report
    thresholds: Thresholds
    pairs: tuple[PairComparison, ...]
    status_changes: tuple[StatusChange, ...] = ()
    only_in_a: int = 0
    only_in_b: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    #: the median B ÷ A of the baselines' own pairs (None: no baseline in both). A
    #: device-wide shift (another card, clock or driver) moves every pair by it.
    baseline_shift: float | None = None
    baseline_pairs: int = 0

    @property
    def empty(self) -> bool:
        return not self.pairs and not self.status_changes


def _results(report: Report) -> dict[tuple[str, str], tuple[str, PairResult]]:
    return {
        (row.result.spec_key, row.result.variant_id): (short_label(s.spec), row.result)
        for s in report.sections
        for row in s.rows
    }


def _timed(result: PairResult) -> ClockStats | None:
    clock = result.clocks.device
    return clock if result.status is Status.PASS and clock is not None and clock.n else None


def compare_reports(
    a: Report,
    b: Report,
    *,
    a_name: str = "A",
    b_name: str = "B",
    thresholds: Thresholds | None = None,
) -> Comparison:
    """Every pair present in both reports: timed in both → a ratio and a verdict;
    otherwise, where the status differs, a :class:`StatusChange`. Order: B's specs,
    then B's ranking."""
    t = thresholds or Thresholds()
    in_a, in_b = _results(a), _results(b)
    pairs, changes = [], []
    for key, (label, result_b) in in_b.items():
        if key not in in_a:
            continue
        result_a = in_a[key][1]
        clock_a, clock_b = _timed(result_a), _timed(result_b)
        if clock_a is not None and clock_b is not None:
            est = RatioEstimate.of(clock_a.samples, clock_b.samples, t)
            verdict = judge(est, clock_a.n, clock_b.n, t)
            pairs.append(PairComparison(key[0], label, key[1], clock_a, clock_b, est, verdict))
        elif result_a.status is not result_b.status:
            reason = result_b.reason or result_a.reason
            changes.append(
                StatusChange(
                    key[0], label, key[1], result_a.status.value, result_b.status.value, reason
                )
            )
    counts = Counter(p.verdict.value for p in pairs)
    baselines = {
        (row.result.spec_key, row.result.variant_id)
        for section in b.sections
        for row in section.rows
        if row.is_baseline
    }
    shifts = [p.ratio for p in pairs if (p.spec_key, p.variant_id) in baselines]
    return Comparison(
        a_name,
        b_name,
        a,
        b,
        t,
        tuple(pairs),
        tuple(changes),
        only_in_a=len(in_a.keys() - in_b.keys()),
        only_in_b=len(in_b.keys() - in_a.keys()),
        counts={v.value: counts.get(v.value, 0) for v in Verdict},
        baseline_shift=float(np.median(shifts)) if shifts else None,
        baseline_pairs=len(shifts),
    )


# ---- rendering ------------------------------------------------------------------------


def run_line(name: str, report: Report) -> str:
    """``A: NVIDIA H100 80GB HBM3 (cuda), policy p90520ac7d7; 2106 pairs: …``."""
    d = report.device
    return f"{name}: {d.name} ({d.kind}), policy {report.policy.fingerprint}; {report.plan_summary}"


def summary_line(c: Comparison) -> str:
    counts = ", ".join(f"{c.counts.get(v.value, 0)} {v.value}" for v in Verdict)
    text = f"{len(c.pairs)} pairs timed in both: {counts}"
    if c.status_changes:
        text += f"; {len(c.status_changes)} changed status"
    return text + f"; {c.only_in_a} only in A, {c.only_in_b} only in B"


def shift_line(c: Comparison) -> str:
    """What the baselines did, when they moved beyond half the noise threshold: a
    device-wide shift that every pair's ratio carries, not a change of the kernels."""
    shift = c.baseline_shift
    if shift is None or abs(shift - 1.0) <= c.thresholds.noise / 2:
        return ""
    return (
        f"the baselines moved too: B ÷ A {shift:.3f}× (median over {c.baseline_pairs} "
        f"specs) — a device-wide shift (another card, clock or driver) moves every pair "
        f"by about as much; the runs' own ratios to the baseline factor it out"
    )


COMPARE_HEADERS = ["shape", "variant", "A µs (n)", "B µs (n)", "B/A [interval]", "verdict"]


def compare_cells(p: PairComparison) -> list[str]:
    return [
        p.label,
        p.variant_id,
        f"{p.a.median_us:.2f} (n={p.a.n})",
        f"{p.b.median_us:.2f} (n={p.b.n})",
        f"{p.ratio:.3f}× [{p.lo:.3f}–{p.hi:.3f}]",
        p.verdict.value,
    ]


def change_line(change: StatusChange) -> str:
    return (
        f"{change.label}  {change.variant_id}: {change.a.upper()} in A, {change.b.upper()} "
        f"in B — {change.reason}"
    )


def render_compare_text(c: Comparison) -> str:
    out = [
        term_safe(f"matprobe compare: A = {c.a_name}, B = {c.b_name}"),
        term_safe("  " + run_line("A", c.a)),
        term_safe("  " + run_line("B", c.b)),
        "  " + c.thresholds.describe(),
        "  " + summary_line(c),
    ]
    if shift := shift_line(c):
        out.append("  " + shift)
    if c.pairs:
        out += ["", plain_table(COMPARE_HEADERS, [compare_cells(p) for p in c.pairs])]
    if c.status_changes:
        out += ["", "Status changed (not timed in both):"]
        out += [term_safe("  " + change_line(change)) for change in c.status_changes]
    return "\n".join(out) + "\n"


def render_compare_markdown(c: Comparison) -> str:
    out = [
        "# matprobe compare",
        "",
        f"- A = {md_safe(c.a_name)}: {md_safe(run_line('A', c.a))}",
        f"- B = {md_safe(c.b_name)}: {md_safe(run_line('B', c.b))}",
        f"- {md_safe(c.thresholds.describe())}",
        f"- {md_safe(summary_line(c))}",
    ]
    if shift := shift_line(c):
        out.append(f"- {md_safe(shift)}")
    if c.pairs:
        out += ["", md_table(COMPARE_HEADERS, [compare_cells(p) for p in c.pairs])]
    if c.status_changes:
        out += ["", "## Status changed", ""]
        out += [f"- {md_safe(change_line(change))}" for change in c.status_changes]
    return "\n".join(out) + "\n"


def compare_json(c: Comparison) -> dict[str, Any]:
    def run(name: str, report: Report) -> dict[str, Any]:
        return {
            "name": name,
            "run_id": report.run_id,
            "device": report.device.to_dict(),
            "policy": report.policy.fingerprint,
        }

    t = c.thresholds
    return {
        "a": run(c.a_name, c.a),
        "b": run(c.b_name, c.b),
        "method": "Hodges-Lehmann ratio with Mann-Whitney interval, log scale",
        "thresholds": {
            "noise": t.noise,
            "resolution": t.resolution,
            "min_samples": t.min_samples,
            "confidence": t.confidence,
            "same_confidence": t.same_confidence,
        },
        "counts": dict(c.counts),
        "baseline_shift": c.baseline_shift,
        "only_in_a": c.only_in_a,
        "only_in_b": c.only_in_b,
        "pairs": [p.to_dict() for p in c.pairs],
        "status_changes": [
            {
                "spec_key": s.spec_key,
                "variant_id": s.variant_id,
                "a": s.a,
                "b": s.b,
                "reason": s.reason,
            }
            for s in c.status_changes
        ],
    }
