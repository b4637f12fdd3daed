"""The device clock: a candidate timed after a *different* kernel that produced its
input, interleaved with the baseline on the same card and the same inputs.

Why this shape (issue: "pdl1 figures do not hold in a decode token"): replaying
the same kernel back to back lets a kernel with programmatic dependent launch
overlap its own previous call, a gain that vanishes in an engine, where the
kernel before it is an RMSNorm or an activation. So every call is preceded by a
producer — an elementwise kernel that writes the call's ``x`` (``a``) and does
not trigger dependents early — and the producer's own cost is measured alone
and subtracted::

    recording P·C : P₀ C₀ P₁ C₁ … (candidate after its producer)
    recording P·B : P₀ B₀ P₁ B₁ … (baseline after the same producer)
    recording P   : P₀ P₁ …        (the producer alone)
    candidate µs/call = (t(P·C) − t(P)) / calls, baseline likewise

The three recordings are replayed in rounds (rotating their order), so the
candidate and the baseline see the same card state, clocks and neighbours
within milliseconds of each other; the ratio of each round gives a ratio with
a distribution-free confidence interval (:func:`matprobe.stats.median_ci`).

Each timed replay follows an untimed replay of the same recording: a replay's
time depends on the recording before it, for the whole replay. On an H100
(benchmarks/round_order_probe.py, BENCHMARKS.md) cuBLAS's attention bmm took
3.67 µs a call after the producer but 4.23 after the Triton candidate, and the
producer 1.38 after itself but 1.82 after a candidate — so the per-round ratio
was bimodal (0.77 or 1.00 by the round's order) and the producer's subtracted
time too large. After itself, every recording took the same time at every
place in the round, and the ratio was one mode (1.02, not the 0.79 median of
the rotating order; o_proj's 0.68, not 0.64). Each contender is timed in its
own steady state; the warm replays double the device time of a round.

Every call writes its own output (decode outputs are tiny), so a replay can be
checked call by call (see :mod:`matprobe.measure.checks`).

A :class:`Recorder` hides the device: on CUDA a recording is a CUDA graph timed
with events; on the CPU it is the list of calls timed with the wall clock. The
sampling loop, the producer and the checks are the same code on both.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from matprobe.measure.results import ClockStats, Ratio
from matprobe.measure.timing import TimingPolicy
from matprobe.stats import median_ci

Step = Callable[[], None]
Call = Callable[[Any, Any], None]  # (inputs, out) -> None


class Recorder(Protocol):
    """Records a sequence of steps once, replays it, times a replay."""

    def record(self, steps: Sequence[Step], warmup: int) -> Any: ...

    def replay(self, recording: Any) -> None: ...

    def time_us(self, recording: Any) -> float: ...

    def sync(self) -> None: ...


class CpuRecorder:
    """The CPU: a recording is the list of steps; the wall clock times it."""

    def record(self, steps: Sequence[Step], warmup: int) -> list[Step]:
        for _ in range(min(warmup, 1)):
            for step in steps:
                step()
        return list(steps)

    def replay(self, recording: list[Step]) -> None:
        for step in recording:
            step()

    def time_us(self, recording: list[Step]) -> float:
        t0 = time.perf_counter()
        self.replay(recording)
        return (time.perf_counter() - t0) * 1e6

    def sync(self) -> None:
        return None


class MpsRecorder(CpuRecorder):
    """Apple's GPU through PyTorch's MPS backend. There are no graphs: a recording
    is the list of steps, replayed eagerly, and its time is taken between two
    MPS events (``torch.mps.Event``: GPU timestamps of the command stream) after
    draining the queue — so it includes the host's encoding of each op, as an
    eager MPS engine pays it. Without events: the wall clock around a replay
    and a synchronize."""

    def record(self, steps: Sequence[Step], warmup: int) -> list[Step]:
        # More than one warm-up pass: MPS compiles a Metal pipeline per new shape.
        for _ in range(max(warmup, 1)):
            for step in steps:
                step()
        self.sync()
        return list(steps)

    def time_us(self, recording: list[Step]) -> float:
        import torch

        self.sync()
        event = getattr(torch.mps, "Event", None)
        if event is None:
            t0 = time.perf_counter()
            self.replay(recording)
            self.sync()
            return (time.perf_counter() - t0) * 1e6
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        self.replay(recording)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1000.0

    def sync(self) -> None:
        import torch

        torch.mps.synchronize()


def recorder_for(kind: str) -> Recorder:
    """The recorder of a device kind: CUDA graphs, MPS events, or the CPU's wall clock."""
    if kind == "cuda":
        return CudaRecorder()
    if kind == "mps":
        return MpsRecorder()
    return CpuRecorder()


class CudaRecorder:
    """CUDA: warm up on a side stream (compilation, autotuning, handles), capture the
    steps into one CUDA graph on that stream, time a replay between two events.

    One warm-up pass over the steps: what must happen before a capture (a kernel's
    compilation, cuBLAS's workspace) happens on a step's first call; clocks and
    caches warm up in the timed rounds, which interleave every recording. The
    capture calls ``capture_begin``/``capture_end`` itself: ``torch.cuda.graph``
    also empties the allocator's cache first, which returns every cached block
    to the driver (and the next pair allocates it again) — 0.08 s a capture on
    an H100 after a spec's sets were freed."""

    def __init__(self) -> None:
        self._stream: Any = None

    def record(self, steps: Sequence[Step], warmup: int) -> Any:
        import torch

        if self._stream is None:
            self._stream = torch.cuda.Stream()
        stream = self._stream
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            for _ in range(min(warmup, 1)):
                for step in steps:
                    step()
            stream.synchronize()
            graph.capture_begin()
            try:
                for step in steps:
                    step()
            except BaseException:
                # End the capture so the stream is usable again; the step's error
                # is the one worth reporting, not the invalidated capture's.
                with contextlib.suppress(Exception):
                    graph.capture_end()
                raise
            graph.capture_end()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph.replay()  # the first replays upload the graph
        torch.cuda.synchronize()
        return graph

    def replay(self, recording: Any) -> None:
        recording.replay()

    def time_us(self, recording: Any) -> float:
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        recording.replay()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1000.0

    def sync(self) -> None:
        import torch

        torch.cuda.synchronize()


class ReplayJudge(Protocol):
    """Judges a contender's timed replays: :meth:`keep` after each (what it does
    runs between two timed replays, so little), :meth:`problem` after the rounds,
    and :meth:`judged`: how many calls' outputs its verdicts cover."""

    def keep(self) -> None: ...

    def problem(self) -> str | None: ...

    def judged(self) -> int: ...


@dataclass
class Contender:
    """One kernel in the rounds: its per-call outputs, its recording, and how a
    timed replay's outputs are judged (None: returns the problem, if any)."""

    name: str
    fn: Call
    outputs: Any  # GuardedOutputs
    recording: Any = None
    samples: list[float] = field(default_factory=list)
    #: makes the judge of one :func:`interleave`'s timed replays (None: not judged)
    judge: Callable[[], ReplayJudge] | None = None
    #: outputs of timed replays judged, and the first problem found in them
    judged: int = 0
    problem: str | None = None


@dataclass
class Rounds:
    """What :func:`interleave` measured."""

    candidate: ClockStats
    baseline: ClockStats | None
    ratio: tuple[float, float, float] | None  # median, lo, hi
    rounds: int
    #: the candidate's timed outputs judged, and the first problem found in them
    judged: int = 0
    problem: str | None = None


def _enough(
    samples: Sequence[float], ratios: Sequence[float], started: float, policy: TimingPolicy
) -> bool:
    n = len(samples)
    if n >= policy.max_samples:
        return True
    if n < policy.min_samples:
        return False
    if time.perf_counter() - started > policy.budget_s:
        return True
    if ClockStats.from_samples(samples).spread >= policy.target_spread * 4:
        return False
    if not ratios:
        return ClockStats.from_samples(samples).spread < policy.target_spread
    median, lo, hi = median_ci(ratios)
    return (hi - lo) / 2 < policy.target_spread * median


def interleave(
    recorder: Recorder,
    producer: Any,
    candidate: Contender,
    baseline: Contender | None,
    calls: int,
    policy: TimingPolicy,
) -> Rounds:
    """Replay the producer-only, candidate and baseline recordings in rounds (their
    order rotating each round) until the stop rule; per-call device times with the
    producer subtracted, and per-round candidate/baseline ratios. After each timed
    replay of a contender with a ``judge``, the judge keeps that replay's outputs;
    after the rounds it judges every call of every replay kept (the time spent
    keeping and judging is not counted against the policy's budget)."""
    contenders = [candidate] + ([baseline] if baseline is not None else [])
    for contender in contenders:  # a baseline recording serves many candidates' rounds
        contender.samples, contender.judged, contender.problem = [], 0, None
    judges = {c.name: c.judge() for c in contenders if c.judge is not None}
    names = ["producer", *(c.name for c in contenders)]
    recordings = {"producer": producer, **{c.name: c.recording for c in contenders}}
    ratios: list[float] = []
    started = time.perf_counter()
    index = 0
    # Replays kept, counted here in locals: what the judges hold is reachable from a
    # kernel's Python (gc); these counts are not, and the verdicts must cover them.
    kept_candidate = kept_baseline = 0
    while not _enough(candidate.samples, ratios, started, policy):
        order = names[index % len(names) :] + names[: index % len(names)]
        index += 1
        times = {}
        for name in order:
            recorder.replay(recordings[name])  # the warm replay (see the module doc)
            times[name] = recorder.time_us(recordings[name])
            if name in judges:
                judging = time.perf_counter()
                judges[name].keep()
                if name == candidate.name:
                    kept_candidate += 1
                else:
                    kept_baseline += 1
                started += time.perf_counter() - judging
        for contender in contenders:
            contender.samples.append(max(times[contender.name] - times["producer"], 0.0) / calls)
        if baseline is not None:
            base = baseline.samples[-1]
            ratios.append(candidate.samples[-1] / base if base > 0 else math.inf)
    kept = ((candidate, kept_candidate), (baseline, kept_baseline))
    for judged, replays in kept:
        if judged is not None and judged.name in judges:
            _judge_rounds(judged, judges[judged.name], replays * calls)
    base_stats = ClockStats.from_samples(baseline.samples, calls) if baseline is not None else None
    return Rounds(
        ClockStats.from_samples(candidate.samples, calls),
        base_stats,
        median_ci(ratios) if ratios else None,
        len(candidate.samples),
        candidate.judged,
        candidate.problem,
    )


def _judge_rounds(contender: Contender, judge: ReplayJudge, timed: int) -> None:
    """The verdict on a contender's ``timed`` outputs: the first problem, and how
    many its judge's verdicts cover — all of them, or the rounds fail."""
    contender.problem = judge.problem()
    contender.judged = judge.judged()
    if contender.problem is None and contender.judged != timed:
        contender.problem = (
            f"{contender.judged} of {timed} timed outputs judged (a verdict needs every one)"
        )


def ratio_of(rounds: Rounds, baseline_id: str) -> Ratio | None:
    if rounds.ratio is None or rounds.baseline is None:
        return None
    median, lo, hi = rounds.ratio
    return Ratio(
        baseline_id,
        median,
        lo,
        hi,
        rounds.rounds,
        rounds.baseline.median_us,
        samples=rounds.baseline.samples,
    )
