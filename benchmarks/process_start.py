"""How long a kernel-running process takes to start: from ``start()`` to the child's
first message, the child importing torch first (as every worker does), with
``matprobe.run.processes``' start method and with a fresh interpreter (spawn).
The first start of each includes its one-off set-up (the fork server's own
torch import). Run on the machine whose figure you want:

    PYTHONPATH=src python3 benchmarks/process_start.py
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext

from matprobe.run import processes


def ready(conn: Connection) -> None:
    import torch  # noqa: F401 - what every worker imports

    conn.send(time.perf_counter())


def once(ctx: BaseContext) -> float:
    mine, theirs = multiprocessing.Pipe()
    start = time.perf_counter()
    if ctx is processes.context():
        child = processes.start(ready, (theirs,))
    else:
        child = ctx.Process(target=ready, args=(theirs,), daemon=True)  # type: ignore[attr-defined]
        child.start()
    theirs.close()
    answered: float = mine.recv()
    child.join()
    return answered - start


def main() -> None:
    for ctx in (processes.context(), multiprocessing.get_context("spawn")):
        first = once(ctx)
        rest = [once(ctx) for _ in range(5)]
        spread = f"[{min(rest):.3f}–{max(rest):.3f}]"
        median = statistics.median(rest)
        print(f"{ctx.get_start_method()}: first {first:.2f} s, then {median:.3f} s {spread} of 5")


if __name__ == "__main__":
    main()
