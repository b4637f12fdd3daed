"""Issue 23, item 1: why is the token's matmul-less compiled step slower than an
independent compile of the same step?

In one process, on one card: matprobe's token (``TokenBench``: ``compile-none``,
``compile``, ``eager-none``) and the independent step of
``../shared/probes/decode_step_peer.py`` (its own ``compile-none`` and
``compile`` at ``CTX=127``, whose cache then holds the token's 128 keys, built
by executing the probe's set-up part, everything before its float64
reference), each captured as one CUDA graph. For every graph: µs per
token on two clocks (20 back-to-back replays; one replay after a sync), in
interleaved rounds, and a profiler trace of a few replays: kernels per token,
the sum of their durations (the rest of the replay is gaps) and the kernels
that take the time, by name. Writes ``$OUT/token_peer.json`` and
``$OUT/<graph>_kernels.txt``; prints a table.

    PYTHONPATH=src OUT=dir python3 benchmarks/token_peer_probe.py [PEER_PATH]
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from matprobe.profile.models import get_model
from matprobe.token.bench import TokenBench
from matprobe.token.modes import MODES

CONTEXT = 128
PEER = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/probes/decode_step_peer.py")
OUT = Path(os.environ.get("OUT", "/tmp"))


def peer_graphs() -> dict[str, Callable[[], Any]]:
    """The independent step's compile and compile-none graphs (the probe's own code)."""
    text = PEER.read_text()
    setup = text.split("# float64 reference")[0]
    # the probe's CTX=L caches L + 1 keys (L past and the new one); the token's
    # context L holds L, the new one included: CTX = L - 1 reads the same cache
    os.environ["CTX"] = str(CONTEXT - 1)
    # a module of its own (Dynamo finds a compiled function's globals by module name)
    folder = Path(tempfile.mkdtemp())
    (folder / "peer_setup.py").write_text(setup)
    sys.path.insert(0, str(folder))
    space = vars(importlib.import_module("peer_setup"))
    graphs = {}
    step, lin = space["step"], space["Lin"]
    for name, kind in (("peer:compile", "torch"), ("peer:compile-none", "none")):
        compiled = torch.compile(
            lambda w, nf, wlm, x, c, s, kind=kind: step(lin(kind), w, nf, wlm, x, c, s),
            fullgraph=True,
            dynamic=False,
        )
        args = (space["W"], space["NF"], space["WLM"], space["x0"], space["COS"], space["SIN"])
        graph = space["capture"](lambda compiled=compiled, args=args: compiled(*args))
        graphs[name] = graph.replay
    return graphs


#: the token's benches stay alive: a captured graph does not hold the weights it reads
KEEP: list[object] = []


def token_graphs() -> dict[str, Callable[[], Any]]:
    bench = TokenBench(get_model("qwen2.5-0.5b"), context=CONTEXT, dtype="f16", device="cuda")
    KEEP.append(bench)
    return {f"token:{m}": bench.build(MODES[m]) for m in ("compile", "compile-none", "eager-none")}


def back_to_back_us(replay: Callable[[], Any], reps: int = 20) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        replay()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1000 / reps


def single_us(replay: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    replay()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1000


def single_after_idle_us(replay: Callable[[], Any], idle_s: float = 0.002) -> float:
    """One replay after a sync and a host pause (the GPU idle for ``idle_s``, as
    between the token's judged replays, which draw fresh inputs on the host)."""
    torch.cuda.synchronize()
    time.sleep(idle_s)
    return single_us(replay)


def kernels(name: str, replay: Callable[[], Any], reps: int = 5) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            replay()
        torch.cuda.synchronize()
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            by_name[event.name].append(event.device_time)
    total = sum(sum(v) for v in by_name.values()) / reps
    count = sum(len(v) for v in by_name.values()) / reps
    rows = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
    lines = [f"{sum(v) / reps:9.1f} µs {len(v) // reps:5d}×  {k[:150]}" for k, v in rows]
    (OUT / f"{name.replace(':', '_')}_kernels.txt").write_text("\n".join(lines) + "\n")
    return {"kernels": count, "kernel_us": total, "top": lines[:12]}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    graphs = {**token_graphs(), **peer_graphs()}
    for replay in graphs.values():
        replay()
    torch.cuda.synchronize()
    b2b: dict[str, list[float]] = {n: [] for n in graphs}
    one: dict[str, list[float]] = {n: [] for n in graphs}
    idle: dict[str, list[float]] = {n: [] for n in graphs}
    names = list(graphs)
    for index in range(12):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            b2b[name].append(back_to_back_us(graphs[name]))
            one[name].append(single_us(graphs[name]))
            idle[name].append(single_after_idle_us(graphs[name]))
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "graphs": {}}
    print(result["device"], "torch", torch.__version__, "context", CONTEXT)
    for name, replay in graphs.items():
        k = kernels(name, replay)
        row = {
            "back_to_back_us": b2b[name],
            "single_us": one[name],
            "single_after_idle_us": idle[name],
            **k,
        }
        result["graphs"][name] = row
        print(
            f"{name:20s} b2b {statistics.median(b2b[name]):7.1f} µs"
            f" [{min(b2b[name]):.1f}–{max(b2b[name]):.1f}]"
            f"  single {statistics.median(one[name]):7.1f}"
            f"  after 2 ms idle {statistics.median(idle[name]):7.1f}"
            f"  kernels {k['kernels']:.0f}  kernel time {k['kernel_us']:.1f} µs"
        )
        for line in k["top"][:8]:
            print("      ", line)
    (OUT / "token_peer.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
