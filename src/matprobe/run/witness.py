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
  validation and with the family's declared activation rounding.

A row whose outputs fail, or whose claimed time a call — the device clock's
median, and the ratio times the baseline — is below the witnessed lower bound by
more than :data:`CLOCK_TOLERANCE`, becomes an ERROR. What the witness does not
see: a kernel that runs honestly only when it finds itself in the witness's
process (the two differ; a kernel can look at its caller). Such a kernel's
claimed speed is still held to its honest speed; its wrong answers elsewhere
are judged in its own worker, whose verdict it would have to forge — and then
the row claims a time the witness bounds. Ray clusters and Apple's GPU are not
witnessed (the card is another host's, or has no shared memory here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import multiprocessing
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import copy_all, make_input_sets, named_tensors, shapes
from matprobe.measure.references import CallAnswers
from matprobe.measure.results import ErrorKind, PairResult, Status
from matprobe.measure.sampling import recorder_for
from matprobe.measure.seeds import new_run_seed
from matprobe.measure.timing import TimingPolicy, rotation_count
from matprobe.measure.validate import Verdicts, spec_tolerance
from matprobe.measure.variants import Variant
from matprobe.run.runner import PairState, RunOutcome
from matprobe.run.shared_arena import Arena
from matprobe.run.store import ResultStore
from matprobe.run.witness_child import _witness_main, input_slot
from matprobe.spec import MatmulSpec

#: Claimed work (seconds) the witness's clock brackets at least: long against
#: what one message costs (0.1–1 ms), so the bound is tight.
BRACKET_S = 0.02
#: Calls a witness makes at least (a row with no device clock: these only), at most.
MIN_CALLS, MAX_CALLS = 8, 2000
#: By how much a row's claimed time a call may fall below the witnessed lower
#: bound, per device kind. On an H200 honest rows claimed 0.955–1.165× of it (48
#: rows: cuBLAS, two Triton GEMVs, a float64 kernel, on the four weight matmuls of
#: the built-in profile; BENCHMARKS.md, twentieth session). The CPU's wall clock,
#: shared with the host, is not held at all: honest rows claimed 0.33–2.5× of their
#: bound on a 2-core machine, and CI runs of the suite raised false alarms at
#: thresholds of 50 % and 80 %; there only the outputs are judged.
CLOCK_TOLERANCE = {"cuda": 0.15}
#: Pings before the plugin is imported; the slowest is what a message costs.
PINGS = 8
START_TIMEOUT_S = 180.0
PAIR_TIMEOUT_S = 300.0
#: Seconds the witness waits, after "done", for outputs still unwritten.
UNFINISHED_S = 30.0


class WitnessError(Exception):
    """The plugin's process did not do what the witness asked (died, timed out, said
    something else, raised): the row gets no verdict."""


class WitnessProcess:
    """A fresh process of one plugin's, driven by the witness (see the module doc)."""

    def __init__(
        self, factory: str, plugin: str, device: DeviceInfo, cpu_threads: int | None = None
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        args = (theirs, factory, (plugin,), device.kind, device.index, cpu_threads)
        self._process = context.Process(target=_witness_main, args=args, daemon=True)
        self._process.start()
        theirs.close()
        try:
            self.expect("ready", START_TIMEOUT_S)
            self.latency_s = max(self._ping() for _ in range(PINGS))
            self.send("import")
            self.expect("imported", START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def send(self, *message: Any) -> None:
        self._conn.send(message)  # plain data, to a process that may read it as it likes

    def expect(self, word: str, timeout_s: float) -> None:
        """Wait for ``word``; :class:`WitnessError` for anything else, or nothing."""
        try:
            ready = self._conn.poll(timeout_s)
            message = json.loads(self._conn.recv_bytes()) if ready else None
        except (EOFError, OSError, ValueError) as exc:
            self._process.join(1)
            code = self._process.exitcode
            raise WitnessError(
                f"its process ended (exit code {code}) or garbled its answer ({exc!r})"
            ) from None
        if message is None:
            raise WitnessError(f"no answer within {timeout_s:.0f} s")
        if isinstance(message, list) and message[:1] == ["error"] and len(message) == 2:
            last = str(message[1]).strip().splitlines()[-1:] or ["?"]
            raise WitnessError(f"its process raised {last[0]}")
        if message != [word]:
            raise WitnessError(f"its process broke the protocol (sent {str(message)[:80]!r})")

    def _ping(self) -> float:
        start = time.perf_counter()
        self.send("ping")
        self.expect("pong", START_TIMEOUT_S)
        return time.perf_counter() - start

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()


@dataclass(frozen=True)
class Witnessed:
    """What the witness saw of one row: calls judged, the seconds its clock read,
    the lower bound it gives a call (µs; None without a claim to hold), and why the
    row cannot stand (None: it stands)."""

    calls: int
    seconds: float
    lower_us: float | None
    problem: str | None


def claimed_us(row: PairResult) -> float | None:
    """The fastest time a call ``row`` claims: its device clock's median, and its
    ratio times the baseline's median in the same rounds (None without a clock)."""
    device, ratio = row.clocks.device, row.clocks.vs_baseline
    figures = [device.median_us] if device is not None else []
    if ratio is not None:
        figures.append(ratio.median * ratio.baseline_us)
    return min(figures) if figures else None


def _where(device: DeviceInfo) -> str:
    return f"cuda:{device.index}" if device.kind == "cuda" else "cpu"


def _sync(device: DeviceInfo) -> None:
    recorder_for(device.kind).sync()


def _calls(claim_us: float | None, sets: int) -> int:
    """Calls to witness: enough claimed work for :data:`BRACKET_S`, a multiple of
    the set count (every set serves as many calls)."""
    want = MIN_CALLS if claim_us is None else math.ceil(BRACKET_S * 1e6 / max(claim_us, 1e-3))
    want = min(max(want, MIN_CALLS), MAX_CALLS)
    return sets * math.ceil(want / sets)


def witness_pair(
    process: WitnessProcess,
    spec: MatmulSpec,
    variant: Variant,
    device: DeviceInfo,
    policy: TimingPolicy,
    claim_us: float | None,
) -> Witnessed:
    """One row witnessed (see the module doc); :class:`WitnessError` when the
    plugin's process does not cooperate."""
    import torch

    where = _where(device)
    (first,) = make_input_sets(spec, new_run_seed(), 1, where)
    count = rotation_count(first.nbytes, device.l2_bytes, policy) if device.kind == "cuda" else 1
    count = min(count, MAX_CALLS)
    sets = [first, *make_input_sets(spec, new_run_seed(), count - 1, where)]
    calls = _calls(claim_us, count)
    act = first.a.dtype
    wanted = [
        (input_slot(s, name), tuple(t.shape), t.dtype)
        for s, one in enumerate(sets)
        for name, t in named_tensors(one).items()
    ]
    wanted += [("x", (calls, *first.a.shape), act), ("out", (calls, *shapes(spec)["out"]), act)]
    arena = Arena(wanted, where)
    shared: dict[str, Any] = {}
    try:
        shared = {name: arena.tensors[name] for name, _, _ in wanted[:-2]}
        copy_all(list(shared.values()), _private(sets))
        family, params = variant.family.name, [list(p) for p in variant.params]
        process.send(
            "pair", spec.to_dict(), family, params, device.to_dict(), arena.handle(), count, calls
        )
        process.expect("built", PAIR_TIMEOUT_S)
        judged = _Judged(spec, variant, device, sets, arena)
        seen = judged.round(process)
        if seen.problem is not None or claim_us is None or device.kind not in CLOCK_TOLERANCE:
            return Witnessed(calls, seen.seconds, None, seen.problem)
        return judged.hold_clock(process, seen, claim_us)
    finally:
        del shared
        arena.close()
        if device.kind == "cuda":
            torch.cuda.empty_cache()


def _private(sets: Sequence[Any]) -> list[Any]:
    return [t for one in sets for t in named_tensors(one).values()]


@dataclass
class _Round:
    """One ``go``: the seconds it took, the ``x`` it posed, what was wrong."""

    seconds: float
    calls: int
    x: Any
    problem: str | None

    def lower_us(self, latency_s: float, copies_s: float) -> float:
        return max(self.seconds - latency_s - copies_s, 0.0) / self.calls * 1e6


class _Judged:
    """The witness's rounds on one recorded kernel: fresh problems, its own clock,
    every output judged from its own copy of the inputs."""

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
        self.answers = CallAnswers(sets, _where(device))

    def round(self, process: WitnessProcess) -> _Round:
        import torch

        x_ring, out_ring = self.arena.tensors["x"], self.arena.tensors["out"]
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
        return _Round(seconds, calls, x, self._problem(outs, x))

    def hold_clock(self, process: WitnessProcess, seen: _Round, claim_us: float) -> Witnessed:
        """``claim_us`` held to the lower bound ``seen`` gives a call — after one more
        round with new problems when it falls short (the host may have been busy
        once; a kernel that is not that fast is twice)."""
        tolerance = CLOCK_TOLERANCE[self.device.kind]
        lower = seen.lower_us(process.latency_s, _copies_s(self.sets, seen.x, self.device))
        if claim_us < lower * (1 - tolerance):
            again = self.round(process)
            if again.problem is not None:
                return Witnessed(seen.calls, again.seconds, None, again.problem)
            copies = _copies_s(self.sets, again.x, self.device)
            lower = min(lower, again.lower_us(process.latency_s, copies))
        problem = None
        if claim_us < lower * (1 - tolerance):
            problem = (
                f"tamper: judged apart, in a process that never imported the plugin, "
                f"{seen.calls} calls took at least {lower:.2f} µs each; the row claims "
                f"{claim_us:.2f} µs (more than {tolerance:.0%} less)"
            )
        return Witnessed(seen.calls, seen.seconds, lower, problem)

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


def _copies_s(sets: Sequence[Any], x: Any, device: DeviceInfo) -> float:
    """Seconds this process takes for the recording's copies of ``x`` alone, timed
    as the witness times a ``go`` (a replay, then the card finished): the smallest
    of three."""
    recorder = recorder_for(device.kind)
    private = [one.a.clone() for one in sets]

    def copy(i: int) -> Callable[[], Any]:
        return lambda: private[i % len(sets)].copy_(x[i])

    recording = recorder.record([copy(i) for i in range(x.shape[0])], 1)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        recorder.replay(recording)
        recorder.sync()
        times.append(time.perf_counter() - start)
    return min(times)


def witness_plugin_rows(
    results: Mapping[tuple[str, str], PairResult],
    variants: Mapping[tuple[str, str], tuple[MatmulSpec, Variant]],
    *,
    factory: str,
    device: DeviceInfo,
    policy: TimingPolicy,
    cpu_threads: int | None = None,
) -> dict[tuple[str, str], Witnessed | str]:
    """Every passing row of a plugin's variant in ``results`` witnessed, in one fresh
    process per plugin; by the row's key, what was seen, or why nothing could be
    (the plugin's process failed: the row gets no verdict). ``variants``: each
    key's spec and variant."""
    by_plugin: dict[str, list[tuple[str, str]]] = {}
    for key, row in results.items():
        spec_variant = variants.get(key)
        if spec_variant is not None and row.status is Status.PASS:
            family = spec_variant[1].family
            if family.is_plugin:
                by_plugin.setdefault(family.origin, []).append(key)
    seen: dict[tuple[str, str], Witnessed | str] = {}
    for plugin, keys in by_plugin.items():
        process: WitnessProcess | None = None
        for key in keys:
            spec, variant = variants[key]
            try:
                if process is None:
                    process = WitnessProcess(factory, plugin, device, cpu_threads)
                seen[key] = witness_pair(
                    process, spec, variant, device, policy, claimed_us(results[key])
                )
            except WitnessError as exc:
                seen[key] = f"tamper: judged apart, no verdict: {exc}"
                if process is not None:
                    process.close()
                process = None  # a fresh one for the next row
        if process is not None:
            process.close()
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


def witness_outcome(
    outcome: RunOutcome,
    store: ResultStore,
    *,
    factory: str,
    device: DeviceInfo,
    policy: TimingPolicy,
) -> str | None:
    """The plugin rows of ``outcome`` that passed, witnessed: those that cannot stand
    made ERRORs (in ``outcome`` and ``store``); a note for the report (None: no
    plugin row to witness)."""
    variants = {
        (pair.spec.key(), pair.variant.id): (pair.spec, pair.variant)
        for pair in outcome.plan.pairs
        if pair.state in (PairState.RUN, PairState.CACHED) and pair.variant.family.is_plugin
    }
    wanted = {key: row for key, row in outcome.results.items() if key in variants}
    seen = witness_plugin_rows(wanted, variants, factory=factory, device=device, policy=policy)
    if not seen:
        return None
    changed = as_rows(outcome.results, seen)
    for key, row in changed.items():
        outcome.results[key] = row
        store.put(row)
    # What the witness saw of each row, with the run: the claims beside the bounds.
    store.add_to_run(outcome.run_id, {"judged_apart": [
        {"spec": key[0], "variant": key[1], "claimed_us": claimed_us(wanted[key]),
         **({"problem": what} if isinstance(what, str) else dataclasses.asdict(what))}
        for key, what in seen.items()
    ]})  # fmt: skip
    calls = sum(what.calls for what in seen.values() if isinstance(what, Witnessed))
    return (
        f"judged apart: {len(seen)} passing plugin row(s) re-run on problems posed, timed "
        f"and judged by a process that never imported a plugin ({calls} calls); "
        f"{len(seen) - len(changed)} stand, {len(changed)} made ERROR"
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
