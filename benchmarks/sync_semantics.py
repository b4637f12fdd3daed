"""Does ``torch.cuda.synchronize()`` wait for kernels another thread queues while it
waits? (Twenty-eighth session, issue 20: what the thread-flood cheat may rely on.)

A thread keeps two ~1 s kernels queued on a side stream; the main thread
synchronizes three times (from a thread of its own, given 8 s) and says how long
each took and whether the side stream was still busy after. Writes
``$OUT/sync.json``.

    OUT=/tmp/x python3 benchmarks/sync_semantics.py
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch


def _flood(side: torch.cuda.Stream, stop: threading.Event, launched: list[int]) -> None:
    queued: list[torch.cuda.Event] = []
    while not stop.is_set():
        queued = [done for done in queued if not done.query()]
        while len(queued) < 2:
            with torch.cuda.stream(side):
                torch.cuda._sleep(2_000_000_000)  # ~1 s at 1.98 GHz
                done = torch.cuda.Event()
                done.record(side)
            queued.append(done)
            launched[0] += 1
        time.sleep(0.0005)


def _one_sync(side: torch.cuda.Stream, launched: list[int]) -> dict[str, Any]:
    start = time.perf_counter()
    returned = threading.Event()
    took: dict[str, float] = {}

    def sync() -> None:
        torch.cuda.synchronize()
        took["s"] = time.perf_counter() - start
        returned.set()

    threading.Thread(target=sync, daemon=True).start()
    ok = returned.wait(8.0)
    return {"returned": ok, "seconds": took.get("s"), "side_idle_after": side.query(),
            "launched": launched[0]}  # fmt: skip


def main() -> None:
    torch.cuda.init()
    side, stop, launched = torch.cuda.Stream(), threading.Event(), [0]
    threading.Thread(target=_flood, args=(side, stop, launched), daemon=True).start()
    time.sleep(0.5)
    seen = []
    for _ in range(3):
        seen.append(_one_sync(side, launched))
        print(seen[-1], flush=True)
    stop.set()
    Path(os.environ.get("OUT", "/tmp"), "sync.json").write_text(json.dumps(seen))
    os._exit(0)  # the side stream's queue is not waited for


if __name__ == "__main__":
    main()
