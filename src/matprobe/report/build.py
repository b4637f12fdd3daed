"""A report built from a run's results: per spec, every variant ranked by the
device clock, in the spirit of ``seeds/002_…`` but without its defects — a FAIL
is never ranked, unsupported pairs are listed apart (not counted as failures),
and every time comes with its spread and sample count.

:func:`build_report` groups a run's plan and outcome by spec;
:func:`assemble_report` ranks and tags each spec's results (what a stored run is
rebuilt through too). Rows are tagged where their figures need a word: the
baseline, a peer, a noisy clock, clocks that disagree, a ratio to a baseline
timed apart, a host round trip far above the device time. Calls per token come
from the profile's structure (:mod:`matprobe.profile.per_token`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import PairResult, Status
from matprobe.measure.timing import TimingPolicy, throttling
from matprobe.measure.variants import Variant
from matprobe.profile.per_token import per_token_weights
from matprobe.report.cells import short_label
from matprobe.report.model import (
    CLOCKS_DISAGREE_TAG,
    NOT_JUDGED_APART_TAG,
    Report,
    Row,
    SpecSection,
    pair_base_tag,
)
from matprobe.run.runner import PairState, Plan, RunOutcome
from matprobe.spec import MatmulSpec

#: host round trip at least this many times the device time: launch-bound
HOST_GAP_FACTOR = 3.0


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
    specs' own structure and ``tokens`` (see :mod:`matprobe.profile.per_token`).
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
        unjudged=outcome.not_judged_apart,
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
    unjudged: Collection[tuple[str, str]] = (),
) -> Report:
    """A report from each spec's results (in the order given): what
    :func:`build_report` makes of a run, and what a stored run is rebuilt into.
    ``unjudged``: (spec key, variant id) of the plugin rows no witness judged
    (tagged, never crowned nor the baseline)."""
    apart = set(unjudged)
    per_token = per_token_weights([part.spec for part in parts], tokens)
    sections = [
        replace(
            _section(
                part.spec,
                [(r, (r.spec_key, r.variant_id) in apart) for r in part.results],
                part.baseline,
                peaks,
                set(peers),
                device.kind == "cpu",
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
    results: Sequence[tuple[PairResult, bool]],
    target: str | None,
    peaks: Mapping[str, Any] | None,
    peers: Collection[str],
    one_clock: bool,
) -> SpecSection:
    """One spec's rows, ranked and tagged; best and best peer picked apart.
    ``one_clock``: the device, hot and host clocks all time the same wall-clock
    call (the CPU), so a row whose clocks disagree is not ranked — nor is a
    baseline whose clocks disagree a figure to compare with. Each result comes with
    whether it is a plugin's row no witness judged (such a row is neither)."""
    base = next(
        (
            r
            for r, unjudged in results
            if not unjudged
            and r.status is Status.PASS
            and _matches(target, r)
            and r.clocks.device
            and not (one_clock and clocks_disagree(r))
        ),
        None,
    )
    base_us = base.clocks.device.median_us if base and base.clocks.device else None
    rows = [
        _row(spec, r, base_us, peaks, target, peers, one_clock, unjudged) for r, unjudged in results
    ]
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
    unjudged: bool = False,
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
    if unjudged and result.status is Status.PASS:
        tags.append(NOT_JUDGED_APART_TAG)
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


def clock_note(before: dict[str, str], after: dict[str, str]) -> str:
    """The SM clock before and after a CUDA run and any throttling, or "" when
    nvidia-smi said nothing."""
    if not before and not after:
        return ""
    held = sorted(set(throttling(before) + throttling(after)))
    sm = "clocks.sm"
    return (
        f"SM clock {before.get(sm, '?')} before, {after.get(sm, '?')} after (max "
        f"{after.get('clocks.max.sm', '?')}); "
        + (f"WARNING: throttled ({', '.join(held)})" if held else "no throttling")
    )


def cards_note(outcome: RunOutcome, labels: Sequence[str]) -> str:
    """How many of this run's fresh rows each card measured (each row says its card)."""
    counts = dict.fromkeys(labels, 0)
    for result in outcome.results.values():
        if result.run_id != outcome.run_id:
            continue  # cached, or measured by another run on the same store
        for note in result.clocks.notes:
            label = note.removeprefix("card ")
            if note.startswith("card ") and label in counts:
                counts[label] += 1
    spread = ", ".join(f"{label} {n}" for label, n in counts.items())
    return (
        f"{len(labels)} cards in parallel, one worker each (pairs measured: {spread}); a "
        "candidate and its baseline always on the same card; each row's notes name its card"
    )
