"""The witness's rounds on one recorded kernel (:mod:`~matprobe.run.witness`):
fresh problems for every round, its own clock, every output of the plugin's
kernel judged from its own copy of the inputs, and the claims held to what its
clock saw — the time a call took, and that time against the baseline's,
recorded over the same problems (in a block of their own) in a process that
never imported a plugin."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import named_tensors
from matprobe.measure.references import CallAnswers
from matprobe.measure.sampling import recorder_for
from matprobe.measure.seeds import new_run_seed
from matprobe.measure.validate import Verdicts, spec_tolerance
from matprobe.measure.variants import Variant
from matprobe.run.shared_arena import Arena
from matprobe.run.witness_child import input_slot
from matprobe.run.witness_process import (
    PAIR_TIMEOUT_S,
    UNFINISHED_S,
    WitnessError,
    WitnessProcess,
)
from matprobe.spec import MatmulSpec

#: By how much a row's claimed time a call may fall below the witnessed lower
#: bound, per device kind. On an H200 honest rows claimed 0.955–1.165× of it (48
#: rows: cuBLAS, two Triton GEMVs, a float64 kernel, on the four weight matmuls of
#: the built-in profile; BENCHMARKS.md, twentieth session). The CPU's wall clock,
#: shared with the host, is not held to an absolute bound: honest rows claimed
#: 0.33–2.5× of it on a 2-core machine, and CI runs of the suite raised false
#: alarms at thresholds of 50 % and 80 %.
CLOCK_TOLERANCE = {"cuda": 0.15}
#: By how much a row's claimed ratio to the baseline may fall below the ratio the
#: witness's clock saw: the baseline recorded over the same problems in a process
#: that never imported a plugin, its rounds turn about with the kernel's, the
#: plugin's process stopped meanwhile. On the CPU this is the only clock held, and
#: loosely: on this repo's 2-core machine an honest plugin's claimed ratio was
#: 0.37–4.1× the witnessed one over 312 rows of the README's example (its tiny
#: products take 60–130 µs of dispatch a call, whose cost moves between processes
#: by up to 2×; the worker's own clock moved 3× between runs) — so only a claim
#: more than ten times better than what the witness saw is an ERROR there.
RATIO_TOLERANCE = {"cuda": 0.15, "cpu": 0.9}
#: Rounds of the kernel's (the first included) and of the baseline's, turn about.
ROUNDS = 2
#: A card's canary (one one-element kernel, launch to synchronize, on the wall
#: clock) slower than this: another process had work on the card. Stopping a
#: plugin's processes stops their host side only; what they queued runs on, and
#: processes share a card by time slices: on an H200 a canary took 23–332 µs on a
#: quiet card and 2250–2380 µs behind a 10 ms kernel of a stopped process, which
#: stretched a baseline round of 200 GEMVs from 871 to 3197 µs (BENCHMARKS.md,
#: twenty-fourth session).
BUSY_US = 1000.0
#: Seconds the witness waits for the card to fall quiet before a baseline round.
QUIET_WAIT_S = 5.0
#: Baseline rounds tried before a busy card costs the row its verdict.
QUIET_TRIES = 3


@dataclass(frozen=True)
class Claim:
    """What a row claims of a call: its fastest time (µs: the device clock's
    median, or ratio × the baseline's median of the same rounds), its smallest
    ratio to the baseline (the ratio, or the device median ÷ that baseline
    median) and the baseline that ratio names; None where the row has no clock."""

    us: float | None
    ratio: float | None
    baseline_id: str | None


@dataclass(frozen=True)
class Seen:
    """What the rounds saw: seconds of the first round, the lower bound of a call
    (µs), the baseline's lower bound of a call on the same problems (µs), why the row
    cannot stand (None: it stands); the bounds None where no claim was held."""

    seconds: float
    lower_us: float | None
    baseline_us: float | None
    problem: str | None


@dataclass
class _Round:
    """One ``go``: the seconds it took, the ``x`` it posed, what was wrong."""

    seconds: float
    calls: int
    x: Any
    problem: str | None

    def lower_us(self, latency_s: float, copies_s: float) -> float:
        return max(self.seconds - latency_s - copies_s, 0.0) / self.calls * 1e6


def where(device: DeviceInfo) -> str:
    return f"cuda:{device.index}" if device.kind == "cuda" else "cpu"


def _sync(device: DeviceInfo) -> None:
    recorder_for(device.kind).sync()


def quiet(canary: Callable[[], float], wait_s: float) -> bool:
    """Whether two canaries in a row (µs each) took less than :data:`BUSY_US` within
    ``wait_s`` seconds."""
    deadline = time.perf_counter() + wait_s
    in_a_row = 0
    while in_a_row < 2:
        if canary() < BUSY_US:
            in_a_row += 1
        elif time.perf_counter() > deadline:
            return False
        else:
            in_a_row = 0
    return True


def short_of(
    kind: str, lowers: Sequence[float], base_lowers: Sequence[float], claim: Claim, calls: int
) -> str | None:
    """Why ``claim`` does not hold on a ``kind`` device against the lowest bounds of
    a call seen (µs: the kernel's, the baseline's) — None: it does."""
    lower = min(lowers)
    tolerance = CLOCK_TOLERANCE.get(kind)
    said = "tamper: judged apart, in a process that never imported the plugin, "
    if tolerance is not None and claim.us is not None and claim.us < lower * (1 - tolerance):
        return (
            f"{said}{calls} calls took at least {lower:.2f} µs each; the row claims "
            f"{claim.us:.2f} µs (more than {tolerance:.0%} less)"
        )
    tolerance = RATIO_TOLERANCE.get(kind)
    if tolerance is None or claim.ratio is None or not base_lowers:
        return None
    base = min(base_lowers)
    ratio = lower / base if base > 0 else math.inf
    if claim.ratio < ratio * (1 - tolerance):
        return (
            f"{said}{calls} calls took at least {lower:.2f} µs each and the "
            f"baseline's {base:.2f} µs, recorded on the same problems in a process "
            f"of its own: {ratio:.3f}× of it; the row claims {claim.ratio:.3f}× "
            f"(more than {tolerance:.0%} less)"
        )
    return None


class Canary:
    """Whether ``device`` is quiet (:func:`quiet`): on a card, a one-element kernel
    launched and waited for; the CPU always is (the processes stopped are all that
    could run beside)."""

    def __init__(self, device: DeviceInfo) -> None:
        self.device = device
        self._tensor: Any = None

    def quiet(self, wait_s: float) -> bool:
        if self.device.kind != "cuda":
            return True
        import torch

        if self._tensor is None:
            self._tensor = torch.zeros(1, device=where(self.device))
        tensor = self._tensor

        def canary() -> float:
            start = time.perf_counter()
            tensor.add_(1)
            _sync(self.device)
            return (time.perf_counter() - start) * 1e6

        return quiet(canary, wait_s)


class JudgedRounds:
    """Rounds of ``go`` on the kernels recorded over ``arena`` (see the module doc)."""

    def __init__(
        self,
        spec: MatmulSpec,
        variant: Variant,
        device: DeviceInfo,
        sets: Sequence[Any],
        arena: Arena,
    ) -> None:
        self.spec, self.device, self.sets, self.arena = spec, device, sets, arena
        self.declared = variant.family.activation_quant
        self.interpreted = device.kind == "cpu" and variant.family.interpreted_on_cpu
        self.answers = CallAnswers(sets, where(device))
        self._copies: float | None = None
        self._canary = Canary(device)

    def round(
        self, process: WitnessProcess, *, judge: bool = True, arena: Arena | None = None
    ) -> _Round:
        """One replay of ``process``'s recording on a fresh ``x``, timed from ``go``
        until no output is left unwritten; its outputs judged (``judge``), or
        only required written (the baseline's, recorded over ``arena``: a block of
        its own)."""
        import torch

        block = arena or self.arena
        x_ring, out_ring = block.tensors["x"], block.tensors["out"]
        calls = x_ring.shape[0]
        generator = torch.Generator(device=x_ring.device).manual_seed(new_run_seed())
        x = torch.rand(x_ring.shape, generator=generator, device=x_ring.device)
        x = x.mul_(2).sub_(1).to(x_ring.dtype)
        # NaN in every output: the clock stops only once none is left, so a process
        # that says "done" before its card has finished gains nothing.
        out_ring.fill_(math.nan)
        x_ring.copy_(x)
        _sync(self.device)
        start = time.perf_counter()
        process.send("go")
        process.expect("done", PAIR_TIMEOUT_S)
        deadline = time.perf_counter() + UNFINISHED_S
        while bool(torch.isnan(out_ring).any()) and time.perf_counter() < deadline:
            pass  # what stays unwritten is judged so
        seconds = time.perf_counter() - start
        outs = out_ring.clone()  # at once: nothing written later counts
        _sync(self.device)
        if judge:
            return _Round(seconds, calls, x, self._problem(outs, x))
        unwritten = bool(torch.isnan(outs).any())
        return _Round(seconds, calls, x, "outputs left unwritten" if unwritten else None)

    def hold(
        self,
        process: WitnessProcess,
        baseline: WitnessProcess | None,
        seen: _Round,
        claim: Claim,
        base_arena: Arena | None = None,
    ) -> Seen:
        """``claim`` held to the lower bound of a call the rounds give, and to the
        ratio of that bound to the baseline's (``baseline``: its process, recorded on
        ``base_arena``, the same problems in a block of its own; None: no ratio
        held): :data:`ROUNDS` rounds of each, turn
        about, new problems every round, every output of the kernel's judged; the
        fastest of each counts (a first round pays for what a process does once,
        and the host may have been busy for one)."""
        lowers = [seen.lower_us(process.latency_s, self._copies_s(seen.x))]
        base_lowers: list[float] = []
        for turn in range(ROUNDS):
            if baseline is not None:
                base_lowers.append(self._baseline_lower(process, baseline, base_arena))
            if turn + 1 < ROUNDS:
                again = self.round(process)
                if again.problem is not None:
                    return Seen(seen.seconds, None, None, again.problem)
                lowers.append(again.lower_us(process.latency_s, self._copies_s(again.x)))
        problem = short_of(self.device.kind, lowers, base_lowers, claim, seen.calls)
        base_lower = min(base_lowers) if base_lowers else None
        return Seen(seen.seconds, min(lowers), base_lower, problem)

    def _baseline_lower(
        self, process: WitnessProcess, baseline: WitnessProcess, arena: Arena | None
    ) -> float:
        """The baseline's lower bound of a call, one round, ``process`` (the plugin's)
        stopped meanwhile with the processes it started: nothing they run on the
        host's cores slows the baseline — nor on a card: the round counts only when
        the card was quiet before it and after it (what a stopped process queued
        there runs on, sharing the card by time slices)."""
        with process.stopped():
            base = self._quiet_round(baseline, arena)
        if base is None:
            raise WitnessError(
                "the card was busy with work not the baseline's while its rounds were "
                "timed (work the plugin's processes queued before they were stopped, "
                f"or another process's): a canary took over {BUSY_US:.0f} µs"
            )
        if base.problem is not None:
            raise WitnessError(f"the baseline's process: {base.problem}")
        return base.lower_us(baseline.latency_s, self._copies_s(base.x))

    def _quiet_round(self, baseline: WitnessProcess, arena: Arena | None) -> _Round | None:
        """One round of the baseline's on a card quiet before it and after it; None
        when the card stayed busy (:data:`QUIET_TRIES` rounds)."""
        for _ in range(QUIET_TRIES):
            if not self._canary.quiet(QUIET_WAIT_S):
                return None
            base = self.round(baseline, judge=False, arena=arena)
            if self._canary.quiet(0.0):
                return base
        return None

    def _problem(self, outs: Any, x: Any) -> str | None:
        import torch

        # Every tensor of every set but A, which each call's copy of its x overwrites.
        fixed = [
            (self.arena.tensors[input_slot(s, name)], t)
            for s, one in enumerate(self.sets)
            for name, t in named_tensors(one).items()
            if name != "a"
        ]
        if any(not torch.equal(shared, mine) for shared, mine in fixed):
            return "tamper: judged apart, its calls wrote into their weights, bias or C₀"
        refs, scales, rounded = self.answers.answers(x, self.declared)
        assert self.spec.k is not None
        tolerances = spec_tolerance(self.spec, interpreted=self.interpreted)
        verdicts = Verdicts(outs, refs, scales, self.spec.k, *tolerances, rounded=rounded)
        found = verdicts.describe()
        if found is None:
            return None
        return (
            f"tamper: judged apart, in a process that never imported the plugin, call "
            f"{found[0] + 1}/{outs.shape[0]} of its kernel: {found[1]}"
        )

    def _copies_s(self, x: Any) -> float:
        """Seconds this process takes for the recording's copies of ``x`` alone, timed
        as the witness times a ``go`` (a replay, then the card finished): the
        smallest of three, measured once (every round copies as much)."""
        if self._copies is not None:
            return self._copies
        recorder = recorder_for(self.device.kind)
        private = [one.a.clone() for one in self.sets]

        def copy(i: int) -> Callable[[], Any]:
            return lambda: private[i % len(self.sets)].copy_(x[i])

        recording = recorder.record([copy(i) for i in range(x.shape[0])], 1)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            recorder.replay(recording)
            recorder.sync()
            times.append(time.perf_counter() - start)
        self._copies = min(times)
        return self._copies
