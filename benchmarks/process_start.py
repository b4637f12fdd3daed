"""How long a kernel-running process takes to start: from ``start()`` to the child's
first message, the child first setting up as every worker does before it says
``ready`` (torch, matprobe's measuring loop and shipped families, the tamper
snapshot), with ``matprobe.run.processes``' start method and with a fresh
interpreter (spawn). The first start of each includes its one-off set-up (the
fork server's own imports). ``--preload torch`` gives the fork server what it
imported before the twenty-third session (torch only). Run on the machine whose
figure you want:

    PYTHONPATH=src python3 benchmarks/process_start.py [--preload torch]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext

from matprobe.run import processes


def ready(conn: Connection) -> None:
    """What a worker does before its ``ready`` (``run/worker_process.py``)."""
    import torch  # noqa: F401 - what every worker imports

    from matprobe.measure.tamper import Snapshot, worker_objects
    from matprobe.measure.variants import resolve_factory

    registry = resolve_factory("matprobe.kernels.catalogue:shipped_registry")
    Snapshot.take(extra=lambda: worker_objects(registry, conn))
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preload", nargs="+", help="the fork server's imports instead")
    args = parser.parse_args()
    if args.preload:
        processes.PRELOAD = tuple(args.preload)
    print(f"fork server preloads {', '.join(processes.PRELOAD)}")
    for ctx in (processes.context(), multiprocessing.get_context("spawn")):
        first = once(ctx)
        rest = [once(ctx) for _ in range(9)]
        spread = f"[{min(rest):.3f}–{max(rest):.3f}]"
        median = statistics.median(rest)
        print(f"{ctx.get_start_method()}: first {first:.2f} s, then {median:.3f} s {spread} of 9")


if __name__ == "__main__":
    main()
