"""Wall time, judged outputs and each spec's best ratio in `matprobe run` JSON reports,
side by side (benchmarks/judged_gpu.sh: the default job before and after issue 20).

    python3 benchmarks/judged_summary.py RUN_A/report.json RUN_B/report.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    reports = [(Path(p).parent.name, json.loads(Path(p).read_text())) for p in sys.argv[1:]]
    for name, report in reports:
        rows = [r for s in report["specs"] for r in s["results"]]
        judged = sum(r["clocks"].get("judged", 0) for r in rows)
        statuses = {st: sum(r["status"] == st for r in rows) for st in ("pass", "fail", "error")}
        print(
            f"{name}: run {report['seconds']:.1f} s, {len(rows)} rows {statuses}, judged {judged}"
        )
    keys = [s["spec"]["key"] for s in reports[0][1]["specs"]]
    print("spec | " + " | ".join(f"{n}: best, best÷baseline [lo–hi]" for n, _ in reports))
    for key in keys:
        cells = []
        for _, report in reports:
            section = next((s for s in report["specs"] if s["spec"]["key"] == key), None)
            ratio = section and section.get("best_ratio")
            if not ratio:
                cells.append("-")
                continue
            best = section["best"] or "-"
            cells.append(f"{best} {ratio['median']:.3f}x [{ratio['lo']:.3f}–{ratio['hi']:.3f}]")
        print(f"{key} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
