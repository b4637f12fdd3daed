"""Is a token graph's back-to-back figure the GPU's or the host's launch rate?
(issue 23, twenty-ninth session: the same eager graph read 2297 µs in most
processes and 1942 in others, clocks equal; mode_mix_probe.py read 2297 after
every step.) For each graph: the host µs one ``replay()`` takes while the GPU is
held by a long sleep (its launch cost alone), and the GPU µs of 4 replays back
to back behind a 1 ms lead (``token.timing.LEAD_CYCLES``) and behind a 100 ms
lead (every launch queued before the first event surely).
    PYTHONPATH=src python benchmarks/launch_bound_probe.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from matprobe.profile.models import get_model
from matprobe.token.bench import TokenBench
from matprobe.token.modes import mode_named
from matprobe.token.timing import LEAD_CYCLES, TokenCall

CYCLES_PER_MS = LEAD_CYCLES  # LEAD_CYCLES is about 1 ms


def host_launch_us(call: TokenCall, times: int = 8) -> list[float]:
    """Host µs of one replay() call, the GPU busy so nothing waits on it."""
    torch.cuda.synchronize()
    torch.cuda._sleep(CYCLES_PER_MS * 200)  # type: ignore[no-untyped-call]
    samples = []
    for _ in range(times):
        started = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - started) / 1000.0)
    torch.cuda.synchronize()
    return samples


def gpu_us(call: TokenCall, lead_ms: int, times: int = 10, window: int = 4) -> list[float]:
    samples = []
    for _ in range(times):
        torch.cuda.synchronize()
        torch.cuda._sleep(CYCLES_PER_MS * lead_ms)  # type: ignore[no-untyped-call]
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()  # type: ignore[no-untyped-call]
        queued = time.perf_counter_ns()
        for _ in range(window):
            call()
        queued_us = (time.perf_counter_ns() - queued) / 1000.0
        end.record()  # type: ignore[no-untyped-call]
        end.synchronize()  # type: ignore[no-untyped-call]
        samples.append(start.elapsed_time(end) * 1000.0 / window)
        samples.append(-queued_us / window)  # negative: host µs per replay queued
    return samples


def summary(samples: list[float]) -> list[float]:
    return [round(statistics.median(samples), 1), round(min(samples), 1), round(max(samples), 1)]


def main() -> None:
    bench = TokenBench(get_model("qwen2.5-0.5b"), context=128, dtype="f16", device="cuda")
    rows = []
    calls = {}
    for name in ("eager", "compile", "compile-none", "layer+pdl"):
        mode = mode_named(name)
        assert mode is not None
        calls[name] = bench.build(mode)
    for repeat in range(2):
        for name, call in calls.items():
            row: dict[str, object] = {"mode": name, "repeat": repeat}
            row["host_launch_us"] = summary(host_launch_us(call))
            for lead in (1, 100):
                both = gpu_us(call, lead)
                row[f"gpu_us_lead_{lead}ms"] = summary([s for s in both if s > 0])
                row[f"host_queue_us_lead_{lead}ms"] = summary([-s for s in both if s < 0])
            rows.append(row)
            print(row, flush=True)
    with open(sys.argv[1], "w") as out:
        json.dump({"card": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "rows": rows}, out, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
