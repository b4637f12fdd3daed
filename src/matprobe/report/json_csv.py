"""The report for programs: JSON (the run, every spec's verdict and figures,
every result with its raw samples) and CSV (one line a result)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from matprobe.report.cells import verdict
from matprobe.report.model import Report, Row, SpecSection


def _result_json(row: Row) -> dict[str, Any]:
    return {
        **row.result.to_dict(),
        "tags": list(row.tags),
        "peer": row.peer,
        "gbps": row.gbps,
        "pct_read_peak": row.pct_read,
        "exceeds_read_ceiling": row.exceeds_read_ceiling,
        "tflops": row.tflops,
        "vs_baseline": row.vs_baseline,
        "vs_baseline_interleaved": row.ratio.to_dict() if row.ratio else None,
        "vs_production": row.vs_production,
    }


def _section_json(report: Report, s: SpecSection) -> dict[str, Any]:
    return {
        "spec": s.spec.to_dict(),
        "baseline": s.baseline_id,
        "best": s.best_id,
        "baseline_us": s.baseline_us,
        "best_us": s.best_us,
        "best_ratio": s.best_ratio.to_dict() if s.best_ratio else None,
        "interleaved": s.interleaved,
        "verdict": verdict(s),
        "saving_us": s.saving_us,
        "calls_per_token": report.calls_per_token(s),
        "best_peer": s.best_peer_id,
        "best_peer_us": s.best_peer_us,
        "results": [_result_json(row) for row in s.rows],
        "unsupported": [{"variant": v, "reason": r} for v, r in s.unsupported],
    }


def to_json(report: Report) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "device": report.device.to_dict(),
        "policy": {"fingerprint": report.policy.fingerprint, **report.policy.__dict__},
        "plan": report.plan_summary,
        "seconds": report.seconds,
        "interrupted": report.interrupted,
        "peaks": dict(report.peaks) if report.peaks else None,
        "tokens": report.tokens,
        "per_token_basis": report.per_token_basis,
        "notes": list(report.notes),
        "impact_ms_per_run": report.impact_ms(),
        "impact_us_per_token": report.impact_us_per_token(),
        "specs": [_section_json(report, s) for s in report.sections],
    }


CSV_FIELDS = [
    "spec_key",
    "variant_id",
    "status",
    "reason",
    "device_median_us",
    "device_p10_us",
    "device_p90_us",
    "device_n",
    "hot_median_us",
    "host_median_us",
    "kernel_median_us",
    "gbps",
    "pct_read_peak",
    "exceeds_read_ceiling",
    "tflops",
    "vs_baseline",
    "ratio_median",
    "ratio_lo",
    "ratio_hi",
    "vs_production",
    "norm_rel",
    "max_rel",
    "max_abs",
    "peer",
    "tags",
    "device_samples_us",
]


def to_csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for section in report.sections:
        for row in section.rows:
            r, c, ratio = row.result, row.result.clocks, row.ratio
            writer.writerow(
                {
                    "spec_key": r.spec_key,
                    "variant_id": r.variant_id,
                    "status": r.status.value,
                    "reason": r.reason,
                    "device_median_us": c.device.median_us if c.device else "",
                    "device_p10_us": c.device.p10_us if c.device else "",
                    "device_p90_us": c.device.p90_us if c.device else "",
                    "device_n": c.device.n if c.device else "",
                    "hot_median_us": c.hot.median_us if c.hot else "",
                    "host_median_us": c.host.median_us if c.host else "",
                    "kernel_median_us": c.kernel.median_us if c.kernel else "",
                    "gbps": row.gbps or "",
                    "pct_read_peak": row.pct_read or "",
                    "exceeds_read_ceiling": int(row.exceeds_read_ceiling),
                    "tflops": row.tflops or "",
                    "vs_baseline": row.vs_baseline or "",
                    "ratio_median": ratio.median if ratio else "",
                    "ratio_lo": ratio.lo if ratio else "",
                    "ratio_hi": ratio.hi if ratio else "",
                    "vs_production": row.vs_production or "",
                    "norm_rel": r.metrics.norm_rel if r.metrics else "",
                    "max_rel": r.metrics.max_rel if r.metrics else "",
                    "max_abs": r.metrics.max_abs if r.metrics else "",
                    "peer": int(row.peer),
                    "tags": " ".join(row.tags),
                    "device_samples_us": json.dumps(list(c.device.samples)) if c.device else "",
                }
            )
    return buffer.getvalue()
