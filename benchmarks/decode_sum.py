"""Per-shape winners and one decode token's Σ count × time, from a run's report.json.

    python3 benchmarks/decode_sum.py report.json [--tokens N]

Σ per token = Σ over specs of (calls per run / tokens) × median device time, for
the baseline (cuBLAS) and for the best validated variant of each spec.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--tokens", type=int)
    args = parser.parse_args()
    with open(args.report, encoding="utf-8") as handle:
        data = json.load(handle)
    tokens = args.tokens or data.get("tokens") or 1
    base_sum = best_sum = 0.0
    rows = []
    for entry in data["specs"]:
        spec = entry["spec"]
        count = spec["provenance"]["count"] if spec.get("provenance") else 0
        base, best = entry["baseline_us"], entry["best_us"]
        if base is None or best is None:
            continue
        base_sum += count * base / tokens
        best_sum += count * best / tokens
        rows.append((count * base / tokens, spec["key"], count, base, best, entry["best"]))
    print(f"{'shape':70s} {'calls':>6s} {'cuBLAS µs':>10s} {'best µs':>8s} {'ratio':>6s}  best")
    for _, key, count, base, best, name in sorted(rows, reverse=True):
        print(f"{key[:70]:70s} {count:6d} {base:10.2f} {best:8.2f} {best / base:6.2f}  {name}")
    print(f"\nΣ per token over {tokens} tokens: cuBLAS {base_sum:.1f} µs, best {best_sum:.1f} µs "
          f"= {best_sum / base_sum:.3f}×")


if __name__ == "__main__":
    main()
