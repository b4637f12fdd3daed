"""Issue 20, item 3: can a judge process clock a candidate that runs in another process?

The judge apart would own the clock, the problems and the comparison, and the
candidate would replay its recording in its own process on buffers shared by CUDA
IPC. The judge cannot record a timing event on the candidate's stream, and an
interprocess event cannot time (CUDA: ``cudaEventInterprocess`` needs
``cudaEventDisableTiming``), so the only clock it can take is: on its own stream,
a long sleep (both processes enqueue during it), timing event T0, IPC event A;
the candidate's stream waits on A, replays, records IPC event B; the judge's
stream waits on B, timing event T1. T1 - T0 holds the replay plus the handover
between two CUDA contexts (two processes: the GPU time-slices them without MPS).

This probe measures that handover, for an empty recording and for GEMVs of the
Qwen2.5-0.5B weight shapes, beside the same recording clocked in one process
(T0, replay, T1 on one stream), so the question "does the handover's cost and
spread let a ±1 % ratio through?" gets numbers. Run on a GPU:
``python3 benchmarks/ipc_clock_probe.py [REPS]``; prints one line per case.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

import torch
import torch.multiprocessing as mp

SHAPES = {"empty": (1, 1), "qkv": (896, 1152), "down": (4864, 896), "gate_up": (896, 9728)}
SLEEP_CYCLES = 4_000_000  # ~2 ms at 1.98 GHz: both processes enqueue inside it


def _recording(
    x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, stream: torch.cuda.Stream
) -> torch.cuda.CUDAGraph:
    with torch.cuda.stream(stream):
        torch.matmul(x, w, out=out)  # warm cuBLAS before capture
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        torch.matmul(x, w, out=out)
    return graph


def candidate(conn: Any) -> None:
    """The candidate's process: replays its recording between events A and B."""
    torch.cuda.set_device(0)
    stream = torch.cuda.Stream()
    while True:
        message = conn.recv()
        if message is None:
            return
        x, w, out, a_handle, b_handle = message
        gate = torch.cuda.Event.from_ipc_handle(0, a_handle)
        done = torch.cuda.Event.from_ipc_handle(0, b_handle)
        graph = _recording(x, w, out, stream)
        conn.send("ready")
        while (command := conn.recv()) != "stop":
            stream.wait_event(gate)
            with torch.cuda.stream(stream):
                for _ in range(command):  # the window: so many replays back to back
                    graph.replay()
            done.record(stream)
            conn.send("enqueued")
        stream.synchronize()
        del graph
        conn.send("stopped")


def _summary(samples_ms: list[float]) -> str:
    us = sorted(1000 * s for s in samples_ms)
    p = lambda q: us[min(len(us) - 1, int(q * len(us)))]  # noqa: E731
    return f"median {statistics.median(us):8.2f} µs  p10 {p(0.1):8.2f}  p90 {p(0.9):8.2f}"


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for window in (1, 32):
        print(f"-- {window} replays between the handovers; µs per replay")
        measure(reps, window)


def measure(reps: int, window: int) -> None:
    torch.cuda.set_device(0)
    ctx = mp.get_context("spawn")
    judge_end, candidate_end = ctx.Pipe()
    worker = ctx.Process(target=candidate, args=(candidate_end,), daemon=True)
    worker.start()
    stream = torch.cuda.Stream()
    print(torch.cuda.get_device_name(0), "torch", torch.__version__)
    for name, (k, n) in SHAPES.items():
        x = torch.randn(1, k, device="cuda", dtype=torch.float16)
        w = torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5
        out = torch.empty(1, n, device="cuda", dtype=torch.float16)
        # in one process: sleep, T0, replay, T1 on one stream
        graph = _recording(x, w, out, stream)
        local = []
        for _ in range(reps):
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                torch.cuda._sleep(SLEEP_CYCLES)
                t0.record(stream)
                for _ in range(window):
                    graph.replay()  # on the current stream: `stream`
                t1.record(stream)
            t1.synchronize()
            local.append(t0.elapsed_time(t1) / window)
        # across processes: T0, A | wait A, replay, B | wait B, T1
        gate = torch.cuda.Event(interprocess=True, blocking=False)
        done = torch.cuda.Event(interprocess=True, blocking=False)
        judge_end.send((x, w, out, gate.ipc_handle(), done.ipc_handle()))
        assert judge_end.recv() == "ready"
        crossed = []
        for _ in range(reps):
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                torch.cuda._sleep(SLEEP_CYCLES)
                t0.record(stream)
                gate.record(stream)
            judge_end.send(window)
            assert judge_end.recv() == "enqueued"
            stream.wait_event(done)
            t1.record(stream)
            t1.synchronize()
            crossed.append(t0.elapsed_time(t1) / window)
        judge_end.send("stop")
        assert judge_end.recv() == "stopped"
        torch.testing.assert_close(out.float(), (x.float() @ w.float()), rtol=2e-2, atol=2e-2)
        print(f"{name:8s} one process : {_summary(local)}")
        print(f"{name:8s} two processes: {_summary(crossed)}")
    judge_end.send(None)
    worker.join(timeout=30)


if __name__ == "__main__":
    main()
