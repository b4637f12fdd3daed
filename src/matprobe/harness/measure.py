"""Measure one variant on one spec, in the current process: build, validate, time.

Order matters: a variant is timed only after it validated, and on the GPU its
output is checked once more after a graph replay — work a kernel enqueued
outside the captured stream (a side-stream cheater) is not in the graph and
leaves the poisoned output unwritten.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from matprobe.harness.device import DeviceInfo
from matprobe.harness.inputs import (
    empty_output,
    fresh_copy,
    make_inputs,
    reference,
    reference_scale,
    seeded_case,
)
from matprobe.harness.results import Clocks, ErrorKind, PairResult, Status
from matprobe.harness.timing import (
    TimingPolicy,
    calls_per_sample,
    capture,
    rotation_count,
    time_graph,
    time_host_cpu,
    time_host_cuda,
    time_kernels_profiler,
    time_loop_cpu,
)
from matprobe.harness.validate import compare, tolerance, validate
from matprobe.harness.variants import KernelFn, Variant
from matprobe.spec import MatmulSpec

#: Trials draw inputs from seeds VALIDATION_SEED + t; timing sets from TIMING_SEED + i.
VALIDATION_SEED = 1000
TIMING_SEED = 5000
#: Kernel-clock disagreement with the device clock worth a note.
KERNEL_CLOCK_TOLERANCE = 0.10


class PoisonedContextError(Exception):
    """An error after which the CUDA context cannot be trusted: the worker must exit."""


def classify(exc: BaseException) -> tuple[ErrorKind, bool]:
    """(error kind, whether the process's CUDA context is poisoned)."""
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
        for marker in ("illegal memory access", "illegal address", "misaligned address",
                       "unspecified launch failure", "device-side assert", "cuda error")
    )
    if poisoned:
        return ErrorKind.CRASH, True
    if "launch" in text:
        return ErrorKind.LAUNCH, False
    return ErrorKind.EXCEPTION, False


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


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
        **fields,
    )


def error_result(
    spec: MatmulSpec, variant: Variant, ctx: PairContext, kind: ErrorKind, message: str
) -> PairResult:
    first_line = (message.strip().splitlines() or [""])[0][:300]
    return _result(spec, variant, ctx, status=Status.ERROR, error_kind=kind,
                   reason=f"{kind.value}: {first_line}")


def _sync(device: DeviceInfo) -> None:
    if device.kind == "cuda":
        import torch

        torch.cuda.synchronize()


def _torch_device(device: DeviceInfo) -> str:
    return f"cuda:{device.index}" if device.kind == "cuda" else "cpu"


def measure_pair(spec: MatmulSpec, variant: Variant, ctx: PairContext) -> PairResult:
    """Build, validate and (if valid) time one pair. Exceptions are results, except
    a poisoned CUDA context, which is raised as :class:`PoisonedContextError` after the
    caller has had the chance to record it (see :func:`measure_pair_safely`)."""
    device, policy = ctx.device, ctx.policy
    where = _torch_device(device)
    fn = variant.build(spec, device)

    def trial(t: int) -> tuple[Any, Any, Any]:
        # The reference comes from the pristine inputs, never from the copy the
        # kernel was given: a kernel that rewrites its inputs is graded against
        # the problem it was asked, not the one it left behind.
        case = seeded_case(spec, VALIDATION_SEED + t)
        inputs = fresh_copy(case.inputs, where)
        out = empty_output(spec, where)
        out.fill_(float("nan"))
        fn(inputs, out)
        _sync(device)
        return out, case.reference, case.scale

    checked = validate(spec, trial, policy.trials)
    if not checked.passed:
        return _result(spec, variant, ctx, status=Status.FAIL, reason=checked.failure or "",
                       metrics=checked.metrics)

    if device.kind == "cpu" and variant.family.interpreted_on_cpu:
        clocks = Clocks(notes=("Triton interpreter on the CPU: validated, not timed",))
    elif device.kind == "cpu":
        clocks = _time_cpu(spec, fn, policy)
    else:
        clocks, replay_failure = _time_cuda(spec, fn, device, policy)
        if replay_failure:
            return _result(spec, variant, ctx, status=Status.FAIL, metrics=checked.metrics,
                           reason=f"graph replay: {replay_failure}")
    return _result(spec, variant, ctx, status=Status.PASS, metrics=checked.metrics,
                   clocks=clocks)


def measure_pair_safely(spec: MatmulSpec, variant: Variant, ctx: PairContext) -> PairResult:
    """:func:`measure_pair` with every exception turned into an ERROR result.

    Raises :class:`PoisonedContextError` (carrying the result) when the error leaves
    the CUDA context unusable, so the worker records it and exits."""
    try:
        return measure_pair(spec, variant, ctx)
    except Exception as exc:
        kind, poisoned = classify(exc)
        result = error_result(spec, variant, ctx, kind, f"{type(exc).__name__}: {exc}")
        if poisoned and ctx.device.kind == "cuda":
            raise PoisonedContextError(result) from exc
        return result


def _time_cpu(spec: MatmulSpec, fn: KernelFn, policy: TimingPolicy) -> Clocks:
    inputs = fresh_copy(seeded_case(spec, TIMING_SEED).inputs, "cpu")
    out = empty_output(spec, "cpu")
    device_clock = time_loop_cpu(fn, [inputs], out, policy)
    host = time_host_cpu(fn, inputs, out, policy)
    return Clocks(device=device_clock, host=host,
                  notes=("CPU: device clock is wall time per call; caches not flushed",))


def _time_cuda(
    spec: MatmulSpec, fn: KernelFn, device: DeviceInfo, policy: TimingPolicy
) -> tuple[Clocks, str | None]:
    import torch

    where = _torch_device(device)
    first_case = seeded_case(spec, TIMING_SEED)
    first = fresh_copy(first_case.inputs, where)
    n_sets = rotation_count(first.nbytes, device.l2_bytes, policy)
    sets = [first] + [make_inputs(spec, TIMING_SEED + i, where, generate_on_device=True)
                      for i in range(1, n_sets)]
    out = empty_output(spec, where)
    notes: list[str] = []
    if n_sets * first.nbytes < policy.cold_l2_factor * device.l2_bytes:
        notes.append(f"rotation capped at {n_sets} sets: weights may be partly L2-resident")

    calls = calls_per_sample(n_sets, policy)
    # The replay check's reference, from the last call's inputs before any call.
    last = (calls - 1) % n_sets
    if last == 0:
        last_ref, last_scale = first_case.reference, first_case.scale
    else:
        last_ref, last_scale = reference(sets[last]), reference_scale(sets[last])
    cold = capture(fn, sets, out, calls, policy.warmup)
    assert cold.last_set == last
    device_clock = time_graph(cold, policy)
    # Replay check: poison, replay, compare the last call's output to its reference.
    out.fill_(float("nan"))
    cold.graph.replay()
    torch.cuda.synchronize()
    assert spec.dtype is not None and spec.k is not None
    tol_norm, tol_rel = tolerance(spec.dtype, spec.k)
    failure = compare(out, last_ref, last_scale, spec.k).failure(tol_norm, tol_rel)
    del cold
    if failure:
        return Clocks(device=device_clock, notes=tuple(notes)), failure

    hot_graph = capture(fn, [first], out, calls_per_sample(1, policy), 1)
    hot = time_graph(hot_graph, policy)
    del hot_graph
    host = time_host_cuda(fn, first, out, policy)
    kernel = None
    if policy.kernel_clock:
        try:
            kernel = time_kernels_profiler(fn, sets, out, calls_per_sample(n_sets, policy))
        except Exception as exc:
            notes.append(f"kernel clock unavailable: {exc}")
        if kernel is not None:
            gap = abs(kernel.median_us - device_clock.median_us) / device_clock.median_us
            if gap > KERNEL_CLOCK_TOLERANCE:
                notes.append(f"kernel clock disagrees with device clock by {gap:.0%}")
    del sets
    return Clocks(device=device_clock, hot=hot, host=host, kernel=kernel,
                  notes=tuple(notes)), None
