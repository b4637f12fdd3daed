"""Plan and run: every selected variant on every spec, reusing what is cached.

The plan classifies each (spec, variant) pair before anything runs:

* ``unsupported`` — the variant's capability check gave a reason; not a
  failure, summarized apart;
* ``cached`` — the store holds a PASS/FAIL row with the same spec key, variant
  id, source fingerprint, device and timing policy (errors are not results, so
  they are tried again);
* ``run`` — everything else (all supported pairs with ``--force``), with the
  reason: the pair's latest stored row (any fingerprint or policy) had another
  kernel source (:data:`SOURCE_CHANGED`) or another harness or timing policy
  (:data:`POLICY_CHANGED`), there is none (:data:`NEW`), the cached row is an
  error (:data:`ERRORED`), or :data:`FORCED` — so a store written by an older
  harness is measured again, and the summary says why.

Pairs run family by family in worker processes; each result is stored the
moment it arrives, so Ctrl-C or a crash loses nothing already measured.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TextIO

from matprobe.measure.device import DeviceInfo
from matprobe.measure.fingerprint import changed_sources
from matprobe.measure.results import PairResult, Status
from matprobe.measure.timing import TimingPolicy
from matprobe.measure.variants import SHIPPED_FACTORY, Variant
from matprobe.run.executors import executor_for, start_workers
from matprobe.run.store import ResultKey, ResultStore
from matprobe.run.task import Task
from matprobe.run.work import WorkQueue
from matprobe.run.worker import Place, WorkerSet, run_tasks
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    from matprobe.run.pool import DeviceSlot
    from matprobe.run.ray_pool import RayCluster

DEFAULT_TIMEOUT_S = 300.0

#: Why a supported pair is to run (``PlannedPair.reason``).
NEW = "new"
SOURCE_CHANGED = "kernel source changed"
#: a source file the measuring process had loaded (a plugin's, any name) changed since
LOADED_CHANGED = "a module it ran with changed"
POLICY_CHANGED = "harness or timing policy changed"
ERRORED = "re-run: earlier result was an error"
FORCED = "--force"


class PairState(str, Enum):
    RUN = "run"
    CACHED = "cached"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class PlannedPair:
    spec: MatmulSpec
    variant: Variant
    state: PairState
    reason: str = ""
    key: ResultKey | None = None
    cached: PairResult | None = None


@dataclass
class Plan:
    pairs: list[PlannedPair]

    def of(self, state: PairState) -> list[PlannedPair]:
        return [p for p in self.pairs if p.state is state]

    def summary(self) -> str:
        """``N pairs: X to run (why), Y cached, Z unsupported``; the reasons are
        left out when every pair to run is simply new (a fresh store)."""
        counts = {state: len(self.of(state)) for state in PairState}
        why = Counter(p.reason for p in self.of(PairState.RUN))
        detail = ""
        if set(why) - {NEW}:
            ranked = sorted(why.items(), key=lambda item: (-item[1], item[0]))
            detail = " (" + ", ".join(f"{n} {reason}" for reason, n in ranked) + ")"
        return (
            f"{len(self.pairs)} pairs: {counts[PairState.RUN]} to run{detail}, "
            f"{counts[PairState.CACHED]} cached, {counts[PairState.UNSUPPORTED]} unsupported"
        )


def _why_run(key: ResultKey, errored: bool, latest: ResultKey | None) -> str:
    """Why a supported pair that is not cached runs; a changed source wins over
    a changed policy when both changed (it is the more specific news)."""
    if errored:
        return ERRORED
    if latest is None:
        return NEW
    if latest.fingerprint != key.fingerprint:
        return SOURCE_CHANGED
    if latest.policy != key.policy:
        return POLICY_CHANGED
    return NEW  # not reached: that row would have been the cache hit


def make_plan(
    specs: Sequence[MatmulSpec],
    variants: Sequence[Variant],
    device: DeviceInfo,
    policy: TimingPolicy,
    store: ResultStore,
    force: bool = False,
) -> Plan:
    pairs: list[PlannedPair] = []
    keys: list[ResultKey] = []
    supported: list[tuple[MatmulSpec, Variant, ResultKey]] = []
    device_fp, policy_fp = device.fingerprint, policy.fingerprint
    for spec in specs:
        for variant in variants:
            reason = variant.unsupported_reason(spec, device)
            if reason is not None:
                pairs.append(PlannedPair(spec, variant, PairState.UNSUPPORTED, reason))
                continue
            key = ResultKey(spec.key(), variant.id, variant.fingerprint, device_fp, policy_fp)
            keys.append(key)
            supported.append((spec, variant, key))
    cached = {} if force else store.get_many(keys)
    misses = [key for key in keys if key not in cached]
    latest = (
        {}
        if force
        else store.latest_keys((key.spec_key, key.variant_id, key.device) for key in misses)
    )
    changed: dict[tuple[tuple[str, str], ...], bool] = {}  # sources → changed (once each)
    for spec, variant, key in supported:
        hit = cached.get(key)
        stale = False
        if hit is not None and hit.status in (Status.PASS, Status.FAIL):
            recorded = tuple(sorted(hit.sources.items()))
            if recorded not in changed:
                changed[recorded] = bool(changed_sources(dict(recorded)))
            stale = changed[recorded]
            if not stale:
                pairs.append(PlannedPair(spec, variant, PairState.CACHED, key=key, cached=hit))
                continue
        why = (
            FORCED
            if force
            else LOADED_CHANGED
            if stale
            else _why_run(
                key, hit is not None, latest.get((key.spec_key, key.variant_id, key.device))
            )
        )
        pairs.append(PlannedPair(spec, variant, PairState.RUN, why, key=key))
    order = {(s.key(), v.id): i for i, (s, v) in enumerate((s, v) for s in specs for v in variants)}
    pairs.sort(key=lambda p: order[(p.spec.key(), p.variant.id)])
    return Plan(pairs)


class Progress:
    """The run loop's progress where no bar can be drawn (a log, CI, a dumb
    terminal, no tqdm): a plain line at each tenth of the work. The one live
    display is :mod:`matprobe.report.progress`'s bar, which overrides these."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self._last_decile = -1

    def _eta(self) -> str:
        if not self.done:
            return "?"
        left = (time.monotonic() - self.started) / self.done * (self.total - self.done)
        return f"{int(left // 60)}m{int(left % 60):02d}s"

    def show(self, spec: MatmulSpec, variant: Variant) -> None:
        """The pair being measured: only a live display has room for it."""

    def advance(self) -> None:
        self.done += 1
        decile = self.done * 10 // max(self.total, 1)
        if decile != self._last_decile:
            self._last_decile = decile
            self.stream.write(f"matprobe: {self.done}/{self.total} pairs done, ETA {self._eta()}\n")
            self.stream.flush()

    def close(self) -> None:
        """Nothing to clear: plain lines stay."""


@dataclass
class RunOutcome:
    run_id: int
    plan: Plan
    #: every available result of the plan's supported pairs: fresh and cached
    results: dict[tuple[str, str], PairResult] = field(default_factory=dict)
    fresh: int = 0
    #: pairs another run on the same store measured while this one waited for them
    shared: int = 0
    interrupted: bool = False
    seconds: float = 0.0
    #: rows measured on another card type than the plan's (a mixed Ray cluster), by
    #: device fingerprint: stored under their device, kept out of this run's results
    elsewhere: Counter[str] = field(default_factory=Counter)
    #: each card's bandwidth ceilings, measured by its worker as it started (a run
    #: on this host's CUDA cards), by label ("cuda:1")
    card_peaks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (spec key, variant id) of the plugin rows that passed where no witness could
    #: judge them (a Ray cluster, Apple's GPU): reported, never crowned
    not_judged_apart: set[tuple[str, str]] = field(default_factory=set)


#: Pairs of one family claimed (and handed to a card's worker) at a time when
#: several cards share the run. Each card keeps one worker process, so an item
#: costs no process start: small items keep the cards busy to the end (with a
#: card's share of each family as one item, four H100s finished 18–50 pairs each,
#: 0.339× one card's time; BENCHMARKS.md).
CLAIM_CHUNK = 4
#: The same on one card: None, a family's pairs on one spec at a time (two runs on
#: one store then share spec by spec).
SOLO_CLAIM_CHUNK: int | None = None


def _chunks(
    pairs: Sequence[tuple[int, PlannedPair]], size: int | None, cards: int = 1
) -> list[list[tuple[int, PlannedPair]]]:
    """Work items, each of one family's pairs (a worker's batch), at most ``size``.

    One card: in the plan's order, spec by spec — every family on a spec in turn,
    so the worker builds the spec's timing bench once (:mod:`~.bench`), where
    family by family it built each spec's again for every family. Several
    ``cards``: each family's pairs in chunks of ``size``, the most work first, so
    the cards finish together (:class:`~.work.WorkQueue` keeps each card on its spec)."""
    if cards == 1:
        runs = itertools.groupby(pairs, key=lambda ip: (ip[1].variant.family.name, ip[1].spec))
        return [chunk for _, run in runs for chunk in _cut(list(run), size)]
    by_family: dict[str, list[tuple[int, PlannedPair]]] = defaultdict(list)
    for index, pair in pairs:
        by_family[pair.variant.family.name].append((index, pair))
    chunks = [chunk for group in by_family.values() for chunk in _cut(group, size)]
    return sorted(chunks, key=_chunk_work, reverse=True)


def _cut(
    group: list[tuple[int, PlannedPair]], size: int | None
) -> list[list[tuple[int, PlannedPair]]]:
    step = size or len(group)
    return [group[start : start + step] for start in range(0, len(group), step)]


def _chunk_work(chunk: Sequence[tuple[int, PlannedPair]]) -> int:
    """Multiply-adds of a chunk's pairs: the longest first, so no card is left with
    an LM head pair when the others are done."""
    return sum(pair.spec.flops() for _, pair in chunk)


OnStart = Callable[[Task], None]
OnResult = Callable[[Task, PairResult], None]


def execute(
    plan: Plan,
    store: ResultStore,
    device: DeviceInfo,
    policy: TimingPolicy,
    *,
    run_id: int,
    factory: str = SHIPPED_FACTORY,
    plugins: Sequence[str] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    runner: Callable[..., None] = run_tasks,
    baselines: Mapping[str, Variant | None] | None = None,
    slots: Sequence[DeviceSlot] | None = None,
    ray: RayCluster | None = None,
    workers: Sequence[WorkerSet] | None = None,
) -> RunOutcome:
    """Run the plan's ``run`` pairs; returns with what finished even on Ctrl-C.

    ``baselines`` (op kind → the baseline variant) are timed interleaved with every
    candidate of a spec of that op, in the candidate's worker, where they support
    the spec. The workers rebuild the registry from ``factory`` and ``plugins``
    (the user's family modules), which must give the plan's families.

    ``slots`` (several: every GPU of a host) measure work items in parallel, one
    worker process per slot, each result noted with the card that measured it;
    the slots must share ``device``'s fingerprint (the plan's keys hold it).
    ``ray`` measures them on a Ray cluster instead (:mod:`~matprobe.run.ray_pool`).
    ``workers`` (from :func:`~matprobe.run.executors.start_workers`, started while
    the caller planned) are the processes to measure in, bound here to ``run_id``;
    execute closes them."""
    outcome = RunOutcome(run_id=run_id, plan=plan)
    started = time.monotonic()
    for pair in plan.of(PairState.CACHED):
        assert pair.cached is not None
        outcome.results[(pair.spec.key(), pair.variant.id)] = pair.cached
    record = _Recording(outcome, store, device, progress)
    cards = ray.capacity if ray is not None else len(slots) if slots else 1
    work = _work_queue(plan, store, run_id, _tasks_of(plan, device, baselines), record, cards)
    options: dict[str, Any] = {
        "factory": factory,
        "plugins": tuple(plugins),
        "policy": policy,
        "run_id": run_id,
        "timeout_s": timeout_s,
    }
    if workers is None and runner is run_tasks and ray is None:
        # No caller started them early: started here, the one way workers are made.
        devices = [slot.device for slot in slots] if slots else [device]
        places = [Place(d.kind, d.index) for d in devices]
        workers = start_workers(
            places, factory=factory, plugins=plugins, policy=policy, timeout_s=timeout_s
        )
        for worker, where in zip(workers, devices, strict=True):
            worker.bind_run(None, where)
    for worker in workers or ():
        worker.bind_run(run_id)
    executor = executor_for(device, slots, ray, runner, options, workers)
    try:
        executor(work, record.on_start, record.on_result, outcome.card_peaks)
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        store.release(run_id)
        if progress is not None:
            progress.close()
        outcome.seconds = time.monotonic() - started
    return outcome


def _tasks_of(
    plan: Plan, device: DeviceInfo, baselines: Mapping[str, Variant | None] | None
) -> Callable[[Sequence[int]], list[list[Task]]]:
    """The tasks of the plan's pairs at some indices, one list per family: each
    candidate with its op's baseline where the baseline supports the spec."""

    def tasks_of(indices: Sequence[int]) -> list[list[Task]]:
        by_family: dict[str, list[Task]] = defaultdict(list)
        for index in indices:
            pair = plan.pairs[index]
            base = (baselines or {}).get(pair.spec.kind)
            if base is not None and base.unsupported_reason(pair.spec, device) is not None:
                base = None
            by_family[pair.variant.family.name].append(Task(index, pair.spec, pair.variant, base))
        return list(by_family.values())

    return tasks_of


@dataclass
class _Recording:
    """Where a run's news goes: a result measured here is stored the moment it
    arrives and kept in the outcome (unless measured on another card type); one
    another run measured is kept too; the progress is told of both."""

    outcome: RunOutcome
    store: ResultStore
    device: DeviceInfo
    progress: Progress | None

    def on_start(self, task: Task) -> None:
        if self.progress is not None:
            self.progress.show(task.spec, task.variant)

    def on_result(self, task: Task, result: PairResult) -> None:
        self.store.put(result)
        if result.device == self.device.fingerprint:
            self.outcome.results[(task.spec.key(), task.variant.id)] = result
        else:  # never ranked with the plan's card type
            self.outcome.elsewhere[result.device] += 1
        self.outcome.fresh += 1
        if self.progress is not None:
            self.progress.advance()

    def on_shared(self, index: int, result: PairResult) -> None:
        pair = self.outcome.plan.pairs[index]
        self.outcome.results[(pair.spec.key(), pair.variant.id)] = result
        self.outcome.shared += 1
        if self.progress is not None:
            self.progress.advance()


def _work_queue(
    plan: Plan,
    store: ResultStore,
    run_id: int,
    tasks_of: Callable[[Sequence[int]], list[list[Task]]],
    record: _Recording,
    cards: int,
) -> WorkQueue:
    """The plan's pairs to run as work items for ``cards`` cards.

    Concurrent runs on one store share the work: pairs are claimed a chunk at a
    time, just before they run; a chunk another live run holds is waited for at
    the end and taken from the store (or taken over if that run is gone)."""
    to_run = [(i, p) for i, p in enumerate(plan.pairs) if p.state is PairState.RUN]
    earlier = store.get_many([p.key for _, p in to_run if p.key is not None])
    size = CLAIM_CHUNK if cards > 1 else SOLO_CLAIM_CHUNK
    return WorkQueue(
        [[(i, p.key, p.spec.key()) for i, p in chunk] for chunk in _chunks(to_run, size, cards)],
        store,
        run_id,
        tasks_of,
        record.on_shared,
        earlier,
    )
