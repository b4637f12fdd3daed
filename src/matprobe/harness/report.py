"""Reports of a run: per spec, every variant ranked by the device clock, in the
spirit of ``seeds/002_…`` but without its defects — a FAIL is shown loudly and
never ranked, unsupported pairs are listed apart (not counted as failures),
and every time comes with its spread and sample count.

Only our own families are crowned: the best variant and the impact are taken
among the families that are neither the spec's baseline nor a peer (the
vendor library, ``torch.compile``, numpy); peers keep their rows and a column
of their own. Where a result was timed interleaved with the baseline, its
ratio and 95 % interval are the figures that count, and a best whose interval
holds 1.0 is "SAME within noise" (it saves nothing in the impact). Calls per
token come from the profile's structure (:mod:`matprobe.harness.per_token`).

One :class:`Report` model, four renderings: terminal text, Markdown, JSON and
CSV (the last two carry the raw samples). Text from a profile (spec keys,
backend names) never reaches a terminal or Markdown raw: :func:`term_safe`
and :func:`md_safe` escape it.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from matprobe.harness.device import DeviceInfo
from matprobe.harness.per_token import per_token_weights
from matprobe.harness.results import PairResult, Ratio, Status
from matprobe.harness.runner import PairState, Plan, RunOutcome
from matprobe.harness.timing import TimingPolicy
from matprobe.harness.variants import Variant
from matprobe.safetext import md_safe
from matprobe.spec import MatmulSpec

#: host round trip at least this many times the device time: launch-bound
HOST_GAP_FACTOR = 3.0


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
        """Timed, and its clocks agree: only such a row can be crowned."""
        return self.timed and CLOCKS_DISAGREE_TAG not in self.tags

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


def _matches(target: str | None, result: PairResult) -> bool:
    return target is not None and (result.variant_id == target or result.family == target)


def _rank_key(row: Row) -> tuple[int, float, str]:
    order = {Status.PASS: 0, Status.FAIL: 1, Status.ERROR: 2}[row.result.status]
    return (
        order,
        row.device_us if row.device_us is not None else float("inf"),
        row.result.variant_id,
    )


@dataclass(frozen=True)
class SpecResults:
    """One spec's part of a report: its results (fresh and cached), its unsupported
    pairs as (variant id, reason), and its baseline (a variant id or family name)."""

    spec: MatmulSpec
    results: Sequence[PairResult]
    unsupported: Sequence[tuple[str, str]] = ()
    baseline: str | None = None


def build_report(
    plan: Plan,
    outcome: RunOutcome,
    *,
    baselines: Mapping[str, str | None],
    device: DeviceInfo,
    policy: TimingPolicy,
    peaks: Mapping[str, Any] | None = None,
    tokens: int | None = None,
    source: str = "",
    peers: Collection[str] = (),
) -> Report:
    """Group the plan's pairs by spec (profile order) and rank each spec's results.

    ``peers`` are the family names of peers' code (``VariantFamily.peer``): their
    rows are tagged and compared, never crowned. Calls per token come from the
    specs' own structure and ``tokens`` (see :mod:`matprobe.harness.per_token`).
    """
    specs: dict[str, MatmulSpec] = {}
    unsupported: dict[str, list[tuple[str, str]]] = {}
    for pair in plan.pairs:
        key = pair.spec.key()
        specs.setdefault(key, pair.spec)
        unsupported.setdefault(key, [])
        if pair.state is PairState.UNSUPPORTED:
            unsupported[key].append((pair.variant.id, pair.reason))
    parts = [
        SpecResults(
            spec,
            [r for (k, _), r in outcome.results.items() if k == key],
            unsupported[key],
            baselines.get(spec.kind),
        )
        for key, spec in specs.items()
    ]
    return assemble_report(
        parts,
        run_id=outcome.run_id,
        device=device,
        policy=policy,
        plan_summary=plan.summary(),
        seconds=outcome.seconds,
        interrupted=outcome.interrupted,
        peaks=peaks,
        tokens=tokens,
        source=source,
        peers=peers,
    )


def assemble_report(
    parts: Sequence[SpecResults],
    *,
    run_id: int,
    device: DeviceInfo,
    policy: TimingPolicy,
    plan_summary: str,
    seconds: float = 0.0,
    interrupted: bool = False,
    peaks: Mapping[str, Any] | None = None,
    tokens: int | None = None,
    source: str = "",
    peers: Collection[str] = (),
) -> Report:
    """A report from each spec's results (in the order given): what
    :func:`build_report` makes of a run, and what a stored run is rebuilt into."""
    per_token = per_token_weights([part.spec for part in parts], tokens)
    sections = [
        replace(
            _section(
                part.spec, part.results, part.baseline, peaks, set(peers), device.kind == "cpu"
            ),
            unsupported=tuple(part.unsupported),
            calls_per_token=per_token.weight(part.spec),
        )
        for part in parts
    ]
    report = Report(
        sections,
        device,
        policy,
        plan_summary,
        run_id,
        seconds,
        interrupted,
        peaks,
        tokens,
        source,
        per_token_basis=per_token.describe() if parts else "",
    )
    if note := ceiling_note(report):
        report.notes.append(note)
    return report


def _section(
    spec: MatmulSpec,
    results: Sequence[PairResult],
    target: str | None,
    peaks: Mapping[str, Any] | None,
    peers: Collection[str],
    one_clock: bool,
) -> SpecSection:
    """One spec's rows, ranked and tagged; best and best peer picked apart.
    ``one_clock``: the device, hot and host clocks all time the same wall-clock
    call (the CPU), so a row whose clocks disagree is not ranked — nor is a
    baseline whose clocks disagree a figure to compare with."""
    base = next(
        (
            r
            for r in results
            if r.status is Status.PASS
            and _matches(target, r)
            and r.clocks.device
            and not (one_clock and clocks_disagree(r))
        ),
        None,
    )
    base_us = base.clocks.device.median_us if base and base.clocks.device else None
    rows = [_row(spec, r, base_us, peaks, target, peers, one_clock) for r in results]
    rows.sort(key=_rank_key)
    best = next((r for r in rows if r.ranked and r.ours), None)
    best_peer = next((r for r in rows if r.ranked and r.peer and not r.is_baseline), None)
    best_host = min(
        (r for r in rows if r.ours and r.result.status is Status.PASS and r.result.clocks.host),
        default=None,
        key=lambda r: r.result.clocks.host.median_us,  # type: ignore[union-attr]
    )
    rows = [_tagged(r, best, best_host) for r in rows]
    return SpecSection(
        spec=spec,
        rows=tuple(rows),
        unsupported=(),
        baseline_id=base.variant_id if base else target,
        best_id=best.result.variant_id if best else None,
        baseline_us=base_us,
        best_us=best.device_us if best else None,
        best_peer_id=best_peer.result.variant_id if best_peer else None,
        best_peer_us=best_peer.device_us if best_peer else None,
    )


def _row(
    spec: MatmulSpec,
    result: PairResult,
    base_us: float | None,
    peaks: Mapping[str, Any] | None,
    baseline_target: str | None,
    peers: Collection[str],
    one_clock: bool = False,
) -> Row:
    clock = result.clocks.device
    device_us = clock.median_us if clock and result.status is Status.PASS else None
    gbps = pct = tflops = vs_base = vs_prod = None
    if device_us:
        seconds = device_us * 1e-6
        if spec.is_complete and spec.dtype:
            gbps = spec.min_bytes() / seconds / 1e9
            if peaks and peaks.get("read_gbps"):
                pct = 100.0 * gbps / float(peaks["read_gbps"])
        if spec.is_complete:
            tflops = spec.flops() / seconds / 1e12
        if base_us:
            vs_base = device_us / base_us
        prov = spec.provenance
        if prov and prov.avg_ms > 0:
            vs_prod = device_us / (prov.avg_ms * 1000.0)
    peer = result.family in peers
    tags = []
    if _matches(baseline_target, result):
        tags.append("baseline")
    if peer:
        tags.append("peer")
    if result.status is not Status.PASS:
        tags.append(result.status.value.upper())
    if result.activation_quant:  # judged on the x it declared it rounds, not on x
        tags.append(f"x:{result.activation_quant}")
    if (
        clock
        and result.status is Status.PASS
        and noisy(clock.p10_us, clock.p90_us, clock.median_us)
    ):
        tags.append("noisy")
    if one_clock and clocks_disagree(result):
        tags.append(CLOCKS_DISAGREE_TAG)
    pair = result.clocks.vs_baseline
    pair_base_us = None
    if pair and base_us and abs(pair.baseline_us / base_us - 1.0) > PAIR_BASE_GAP:
        # The ratio is to the baseline timed in this pair's own rounds, which then
        # ran at another speed than in its own row: the ratio and the two medians
        # disagree, and the row says why.
        pair_base_us = pair.baseline_us
        tags.append(pair_base_tag(pair_base_us))
    return Row(
        result, tuple(tags), device_us, vs_base, vs_prod, gbps, pct, tflops, peer, pair_base_us
    )


def pair_base_tag(baseline_us: float) -> str:
    """The tag of a row whose ratio is to a baseline that ran apart from its own row."""
    return f"pair-base {baseline_us:.4g} µs"


#: The tag of a row whose clocks time one call differently (:func:`clocks_disagree`).
CLOCKS_DISAGREE_TAG = "clocks-disagree"
#: Beyond the range the other clocks span, the factor that makes clocks disagree.
CLOCKS_DISAGREE_FACTOR = 2.0
#: How far the baseline in a pair's rounds may run from its own row before it is said.
PAIR_BASE_GAP = 0.25


def clocks_disagree(result: PairResult) -> bool:
    """Where the device, hot and host clocks time the same call (the CPU's wall
    clock), the device median lies more than :data:`CLOCKS_DISAGREE_FACTOR` outside
    the p10–p90 range of the other two: one clock caught something else (a
    112 000 µs device figure beside hot and host clocks of 60 and 96 µs)."""
    c = result.clocks
    if result.status is not Status.PASS or not (c.device and c.hot and c.host):
        return False
    low, high = min(c.hot.p10_us, c.host.p10_us), max(c.hot.p90_us, c.host.p90_us)
    median = c.device.median_us
    return median > CLOCKS_DISAGREE_FACTOR * high or median * CLOCKS_DISAGREE_FACTOR < low


#: (p90 − p10) / median beyond which a device clock is called noisy: a shared
#: CPU's wall clock (168–11966 µs around a few hundred) says little about speed.
NOISY_SPREAD = 0.5


def noisy(p10_us: float, p90_us: float, median_us: float) -> bool:
    return median_us > 0 and (p90_us - p10_us) / median_us > NOISY_SPREAD


def _tagged(row: Row, best: Row | None, best_host: Row | None) -> Row:
    tags = list(row.tags)
    if best is not None and row is best:
        tags.append("best-device")
    if best_host is not None and row is best_host:
        tags.append("best-host")
    host = row.result.clocks.host
    if row.device_us and host and host.median_us >= HOST_GAP_FACTOR * row.device_us:
        tags.append("host-gap")
    return replace(row, tags=tuple(tags))


def ceiling_note(report: Report) -> str:
    """One note naming every result faster than the measured read ceiling, or ""."""
    read = float(report.peaks.get("read_gbps") or 0.0) if report.peaks else 0.0
    over = [(s, r) for s in report.sections for r in s.rows if r.exceeds_read_ceiling]
    if not over or read <= 0:
        return ""
    which = "; ".join(
        f"{r.result.variant_id} on {short_label(s.spec)}: {r.gbps:.0f} GB/s" for s, r in over
    )
    return (
        f"WARNING: read ceiling exceeded: {which} — above the measured streaming-read "
        f"ceiling of {read:.0f} GB/s. The measured ceiling is below what the kernel "
        f"achieved, so the roofline (%read) is suspect: L2 hits (inputs not cold), a "
        f"wrong byte count, or a ceiling kernel that does not saturate memory"
    )


#: Said in every report where a variant that launches early runs or was cached
#: (``VariantFamily.early_launch_param``: ``pdl`` in the shipped families); ``{which}``
#: names those variants' tags (``pdl1``): what their device clock includes.
EARLY_LAUNCH_NOTE = (
    "{which} variants launch early, with programmatic dependent launch (Hopper+): each call "
    "may read its weights before the kernel that writes its input has finished. Their device "
    "clock, like every row's, times each call after a different producer kernel that does not "
    "trigger dependents early (as an engine's elementwise kernels), never back to back with "
    "itself, so the figure holds in a decode token; every {which} variant also passed a chain "
    "of 24 dependent calls."
)


def early_launchers(plan: Plan) -> list[Variant]:
    """The variants of pairs that run (or were cached) and launch early, once each."""
    found: dict[str, Variant] = {}
    for pair in plan.pairs:
        if pair.state is not PairState.UNSUPPORTED and pair.variant.launches_early:
            found.setdefault(pair.variant.id, pair.variant)
    return list(found.values())


def early_launch_note(plan: Plan) -> str:
    """:data:`EARLY_LAUNCH_NOTE` for the plan's early launchers, or "" when there are none."""
    variants = early_launchers(plan)
    if not variants:
        return ""
    tags = []
    for variant in variants:
        param = variant.family.early_launch_param
        tags.append(f"{param}{variant.param_dict.get(param or '')}")
    return EARLY_LAUNCH_NOTE.format(which="/".join(sorted(set(tags))))


# ---- formatting helpers ------------------------------------------------------------


def _us(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _clock_cell(result: PairResult, name: str) -> str:
    clock = getattr(result.clocks, name)
    return "-" if clock is None else f"{clock.median_us:.2f}"


def _device_cell(result: PairResult) -> str:
    clock = result.clocks.device
    if clock is None:
        return "-"
    return f"{clock.median_us:.2f} ({clock.p10_us:.2f}–{clock.p90_us:.2f}, n={clock.n})"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def ratio_cell(ratio: Ratio) -> str:
    """``0.79× [0.78–0.80]``: median and interval of candidate ÷ baseline."""
    return f"{ratio.median:.2f}× [{ratio.lo:.2f}–{ratio.hi:.2f}]"


def _vs_base_cell(row: Row) -> str:
    return ratio_cell(row.ratio) if row.ratio is not None else _ratio(row.vs_baseline)


def _pct_read_cell(row: Row) -> str:
    if row.pct_read is None:
        return "-"
    return ">100%!" if row.exceeds_read_ceiling else f"{row.pct_read:.0f}%"


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


HEADERS = [
    "variant",
    "verdict",
    "device µs (p10–p90, n)",
    "hot µs",
    "host µs",
    "GB/s",
    "%read",
    "TFLOP/s",
    "vs base",
    "vs prod",
    "norm err",
    "max rel",
    "tags",
]


def _cells(row: Row) -> list[str]:
    r = row.result
    return [
        r.variant_id,
        r.status.value.upper(),
        _device_cell(r) if r.status is Status.PASS else "-",
        _clock_cell(r, "hot"),
        _clock_cell(r, "host"),
        "-" if row.gbps is None else f"{row.gbps:.0f}",
        _pct_read_cell(row),
        "-" if row.tflops is None else f"{row.tflops:.2f}",
        _vs_base_cell(row),
        _ratio(row.vs_production),
        _sci(r.metrics.norm_rel if r.metrics else None),
        _sci(r.metrics.max_rel if r.metrics else None),
        " ".join(f"[{t}]" for t in row.tags),
    ]


def _peaks_line(peaks: Mapping[str, Any]) -> str:
    def num(key: str) -> float:
        return float(peaks.get(key) or 0.0)

    line = (
        f"measured peaks (this run): copy {num('copy_gbps'):.0f} GB/s (read+write), "
        f"streaming read {num('read_gbps'):.0f} GB/s"
    )
    if peaks.get("read_config"):
        line += f" ({peaks['read_config']}, {num('size_bytes') / 2**20:.0f} MiB buffer)"
    if peaks.get("torch_sum_gbps"):
        line += f"; torch.sum {num('torch_sum_gbps'):.0f} GB/s"
    return line


def _header_lines(report: Report) -> list[str]:
    d = report.device
    cap = f" sm_{d.capability[0]}{d.capability[1]}" if d.capability else ""
    versions = ", ".join(f"{k} {v}" for k, v in sorted(d.versions.items()))
    lines = [
        f"matprobe run {report.run_id} on {d.name} ({d.kind}{cap}"
        + (f", driver {d.driver}" if d.driver else "")
        + f"); {versions}",
        f"plan: {report.plan_summary}; {report.seconds:.1f} s"
        + ("; INTERRUPTED: partial results" if report.interrupted else ""),
    ]
    if report.peaks:
        lines.append(_peaks_line(report.peaks))
    p = report.policy
    clock = (
        f"device = per call after a producer kernel that writes its input (producer "
        f"time subtracted), CUDA-graph replays of ≥ {p.min_calls_per_sample} calls, inputs "
        f"rotated over > {p.cold_l2_factor:g}× L2 (cold), interleaved with the baseline"
        if d.kind == "cuda"
        else "device = wall time per call on the CPU, interleaved with the baseline"
    )
    lines.append(
        f"timing policy {p.fingerprint}: {clock}; ≥ {p.min_samples} rounds, stop at "
        f"spread < {p.target_spread:.0%} and ratio ±{p.target_spread:.0%} or "
        f"{p.budget_s:g} s; {p.trials} validation trials vs float64; every call of "
        f"every timed replay judged vs float64, each with a fresh x and a prefilled output"
        + (
            f"; seed {p.seed} (run --seed {p.seed} --force replays it)"
            if p.seed is not None
            else ""
        )
    )
    lines.extend(report.notes)
    return lines


def _spec_lines(section: SpecSection, report: Report) -> list[str]:
    spec = section.spec
    parts = []
    if section.count:
        if spec.provenance and not spec.provenance.backends:
            parts.append(f"{section.count} calls per token")
        else:
            per_token = report.calls_per_token(section)
            parts.append(
                f"{section.count} calls in the profile"
                + (f" ({per_token:.3g} per token)" if per_token is not None else "")
            )
    prov = spec.provenance
    if prov and prov.avg_ms > 0:
        parts.append(
            f"production {prov.main_backend} {prov.avg_ms * 1000:.1f} µs avg "
            f"(another device's figure)"
        )
    if spec.is_complete and spec.dtype:
        parts.append(f"{spec.min_bytes() / 1e6:.3f} MB, {spec.flops() / 1e6:.3f} MFLOP per call")
    return parts


def _failure_lines(section: SpecSection) -> list[str]:
    return [
        f"  ✗ {row.result.variant_id}: {row.result.status.value.upper()} — {row.result.reason}"
        for row in section.rows
        if row.result.status is not Status.PASS
    ]


def _notes(section: SpecSection) -> list[str]:
    seen: dict[str, list[str]] = {}
    for row in section.rows:
        for note in row.result.clocks.notes:
            seen.setdefault(note, []).append(row.result.variant_id)
    return [f"  note: {note} ({', '.join(ids)})" for note, ids in seen.items()]


def _unsupported_line(section: SpecSection) -> str:
    if not section.unsupported:
        return ""
    grouped: dict[str, list[str]] = {}
    for variant_id, reason in section.unsupported:
        grouped.setdefault(reason, []).append(variant_id)
    text = "; ".join(f"{len(ids)} × {reason}" for reason, ids in grouped.items())
    return f"  unsupported (not failures): {text}"


def short_label(spec: MatmulSpec) -> str:
    """``matmul 1×9728×896 NT f16``: op, m×n×k (batch× when > 1), layout, dtype."""
    layout = ("T" if spec.tA else "N") + ("T" if spec.tB else "N")
    batch = f"{spec.batch}×" if spec.batch and spec.batch > 1 else ""
    extra = "+bias" if spec.has_bias else ""
    if spec.alpha is not None and spec.alpha != 1.0:
        extra += f" α={spec.alpha:g}"
    return (
        f"{spec.kind} {batch}{spec.m}×{spec.n_total}×{spec.k} {layout}{extra} {spec.dtype or '?'}"
    )


def verdict(section: SpecSection) -> str:
    """``faster``, ``same`` (interval holds 1.0), ``slower`` (the baseline is at least
    as fast) or ``unjudged`` (no timed variant of ours, or no baseline time)."""
    if section.best_id is None:
        return "unjudged"
    if section.same_within_noise:
        return "same"
    saving = section.saving_us
    if saving is None:
        return "unjudged"
    return "faster" if saving > 0 else "slower"


def _impact_rows(report: Report) -> list[list[str]]:
    """Specs where our validated variant beats the baseline, biggest saving first."""
    rows = []
    for s in sorted(report.sections, key=lambda s: -s.gain_us * s.count):
        if s.gain_us <= 0:
            continue
        ratio = s.best_ratio
        base_us = ratio.baseline_us if ratio else s.baseline_us
        best_us = ratio.baseline_us * ratio.median if ratio else s.best_us
        weight = report.calls_per_token(s)
        rows.append(
            [
                short_label(s.spec),
                str(s.count),
                "-" if weight is None else f"{weight:.3g}",
                _us(base_us),
                _us(best_us),
                s.best_id or "-",
                _us(s.gain_us) + ("" if ratio else " (not interleaved)"),
                f"{s.gain_us * s.count / 1000:.3f}",
                "-" if weight is None else f"{s.gain_us * weight:.2f}",
            ]
        )
    return rows


def _verdict_line(report: Report) -> str:
    counts = {name: 0 for name in ("faster", "same", "slower", "unjudged")}
    for section in report.sections:
        counts[verdict(section)] += 1
    return (
        f"ours beat the baseline on {counts['faster']} of {len(report.sections)} specs; "
        f"SAME within noise on {counts['same']}; the baseline is at least as fast on "
        f"{counts['slower']}; not judged on {counts['unjudged']} (no validated, timed "
        f"variant of ours, or no baseline time)"
    )


IMPACT_HEADERS = [
    "shape",
    "count",
    "calls/token",
    "baseline µs",
    "best µs",
    "best variant",
    "saved µs/call",
    "saved ms/run",
    "saved µs/token",
]


def _impact_total(report: Report) -> str:
    def saved(total_ms: float, per_token_us: float | None) -> str:
        text = f"{total_ms:.3f} ms saved per profiled run"
        if per_token_us is not None:
            text += f" = {per_token_us:.1f} µs per token"
        return text

    if all(verdict(s) == "unjudged" for s in report.sections):
        return "total: no spec judged, so no saving is claimed"
    text = f"total: {saved(report.impact_ms(), report.impact_us_per_token())}"
    if report.tokens:
        text += f" over {report.tokens} tokens"
    text += (
        " (device clock, our best validated variant vs the baseline, interleaved ratios "
        "where measured; SAME within noise counts 0)"
    )
    return text


SUMMARY_HEADERS = [
    "shape",
    "count",
    "best variant",
    "best µs",
    "baseline µs",
    "speed-up",
    "best peer",
    "peer µs",
    "pass",
    "fail",
    "error",
    "unsupported",
]


def _inverse(value: float) -> float:
    return 1.0 / value if value > 0 else float("inf")


def _speedup_cell(section: SpecSection) -> str:
    """Baseline ÷ best: from the interleaved ratio with its interval where measured."""
    ratio = section.best_ratio
    best = section.best_row
    warning = " NOISY: spread > 50% of the median" if best and "noisy" in best.tags else ""
    if ratio is not None:
        # The column's figure either way (baseline ÷ best): a SAME cell once showed
        # best ÷ baseline, so a best 1.25× faster in the median read "0.80×".
        inverse = (
            f"{_inverse(ratio.median):.2f}× [{_inverse(ratio.hi):.2f}–{_inverse(ratio.lo):.2f}]"
        )
        if section.same_within_noise:
            return f"SAME within noise ({inverse})"
        return inverse + warning
    if section.baseline_us and section.best_us:
        return f"{section.baseline_us / section.best_us:.2f}× (not interleaved){warning}"
    return "-"


def _summary_rows(report: Report) -> list[list[str]]:
    """One line a spec: which of ours wins, by how much, the best peer, and how many
    variants did what."""
    rows = []
    for s in report.sections:
        statuses = [row.result.status for row in s.rows]
        rows.append(
            [
                short_label(s.spec),
                str(s.count),
                s.best_id or "-",
                _us(s.best_us),
                _us(s.baseline_us),
                _speedup_cell(s),
                s.best_peer_id or "-",
                _us(s.best_peer_us),
                str(statuses.count(Status.PASS)),
                str(statuses.count(Status.FAIL)),
                str(statuses.count(Status.ERROR)),
                str(len(s.unsupported)),
            ]
        )
    return rows


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(md_safe(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md_safe(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    out = ["# matprobe report", ""]
    out += [f"- {md_safe(line)}" for line in _header_lines(report)]
    for section in report.sections:
        out += ["", f"## {md_safe(section.spec.key())}", ""]
        details = _spec_lines(section, report)
        if details:
            out += [md_safe(" · ".join(details)), ""]
        if section.rows:
            out.append(_md_table(HEADERS, [_cells(r) for r in section.rows]))
        failures = _failure_lines(section)
        if failures:
            out += [""] + [f"- **{md_safe(line.strip())}**" for line in failures]
        out += [f"- {md_safe(line.strip())}" for line in _notes(section)]
        if line := _unsupported_line(section):
            out += ["", f"- {md_safe(line.strip())}"]
    out += [
        "",
        "## Summary",
        "",
        "Best = our fastest validated variant, never a peer nor the baseline.",
        "",
        _md_table(SUMMARY_HEADERS, _summary_rows(report)),
    ]
    impact = _impact_rows(report)
    out += ["", "## Impact", ""]
    if impact:
        out += [_md_table(IMPACT_HEADERS, impact), ""]
    out += [f"{md_safe(_verdict_line(report))}. {md_safe(_impact_total(report))}."]
    if report.per_token_basis:
        out += ["", md_safe(report.per_token_basis) + "."]
    if scope := scope_line(report):
        out += ["", md_safe(scope)]
    return "\n".join(out) + "\n"


def scope_line(report: Report) -> str | None:
    """What a run on this device cannot tell, where that is not obvious: a CPU run
    validates every kernel but times only what runs natively on the CPU."""
    if report.device.kind != "cpu":
        return None
    return (
        "What this CPU run tells: which variants compute the right answer (each judged "
        "against float64; Triton kernels in the interpreter) and how the libraries that "
        "run natively compare on this CPU. What it cannot tell: which kernel wins on a "
        "GPU — interpreted kernels are validated, not timed, and CPU times say nothing "
        "of a GPU's. Rank GPU kernels with matprobe run on a CUDA machine."
    )


def _result_json(row: Row) -> dict[str, Any]:
    return {
        **row.result.to_dict(),
        "tags": list(row.tags),
        "peer": row.peer,
        "gbps": row.gbps,
        "pct_read_peak": row.pct_read,
        "exceeds_read_ceiling": row.exceeds_read_ceiling,
        "tflops": row.tflops,
        "vs_baseline": row.vs_baseline,
        "vs_baseline_interleaved": row.ratio.to_dict() if row.ratio else None,
        "vs_production": row.vs_production,
    }


def _section_json(report: Report, s: SpecSection) -> dict[str, Any]:
    return {
        "spec": s.spec.to_dict(),
        "baseline": s.baseline_id,
        "best": s.best_id,
        "baseline_us": s.baseline_us,
        "best_us": s.best_us,
        "best_ratio": s.best_ratio.to_dict() if s.best_ratio else None,
        "interleaved": s.interleaved,
        "verdict": verdict(s),
        "saving_us": s.saving_us,
        "calls_per_token": report.calls_per_token(s),
        "best_peer": s.best_peer_id,
        "best_peer_us": s.best_peer_us,
        "results": [_result_json(row) for row in s.rows],
        "unsupported": [{"variant": v, "reason": r} for v, r in s.unsupported],
    }


def to_json(report: Report) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "device": report.device.to_dict(),
        "policy": {"fingerprint": report.policy.fingerprint, **report.policy.__dict__},
        "plan": report.plan_summary,
        "seconds": report.seconds,
        "interrupted": report.interrupted,
        "peaks": dict(report.peaks) if report.peaks else None,
        "tokens": report.tokens,
        "per_token_basis": report.per_token_basis,
        "notes": list(report.notes),
        "impact_ms_per_run": report.impact_ms(),
        "impact_us_per_token": report.impact_us_per_token(),
        "specs": [_section_json(report, s) for s in report.sections],
    }


CSV_FIELDS = [
    "spec_key",
    "variant_id",
    "status",
    "reason",
    "device_median_us",
    "device_p10_us",
    "device_p90_us",
    "device_n",
    "hot_median_us",
    "host_median_us",
    "kernel_median_us",
    "gbps",
    "pct_read_peak",
    "exceeds_read_ceiling",
    "tflops",
    "vs_baseline",
    "ratio_median",
    "ratio_lo",
    "ratio_hi",
    "vs_production",
    "norm_rel",
    "max_rel",
    "max_abs",
    "peer",
    "tags",
    "device_samples_us",
]


def to_csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for section in report.sections:
        for row in section.rows:
            r, c, ratio = row.result, row.result.clocks, row.ratio
            writer.writerow(
                {
                    "spec_key": r.spec_key,
                    "variant_id": r.variant_id,
                    "status": r.status.value,
                    "reason": r.reason,
                    "device_median_us": c.device.median_us if c.device else "",
                    "device_p10_us": c.device.p10_us if c.device else "",
                    "device_p90_us": c.device.p90_us if c.device else "",
                    "device_n": c.device.n if c.device else "",
                    "hot_median_us": c.hot.median_us if c.hot else "",
                    "host_median_us": c.host.median_us if c.host else "",
                    "kernel_median_us": c.kernel.median_us if c.kernel else "",
                    "gbps": row.gbps or "",
                    "pct_read_peak": row.pct_read or "",
                    "exceeds_read_ceiling": int(row.exceeds_read_ceiling),
                    "tflops": row.tflops or "",
                    "vs_baseline": row.vs_baseline or "",
                    "ratio_median": ratio.median if ratio else "",
                    "ratio_lo": ratio.lo if ratio else "",
                    "ratio_hi": ratio.hi if ratio else "",
                    "vs_production": row.vs_production or "",
                    "norm_rel": r.metrics.norm_rel if r.metrics else "",
                    "max_rel": r.metrics.max_rel if r.metrics else "",
                    "max_abs": r.metrics.max_abs if r.metrics else "",
                    "peer": int(row.peer),
                    "tags": " ".join(row.tags),
                    "device_samples_us": json.dumps(list(c.device.samples)) if c.device else "",
                }
            )
    return buffer.getvalue()
