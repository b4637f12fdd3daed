"""One decode token's Σ calls per token × device time, from a run's report.json.

    python3 benchmarks/decode_sum.py report.json [--no-pdl]

Σ per token = Σ over specs of calls per token (the report's own weights: weight
matmuls count ÷ tokens, attention sites Σ count ÷ context lengths seen) × time,
for the baseline and for our best validated variant of each spec (never a
peer). Where the best was timed interleaved with the baseline, its time is the
baseline's interleaved median × the ratio median, so both terms come from the
same rounds. ``--no-pdl`` keeps only variants launched without programmatic
dependent launch. Specs with no weight or no figure are listed and left out.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def ours(entry: dict[str, Any], no_pdl: bool) -> tuple[float, float, str] | None:
    """(baseline µs, best µs, best id) of one spec, from the same rounds where possible."""
    timed = [
        r
        for r in entry["results"]
        if r["status"] == "pass"
        and r["clocks"].get("device")
        and not r.get("peer")
        and not r.get("baseline")
        and not (no_pdl and (r.get("params") or {}).get("pdl"))
    ]
    if not timed or entry.get("baseline_us") is None:
        return None
    best = min(timed, key=lambda r: r["clocks"]["device"]["median_us"])
    ratio = best["clocks"].get("vs_baseline")
    if ratio:
        return ratio["baseline_us"], ratio["baseline_us"] * ratio["median"], best["variant_id"]
    return entry["baseline_us"], best["clocks"]["device"]["median_us"], best["variant_id"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--no-pdl", action="store_true", help="leave out pdl=1 variants")
    args = parser.parse_args()
    with open(args.report, encoding="utf-8") as handle:
        data = json.load(handle)
    base_sum = best_sum = 0.0
    rows, left_out = [], []
    for entry in data["specs"]:
        key, weight = entry["spec"]["key"], entry.get("calls_per_token")
        figures = ours(entry, args.no_pdl)
        if weight is None or figures is None:
            left_out.append(key)
            continue
        base, best, name = figures
        base_sum += weight * base
        best_sum += weight * best
        rows.append((weight * base, key, weight, base, best, name))
    print(f"{'shape':70s} {'calls':>6s} {'base µs':>8s} {'best µs':>8s} {'ratio':>6s}  best")
    for _, key, weight, base, best, name in sorted(rows, reverse=True):
        print(f"{key[:70]:70s} {weight:6.2f} {base:8.2f} {best:8.2f} {best / base:6.3f}  {name}")
    scope = " (pdl=1 variants left out)" if args.no_pdl else ""
    print(
        f"\nΣ per token{scope}: baseline {base_sum:.1f} µs, ours {best_sum:.1f} µs = "
        f"{best_sum / base_sum:.3f}×  ({len(rows)} specs; weights: "
        f"{data.get('per_token_basis')})"
    )
    if left_out:
        print(f"left out (no per-token weight or no figure): {len(left_out)} specs")


if __name__ == "__main__":
    main()
