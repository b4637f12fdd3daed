"""A spec's timing bench: what every candidate of that spec is timed against.

The device clock (:mod:`matprobe.harness.sampling`) replays three recordings — the
producer alone, the candidate after it, the baseline after it — over input sets
rotated past the L2. Only the candidate's recording belongs to one pair. The
sets, the producer's recording and the baseline's are the same for every
candidate of the spec, and recording them is most of a small spec's cost: the
Qwen2.5 attention specs rotate ~1300 sets, so each recording is ~2600 launches
to capture and a graph as large to instantiate (0.2 s each on an H100, where the
pair's timing rounds take 0.2 s). A worker keeps the bench of the specs it
measured last and times each new candidate of a spec against it.

Reusing buffers across pairs must not let a kernel see a problem twice: a
kernel that baked answers into its captured graph, or memoised them by input
pointer, would find the old problem again if the sets kept their values. So
each use of a bench draws every set afresh (:meth:`Bench.redraw`), and the
replay check refills with values no earlier pair saw (:func:`fresh_seed`).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from matprobe.harness.inputs import (
    MatmulInputs,
    copy_all,
    fresh_copy,
    make_input_sets,
    refill_sets,
    seeded_case,
)
from matprobe.harness.sampling import Contender, Recorder, producer_sources, producer_step
from matprobe.harness.timing import TimingPolicy, calls_per_sample, rotation_count
from matprobe.spec import MatmulSpec

#: The first timing set is the seeded case of TIMING_SEED (the hot and host clocks'
#: set); the others are drawn together from TIMING_SEED + 1.
TIMING_SEED = 5000
#: Seeds of every later draw into a bench's sets (each use's values, each replay
#: check's refill): one counter per process, far from the fixed seeds, so no two
#: draws of a process share values.
FRESH_SEEDS_FROM = 1 << 24
_fresh_seeds = itertools.count(FRESH_SEEDS_FROM)

#: Most input-set bytes the benches of one process keep; the newest always stays.
#: A spec's sets take ~3 × L2 (150 MB on an H100), or one set where that is larger.
BENCH_CACHE_BYTES = 1 << 30

#: Most input sets an MPS sample rotates over (eager calls, one per set): past
#: this the host's encoding, not the GPU, sets the pace of a sample.
MPS_MAX_SETS = 64


def fresh_seed() -> int:
    """A seed no earlier draw of this process used."""
    return next(_fresh_seeds)


@dataclass
class BaselineEntry:
    """A baseline recorded on a bench, with what its replay check found (None: passed)."""

    contender: Contender
    problem: str | None = None


@dataclass
class Bench:
    """The input sets a spec's candidates rotate over, the producer's sources and
    recording, and the baselines recorded on them (by variant id)."""

    spec: MatmulSpec
    sets: list[MatmulInputs]
    sources: list[Any]
    calls: int
    producer: Any
    notes: tuple[str, ...]
    baselines: dict[str, BaselineEntry] = field(default_factory=dict)
    uses: int = 0

    @property
    def first(self) -> MatmulInputs:
        return self.sets[0]

    @property
    def nbytes(self) -> int:
        return len(self.sets) * self.first.nbytes

    def redraw(self) -> None:
        """New values in every set (same storage: the recordings stay valid) and the
        producer's sources to match — before every use but the first."""
        if self.uses:
            refill_sets(self.sets, self.spec, fresh_seed())
            copy_all(self.sources, producer_sources(self.sets))
        self.uses += 1


#: by (spec key, torch device, device kind, L2 bytes, policy)
_benches: OrderedDict[tuple[str, str, str, int, TimingPolicy], Bench] = OrderedDict()


def bench_for(
    spec: MatmulSpec,
    where: str,
    l2_bytes: int,
    policy: TimingPolicy,
    recorder: Recorder,
    *,
    kind: str,
) -> Bench:
    """This process's bench for ``spec`` on ``where`` (a torch device), made on first
    use, with fresh values in its sets (:meth:`Bench.redraw`). ``kind``: the device
    kind ("cuda", "mps", "cpu"); ``l2_bytes``: its L2, which the sets must exceed."""
    key = (spec.key(), where, kind, l2_bytes, policy)
    bench = _benches.get(key)
    if bench is None:
        bench = _make_bench(spec, where, l2_bytes, policy, recorder, kind)
        _benches[key] = bench
        held = sum(kept.nbytes for kept in _benches.values())
        while len(_benches) > 1 and held > BENCH_CACHE_BYTES:
            held -= _benches.popitem(last=False)[1].nbytes
    _benches.move_to_end(key)
    bench.redraw()
    return bench


def baseline_on(
    bench: Bench,
    baseline_id: str,
    record: Callable[[], Contender],
    check: Callable[[Contender], str | None],
) -> BaselineEntry:
    """The baseline ``baseline_id`` recorded on ``bench`` — recorded (``record()``) and
    replay-checked (``check(contender)``) the first time it is asked for."""
    entry = bench.baselines.get(baseline_id)
    if entry is None:
        contender = record()
        entry = BaselineEntry(contender, check(contender))
        bench.baselines[baseline_id] = entry
    return entry


def _make_bench(
    spec: MatmulSpec, where: str, l2_bytes: int, policy: TimingPolicy, recorder: Recorder, kind: str
) -> Bench:
    first = fresh_copy(seeded_case(spec, TIMING_SEED, where).inputs, where)
    n_sets = rotation_count(first.nbytes, l2_bytes, policy)
    if kind == "mps":
        n_sets = min(n_sets, MPS_MAX_SETS)
    sets = [first, *make_input_sets(spec, TIMING_SEED + 1, n_sets - 1, where)]
    notes: tuple[str, ...] = ()
    if kind != "cpu" and n_sets * first.nbytes < policy.cold_l2_factor * l2_bytes:
        notes = (f"rotation capped at {n_sets} sets: weights may be partly L2-resident",)
    # On the GPU a sample is a graph of many calls; elsewhere one round over the sets.
    calls = calls_per_sample(n_sets, policy) if kind == "cuda" else n_sets
    sources = producer_sources(sets)
    producer = recorder.record(
        [producer_step(sources[i % n_sets], sets[i % n_sets]) for i in range(calls)], policy.warmup
    )
    return Bench(spec, sets, sources, calls, producer, notes)
