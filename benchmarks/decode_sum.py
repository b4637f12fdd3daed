"""Per-shape winners and one decode token's Σ count × time, from a run's report.json.

    python3 benchmarks/decode_sum.py report.json [--tokens N] [--no-pdl]

Σ per token = Σ over specs of (calls per run / tokens) × median device time, for
the baseline (cuBLAS) and for the best validated variant of each spec.
``--no-pdl`` leaves out variants launched with programmatic dependent launch
(``pdl=1``), whose graph-replay figure includes overlap with the previous call:
what remains are the stand-alone figures.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def best_of(entry: dict[str, Any], no_pdl: bool) -> tuple[float | None, str | None]:
    """The fastest passing variant of one spec (the report's own pick unless filtered)."""
    if not no_pdl:
        return entry["best_us"], entry["best"]
    timed = [
        (r["clocks"]["device"]["median_us"], r["variant_id"])
        for r in entry["results"]
        if r["status"] == "pass" and r["clocks"].get("device")
        and not (r.get("params") or {}).get("pdl")
    ]
    return min(timed) if timed else (None, None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--tokens", type=int)
    parser.add_argument("--no-pdl", action="store_true", help="leave out pdl=1 variants")
    args = parser.parse_args()
    with open(args.report, encoding="utf-8") as handle:
        data = json.load(handle)
    tokens = args.tokens or data.get("tokens") or 1
    base_sum = best_sum = 0.0
    rows = []
    for entry in data["specs"]:
        spec = entry["spec"]
        count = spec["provenance"]["count"] if spec.get("provenance") else 0
        base = entry["baseline_us"]
        best, name = best_of(entry, args.no_pdl)
        if base is None or best is None:
            continue
        base_sum += count * base / tokens
        best_sum += count * best / tokens
        rows.append((count * base / tokens, spec["key"], count, base, best, name))
    print(f"{'shape':70s} {'calls':>6s} {'cuBLAS µs':>10s} {'best µs':>8s} {'ratio':>6s}  best")
    for _, key, count, base, best, name in sorted(rows, reverse=True):
        print(f"{key[:70]:70s} {count:6d} {base:10.2f} {best:8.2f} {best / base:6.2f}  {name}")
    scope = " (pdl=1 variants left out)" if args.no_pdl else ""
    print(f"\nΣ per token over {tokens} tokens{scope}: cuBLAS {base_sum:.1f} µs, "
          f"best {best_sum:.1f} µs = {best_sum / base_sum:.3f}×")


if __name__ == "__main__":
    main()
