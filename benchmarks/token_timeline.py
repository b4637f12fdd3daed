"""The kernel timeline of one token: where a mode's time goes, kernel by kernel.

Builds ``matprobe token``'s step (MODEL, DTYPE, CONTEXT; default Qwen2.5-0.5B
f16 at 128) in MODE (default ``layer+pdl``), captured as one CUDA graph, replays
it a few times, then records one replay with the PyTorch profiler (CUPTI: each
kernel's start and end on the GPU). Prints, per kernel name, the count, the
summed and median duration, and the span of the replay against the sum of its
kernels (the rest: launch gaps, or negative where launched-early kernels
overlap); writes every kernel in order to $OUT/timeline-….json.

    PYTHONPATH=src OUT=dir MODE=layer+pdl python3 benchmarks/token_timeline.py
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict

import torch
from torch.profiler import DeviceType, ProfilerActivity

from matprobe.profile.models import MODELS
from matprobe.quiet_profiler import quiet_profile
from matprobe.token.bench import TokenBench
from matprobe.token.modes import MODES


def main() -> None:
    model = os.environ.get("MODEL", "qwen2.5-0.5b")
    dtype = os.environ.get("DTYPE", "f16")
    context = int(os.environ.get("CONTEXT", "128"))
    mode = MODES[os.environ.get("MODE", "layer+pdl")]
    bench = TokenBench(MODELS[model], context=context, dtype=dtype, device="cuda", trials=1)
    call = bench.build(mode)
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    with quiet_profile([ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = sorted(
        (e for e in prof.events() if e.device_type == DeviceType.CUDA),
        key=lambda e: e.time_range.start,
    )
    start = kernels[0].time_range.start
    span = kernels[-1].time_range.end - start
    busy = sum(e.time_range.elapsed_us() for e in kernels)
    by_name: dict[str, list[float]] = defaultdict(list)
    for e in kernels:
        by_name[e.name].append(e.time_range.elapsed_us())
    rest = span - busy
    print(f"{model} {dtype} ctx {context} {mode.name}: {len(kernels)} kernels, replay "
          f"span {span:.1f} µs, kernels' sum {busy:.1f} µs, span − sum {rest:.1f} µs")  # fmt: skip
    for name, durations in sorted(by_name.items(), key=lambda item: -sum(item[1])):
        print(f"  {sum(durations):8.1f} µs  {len(durations):4d} × median "
              f"{statistics.median(durations):6.2f}  {name[:90]}")  # fmt: skip
    rows = [
        {"name": e.name, "start_us": e.time_range.start - start, "us": e.time_range.elapsed_us()}
        for e in kernels
    ]
    out = os.path.join(os.environ.get("OUT", "."), f"timeline-{model}-{dtype}-{context}.json")
    with open(out, "w") as f:
        json.dump({"mode": mode.name, "span_us": span, "kernels": rows}, f, indent=0)


if __name__ == "__main__":
    main()
