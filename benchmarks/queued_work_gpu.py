"""Work a stopped process left on the card: does it slow another process's timed
rounds, and does a tiny "canary" call before the rounds see it? (issue 20)

A hostile process (its own CUDA context, as a plugin's witness process has) queues
a spinning kernel (``torch.cuda._sleep``) of a given length, says so, and is
stopped (SIGSTOP) — as the witness stops a plugin's process while the baseline's
rounds are timed. The judging process then times (a) a canary: one tiny kernel,
launch to synchronize, on the wall clock; (b) a baseline round: a CUDA graph of
``CALLS`` ``torch.mm`` GEMVs (Qwen2.5-0.5B's o_proj, 896 × 896, fp16) replayed
once, launch to synchronize — each with no hostile work, and with spinners of
several lengths queued just before. Prints one JSON line a case and a summary.

    PYTHONPATH=src OUT=… python3 benchmarks/queued_work_gpu.py
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import statistics
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

CALLS = 200
REPEATS = 7
#: Spinner lengths in GPU clock cycles (~1.98 GHz: 2e6 cycles ≈ 1 ms).
SPINS = (0, 200_000, 2_000_000, 20_000_000)


def _hostile(conn: Connection) -> None:
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    conn.send("ready")
    while True:
        cycles = conn.recv()
        if cycles is None:
            return
        if cycles:
            torch.cuda._sleep(cycles)  # queued, not waited for
        conn.send("queued")


def _canary_us(torch: object, t: object) -> float:
    start = time.perf_counter()
    t.add_(1)  # type: ignore[attr-defined]
    torch.cuda.synchronize()  # type: ignore[attr-defined]
    return (time.perf_counter() - start) * 1e6


def main() -> None:
    import torch

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    hostile = ctx.Process(target=_hostile, args=(theirs,), daemon=True)
    hostile.start()
    assert mine.recv() == "ready"
    w = torch.randn(896, 896, device="cuda", dtype=torch.float16)
    x = torch.randn(896, 1, device="cuda", dtype=torch.float16)
    out = torch.empty(896, 1, device="cuda", dtype=torch.float16)
    tiny = torch.zeros(1, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            torch.mm(w, x, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            torch.mm(w, x, out=out)
    for _ in range(5):
        graph.replay()
        _canary_us(torch, tiny)
    rows = []
    for repeat in range(REPEATS):
        for cycles in SPINS:
            mine.send(cycles)
            assert mine.recv() == "queued"
            os.kill(hostile.pid or 0, signal.SIGSTOP)
            try:
                canary = _canary_us(torch, tiny)
                canary_again = _canary_us(torch, tiny)
                start = time.perf_counter()
                graph.replay()
                torch.cuda.synchronize()
                round_us = (time.perf_counter() - start) * 1e6
                after = _canary_us(torch, tiny)
            finally:
                os.kill(hostile.pid or 0, signal.SIGCONT)
            torch.cuda.synchronize()
            time.sleep(0.05 + cycles / 1.5e9)  # let the spinner end before the next case
            row = {"repeat": repeat, "spin_cycles": cycles, "canary_us": canary,
                   "canary_again_us": canary_again, "round_us": round_us,
                   "canary_after_us": after}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    mine.send(None)
    hostile.join(10)
    summary = {}
    for cycles in SPINS:
        mine_rows = [r for r in rows if r["spin_cycles"] == cycles]
        summary[str(cycles)] = {
            key: {"median": statistics.median(r[key] for r in mine_rows),
                  "min": min(r[key] for r in mine_rows), "max": max(r[key] for r in mine_rows)}
            for key in ("canary_us", "canary_again_us", "round_us", "canary_after_us")
        }  # fmt: skip
    print(json.dumps({"summary": summary, "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__}, indent=1))  # fmt: skip
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir, "queued_work.json").write_text(json.dumps({"rows": rows, "summary": summary}))


if __name__ == "__main__":
    sys.exit(main())
