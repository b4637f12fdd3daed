"""The judge apart: a plugin's passing row stands only if a process that never
imported the plugin saw its kernel solve problems it posed, in the time the row
claims.

Everything a plugin's row says comes from its own worker, where the plugin's
code ran beside the judge: a plugin written against the tamper snapshot can
replace the snapshot's check and rewrite its rows on the way out — a kernel
writing zeros reported as PASS, or an honest one reported ten times faster
(``tests/test_witness.py``). What such a process cannot forge is what another
process sees. So after the run, for every plugin row that passed, this process
(which plans, stores and reports, and never imports a plugin) is the witness:

- it draws the problem itself, with seeds from the operating system: input sets
  rotated over more than the card's L2 as the device clock rotates them, and a
  fresh ``x`` for each of ``calls`` calls, in a block of memory it shares with a
  fresh process of the plugin's (:mod:`~matprobe.run.witness_child`; CUDA IPC on
  a card, shared memory on the CPU), and writes the ``x`` only once that
  process has built and recorded the kernel — nothing before the clock starts
  can know them;
- it times, on its own clock, from the message that starts the recording's one
  replay to the message that says the card has finished, less what a message
  costs (measured before the plugin was imported) and less the copies of ``x``
  the recording also makes (this process replays the same copies itself): a
  lower bound of what a call really took, forge what the other process may;
- it copies the outputs out of the shared block at once and judges every one
  against float64 answers from its own copy of the inputs (the shared ones
  compared with its copy: written, they fail the row), within the bounds of
  validation and with the family's declared activation rounding;
- it has the run's baseline recorded over the same problems, in a block of
  their own the plugin's process never maps, in one more process, which imports
  no plugin, and times its rounds turn about with the kernel's
  (:data:`~matprobe.run.witness_rounds.ROUNDS` each, new problems every round,
  the plugin's process and those it started stopped while the baseline runs, the
  card quiet before and after): the ratio the row claims is held to the one this
  clock saw.

A row whose outputs fail, whose claimed time a call (the device clock's median,
and the ratio times the baseline) is below the witnessed lower bound by more
than :data:`~matprobe.run.witness_rounds.CLOCK_TOLERANCE` (on a card), or whose
claimed ratio is below the witnessed one by more than
:data:`~matprobe.run.witness_rounds.RATIO_TOLERANCE` (on a card, and loosely on
the CPU, whose shared wall clock moves too much for more), becomes an ERROR.
What the witness does not see: a kernel that runs honestly only when it finds
itself in the witness's process (the two differ; a kernel can look at its
caller). Such a kernel's claimed speed is still held to its honest speed; its
wrong answers elsewhere are judged in its own worker, whose verdict it would
have to forge — and then the row claims a time the witness bounds. Ray
clusters and Apple's GPU are not witnessed (the card is another host's, or has
no shared memory here): the run's note says how many plugin rows stand on their
own worker's word (:func:`not_witnessed`), and the dispatch export refuses
them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import copy_all, make_input_sets, named_tensors, shapes
from matprobe.measure.results import ErrorKind, PairResult, Status
from matprobe.measure.seeds import new_run_seed
from matprobe.measure.timing import TimingPolicy, rotation_count
from matprobe.measure.variants import Variant
from matprobe.run.runner import PairState, RunOutcome
from matprobe.run.shared_arena import Arena
from matprobe.run.store import ResultStore
from matprobe.run.witness_child import input_slot
from matprobe.run.witness_process import PAIR_TIMEOUT_S, WitnessError, WitnessProcess
from matprobe.run.witness_rounds import RATIO_TOLERANCE, Claim, JudgedRounds, where
from matprobe.spec import MatmulSpec

#: Claimed work (seconds) the witness's clock brackets at least: long against
#: what one message costs (0.1–1 ms), so the bound is tight.
BRACKET_S = 0.02
#: Calls a witness makes at least (a row with no device clock: these only), at most.
MIN_CALLS, MAX_CALLS = 8, 2000


@dataclass(frozen=True)
class Witnessed:
    """What the witness saw of one row: calls judged, the seconds its clock read,
    the lower bound it gives a call (µs; None without a claim to hold), the
    baseline's on the same problems (µs; None where no ratio was held), and why
    the row cannot stand (None: it stands)."""

    calls: int
    seconds: float
    lower_us: float | None
    problem: str | None
    baseline_us: float | None = None


def claim_of(row: PairResult) -> Claim:
    """What ``row`` claims a call takes (:class:`Claim`)."""
    device, ratio = row.clocks.device, row.clocks.vs_baseline
    figures = [device.median_us] if device is not None else []
    if ratio is None:
        return Claim(min(figures) if figures else None, None, None)
    ratios = [ratio.median]
    if device is not None and ratio.baseline_us > 0:
        ratios.append(device.median_us / ratio.baseline_us)
    figures.append(ratio.median * ratio.baseline_us)
    return Claim(min(figures), min(ratios), ratio.baseline_id)


def _calls(claim_us: float | None, sets: int) -> int:
    """Calls to witness: enough claimed work for :data:`BRACKET_S`, a multiple of
    the set count (every set serves as many calls)."""
    want = MIN_CALLS if claim_us is None else math.ceil(BRACKET_S * 1e6 / max(claim_us, 1e-3))
    want = min(max(want, MIN_CALLS), MAX_CALLS)
    return sets * math.ceil(want / sets)


class _Baseline:
    """The process the baselines are recorded in (it imports no plugin), started
    when first wanted and again after it failed; the run's baseline per op."""

    def __init__(
        self,
        factory: str,
        device: DeviceInfo,
        variants: Mapping[str, Variant | None],
        cpu_threads: int | None,
    ) -> None:
        self.factory, self.device, self.variants = factory, device, variants
        self.cpu_threads = cpu_threads
        self.process: WitnessProcess | None = None

    def variant_for(self, spec: MatmulSpec, claim: Claim) -> Variant | None:
        """The run's baseline of ``spec``'s op, where a ratio is held on this device
        kind and the row claims one; else None."""
        if claim.ratio is None or self.device.kind not in RATIO_TOLERANCE:
            return None
        return self.variants.get(spec.kind)

    def started(self) -> WitnessProcess:
        if self.process is None:
            self.process = WitnessProcess(self.factory, (), self.device, self.cpu_threads)
        return self.process

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
        self.process = None


def witness_pair(
    process: WitnessProcess,
    spec: MatmulSpec,
    variant: Variant,
    device: DeviceInfo,
    policy: TimingPolicy,
    claim: Claim,
    baseline: _Baseline | None = None,
) -> Witnessed:
    """One row witnessed (see the module doc); :class:`WitnessError` when the
    plugin's process (or the baseline's) does not cooperate."""
    import torch

    place = where(device)
    (first,) = make_input_sets(spec, new_run_seed(), 1, place)
    count = rotation_count(first.nbytes, device.l2_bytes, policy) if device.kind == "cuda" else 1
    count = min(count, MAX_CALLS)
    sets = [first, *make_input_sets(spec, new_run_seed(), count - 1, place)]
    calls = _calls(claim.us, count)
    act = first.a.dtype
    wanted = [
        (input_slot(s, name), tuple(t.shape), t.dtype)
        for s, one in enumerate(sets)
        for name, t in named_tensors(one).items()
    ]
    wanted += [("x", (calls, *first.a.shape), act), ("out", (calls, *shapes(spec)["out"]), act)]

    def holding_the_sets() -> Arena:
        """A block of ``wanted``, the input sets copied in (``x`` and ``out`` not)."""
        block = Arena(wanted, place)
        copy_all([block.tensors[name] for name, _, _ in wanted[:-2]], _private(sets))
        return block

    def recorded(block: Arena) -> tuple[Any, ...]:
        return (spec.to_dict(), device.to_dict(), block.handle(), count, calls)

    arena, base_arena = holding_the_sets(), None
    try:
        rounds = JudgedRounds(spec, variant, device, sets, arena)
        _record(process, variant, *recorded(arena))
        seen = rounds.round(process)
        if seen.problem is not None or claim.us is None:
            return Witnessed(calls, seen.seconds, None, seen.problem)
        chosen = baseline.variant_for(spec, claim) if baseline is not None else None
        if chosen is not None and chosen.id != claim.baseline_id:
            problem = (
                f"tamper: judged apart, its row names the baseline {claim.baseline_id!r}; "
                f"the run's is {chosen.id!r}"
            )
            return Witnessed(calls, seen.seconds, None, problem)
        base_process = None
        if chosen is not None and baseline is not None:
            # A block of its own, the same problems: no memory the judge writes for
            # the baseline's rounds is memory the plugin's process could watch.
            base_arena = holding_the_sets()
            base_process = baseline.started()
            _record(base_process, chosen, *recorded(base_arena))
        held = rounds.hold(process, base_process, seen, claim, base_arena)
        return Witnessed(calls, seen.seconds, held.lower_us, held.problem, held.baseline_us)
    finally:
        for block in (arena, base_arena):
            if block is not None:
                block.close()
        if device.kind == "cuda":
            torch.cuda.empty_cache()


def _record(process: WitnessProcess, variant: Variant, *recorded: Any) -> None:
    """``variant`` built and its calls recorded in ``process`` over the block."""
    spec, device, handle, count, calls = recorded
    params = [list(p) for p in variant.params]
    process.send("pair", spec, variant.family.name, params, device, handle, count, calls)
    process.expect("built", PAIR_TIMEOUT_S)


def _private(sets: Sequence[Any]) -> list[Any]:
    return [t for one in sets for t in named_tensors(one).values()]


def witness_plugin_rows(
    results: Mapping[tuple[str, str], PairResult],
    variants: Mapping[tuple[str, str], tuple[MatmulSpec, Variant]],
    *,
    factory: str,
    device: DeviceInfo,
    policy: TimingPolicy,
    baselines: Mapping[str, Variant | None] | None = None,
    cpu_threads: int | None = None,
) -> dict[tuple[str, str], Witnessed | str]:
    """Every passing row of a plugin's variant in ``results`` witnessed, in one fresh
    process per plugin (and one for the run's ``baselines``, by op: each row's
    ratio held where it has one); by the row's key, what was seen, or why nothing
    could be (a process failed: the row gets no verdict). ``variants``: each key's
    spec and variant."""
    by_plugin: dict[str, list[tuple[str, str]]] = {}
    for key, row in results.items():
        spec_variant = variants.get(key)
        if spec_variant is not None and row.status is Status.PASS:
            family = spec_variant[1].family
            if family.is_plugin:
                by_plugin.setdefault(family.origin, []).append(key)
    seen: dict[tuple[str, str], Witnessed | str] = {}
    baseline = _Baseline(factory, device, baselines or {}, cpu_threads)
    try:
        for plugin, keys in by_plugin.items():
            process: WitnessProcess | None = None
            for key in keys:
                spec, variant = variants[key]
                try:
                    if process is None:
                        process = WitnessProcess(factory, (plugin,), device, cpu_threads)
                    claim = claim_of(results[key])
                    seen[key] = witness_pair(
                        process, spec, variant, device, policy, claim, baseline
                    )
                except WitnessError as exc:
                    seen[key] = f"tamper: judged apart, no verdict: {exc}"
                    if process is not None:
                        process.close()
                    process = None  # fresh ones for the next row
                    baseline.close()
            if process is not None:
                process.close()
    finally:
        baseline.close()
    return seen


def as_rows(
    results: Mapping[tuple[str, str], PairResult], seen: Mapping[tuple[str, str], Witnessed | str]
) -> dict[tuple[str, str], PairResult]:
    """The rows that cannot stand after the witness, made ERRORs."""
    changed = {}
    for key, what in seen.items():
        problem = what if isinstance(what, str) else what.problem
        if problem is not None:
            row = results[key]
            changed[key] = dataclasses.replace(
                row, status=Status.ERROR, error_kind=ErrorKind.TAMPER, reason=problem
            )
    return changed


def plugin_pairs(outcome: RunOutcome) -> dict[tuple[str, str], tuple[MatmulSpec, Variant]]:
    """The plugin pairs ``outcome`` holds a row of this run for (run or cached), by
    (spec key, variant id): what a witness judges."""
    return {
        (pair.spec.key(), pair.variant.id): (pair.spec, pair.variant)
        for pair in outcome.plan.pairs
        if pair.state in (PairState.RUN, PairState.CACHED) and pair.variant.family.is_plugin
    }


def witness_outcome(
    outcome: RunOutcome,
    store: ResultStore,
    *,
    factory: str,
    device: DeviceInfo,
    policy: TimingPolicy,
    baselines: Mapping[str, Variant | None] | None = None,
) -> str | None:
    """The plugin rows of ``outcome`` that passed, witnessed (their ratios against
    the run's ``baselines``, by op): those that cannot stand made ERRORs (in
    ``outcome`` and ``store``); a note for the report (None: no plugin row to
    witness)."""
    variants = plugin_pairs(outcome)
    wanted = {key: row for key, row in outcome.results.items() if key in variants}
    seen = witness_plugin_rows(
        wanted, variants, factory=factory, device=device, policy=policy, baselines=baselines
    )
    if not seen:
        return None
    changed = as_rows(outcome.results, seen)
    for key, row in changed.items():
        outcome.results[key] = row
        store.put(row)
    # What the witness saw of each row, with the run: the claims beside the bounds.
    claims = {key: claim_of(wanted[key]) for key in seen}
    store.add_to_run(outcome.run_id, {"judged_apart": [
        {"spec": key[0], "variant": key[1], "claimed_us": claims[key].us,
         "claimed_ratio": claims[key].ratio,
         **({"problem": what} if isinstance(what, str) else dataclasses.asdict(what))}
        for key, what in seen.items()
    ]})  # fmt: skip
    calls = sum(what.calls for what in seen.values() if isinstance(what, Witnessed))
    return (
        f"judged apart: {len(seen)} passing plugin row(s) re-run on problems posed, timed "
        f"and judged by a process that never imported a plugin ({calls} calls); "
        f"{len(seen) - len(changed)} stand, {len(changed)} made ERROR"
    )


def not_witnessed(outcome: RunOutcome, store: ResultStore, where: str) -> str | None:
    """For a run whose plugin rows no witness could judge (``where``: a Ray cluster,
    Apple's GPU): the rows that passed on their own worker's word, marked so in
    ``outcome`` and with the run in ``store`` (the report tags them and crowns none;
    ``matprobe dispatch`` refuses to export them: ``stood_apart``); the report's
    note on them, None when none passed."""
    passed = sorted(
        key
        for key in plugin_pairs(outcome)
        if (row := outcome.results.get(key)) is not None and row.status is Status.PASS
    )
    if not passed:
        return None
    outcome.not_judged_apart.update(passed)
    store.add_to_run(outcome.run_id, {"not_judged_apart": [list(key) for key in passed]})
    return (
        f"not judged apart: {len(passed)} passing plugin row(s) stand on their own "
        f"worker's word — on {where} no process apart re-times and judges them (only "
        "this host's CPU or CUDA card has one), so a plugin could have forged its rows; "
        "their rows say so, none is crowned, and matprobe dispatch will not export them"
    )


def stood_apart(environment: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(spec key, variant id) of every plugin row a run's witness let stand, from
    what the run stored (``judged_apart``)."""
    entries = environment.get("judged_apart")
    if not isinstance(entries, list):
        return set()
    return {
        (str(e["spec"]), str(e["variant"]))
        for e in entries
        if isinstance(e, dict) and "spec" in e and "variant" in e and not e.get("problem")
    }
