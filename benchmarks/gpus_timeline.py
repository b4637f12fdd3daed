"""Where a run's time went, card by card, from its store: ``python
benchmarks/gpus_timeline.py STORE [RUN]``. Each card's rows in the order they
were stored: pairs, when its first and last row came (seconds after the run
started), the seconds between consecutive rows summed by family (the time a
pair took, start-up included in a card's first), and the slowest pairs."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import sqlite3
import sys
from collections import defaultdict


def _t(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main(path: str, run: str | None = None) -> None:
    db = sqlite3.connect(path)
    run_id, started = db.execute(
        "SELECT id, started_at FROM runs WHERE id = coalesce(?, (SELECT max(id) FROM runs))",
        (run,),
    ).fetchone()
    t0 = _t(started)
    by_card: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    for measured_at, record in db.execute(
        "SELECT measured_at, record FROM results WHERE run_id = ? ORDER BY measured_at", (run_id,)
    ):
        row = json.loads(record)
        notes = row.get("clocks", {}).get("notes", [])
        card = next((n[5:] for n in notes if n.startswith("card ")), "card")
        by_card[card].append((_t(measured_at) - t0, row["variant_id"], row["spec_key"]))
    for card, rows in sorted(by_card.items()):
        gaps = [(rows[0][0], *rows[0][1:])] + [
            (b[0] - a[0], *b[1:]) for a, b in itertools.pairwise(rows)
        ]
        family: dict[str, float] = defaultdict(float)
        for gap, variant, _spec in gaps[1:]:
            family[variant.split("/")[0]] += gap
        print(f"{card}: {len(rows)} pairs, first row at {rows[0][0]:.1f} s, last at "
              f"{rows[-1][0]:.1f} s; mean {(rows[-1][0] - rows[0][0]) / max(len(rows) - 1, 1):.2f} "
              "s a pair after the first")  # fmt: skip
        for name, seconds in sorted(family.items(), key=lambda item: -item[1]):
            print(f"  {name:34s} {seconds:7.1f} s")
        slow = sorted(gaps[1:], key=lambda g: -g[0])[:6]
        print("  slowest: " + "; ".join(f"{v} {s[:40]} {g:.1f}s" for g, v, s in slow))


if __name__ == "__main__":
    main(*sys.argv[1:3])
