"""Where the first seconds of `matprobe run` go (issue 21, rough edge 6): the
default job run in this process with its phases wrapped — target, clocks,
worker spawn, variants, run recorded, plan, execute, each worker's wait for its
process to be ready, first row per card — stopped (SIGINT) once every card has
a row. Times in seconds after this script started.

    PYTHONPATH=src python3 benchmarks/startup_phases.py 0,1,2,3 > phases.txt
"""

from __future__ import annotations

import time

T0 = time.time()

import contextlib  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from typing import Any  # noqa: E402

EVENTS: list[tuple[float, str]] = []
LOCK = threading.Lock()


def mark(what: str) -> None:
    with LOCK:
        EVENTS.append((time.time() - T0, f"{what} [{threading.current_thread().name}]"))


def wrap(owner: Any, name: str, label: str) -> None:
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        mark(f"{label} begins")
        try:
            return inner(*args, **kwargs)
        finally:
            mark(f"{label} ends")

    setattr(owner, name, timed)


def main() -> None:
    gpus = sys.argv[1]
    mark("python up")
    from matprobe.cli import main as cli_main
    from matprobe.run import runner, session, worker
    from matprobe.run.store import ResultStore

    mark("matprobe.cli imported")
    wrap(session.RunSession, "_target", "target (cards detected)")
    if hasattr(session.RunSession, "_spawn_workers"):  # code that starts them early
        wrap(session.RunSession, "_spawn_workers", "workers spawned")
    wrap(session.RunSession, "_variants_for", "variants listed")
    wrap(session, "gpu_clock_state", "nvidia-smi clock read")
    wrap(ResultStore, "start_run", "run recorded")
    wrap(session, "make_plan", "plan")
    wrap(session, "execute", "execute")
    wrap(worker.Worker, "_start", "worker waits for its process")
    cards = len(gpus.split(","))
    seen: set[str] = set()
    real = runner._Recording.on_result

    def on_result(self: Any, task: Any, result: Any) -> None:
        card = next((n for n in result.clocks.notes if n.startswith("card ")), "card cuda:0")
        if card not in seen:
            seen.add(card)
            mark(f"first row on {card}")
            if len(seen) >= cards:
                os.kill(os.getpid(), signal.SIGINT)
        real(self, task, result)

    runner._Recording.on_result = on_result  # type: ignore[method-assign]
    scratch = tempfile.mkdtemp()
    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        cli_main(["run", "--gpus", gpus, "--db", f"{scratch}/s.sqlite", "--out", f"{scratch}/o"])
    for at, what in EVENTS:
        print(f"{at:7.2f}  {what}")


if __name__ == "__main__":
    main()
