"""Measure one variant on one spec, in the current process: build, validate, time.

Order matters: a variant is timed only after it validated (every output inside
guard zones); on a card that can launch early every variant is checked in a
dependent chain; every call of every timed replay — device, hot and host clocks
alike — is judged against the float64 answer to the problem it was given
(:mod:`matprobe.measure.bench`), and the timed recording once more on refilled
weights (:mod:`matprobe.measure.checks`). Every call a kernel gets looks the
same: fresh ``x``, an output prefilled with fresh finite values. Work enqueued
outside the captured stream, a memoised answer, real work on some calls only,
work only where the output looks judged: all fail.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

from matprobe.measure.bench import Bench, TimedJudge, baseline_on, bench_for, make_bench
from matprobe.measure.checks import check_chain, check_replay, runs_chain
from matprobe.measure.device import DeviceInfo
from matprobe.measure.fingerprint import loaded_sources
from matprobe.measure.hooks import HookedError
from matprobe.measure.inputs import fresh_copy, fresh_x, x64
from matprobe.measure.outputs import GuardedOutputs
from matprobe.measure.references import declared_x, seeded_case
from matprobe.measure.results import Clocks, ErrorKind, PairResult, Status
from matprobe.measure.sampling import Contender, Recorder, interleave, ratio_of, recorder_for
from matprobe.measure.seeds import derived, fresh_seed, use_run_seed
from matprobe.measure.timing import (
    TimingPolicy,
    calls_per_sample,
    gpu_clock_state,
    time_host,
    time_kernels_profiler,
)
from matprobe.measure.validate import Validation, validate
from matprobe.measure.variants import KernelFn, Variant
from matprobe.spec import MatmulSpec

#: Kernel-clock disagreement with the device clock worth a note.
KERNEL_CLOCK_TOLERANCE = 0.10


class PoisonedContextError(Exception):
    """An error after which the CUDA context cannot be trusted: the worker must exit."""


def classify(exc: BaseException) -> tuple[ErrorKind, bool]:
    """(error kind, whether the process's CUDA context is poisoned)."""
    if isinstance(exc, HookedError):
        return ErrorKind.TAMPER, False
    name = type(exc).__name__.lower()
    text = str(exc).lower()
    if "outofmemory" in name or "out of memory" in text:
        return ErrorKind.OOM, False
    if "outofresources" in name or "out of resource" in text or "too many resources" in text:
        return ErrorKind.LAUNCH, False
    if "compil" in name or "compil" in text.split("\n")[0]:
        return ErrorKind.COMPILE, False
    poisoned = any(
        marker in text
        for marker in (
            "illegal memory access",
            "illegal address",
            "misaligned address",
            "unspecified launch failure",
            "device-side assert",
            "cuda error",
        )
    )
    if poisoned:
        return ErrorKind.CRASH, True
    if "launch" in text:
        return ErrorKind.LAUNCH, False
    return ErrorKind.EXCEPTION, False


def _now() -> str:
    # Milliseconds: the rows of one card, in order, say how long each pair took.
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class PairContext:
    device: DeviceInfo
    policy: TimingPolicy
    run_id: int | None = None


def _result(spec: MatmulSpec, variant: Variant, ctx: PairContext, **fields: Any) -> PairResult:
    return PairResult(
        spec_key=spec.key(),
        variant_id=variant.id,
        family=variant.family.name,
        params=variant.param_dict,
        fingerprint=variant.fingerprint,
        device=ctx.device.fingerprint,
        policy=ctx.policy.fingerprint,
        baseline=variant.family.baseline,
        run_id=ctx.run_id,
        measured_at=_now(),
        activation_quant=variant.family.activation_quant,
        sources=loaded_sources(),
        **fields,
    )


def error_result(
    spec: MatmulSpec, variant: Variant, ctx: PairContext, kind: ErrorKind, message: str
) -> PairResult:
    first_line = (message.strip().splitlines() or [""])[0][:300]
    return _result(
        spec,
        variant,
        ctx,
        status=Status.ERROR,
        error_kind=kind,
        reason=f"{kind.value}: {first_line}",
    )


def _sync(device: DeviceInfo) -> None:
    recorder_for(device.kind).sync()


def _torch_device(device: DeviceInfo) -> str:
    if device.kind == "cuda":
        return f"cuda:{device.index}"
    return "mps" if device.kind == "mps" else "cpu"


#: What an MPS figure is, said on every MPS row.
MPS_NOTE = (
    "MPS: device clock is MPS-event time of eager calls (host encoding included, no "
    "graphs), inputs rotated over > 3× the assumed cache; float64 references on the CPU"
)


class GuardBreachError(Exception):
    """A check other than the numeric comparison failed (a guard zone was written)."""


def validate_pair(
    spec: MatmulSpec,
    fn: KernelFn,
    device: DeviceInfo,
    trials: int,
    *,
    interpreted: bool = False,
    activation_quant: str | None = None,
) -> Validation:
    """The float64 validation of a built kernel: ``trials`` seeded input sets (seeds
    derived from the run's: :mod:`~matprobe.measure.seeds`), each output prefilled
    with fresh values inside guard zones. A written guard raises
    :class:`GuardBreachError`. ``activation_quant``: what the kernel's family
    declares it does to x (``VariantFamily.activation_quant``)."""
    where = _torch_device(device)

    # Weights, bias and C₀ drawn once per run and spec (the LM head's take seconds to
    # draw on a CPU); every trial an ``x`` no earlier call of the process saw.
    case = seeded_case(spec, derived("validation"), where)
    operands = case.operands

    def trial(t: int) -> tuple[Any, Any, Any, Any | None]:
        # The reference comes from the pristine inputs, never from the copy the
        # kernel was given: a kernel that rewrites its inputs is graded against
        # the problem it was asked, not the one it left behind.
        x = fresh_x(case.inputs, fresh_seed())
        a = declared_x(x64(case.inputs, x), activation_quant)
        # Q8_0: with the answer from fp16-rounded weights, the other legitimate one
        expected = operands.answer(a), operands.scale(a), operands.rounded_answer(a)
        inputs = fresh_copy(replace(case.inputs, a=x), where)
        outputs = GuardedOutputs(spec, where)
        outputs.prefill()
        fn(inputs, outputs.views[0])
        _sync(device)
        if breach := outputs.breach():
            raise GuardBreachError(f"trial {t + 1}/{trials}: {breach}")
        return outputs.views[0], *expected

    return validate(spec, trial, trials, interpreted=interpreted)


def measure_pair(
    spec: MatmulSpec, variant: Variant, ctx: PairContext, baseline: Variant | None = None
) -> PairResult:
    """Build, validate and (if valid) time one pair — interleaved with ``baseline``
    when one is given and it is another variant. Exceptions are results, except a
    poisoned CUDA context, which is raised as :class:`PoisonedContextError` after the
    caller has had the chance to record it (see :func:`measure_pair_safely`)."""
    device, policy = ctx.device, ctx.policy
    use_run_seed(policy.seed)  # before anything is built or drawn
    where = _torch_device(device)
    fn = variant.build(spec, device)

    def fail(reason: str, metrics: Any = None) -> PairResult:
        return _result(spec, variant, ctx, status=Status.FAIL, reason=reason, metrics=metrics)

    declared = variant.family.activation_quant
    try:
        interpreted = device.kind == "cpu" and variant.family.interpreted_on_cpu
        checked = validate_pair(
            spec, fn, device, policy.trials, interpreted=interpreted, activation_quant=declared
        )
    except GuardBreachError as failed:
        return fail(str(failed))
    if not checked.passed:
        return fail(checked.failure or "", checked.metrics)
    recorder = recorder_for(device.kind)
    if runs_chain(spec, device, variant.launches_early) and (
        problem := check_chain(spec, fn, recorder, where, activation_quant=declared)
    ):
        return fail(problem, checked.metrics)

    if device.kind == "cpu" and variant.family.interpreted_on_cpu:
        clocks = Clocks(notes=("Triton interpreter on the CPU: validated, not timed",))
    else:
        base = None
        if baseline is not None and baseline.id != variant.id:
            base = (baseline.id, _baseline_fn(spec, baseline, device))
        clocks, problem = _time(spec, fn, device, policy, recorder, base, declared)
        if problem:
            return fail(problem, checked.metrics)
    return _result(spec, variant, ctx, status=Status.PASS, metrics=checked.metrics, clocks=clocks)


#: Built baselines per (spec, baseline variant) in this worker: every candidate of
#: a spec is interleaved with the same one.
_baselines: dict[tuple[str, str], KernelFn] = {}


def _baseline_fn(spec: MatmulSpec, baseline: Variant, device: DeviceInfo) -> KernelFn:
    key = (spec.key(), baseline.id)
    if key not in _baselines:
        if len(_baselines) > 8:
            _baselines.clear()
        _baselines[key] = baseline.build(spec, device)
    return _baselines[key]


def measure_pair_safely(
    spec: MatmulSpec, variant: Variant, ctx: PairContext, baseline: Variant | None = None
) -> PairResult:
    """:func:`measure_pair` with every exception turned into an ERROR result.

    Raises :class:`PoisonedContextError` (carrying the result) when the error leaves
    the CUDA context unusable, so the worker records it and exits."""
    try:
        return measure_pair(spec, variant, ctx, baseline)
    except Exception as exc:
        kind, poisoned = classify(exc)
        result = error_result(spec, variant, ctx, kind, f"{type(exc).__name__}: {exc}")
        if poisoned and ctx.device.kind == "cuda":
            raise PoisonedContextError(result) from exc
        return result


@dataclass
class _Timing:
    """What :func:`_time` gathers on one pair: the device clock, the notes of every
    clock, and the timed outputs judged so far."""

    device: Any = None  # the device clock's ClockStats
    notes: list[str] = field(default_factory=list)
    judged: int = 0

    def clocks(self, **more: Any) -> Clocks:
        return Clocks(device=self.device, notes=tuple(self.notes), **more)


def _time(
    spec: MatmulSpec,
    fn: KernelFn,
    device: DeviceInfo,
    policy: TimingPolicy,
    recorder: Recorder,
    baseline: tuple[str, KernelFn] | None,
    activation_quant: str | None = None,
) -> tuple[Clocks, str | None]:
    """The device clock after a producer, interleaved with the baseline (see
    :mod:`matprobe.measure.sampling`), then the replay check on refilled weights,
    then the hot, host and (optionally) kernel clocks — every call of every timed
    replay judged. Returns the clocks and the first problem found, if any.
    ``activation_quant``: the candidate family's declaration (the baseline is
    judged without one)."""
    cuda = device.kind == "cuda"
    where = _torch_device(device)
    bench = bench_for(spec, where, device.l2_bytes, policy, recorder, kind=device.kind)
    timing = _Timing(notes=list(bench.notes))
    ratio, problem = _device_clock(timing, bench, fn, recorder, policy, baseline, activation_quant)
    state = gpu_clock_state(device.index) if cuda else {}
    if problem:
        return timing.clocks(), problem
    later = _later_clocks(timing, bench, fn, recorder, policy, cuda, activation_quant)
    if isinstance(later, str):
        return timing.clocks(), later
    hot, host, kernel = later
    if device.kind == "mps":
        timing.notes.append(MPS_NOTE)
    elif not cuda:
        timing.notes.append("CPU: device clock is wall time per call; caches not flushed")
    clocks = timing.clocks(
        hot=hot, host=host, kernel=kernel, vs_baseline=ratio, gpu_state=state, judged=timing.judged
    )
    return clocks, None


def _contender(
    on: Bench, name: str, kernel: KernelFn, declared: str | None, recorder: Recorder, warmup: int
) -> Contender:
    """``kernel`` recorded on ``on`` (each call after its producer), its timed replays
    judged against ``declared``'s reference."""
    outputs = on.outputs()
    entry = Contender(name, kernel, outputs)
    entry.recording = recorder.record(on.steps(kernel, outputs), warmup)
    entry.judge = lambda: TimedJudge(on, outputs, declared)
    return entry


def _device_clock(
    timing: _Timing,
    bench: Bench,
    fn: KernelFn,
    recorder: Recorder,
    policy: TimingPolicy,
    baseline: tuple[str, KernelFn] | None,
    activation_quant: str | None,
) -> tuple[Any, str | None]:
    """The device clock's rounds, interleaved with the baseline, then the input
    checksums and the replay check on refilled weights, into ``timing``; the ratio
    to the baseline (None without one, or when the baseline failed here) and the
    first problem found."""
    notes = timing.notes

    def replay_problem(entry: Contender, declared: str | None = None) -> str | None:
        return check_replay(
            bench, recorder, entry.recording, entry.outputs, activation_quant=declared
        )

    candidate = _contender(bench, "candidate", fn, activation_quant, recorder, policy.warmup)
    base, baseline_problem = None, None
    if baseline is not None:
        # Recorded and checked once per bench: every candidate of the spec is
        # interleaved with the same recording (the check refilled the sets, and the
        # next use draws them afresh).
        recorded = baseline_on(
            bench,
            baseline[0],
            lambda: _contender(bench, "baseline", baseline[1], None, recorder, policy.warmup),
            replay_problem,
        )
        base, baseline_problem = recorded.contender, recorded.problem
        if baseline_problem:
            notes.append(f"baseline failed its replay check here; no ratio ({baseline_problem})")
            base.judge = None  # known bad: timed for the record, not judged again
    rounds = interleave(recorder, bench.producer, candidate, base, bench.calls, policy)
    timing.device, timing.judged = rounds.candidate, rounds.judged
    if rounds.problem:
        return None, rounds.problem
    if base is not None and base.problem:
        notes.append(f"baseline failed in a timed replay here; no ratio ({base.problem})")
        baseline_problem = base.problem
    problem = bench.untouched() or replay_problem(candidate, activation_quant)
    if problem or baseline is None or baseline_problem:
        return None, problem
    return ratio_of(rounds, baseline[0]), None


def _later_clocks(
    timing: _Timing,
    bench: Bench,
    fn: KernelFn,
    recorder: Recorder,
    policy: TimingPolicy,
    cuda: bool,
    activation_quant: str | None,
) -> tuple[Any, Any, Any] | str:
    """The hot clock (one input set), the host clock and, when asked for on CUDA,
    the kernel clock — every call judged, into ``timing`` — then the input
    checksums once more: (hot, host, kernel), or the first problem found."""
    hot_bench = make_bench(
        bench.spec, [bench.first], calls_per_sample(1, policy) if cuda else 1, within=bench
    )
    hot_bench.producer_outputs = hot_bench.outputs()
    hot_bench.producer = recorder.record(hot_bench.steps(None, hot_bench.producer_outputs), 1)
    hot_entry = _contender(hot_bench, "candidate", fn, activation_quant, recorder, policy.warmup)
    # The hot clock is a second column, not a verdict: a quarter of the budget.
    hot_policy = replace(policy, budget_s=policy.budget_s / 4)
    hot = interleave(recorder, hot_bench.producer, hot_entry, None, hot_bench.calls, hot_policy)
    if hot.problem:
        return f"hot clock, {hot.problem}"
    timing.judged += hot.judged
    host, problem = _host_clock(bench.spec, fn, bench, policy, recorder, cuda, activation_quant)
    if problem:
        return f"host clock: {problem}"
    timing.judged += host.n
    kernel = None
    if policy.kernel_clock and cuda:
        try:
            kernel, problem = _kernel_clock(bench.spec, fn, bench, activation_quant)
        except Exception as exc:
            timing.notes.append(f"kernel clock unavailable: {exc}")
        else:
            if problem:
                return f"kernel clock: {problem}"
            timing.judged += bench.calls
            gap = abs(kernel.median_us - timing.device.median_us) / timing.device.median_us
            if gap > KERNEL_CLOCK_TOLERANCE:
                timing.notes.append(f"kernel clock disagrees with device clock by {gap:.0%}")
    if problem := bench.untouched():  # the later clocks ran on the same sets
        return problem
    return hot.candidate, host, kernel


def _kernel_clock(
    spec: MatmulSpec, fn: KernelFn, bench: Bench, activation_quant: str | None
) -> tuple[Any, str | None]:
    """The profiler's kernel durations of eager calls over the bench's sets, each call
    after its producer, with an ``x`` and an output of its own; every call judged.
    (The clock, the problem found or None.)"""
    clocked = make_bench(spec, bench.sets, bench.calls, within=bench)
    outputs = clocked.outputs()
    clocked.fresh_step(outputs)()

    def producers() -> None:
        for i in range(clocked.calls):
            clocked.producer_step(i)()

    def calls_after_producers() -> None:
        for i in range(clocked.calls):
            clocked.producer_step(i)()
            clocked.call_step(fn, i, outputs.views[i])()

    clock = time_kernels_profiler(producers, calls_after_producers, clocked.calls)
    return clock, clocked.judge(outputs, activation_quant=activation_quant)


def _host_clock(
    spec: MatmulSpec,
    fn: KernelFn,
    outer: Bench,
    policy: TimingPolicy,
    recorder: Recorder,
    cuda: bool,
    activation_quant: str | None,
) -> tuple[Any, str | None]:
    """One eager call + sync per sample, on the weights of ``outer``'s first set, each
    call with an ``x`` and an output of its own (written fresh first, untimed); every
    call's output judged afterwards. (The clock, the problem found or None.)"""
    first = outer.first
    bench = make_bench(spec, [first], policy.host_samples, within=outer)
    outputs = bench.outputs()
    bench.fresh_step(outputs)()
    host = time_host(
        lambda i: bench.producer_step(i)(),
        lambda i: fn(first, outputs.views[i]),
        recorder.sync,
        policy,
        budget=not cuda,
    )
    return host, bench.judge(outputs, host.n, activation_quant)
