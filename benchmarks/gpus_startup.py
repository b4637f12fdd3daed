"""Issue 21, rough edge 6: how long after `matprobe run` starts each card's first
row arrives, for the code under each source folder, alternating A B A B.

Each run is the default job (`matprobe run`, built-in Qwen2.5-0.5B profile) with
`--gpus CARDS`, a fresh store and fresh Triton/Inductor caches; it is stopped
(SIGINT, as Ctrl-C) once every card has stored a row, or after --limit seconds.
The first row of a card is the earliest `measured_at` among the rows whose notes
name it; t0 is taken just before the process is started.

    python3 benchmarks/gpus_startup.py --src .exp/gpus-before/src src \
        --gpus 0,1 0 --repeats 2 --out $OUT/startup.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _first_rows(db: Path) -> tuple[float | None, dict[str, float]]:
    """The run's start and each card's first row, as epoch seconds."""
    if not db.exists():
        return None, {}
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            started = conn.execute("SELECT min(started_at) FROM runs").fetchone()[0]
            rows = conn.execute("SELECT measured_at, record FROM results").fetchall()
    except sqlite3.Error:
        return None, {}
    first: dict[str, float] = {}
    for measured_at, record in rows:
        notes = json.loads(record).get("clocks", {}).get("notes", [])
        cards = [n.removeprefix("card ") for n in notes if n.startswith("card ")] or ["cuda:0"]
        at = _seconds(measured_at)
        first[cards[0]] = min(first.get(cards[0], at), at)
    return (_seconds(started) if started else None), first


def one_run(src: str, gpus: str, limit: float) -> dict[str, object]:
    cards = len(gpus.split(","))
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "s.sqlite"
        env = dict(os.environ, PYTHONPATH=src, TRITON_CACHE_DIR=f"{scratch}/triton",
                   TORCHINDUCTOR_CACHE_DIR=f"{scratch}/inductor")  # fmt: skip
        command = [sys.executable, "-m", "matprobe", "run", "--gpus", gpus, "--db", str(db),
                   "--out", f"{scratch}/out"]  # fmt: skip
        t0 = time.time()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        while time.time() - t0 < limit and proc.poll() is None:
            time.sleep(0.25)
            if len(_first_rows(db)[1]) >= cards:
                break
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        started, first = _first_rows(db)
    return {
        "src": src,
        "gpus": gpus,
        "run_recorded_s": None if started is None else round(started - t0, 3),
        "first_row_s": {card: round(at - t0, 3) for card, at in sorted(first.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", nargs="+", required=True)
    parser.add_argument("--gpus", nargs="+", default=["0,1"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--limit", type=float, default=60.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        for gpus in args.gpus:
            for src in args.src:
                runs.append(one_run(src, gpus, args.limit))
                print(json.dumps(runs[-1]), flush=True)
    args.out.write_text(json.dumps(runs, indent=1))
    for gpus in args.gpus:
        for src in args.src:
            firsts = [max(r["first_row_s"].values()) for r in runs  # type: ignore[union-attr]
                      if r["src"] == src and r["gpus"] == gpus and r["first_row_s"]]  # fmt: skip
            if firsts:
                print(f"--gpus {gpus} {src}: every card's first row after "
                      f"{statistics.median(firsts):.2f} s (median of {len(firsts)}: "
                      f"{', '.join(f'{f:.2f}' for f in firsts)})")  # fmt: skip


if __name__ == "__main__":
    main()
