"""What a report of a run is: per spec, every variant's :class:`Row`, ranked by
the device clock in a :class:`SpecSection`; the run's :class:`Report` with its
impact per profiled run and per token.

Only our own families are crowned: the best variant and the impact are taken
among the families that are neither the spec's baseline nor a peer (the
vendor library, ``torch.compile``, numpy); peers keep their rows and a column
of their own. Where a result was timed interleaved with the baseline, its
ratio and 95 % interval are the figures that count, and a best whose interval
holds 1.0 is "SAME within noise" (it saves nothing in the impact).

:mod:`~matprobe.report.build` makes a report from a run or a store; the
renderings read it: terminal text (:mod:`~matprobe.report.text`), Markdown
(:mod:`~matprobe.report.markdown`), JSON and CSV (:mod:`~matprobe.report.json_csv`),
HTML (:mod:`~matprobe.report.html`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import PairResult, Ratio, Status
from matprobe.measure.timing import TimingPolicy
from matprobe.spec import MatmulSpec


@dataclass(frozen=True)
class Row:
    result: PairResult
    tags: tuple[str, ...]
    device_us: float | None
    vs_baseline: float | None
    vs_production: float | None
    gbps: float | None
    pct_read: float | None
    tflops: float | None
    #: the family is a peer's code (vendor library, torch.compile): shown, never crowned
    peer: bool = False
    #: the baseline's median in this pair's own rounds, where it ran > PAIR_BASE_GAP
    #: apart from the baseline's own row (the ratio is to it; tagged so)
    pair_base_us: float | None = None

    @property
    def ratio(self) -> Ratio | None:
        """Device time ÷ the baseline's, measured interleaved, for a PASS result."""
        return self.result.clocks.vs_baseline if self.result.status is Status.PASS else None

    @property
    def is_baseline(self) -> bool:
        return "baseline" in self.tags

    @property
    def ours(self) -> bool:
        """One of our own variants: neither a peer nor the spec's baseline."""
        return not self.peer and not self.is_baseline

    @property
    def timed(self) -> bool:
        return self.result.status is Status.PASS and self.device_us is not None

    @property
    def ranked(self) -> bool:
        """Timed, its clocks agree and, a plugin's, judged apart: only such a row
        can be crowned."""
        return self.timed and not {CLOCKS_DISAGREE_TAG, NOT_JUDGED_APART_TAG} & set(self.tags)

    @property
    def exceeds_read_ceiling(self) -> bool:
        """Faster than the measured read ceiling: the roofline is suspect."""
        return self.pct_read is not None and self.pct_read > 100.0


def same_within_noise(ratio: Ratio) -> bool:
    """The ratio's interval holds 1.0: no measurable difference from the baseline."""
    return ratio.lo <= 1.0 <= ratio.hi


def row_saving_us(row: Row, baseline_us: float | None) -> float | None:
    """Baseline − this row per call: from the interleaved ratio where there is one
    (0 when its interval holds 1.0), else from the two separately timed medians."""
    ratio = row.ratio
    if ratio is not None:
        return 0.0 if same_within_noise(ratio) else ratio.baseline_us * (1.0 - ratio.median)
    if baseline_us is None or row.device_us is None:
        return None
    return baseline_us - row.device_us


@dataclass(frozen=True)
class SpecSection:
    spec: MatmulSpec
    rows: tuple[Row, ...]  # PASS ranked by device time, then FAIL, then ERROR
    unsupported: tuple[tuple[str, str], ...]  # (variant id, reason)
    baseline_id: str | None
    best_id: str | None  # our fastest validated variant (never a peer nor the baseline)
    baseline_us: float | None
    best_us: float | None
    best_peer_id: str | None = None  # the fastest validated peer other than the baseline
    best_peer_us: float | None = None
    #: calls per decode token (per_token.py); None: fall back to count ÷ tokens
    calls_per_token: float | None = None

    @property
    def count(self) -> int:
        return self.spec.provenance.count if self.spec.provenance else 0

    @property
    def production_us(self) -> float | None:
        prov = self.spec.provenance
        return prov.avg_ms * 1000.0 if prov and prov.avg_ms > 0 else None

    @property
    def best_row(self) -> Row | None:
        return next((r for r in self.rows if r.result.variant_id == self.best_id), None)

    def variants_by_note(self) -> dict[str, list[str]]:
        """Each clock note of the rows, first seen first, with the variants that carry
        it: a note repeated on many rows is said once by every rendering."""
        by_note: dict[str, list[str]] = {}
        for row in self.rows:
            for note in row.result.clocks.notes:
                by_note.setdefault(note, []).append(row.result.variant_id)
        return by_note

    def unsupported_by_reason(self) -> dict[str, list[str]]:
        """Each reason a pair is unsupported, first seen first, with its variants."""
        by_reason: dict[str, list[str]] = {}
        for variant_id, reason in self.unsupported:
            by_reason.setdefault(reason, []).append(variant_id)
        return by_reason

    @property
    def best_ratio(self) -> Ratio | None:
        """The best variant's interleaved ratio to the baseline, if it was measured."""
        row = self.best_row
        return row.ratio if row is not None else None

    @property
    def interleaved(self) -> bool:
        return self.best_ratio is not None

    @property
    def same_within_noise(self) -> bool:
        ratio = self.best_ratio
        return ratio is not None and same_within_noise(ratio)

    @property
    def saving_us(self) -> float | None:
        """Baseline − best per call (negative: ours is slower); see :func:`row_saving_us`."""
        row = self.best_row
        if row is not None and row.ratio is not None:
            return row_saving_us(row, self.baseline_us)
        if self.baseline_us is None or self.best_us is None:
            return None
        return self.baseline_us - self.best_us

    @property
    def gain_us(self) -> float:
        """What an engine gains a call: the saving, or 0 where the baseline is as fast."""
        return max(0.0, self.saving_us or 0.0)


@dataclass
class Report:
    sections: list[SpecSection]
    device: DeviceInfo
    policy: TimingPolicy
    plan_summary: str
    run_id: int
    seconds: float
    interrupted: bool
    peaks: Mapping[str, Any] | None = None
    tokens: int | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)
    #: how calls per token were derived, one line (per_token.PerToken.describe)
    per_token_basis: str = ""

    def calls_per_token(self, section: SpecSection) -> float | None:
        if section.calls_per_token is not None:
            return section.calls_per_token
        return section.count / self.tokens if self.tokens else None

    def impact_ms(self) -> float:
        """Per profiled run: Σ count × what our best saves a call (never < 0)."""
        return sum(s.gain_us * s.count for s in self.sections) / 1000.0

    def impact_us_per_token(self) -> float | None:
        """Σ calls per token × saving; None when a saving spec has no per-token weight."""
        return self._per_token(lambda s: s.gain_us)

    def _per_token(self, saving: Callable[[SpecSection], float]) -> float | None:
        """Σ saving × calls per token; None where a spec that saves has no weight,
        or where nothing saves and no token count is known (nothing to say)."""
        total, weighed = 0.0, False
        for section in self.sections:
            us = saving(section)
            if us == 0.0:
                continue
            weight = self.calls_per_token(section)
            if weight is None:
                return None
            total, weighed = total + us * weight, True
        return total if weighed or self.tokens else None


def run_problems(report: Report, *, strict: bool = False) -> list[str]:
    """What makes a run's exit status 1 (pytest's convention: 0 all good, 1 when
    something that matters failed, 2 usage errors): a baseline that FAILs or
    ERRORs (nothing is compared with it), no validated result at all, and with
    ``strict`` any FAIL or ERROR."""
    problems = []
    rows = [row for section in report.sections for row in section.rows]
    for row in rows:
        bad = row.result.status is not Status.PASS
        if bad and (row.is_baseline or strict):
            problems.append(
                f"{row.result.variant_id} {row.result.status.value.upper()} on "
                f"{row.result.spec_key}"
            )
    if not any(row.result.status is Status.PASS for row in rows):
        problems.append("no pair passed validation (nothing ran, or everything failed)")
    return problems


def pair_base_tag(baseline_us: float) -> str:
    """The tag of a row whose ratio is to a baseline that ran apart from its own row."""
    return f"pair-base {baseline_us:.4g} µs"


#: The tag of a row whose clocks time one call differently (:func:`clocks_disagree`).
CLOCKS_DISAGREE_TAG = "clocks-disagree"
#: The tag of a plugin's passing row no process apart re-timed and judged (a Ray
#: cluster, Apple's GPU): it stands on its own worker's word, so it is never crowned.
NOT_JUDGED_APART_TAG = "not-judged-apart"
