"""Each decode-layer site of `matprobe run --model M --layer` reports, one line a
spec: the baseline's time, the best of ours, triton.gemv_decode's best (the fused
kernel) and the torch.compile peer, each as time and ratio to the baseline with its
95 % interval from the same interleaved rounds (benchmarks/layer_sites_gpu.sh).

    python3 benchmarks/layer_sites_summary.py RUN.json [RUN.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "—"
    if row["status"] != "pass":
        return f"{row['status'].upper()} {row['variant_id']}"
    ratio = row.get("vs_baseline_interleaved") or {}
    us = row["clocks"]["device"]["median_us"]
    if not ratio:
        return f"{us:.2f} µs"
    return f"{us:.2f} µs {ratio['median']:.3f}× [{ratio['lo']:.3f}–{ratio['hi']:.3f}]"


def _best(rows: list[dict[str, Any]], family: str) -> dict[str, Any] | None:
    mine = [r for r in rows if r["family"] == family]
    passed = [r for r in mine if r["status"] == "pass" and r["clocks"].get("device")]
    if passed:
        return min(passed, key=lambda r: r["clocks"]["device"]["median_us"])
    return mine[0] if mine else None


def main() -> None:
    for path in sys.argv[1:]:
        report = json.loads(Path(path).read_text())
        rows = [r for s in report["specs"] for r in s["results"]]
        states = {st: sum(r["status"] == st for r in rows) for st in ("pass", "fail", "error")}
        print(f"== {Path(path).stem}: run {report['seconds']:.1f} s, {len(rows)} rows {states}")
        for section in report["specs"]:
            results = section["results"]
            best = section.get("best") or "—"
            ratio = section.get("best_ratio") or {}
            best_text = (
                f"{best} {section['best_us']:.2f} µs {ratio['median']:.3f}× "
                f"[{ratio['lo']:.3f}–{ratio['hi']:.3f}]"
                if ratio
                else best
            )
            base = section.get("baseline_us")
            print(f"  {section['spec']['key']}")
            print(f"    baseline {section.get('baseline')} {base or 0:.2f} µs; best {best_text}")
            print(f"    gemv_decode {_cell(_best(results, 'triton.gemv_decode'))}; "
                  f"torch.compile {_cell(_best(results, 'torch.compile'))}")  # fmt: skip
            bad = [r for r in results if r["status"] != "pass"]
            for r in bad[:4]:
                print(f"    {r['status'].upper()} {r['variant_id']}: {r['reason'][:160]}")


if __name__ == "__main__":
    main()
