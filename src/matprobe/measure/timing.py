"""The timing policy and the clocks besides the device clock (DESIGN.md §4).

* ``device`` (see :mod:`matprobe.measure.sampling`): per-call device time of
  the candidate after a producer kernel that writes its input, the producer's
  own time subtracted, interleaved with the baseline; CUDA-graph replays of
  many calls rotating over input sets whose total size exceeds
  ``cold_l2_factor`` × the L2 size, so weights come from memory as in decode
  (cold). ``hot`` is the same with a single input set (L2-resident when it fits).
* ``host``: one eager call + synchronize, wall clock: launch overhead included.
* ``kernel`` (optional): kernel durations from the PyTorch profiler (CUPTI), a
  cross-check of ``device``.

Stop rule, the same for every variant of a spec: at least ``min_samples``
rounds, then stop once the spread (p90 − p10)/median is under
``target_spread`` and the ratio to the baseline is known to ± ``target_spread``,
or the pair's ``budget_s`` is spent, at most ``max_samples``.

On the CPU the device clock is wall time over the same rounds (there is no
asynchronous device), and interpreted Triton kernels are not timed at all.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from matprobe.measure.fingerprint import measurement_fingerprint
from matprobe.measure.results import ClockStats

Call = Callable[[Any, Any], None]  # (inputs, out) -> None


@dataclass(frozen=True)
class TimingPolicy:
    cold_l2_factor: float = 3.0
    min_samples: int = 10
    max_samples: int = 400
    target_spread: float = 0.01
    budget_s: float = 0.2
    min_calls_per_sample: int = 20
    host_samples: int = 50
    #: warm-up passes before a recording where the recorder needs several (MPS builds
    #: a Metal pipeline per new shape); CUDA graphs and the CPU take one pass
    warmup: int = 3
    kernel_clock: bool = False
    trials: int = 3
    #: cap on the memory the rotating input sets may take (bytes)
    max_rotation_bytes: int = 4 * 2**30
    #: the run's seed, every drawn value's origin (:mod:`~matprobe.measure.seeds`;
    #: None: one from the OS). Not part of the fingerprint: a verdict reached on
    #: other values is the same verdict.
    seed: int | None = None

    @property
    def fingerprint(self) -> str:
        """The settings and the harness's measurement code: a verdict reached by
        other validation or timing code is another result (see ``fingerprint.py``)."""
        settings = {k: v for k, v in asdict(self).items() if k != "seed"}
        text = json.dumps(settings, sort_keys=True) + measurement_fingerprint()
        return "p" + hashlib.sha256(text.encode()).hexdigest()[:10]


def rotation_count(set_bytes: int, l2_bytes: int, policy: TimingPolicy) -> int:
    """Input sets needed so their total exceeds ``cold_l2_factor`` × L2."""
    if l2_bytes <= 0 or set_bytes <= 0:
        return 1
    want = math.ceil(policy.cold_l2_factor * l2_bytes / set_bytes)
    cap = max(1, policy.max_rotation_bytes // set_bytes)
    return max(1, min(want, cap))


def calls_per_sample(n_sets: int, policy: TimingPolicy) -> int:
    """Whole rounds over the sets, at least ``min_calls_per_sample`` calls."""
    rounds = max(1, math.ceil(policy.min_calls_per_sample / n_sets))
    return rounds * n_sets


# ---- CUDA --------------------------------------------------------------------------


def cuda_event_ms(call: Callable[[], Any]) -> float:
    """Device time of one ``call`` (ms), between two CUDA events recorded around it on
    the current stream; waits for the second."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def time_host(
    prepare: Callable[[int], None],
    call: Callable[[int], None],
    sync: Callable[[], None],
    policy: TimingPolicy,
    *,
    budget: bool = False,
) -> ClockStats:
    """The host clock: call ``i`` (one eager kernel call) and ``sync``, wall clock,
    after an untimed ``prepare(i)`` (its producer) and ``sync``. Up to
    ``host_samples`` calls; with ``budget`` (the CPU, MPS) at least three, then
    until the policy's budget is spent. ``len(samples)`` calls were made."""
    samples: list[float] = []
    started = time.perf_counter()
    for i in range(policy.host_samples):
        prepare(i)
        sync()
        t0 = time.perf_counter()
        call(i)
        sync()
        samples.append((time.perf_counter() - t0) * 1e6)
        if budget and time.perf_counter() - started > policy.budget_s and len(samples) >= 3:
            break
    return ClockStats.from_samples(samples)


def time_kernels_profiler(
    producers: Callable[[], None], calls_after_producers: Callable[[], None], calls: int
) -> ClockStats:
    """Per-call sum of kernel durations recorded by the profiler (CUPTI), for eager
    calls each after its producer: ``producers()`` launches the ``calls`` producers
    alone, ``calls_after_producers()`` each producer then its call. The first tells
    how many kernels a producer launches; in the second, each call's kernels are
    what follows its producer's."""
    produced = _kernel_durations(producers)
    both = _kernel_durations(calls_after_producers)
    per_producer = len(produced) // calls
    per_call = len(both) // calls
    if per_call <= per_producer:
        raise RuntimeError("the profiler recorded no kernels of the calls")
    samples = [
        sum(both[start + per_producer : start + per_call])
        for start in range(0, per_call * calls, per_call)
    ]
    return ClockStats.from_samples(samples)


def _kernel_durations(launch: Callable[[], None]) -> list[float]:
    import torch
    from torch.profiler import ProfilerActivity

    from matprobe.quiet_profiler import quiet_profile

    torch.cuda.synchronize()
    with quiet_profile([ProfilerActivity.CUDA]) as prof:
        launch()
        torch.cuda.synchronize()
    return [
        float(getattr(evt, "device_time", 0.0) or getattr(evt, "cuda_time", 0.0))
        for evt in prof.events()
        if str(getattr(evt, "device_type", "")).endswith("CUDA")
    ]


# ---- GPU state ----------------------------------------------------------------------


def gpu_clock_state(index: int = 0) -> dict[str, str]:
    """SM clock and active throttle reasons of CUDA card ``index``, as nvidia-smi
    reports them (read only; {} where it says nothing)."""
    from matprobe.measure.device import command_line, nvidia_smi_id

    fields = "clocks.sm,clocks.max.sm,clocks_throttle_reasons.active,temperature.gpu,power.draw"
    line = command_line(
        ["nvidia-smi", "-i", nvidia_smi_id(index), f"--query-gpu={fields}", "--format=csv,noheader"]
    )
    if not line:
        return {}
    values = [v.strip() for v in line.split(",")]
    return dict(zip(fields.split(","), values, strict=False))


#: Throttle reasons that mean the clock was held down (not idle or app settings).
_THROTTLE_BITS = {
    0x4: "sw power cap",
    0x8: "hw slowdown",
    0x20: "sw thermal",
    0x40: "hw thermal",
    0x80: "power brake",
}


def throttling(state: dict[str, str]) -> list[str]:
    raw = state.get("clocks_throttle_reasons.active", "")
    try:
        mask = int(raw, 16)
    except ValueError:
        return []
    return [name for bit, name in _THROTTLE_BITS.items() if mask & bit]
