"""The baseline timed beside a plugin's kernel, held to the baseline timed alone.

A plugin's candidates are timed round by round against the baseline in the
plugin's own worker, so the ratio's denominator is measured in a process the
plugin's code ran in. The tamper snapshot catches a plugin that rebinds what the
baseline runs or changes a setting; it cannot see one that changes matprobe's
state — tried on c7320ff: a builder that put a slower kernel into the
worker's cache of built baselines (``pair._baselines``) had an exact copy of
the baseline ranked 0.55× of it. Whatever slows the baseline in that process,
the same run also times the baseline in a process that never imported a plugin
(its own row), and there, honest candidates leave it alone: on an H100 the
baseline beside 441 shipped candidates of the default job ran within +1.0 % of
its own row of the same run (BENCHMARKS.md, seventeenth session).

So on a CUDA card: every spec with a plugin candidate to run has its baseline's
own row measured in the same run (:func:`with_reference_rows`, even where the
store holds one: a row of another run may come from another card, which differs
by a few per cent), and a plugin's row whose baseline ran more than
:data:`SLOWER_LIMIT` slower beside it than the slowest it ran in this run's
processes that never imported a plugin — its own row, and beside each shipped
candidate of the spec — has its ratio taken against that clean figure instead,
with a note (:func:`hold_to_reference`): what slowed the baseline wins nothing.

Why the slowest, and why 8 %: the same cuBLAS kernel settles into one of two
speeds per process on some shapes (gate_up, 1×9728×896: 7.2 or 8.2 µs on an
H100). On an H100 honest plugins' baselines ran −0.6…+0.8 % from their own
row, shipped candidates' 0.924–1.010×; on an H200 honest plugins' ran up to
22 % slower (down, 1×896×4864: 8.4 against 6.8 µs, the twentieth session) —
an ERROR there, until the ratio was rescaled instead. Every clean figure of
the run widens the reference to the modes it saw; 8 % covers the rest. The
cheat this check was built for (20 µs more a call) slowed the baseline by
10.6–244 %; a plugin that slows it by less than 8 % wins by as much. Whether
the candidate's own time is what its row claims is the witness's question
(:mod:`~matprobe.run.witness`). The CPU's wall clock, shared with whatever else
runs on the host, is too loose for this check, which is not made there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import PairResult, Status
from matprobe.measure.variants import Variant
from matprobe.run.runner import PairState, Plan, PlannedPair, RunOutcome
from matprobe.run.store import ResultKey, ResultStore

#: How much slower the baseline may run beside a plugin's candidate than the slowest
#: it ran in the run's clean processes (see the module's docstring for the data).
SLOWER_LIMIT = 0.08

#: Why a baseline pair the store holds runs again.
REFERENCE = "the reference for a plugin's ratios"


def with_reference_rows(
    plan: Plan, baselines: Mapping[str, Variant | None], device: DeviceInfo
) -> Plan:
    """``plan`` with the baseline's own pair to run on every spec that has a plugin
    candidate to run (added when the plan lacks it) — on a CUDA card; elsewhere
    ``plan`` itself."""
    if device.kind != "cuda":
        return plan
    wanted = {
        p.spec.key(): p.spec
        for p in plan.of(PairState.RUN)
        if p.variant.family.is_plugin and baselines.get(p.spec.kind) is not None
    }
    pairs: list[PlannedPair] = []
    covered: set[str] = set()
    for pair in plan.pairs:
        base = baselines.get(pair.spec.kind)
        if base is not None and pair.variant.id == base.id and pair.spec.key() in wanted:
            covered.add(pair.spec.key())
            if pair.state is PairState.CACHED:
                pair = dataclasses.replace(pair, state=PairState.RUN, reason=REFERENCE, cached=None)
        pairs.append(pair)
    for key, spec in wanted.items():
        base = baselines[spec.kind]
        if key not in covered and base is not None:
            result_key = ResultKey(
                key, base.id, base.fingerprint, device.fingerprint, _policy_of(plan, key)
            )
            pairs.append(PlannedPair(spec, base, PairState.RUN, REFERENCE, key=result_key))
    return Plan(pairs)


def _policy_of(plan: Plan, spec_key: str) -> str:
    """The policy fingerprint the plan's pairs of ``spec_key`` are keyed under."""
    return next(p.key.policy for p in plan.pairs if p.key is not None and p.spec.key() == spec_key)


def hold_to_reference(
    outcome: RunOutcome,
    baselines: Mapping[str, Variant | None],
    store: ResultStore,
    device: DeviceInfo,
) -> list[str]:
    """Every plugin row of ``outcome`` whose baseline ran more than
    :data:`SLOWER_LIMIT` slower beside it than the slowest it ran in this run's
    clean processes (:func:`_clean_reference`) given a ratio against that clean
    figure instead (in ``outcome`` and in ``store``, with a note); their variant
    ids. On a CUDA card only: on the CPU, where a user who names the baseline gets
    its own row too, an honest plugin's baseline ran 9–42 % slower beside it than
    alone (the wall clock of a shared host)."""
    if device.kind != "cuda":
        return []
    held = []
    for pair in outcome.plan.of(PairState.RUN):
        base = baselines.get(pair.spec.kind)
        found = outcome.results.get((pair.spec.key(), pair.variant.id))
        if not pair.variant.family.is_plugin or found is None or base is None:
            continue
        reference = _clean_reference(outcome, pair.spec.key(), base)
        if reference is not None and (row := _held(found, *reference)):
            outcome.results[(pair.spec.key(), pair.variant.id)] = row
            store.put(row)
            held.append(pair.variant.id)
    return held


def _clean_reference(outcome: RunOutcome, spec_key: str, base: Variant) -> tuple[float, int] | None:
    """The slowest median the baseline of ``spec_key`` ran at in this run in
    processes that never imported a plugin — its own row, and beside each shipped
    candidate of the spec that passed — and how many figures that was; None
    without its own row."""
    own = outcome.results.get((spec_key, base.id))
    if own is None or own.clocks.device is None:
        return None
    figures = [own.clocks.device.median_us]
    for pair in outcome.plan.of(PairState.RUN):
        if pair.spec.key() != spec_key or pair.variant.family.is_plugin:
            continue
        shipped = outcome.results.get((spec_key, pair.variant.id))
        ratio = shipped.clocks.vs_baseline if shipped is not None else None
        if shipped is not None and shipped.status is Status.PASS and ratio is not None:
            figures.append(ratio.baseline_us)
    return max(figures), len(figures)


def _held(found: PairResult, alone_us: float, figures: int) -> PairResult | None:
    """``found`` with its ratio taken against ``alone_us`` (the slowest of ``figures``
    clean figures of the baseline), when its baseline ran more than
    :data:`SLOWER_LIMIT` slower beside it; else None. The interleaved ratio is
    scaled by how much slower: the candidate's own time against the baseline's
    clean one, never in the plugin's favour."""
    ratio = found.clocks.vs_baseline
    if found.status is not Status.PASS or ratio is None:
        return None
    slower = ratio.baseline_us / alone_us - 1.0
    if slower <= SLOWER_LIMIT:
        return None
    where = "its own row"
    if figures > 1:
        where += f" and beside {figures - 1} shipped candidates"
    note = (
        f"ratio against the baseline's clean figure: it ran {slower:.1%} slower beside "
        f"this kernel ({ratio.baseline_us:.2f} µs) than the slowest it ran in this run's "
        f"processes that never imported the plugin ({alone_us:.2f} µs: {where}; honest "
        f"kernels: mostly within {SLOWER_LIMIT:.0%}); the interleaved ratio "
        f"{ratio.median:.3f} scaled by {1 + slower:.3f}"
    )
    scale = 1.0 + slower
    clean = dataclasses.replace(
        ratio, median=ratio.median * scale, lo=ratio.lo * scale, hi=ratio.hi * scale,
        baseline_us=alone_us,
    )  # fmt: skip
    clocks = dataclasses.replace(found.clocks, vs_baseline=clean, notes=(*found.clocks.notes, note))
    return dataclasses.replace(found, clocks=clocks)
