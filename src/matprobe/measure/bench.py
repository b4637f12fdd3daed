"""A spec's timing bench: what every candidate of that spec is timed against, and
how each timed call is judged.

The device clock (:mod:`matprobe.measure.sampling`) replays three recordings — the
producer alone, the candidate after it, the baseline after it — over input sets
rotated past the L2. Only the candidate's recording belongs to one pair. The
sets, the producer's recording and the baseline's are the same for every
candidate of the spec, and recording them is most of a small spec's cost: the
Qwen2.5 attention specs rotate ~1300 sets, so each recording is ~2600 launches
to capture and a graph as large to instantiate (0.2 s each on an H100, where the
pair's timing rounds take 0.2 s). A worker keeps the bench of the specs it
measured last and times each new candidate of a spec against it.

**One kind of call.** Every recording starts by writing fresh values — from the
device's generator, new on every replay — into ``x_log`` (one ``x`` per call)
and into every output it will write; then, call by call, the producer copies
that call's ``x`` into its input set's ``a`` and the kernel runs. So no call
repeats a problem (a kernel cannot memoise, by pointer or by a few values, nor
bake an answer into its captured graph), no output holds anything a kernel
could test to learn whether it is judged, and every call of every timed replay
is compared with the float64 answer to the problem that call was given (kept
aside after each replay, judged after the rounds: :class:`TimedJudge`): the
verdict covers the calls that were timed. The
producer-only recording writes the same fills, so they cancel in the
subtraction.

Between uses of a bench (one per candidate) every set's weights are drawn
afresh (:meth:`Bench.redraw`), and the replay check refills them once more
(:meth:`Bench.refill`), each from a seed no earlier draw of the process used.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from matprobe.measure.inputs import MatmulInputs, make_input_sets, refill_sets
from matprobe.measure.outputs import GuardedOutputs, checksums
from matprobe.measure.references import CallAnswers
from matprobe.measure.sampling import Contender, Recorder, Step
from matprobe.measure.seeds import fresh_seed
from matprobe.measure.timing import TimingPolicy, calls_per_sample, rotation_count
from matprobe.measure.validate import Verdicts, describe_first, spec_tolerance
from matprobe.spec import MatmulSpec

#: Most input-set bytes the benches of one process keep; the newest always stays.
#: A spec's sets take ~3 × L2 (150 MB on an H100), or one set where that is larger.
BENCH_CACHE_BYTES = 1 << 30

#: Most bytes of timed replays' outputs and ``x`` a :class:`TimedJudge` keeps before
#: judging them: past this it judges what it holds between two replays (a spec with
#: large outputs); below it, once after the rounds.
KEPT_BYTES = 64 << 20

#: Most timed replays a :class:`TimedJudge` keeps before judging them (the stop rule
#: rarely runs past this many rounds; one more judging pass when it does).
MAX_KEPT_REPLAYS = 512

#: Most input sets an MPS sample rotates over (eager calls, one per set): past
#: this the host's encoding, not the GPU, sets the pace of a sample.
MPS_MAX_SETS = 64


@dataclass
class BaselineEntry:
    """A baseline recorded on a bench, with what its replay check found (None: passed)."""

    contender: Contender
    problem: str | None = None


Call = Callable[[Any, Any], None]  # (inputs, out) -> None


@dataclass
class Bench:
    """The input sets a spec's calls rotate over (call ``i`` uses set ``i mod S``),
    the per-call ``x`` (``x_log``), the producer's recording, and the baselines
    recorded on them (by variant id)."""

    spec: MatmulSpec
    sets: list[MatmulInputs]
    calls: int
    x_log: Any
    notes: tuple[str, ...] = ()
    producer: Any = None
    #: the outputs the producer's recording fills (kept alive with the recording)
    producer_outputs: GuardedOutputs | None = None
    baselines: dict[str, BaselineEntry] = field(default_factory=dict)
    uses: int = 0
    #: the sets' float64 answers, once converted (``call_answers``)
    _shared: dict[str, CallAnswers] = field(default_factory=dict)
    #: checksums of what no call may write — every set's weights, bias and C₀ — as
    #: drawn (``untouched``)
    _sums: Any = None

    @property
    def first(self) -> MatmulInputs:
        return self.sets[0]

    @property
    def where(self) -> Any:
        return self.first.a.device

    @property
    def nbytes(self) -> int:
        return len(self.sets) * self.first.nbytes

    def redraw(self) -> None:
        """New weights in every set (same storage: the recordings stay valid) — before
        every use but the first."""
        if self.uses:
            self.refill()
        elif self._sums is None:
            self._sums = checksums(self._fixed())
        self.uses += 1

    def refill(self) -> None:
        """Every set drawn again in place, from a seed no earlier draw of the process
        used: a recording that baked in, or memoised, the old weights now answers
        the old problem."""
        refill_sets(self.sets, self.spec, fresh_seed())
        self._shared.clear()
        self._sums = checksums(self._fixed())

    def _fixed(self) -> list[Any]:
        """The tensors of the sets that only a draw writes (every one but ``a``)."""
        return [t for one in self.sets for t in one.tensors() if t is not one.a]

    def untouched(self) -> str | None:
        """None when every set's weights, bias and C₀ hold what was drawn, else what
        was written: a kernel writing anywhere in them — past its output by any
        distance, or into its own inputs — changes a checksum."""
        import torch

        if self._sums is None:
            return None
        answers = self._shared.get("answers")
        if answers is not None and not answers.intact():
            return (
                "wrote outside its output: into the float64 weights, bias or C₀ its "
                "outputs are judged against"
            )
        changed = checksums(self._fixed()) != self._sums
        if not bool(changed.any()):
            return None
        first = int(torch.nonzero(changed)[0])
        per_set = len(self._fixed()) // len(self.sets)
        return (
            f"wrote outside its output: into input set {first // per_set + 1} of "
            f"{len(self.sets)} (a weight, bias or C₀ no call may write), "
            f"{int(changed.sum())} tensor(s) changed"
        )

    def outputs(self, calls: int | None = None) -> GuardedOutputs:
        """Guarded outputs for the bench's calls (or the first ``calls``)."""
        return GuardedOutputs(self.spec, self.where, self.calls if calls is None else calls)

    def fresh_step(self, outputs: GuardedOutputs) -> Step:
        """What starts every recording and every eager round: new values in ``x_log``
        and in ``outputs`` (the device's generator: new on every replay)."""

        def step() -> None:
            self.x_log.uniform_(-1.0, 1.0)
            outputs.prefill()

        return step

    def producer_step(self, i: int) -> Step:
        """Call ``i``'s producer: copies its ``x`` into its set's ``a`` — an elementwise
        kernel of its own, which does not trigger dependents early."""
        target, source = self.sets[i % len(self.sets)].a, self.x_log[i]

        def step() -> None:
            target.copy_(source)

        return step

    def call_step(self, fn: Call, i: int, out: Any) -> Step:
        inputs = self.sets[i % len(self.sets)]
        return lambda: fn(inputs, out)

    def steps(self, fn: Call | None, outputs: GuardedOutputs) -> list[Step]:
        """F P₀ K₀ P₁ K₁ …: the fresh values, then each call after its producer (the
        producer alone when ``fn`` is None)."""
        steps = [self.fresh_step(outputs)]
        for i in range(len(outputs.views)):
            steps.append(self.producer_step(i))
            if fn is not None:
                steps.append(self.call_step(fn, i, outputs.views[i]))
        return steps

    def judge(
        self, outputs: GuardedOutputs, calls: int | None = None, activation_quant: str | None = None
    ) -> str | None:
        """Every call's output (the first ``calls``) against the float64 answer to the
        problem that call was given — the weights of its set and its row of
        ``x_log`` — and the guards; None when all pass. ``activation_quant``: the
        family's declaration (its rounding applied to x: ``inputs.declared_x``)."""
        count = len(outputs.views) if calls is None else calls
        verdicts = self.verdicts(outputs.block[:count], self.x_log[:count], activation_quant)
        found = describe_first([verdicts], outputs.changed_guards().any())
        if found is None:
            return None
        if found[0] == 1:
            return outputs.breach() or "a guard changed"
        return f"call {found[1] + 1}/{count}: {found[2]}"

    def verdicts(self, outs: Any, x: Any, activation_quant: str | None) -> Verdicts:
        """The verdicts on calls that wrote ``outs`` given ``x`` (``[calls, …]`` each;
        call ``i`` used set ``i mod S``), computed where they lie and left there."""
        answers, scales, rounded = self.call_answers().answers(x, activation_quant)
        assert self.spec.k is not None
        tolerances = spec_tolerance(self.spec)
        return Verdicts(outs, answers, scales, self.spec.k, *tolerances, rounded=rounded)

    def call_answers(self) -> CallAnswers:
        """The sets' float64 operands, converted on first use after each (re)draw."""
        if "answers" not in self._shared:
            self._shared["answers"] = CallAnswers(self.sets, self.where)
        return self._shared["answers"]


class TimedJudge:
    """Judges every call of every timed replay of one contender on one bench.

    After each replay, :meth:`keep` copies the replay's outputs and its calls'
    ``x`` into the next row of two slabs allocated before the rounds — two
    copies on the card, no allocation, nothing else between timed replays —
    and :meth:`problem`, after the rounds, judges every row in one pass over
    the sets' float64 weights. (Judging each replay as it came, ~15 launches
    and a float64 read of the weights between two timed replays, doubled the
    spread of a GEMV pair's device clock on an H100 and with it the rounds the
    stop rule needed: BENCHMARKS.md, "Every timed call judged".) The slabs
    hold :data:`KEPT_BYTES` (at least one replay); when they are full, what
    they hold is judged at once, between replays, and the rows are reused.
    The guards are never refilled, so one look after the rounds sees a write
    into them from any replay.

    Slots, no instance dictionary: a kernel that finds its judge (``gc``) cannot
    give it a ``keep`` or ``problem`` of its own; one that empties what the judge
    holds leaves fewer judged outputs than the rounds kept (:meth:`judged`,
    counted from the verdicts themselves, which :func:`~matprobe.measure.sampling.interleave`
    checks against its own count)."""

    __slots__ = (
        "_block",
        "_held",
        "_outs",
        "_replays",
        "_verdicts",
        "_x",
        "_xs",
        "activation_quant",
        "bench",
        "calls",
        "outputs",
    )

    def __init__(self, bench: Bench, outputs: GuardedOutputs, activation_quant: str | None) -> None:
        import torch

        self.bench, self.outputs, self.activation_quant = bench, outputs, activation_quant
        self.calls = len(outputs.views)
        # What a replay writes, as views made once: keep() runs between timed replays.
        self._block = block = outputs.block
        self._x = x = bench.x_log[: self.calls]
        per_replay = block.numel() * block.element_size() + x.numel() * x.element_size()
        rows = max(1, min(KEPT_BYTES // per_replay, MAX_KEPT_REPLAYS))
        self._outs = torch.empty((rows, *block.shape), dtype=block.dtype, device=block.device)
        self._xs = torch.empty((rows, *x.shape), dtype=x.dtype, device=x.device)
        self._held = 0  # rows of the slabs not yet judged
        self._verdicts: list[tuple[int, Verdicts]] = []  # (first replay, its verdicts)
        self._replays = 0

    def keep(self) -> None:
        """Copies the outputs of the replay just made, and the ``x`` of its calls, into
        the slabs' next row (judging the slabs first when they are full)."""
        if self._held == len(self._outs):
            self._judge_held()
        self._outs[self._held].copy_(self._block)
        self._xs[self._held].copy_(self._x)
        self._held += 1
        self._replays += 1

    def _judge_held(self) -> None:
        if not self._held:
            return
        outs = self._outs[: self._held].flatten(0, 1)
        x = self._xs[: self._held].flatten(0, 1)
        first = self._replays - self._held
        # The verdicts are computed, in stream order, before any row is written again.
        self._verdicts.append((first, self.bench.verdicts(outs, x, self.activation_quant)))
        self._held = 0

    def judged(self) -> int:
        """How many calls' outputs the verdicts cover (every kept replay's, once the
        held rows are judged), read from the verdicts, not from a counter."""
        self._judge_held()
        return sum(int(verdicts.bad.shape[0]) for _, verdicts in self._verdicts)

    def problem(self) -> str | None:
        """The first failing call of the replays kept (``timed replay R: call C/N: …``)
        or a written guard, else None; one transfer for the verdicts."""
        self._judge_held()
        guards = self.outputs.changed_guards()
        found = describe_first([v for _, v in self._verdicts], guards.any())
        if found is None:
            return None
        index, row, what = found
        if index == len(self._verdicts):
            return self.outputs.breach() or "a guard changed"
        replay = self._verdicts[index][0] + row // self.calls
        return f"timed replay {replay + 1}: call {row % self.calls + 1}/{self.calls}: {what}"


def make_bench(
    spec: MatmulSpec,
    sets: list[MatmulInputs],
    calls: int,
    notes: tuple[str, ...] = (),
    *,
    within: Bench | None = None,
) -> Bench:
    """A bench over ``sets`` for ``calls`` calls (a multiple of the set count);
    ``within``: a bench whose first sets these are (the hot and host clocks' one
    set), whose float64 weights they share — converted once, not once a clock."""
    import torch

    first = sets[0]
    assert calls % len(sets) == 0, "every set serves the same number of calls"
    x_log = torch.empty((calls, *first.a.shape), dtype=first.a.dtype, device=first.a.device)
    bench = Bench(spec, sets, calls, x_log, notes)
    if within is not None:
        assert within.sets[: len(sets)] == sets, "the sets must be the first of the outer bench"
        bench._shared["answers"] = within.call_answers().first(len(sets))
    return bench


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
        bench = _make_timing_bench(spec, where, l2_bytes, policy, recorder, kind)
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


def _make_timing_bench(
    spec: MatmulSpec, where: str, l2_bytes: int, policy: TimingPolicy, recorder: Recorder, kind: str
) -> Bench:
    (first,) = make_input_sets(spec, fresh_seed(), 1, where)
    n_sets = rotation_count(first.nbytes, l2_bytes, policy)
    if kind == "mps":
        n_sets = min(n_sets, MPS_MAX_SETS)
    sets = [first, *make_input_sets(spec, fresh_seed(), n_sets - 1, where)]
    notes: tuple[str, ...] = ()
    if kind != "cpu" and n_sets * first.nbytes < policy.cold_l2_factor * l2_bytes:
        notes = (f"rotation capped at {n_sets} sets: weights may be partly L2-resident",)
    # On the GPU a sample is a graph of many calls; elsewhere one round over the sets.
    calls = calls_per_sample(n_sets, policy) if kind == "cuda" else n_sets
    bench = make_bench(spec, sets, calls, notes)
    bench.producer_outputs = bench.outputs()
    bench.producer = recorder.record(bench.steps(None, bench.producer_outputs), policy.warmup)
    return bench
