"""Where a `matprobe run` spent its time and how many rounds its clocks took, from
JSON reports (one worker, one card): seconds by family (gaps between rows'
``measured_at``), and for the weight specs and the attention specs apart the mean
device-clock and hot-clock rounds a pair and the p50/p90 device-clock spread.
Judging perturbs the clocks; this is how it shows.

    python3 benchmarks/judged_rounds.py NAME=RUN/report.json [NAME=RUN/report.json …]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any


def _at(row: dict[str, Any]) -> float:
    return datetime.fromisoformat(row["measured_at"].replace("Z", "+00:00")).timestamp()


def _clocks(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "-"
    device = [r["clocks"]["device"] for r in rows if r["clocks"].get("device")]
    hot = [r["clocks"]["hot"]["n"] for r in rows if r["clocks"].get("hot")]
    spread = sorted((d["p90_us"] - d["p10_us"]) / d["median_us"] for d in device)
    return (
        f"{len(rows)} pairs, device rounds {statistics.mean(d['n'] for d in device):.1f}, "
        f"hot rounds {statistics.mean(hot) if hot else 0:.1f}, spread p50 "
        f"{spread[len(spread) // 2]:.3f} p90 {spread[int(0.9 * len(spread))]:.3f}"
    )


def main() -> None:
    for arg in sys.argv[1:]:
        name, _, path = arg.rpartition("=")
        report = json.loads(Path(path).read_text())
        rows = sorted((r for s in report["specs"] for r in s["results"]), key=_at)
        seconds: Counter[str] = Counter()
        for before, row in pairwise(rows):
            seconds[row["family"]] += _at(row) - _at(before)
        print(f"{name or path}: run {report['seconds']:.1f} s")
        print("  by family: " + ", ".join(f"{f} {s:.1f} s" for f, s in seconds.most_common()))
        attention = [r for r in rows if "cache=1" in r["spec_key"]]
        weights = [r for r in rows if "cache=1" not in r["spec_key"]]
        print(f"  weight specs: {_clocks(weights)}")
        print(f"  attention specs: {_clocks(attention)}")


if __name__ == "__main__":
    main()
