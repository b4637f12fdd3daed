"""Reports of a run: per spec, every variant ranked by the device clock, in the
spirit of ``seeds/002_…`` but without its defects — a FAIL is shown loudly and
never ranked, unsupported pairs are listed apart (not counted as failures),
and every time comes with its spread and sample count.

One :class:`Report` model, four renderings: terminal text, Markdown, JSON and
CSV (the last two carry the raw samples).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from matprobe.harness.device import DeviceInfo
from matprobe.harness.results import PairResult, Status
from matprobe.harness.runner import PairState, Plan, RunOutcome
from matprobe.harness.timing import TimingPolicy
from matprobe.spec import MatmulSpec

#: host round trip at least this many times the device time: launch-bound
HOST_GAP_FACTOR = 3.0


@dataclass(frozen=True)
class Row:
    result: PairResult
    tags: tuple[str, ...]
    device_us: float | None
    vs_baseline: float | None
    vs_production: float | None
    gbps: float | None
    pct_read: float | None
    tflops: float | None


@dataclass(frozen=True)
class SpecSection:
    spec: MatmulSpec
    rows: tuple[Row, ...]  # PASS ranked by device time, then FAIL, then ERROR
    unsupported: tuple[tuple[str, str], ...]  # (variant id, reason)
    baseline_id: str | None
    best_id: str | None
    baseline_us: float | None
    best_us: float | None

    @property
    def count(self) -> int:
        return self.spec.provenance.count if self.spec.provenance else 0

    @property
    def production_us(self) -> float | None:
        prov = self.spec.provenance
        return prov.avg_ms * 1000.0 if prov and prov.avg_ms > 0 else None

    @property
    def saving_us(self) -> float | None:
        if self.baseline_us is None or self.best_us is None:
            return None
        return self.baseline_us - self.best_us

    @property
    def best_is_pdl(self) -> bool:
        """The winner launches with programmatic dependent launch (pdl=1): its
        figure includes overlap with the previous call."""
        return any(r.result.variant_id == self.best_id and r.result.params.get("pdl")
                   for r in self.rows)

    def stand_alone_saving_us(self) -> float | None:
        """The saving with pdl=1 variants left out (stand-alone launches only)."""
        times = [r.device_us for r in self.rows
                 if r.result.status is Status.PASS and r.device_us is not None
                 and not r.result.params.get("pdl")]
        if self.baseline_us is None or not times:
            return None
        return max(0.0, self.baseline_us - min(times))


@dataclass
class Report:
    sections: list[SpecSection]
    device: DeviceInfo
    policy: TimingPolicy
    plan_summary: str
    run_id: int
    seconds: float
    interrupted: bool
    peaks: Mapping[str, float] | None = None
    tokens: int | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def impact_ms(self) -> float:
        return sum((s.saving_us or 0.0) * s.count for s in self.sections) / 1000.0

    def stand_alone_impact_ms(self) -> float | None:
        """:meth:`impact_ms` without pdl=1 variants; None when no winner is one."""
        if not any(s.best_is_pdl for s in self.sections):
            return None
        return sum((s.stand_alone_saving_us() or 0.0) * s.count
                   for s in self.sections) / 1000.0


def _matches(target: str | None, result: PairResult) -> bool:
    return target is not None and (result.variant_id == target or result.family == target)


def _rank_key(row: Row) -> tuple[int, float, str]:
    order = {Status.PASS: 0, Status.FAIL: 1, Status.ERROR: 2}[row.result.status]
    return (order, row.device_us if row.device_us is not None else float("inf"),
            row.result.variant_id)


def build_report(
    plan: Plan,
    outcome: RunOutcome,
    *,
    baselines: Mapping[str, str | None],
    device: DeviceInfo,
    policy: TimingPolicy,
    peaks: Mapping[str, float] | None = None,
    tokens: int | None = None,
    source: str = "",
) -> Report:
    """Group the plan's pairs by spec (profile order) and rank each spec's results."""
    specs: dict[str, MatmulSpec] = {}
    unsupported: dict[str, list[tuple[str, str]]] = {}
    for pair in plan.pairs:
        key = pair.spec.key()
        specs.setdefault(key, pair.spec)
        unsupported.setdefault(key, [])
        if pair.state is PairState.UNSUPPORTED:
            unsupported[key].append((pair.variant.id, pair.reason))
    sections = []
    for key, spec in specs.items():
        results = [r for (k, _), r in outcome.results.items() if k == key]
        target = baselines.get(spec.kind)
        base = next((r for r in results if r.status is Status.PASS and _matches(target, r)
                     and r.clocks.device), None)
        base_us = base.clocks.device.median_us if base and base.clocks.device else None
        rows = [_row(spec, r, base_us, peaks, target) for r in results]
        rows.sort(key=_rank_key)
        timed = [r for r in rows if r.result.status is Status.PASS and r.device_us is not None]
        best = timed[0] if timed else None
        best_host = min((r for r in rows if r.result.status is Status.PASS
                         and r.result.clocks.host), default=None,
                        key=lambda r: r.result.clocks.host.median_us)  # type: ignore[union-attr]
        rows = [_tagged(r, best, best_host) for r in rows]
        sections.append(SpecSection(
            spec=spec,
            rows=tuple(rows),
            unsupported=tuple(unsupported[key]),
            baseline_id=base.variant_id if base else target,
            best_id=best.result.variant_id if best else None,
            baseline_us=base_us,
            best_us=best.device_us if best else None,
        ))
    return Report(sections, device, policy, plan.summary(), outcome.run_id, outcome.seconds,
                  outcome.interrupted, peaks, tokens, source)


def _row(spec: MatmulSpec, result: PairResult, base_us: float | None,
         peaks: Mapping[str, float] | None, baseline_target: str | None) -> Row:
    clock = result.clocks.device
    device_us = clock.median_us if clock and result.status is Status.PASS else None
    gbps = pct = tflops = vs_base = vs_prod = None
    if device_us:
        seconds = device_us * 1e-6
        if spec.is_complete and spec.dtype:
            gbps = spec.min_bytes() / seconds / 1e9
            if peaks and peaks.get("read_gbps"):
                pct = 100.0 * gbps / peaks["read_gbps"]
        if spec.is_complete:
            tflops = spec.flops() / seconds / 1e12
        if base_us:
            vs_base = device_us / base_us
        prov = spec.provenance
        if prov and prov.avg_ms > 0:
            vs_prod = device_us / (prov.avg_ms * 1000.0)
    tags = []
    if _matches(baseline_target, result):
        tags.append("baseline")
    if result.status is not Status.PASS:
        tags.append(result.status.value.upper())
    return Row(result, tuple(tags), device_us, vs_base, vs_prod, gbps, pct, tflops)


def _tagged(row: Row, best: Row | None, best_host: Row | None) -> Row:
    tags = list(row.tags)
    if best is not None and row is best:
        tags.append("best-device")
    if best_host is not None and row is best_host:
        tags.append("best-host")
    host = row.result.clocks.host
    if row.device_us and host and host.median_us >= HOST_GAP_FACTOR * row.device_us:
        tags.append("host-gap")
    return Row(row.result, tuple(tags), row.device_us, row.vs_baseline, row.vs_production,
               row.gbps, row.pct_read, row.tflops)


# ---- formatting helpers ------------------------------------------------------------


def _us(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _clock_cell(result: PairResult, name: str) -> str:
    clock = getattr(result.clocks, name)
    return "-" if clock is None else f"{clock.median_us:.2f}"


def _device_cell(result: PairResult) -> str:
    clock = result.clocks.device
    if clock is None:
        return "-"
    return f"{clock.median_us:.2f} ({clock.p10_us:.2f}–{clock.p90_us:.2f}, n={clock.n})"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


HEADERS = ["variant", "verdict", "device µs (p10–p90, n)", "hot µs", "host µs", "GB/s",
           "%read", "TFLOP/s", "vs base", "vs prod", "norm err", "max rel", "tags"]


def _cells(row: Row) -> list[str]:
    r = row.result
    return [
        r.variant_id,
        r.status.value.upper(),
        _device_cell(r) if r.status is Status.PASS else "-",
        _clock_cell(r, "hot"),
        _clock_cell(r, "host"),
        "-" if row.gbps is None else f"{row.gbps:.0f}",
        "-" if row.pct_read is None else f"{row.pct_read:.0f}%",
        "-" if row.tflops is None else f"{row.tflops:.2f}",
        _ratio(row.vs_baseline),
        _ratio(row.vs_production),
        _sci(r.metrics.norm_rel if r.metrics else None),
        _sci(r.metrics.max_rel if r.metrics else None),
        " ".join(f"[{t}]" for t in row.tags),
    ]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    for row in rows:
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)


def _header_lines(report: Report) -> list[str]:
    d = report.device
    cap = f" sm_{d.capability[0]}{d.capability[1]}" if d.capability else ""
    versions = ", ".join(f"{k} {v}" for k, v in sorted(d.versions.items()))
    lines = [
        f"matprobe run {report.run_id} on {d.name} ({d.kind}{cap}"
        + (f", driver {d.driver}" if d.driver else "") + f"); {versions}",
        f"plan: {report.plan_summary}; {report.seconds:.1f} s"
        + ("; INTERRUPTED: partial results" if report.interrupted else ""),
    ]
    if report.peaks:
        lines.append(f"measured peaks: copy {report.peaks.get('copy_gbps', 0):.0f} GB/s "
                     f"(read+write), streaming read {report.peaks.get('read_gbps', 0):.0f} GB/s")
    p = report.policy
    clock = (f"device = CUDA-graph replay of ≥ {p.min_calls_per_sample} calls, inputs rotated "
             f"over > {p.cold_l2_factor:g}× L2 (cold)" if d.kind == "cuda"
             else "device = wall time per call on the CPU")
    lines.append(f"timing policy {p.fingerprint}: {clock}; ≥ {p.min_samples} samples, stop at "
                 f"spread < {p.target_spread:.0%} or {p.budget_s:g} s; {p.trials} validation "
                 f"trials vs float64")
    lines.extend(report.notes)
    return lines


def _spec_lines(section: SpecSection) -> list[str]:
    spec = section.spec
    parts = []
    if section.count:
        per = "per token" if spec.provenance and not spec.provenance.backends else "in the profile"
        parts.append(f"{section.count} calls {per}")
    prov = spec.provenance
    if prov and prov.avg_ms > 0:
        parts.append(f"production {prov.main_backend} {prov.avg_ms * 1000:.1f} µs avg "
                     f"(another device's figure)")
    if spec.is_complete and spec.dtype:
        parts.append(f"{spec.min_bytes() / 1e6:.3f} MB, {spec.flops() / 1e6:.3f} MFLOP per call")
    return parts


def _failure_lines(section: SpecSection) -> list[str]:
    return [f"  ✗ {row.result.variant_id}: {row.result.status.value.upper()} — "
            f"{row.result.reason}" for row in section.rows if row.result.status is not Status.PASS]


def _notes(section: SpecSection) -> list[str]:
    seen: dict[str, list[str]] = {}
    for row in section.rows:
        for note in row.result.clocks.notes:
            seen.setdefault(note, []).append(row.result.variant_id)
    return [f"  note: {note} ({', '.join(ids)})" for note, ids in seen.items()]


def _unsupported_line(section: SpecSection) -> str:
    if not section.unsupported:
        return ""
    grouped: dict[str, list[str]] = {}
    for variant_id, reason in section.unsupported:
        grouped.setdefault(reason, []).append(variant_id)
    text = "; ".join(f"{len(ids)} × {reason}" for reason, ids in grouped.items())
    return f"  unsupported (not failures): {text}"


def short_label(spec: MatmulSpec) -> str:
    """``matmul 1×9728×896 NT f16``: op, m×n×k (batch× when > 1), layout, dtype."""
    layout = ("T" if spec.tA else "N") + ("T" if spec.tB else "N")
    batch = f"{spec.batch}×" if spec.batch and spec.batch > 1 else ""
    extra = "+bias" if spec.has_bias else ""
    if spec.alpha is not None and spec.alpha != 1.0:
        extra += f" α={spec.alpha:g}"
    return (f"{spec.kind} {batch}{spec.m}×{spec.n_total}×{spec.k} {layout}{extra} "
            f"{spec.dtype or '?'}")


def _impact_rows(report: Report) -> list[list[str]]:
    """Specs where a validated variant beats the baseline, biggest saving first."""
    rows = []
    for s in sorted(report.sections, key=lambda s: -((s.saving_us or 0) * s.count)):
        if s.saving_us is None or s.saving_us <= 0:
            continue
        per_token = (f"{s.saving_us * s.count / report.tokens:.2f}" if report.tokens else "-")
        rows.append([
            short_label(s.spec), str(s.count), _us(s.baseline_us), _us(s.best_us),
            s.best_id or "-", _us(s.saving_us), f"{s.saving_us * s.count / 1000:.3f}", per_token,
        ])
    return rows


def _baseline_best_count(report: Report) -> int:
    return sum(1 for s in report.sections if s.saving_us is not None and s.saving_us <= 0)


IMPACT_HEADERS = ["shape", "count", "baseline µs", "best µs", "best variant", "saved µs/call",
                  "saved ms/run", "saved µs/token"]


def _impact_total(report: Report) -> str:
    def saved(total_ms: float) -> str:
        text = f"{total_ms:.3f} ms saved per profiled run"
        if report.tokens:
            text += f" = {total_ms * 1000 / report.tokens:.1f} µs per token"
        return text

    text = f"total: {saved(report.impact_ms())}"
    if report.tokens:
        text += f" over {report.tokens} tokens"
    text += " (device clock, best validated variant vs baseline)"
    stand_alone = report.stand_alone_impact_ms()
    if stand_alone is not None:
        text += f"; without pdl1 variants (stand-alone launches): {saved(stand_alone)}"
    return text


SUMMARY_HEADERS = ["shape", "count", "best variant", "best µs", "baseline µs", "speed-up",
                   "pass", "fail", "error", "unsupported"]


def _summary_rows(report: Report) -> list[list[str]]:
    """One line a spec: who wins, by how much, and how many variants did what."""
    rows = []
    for s in report.sections:
        statuses = [row.result.status for row in s.rows]
        speedup = (f"{s.baseline_us / s.best_us:.2f}×" if s.baseline_us and s.best_us else "-")
        rows.append([
            short_label(s.spec), str(s.count), s.best_id or "-", _us(s.best_us),
            _us(s.baseline_us), speedup, str(statuses.count(Status.PASS)),
            str(statuses.count(Status.FAIL)), str(statuses.count(Status.ERROR)),
            str(len(s.unsupported)),
        ])
    return rows


def render_terminal(report: Report) -> str:
    out = _header_lines(report)
    for section in report.sections:
        out.append("")
        out.append(f"== {section.spec.key()}")
        details = _spec_lines(section)
        if details:
            out.append("   " + " · ".join(details))
        if section.rows:
            out.append(_table(HEADERS, [_cells(r) for r in section.rows]))
        else:
            out.append("  (no supported variant)")
        out.extend(_failure_lines(section))
        out.extend(_notes(section))
        if line := _unsupported_line(section):
            out.append(line)
    out.append("")
    out.append("Summary (device clock):")
    out.append(_table(SUMMARY_HEADERS, _summary_rows(report)))
    out.append("")
    out.append("Impact (call count × (baseline − best validated variant), device clock):")
    impact = _impact_rows(report)
    if impact:
        out.append(_table(IMPACT_HEADERS, impact))
    out.append(f"  the baseline is the fastest on {_baseline_best_count(report)} of "
               f"{len(report.sections)} specs")
    out.append("  " + _impact_total(report))
    return "\n".join(out) + "\n"


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    out = ["# matprobe report", ""]
    out += [f"- {line}" for line in _header_lines(report)]
    for section in report.sections:
        out += ["", f"## `{section.spec.key()}`", ""]
        details = _spec_lines(section)
        if details:
            out += [" · ".join(details), ""]
        if section.rows:
            out.append(_md_table(HEADERS, [_cells(r) for r in section.rows]))
        failures = _failure_lines(section)
        if failures:
            out += [""] + [f"- **{line.strip()}**" for line in failures]
        out += [f"- {line.strip()}" for line in _notes(section)]
        if line := _unsupported_line(section):
            out += ["", f"- {line.strip()}"]
    out += ["", "## Summary", "", _md_table(SUMMARY_HEADERS, _summary_rows(report))]
    impact = _impact_rows(report)
    out += ["", "## Impact", ""]
    if impact:
        out += [_md_table(IMPACT_HEADERS, impact), ""]
    out += [f"The baseline is the fastest on {_baseline_best_count(report)} of "
            f"{len(report.sections)} specs. {_impact_total(report)}."]
    return "\n".join(out) + "\n"


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
        "impact_ms_per_run": report.impact_ms(),
        "stand_alone_impact_ms_per_run": report.stand_alone_impact_ms(),
        "specs": [
            {
                "spec": s.spec.to_dict(),
                "baseline": s.baseline_id,
                "best": s.best_id,
                "baseline_us": s.baseline_us,
                "best_us": s.best_us,
                "results": [
                    {**row.result.to_dict(), "tags": list(row.tags), "gbps": row.gbps,
                     "pct_read_peak": row.pct_read, "tflops": row.tflops,
                     "vs_baseline": row.vs_baseline, "vs_production": row.vs_production}
                    for row in s.rows
                ],
                "unsupported": [{"variant": v, "reason": r} for v, r in s.unsupported],
            }
            for s in report.sections
        ],
    }


CSV_FIELDS = ["spec_key", "variant_id", "status", "reason", "device_median_us", "device_p10_us",
              "device_p90_us", "device_n", "hot_median_us", "host_median_us", "kernel_median_us",
              "gbps", "pct_read_peak", "tflops", "vs_baseline", "vs_production", "norm_rel",
              "max_rel", "max_abs", "tags", "device_samples_us"]


def to_csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for section in report.sections:
        for row in section.rows:
            r, c = row.result, row.result.clocks
            writer.writerow({
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
                "tflops": row.tflops or "",
                "vs_baseline": row.vs_baseline or "",
                "vs_production": row.vs_production or "",
                "norm_rel": r.metrics.norm_rel if r.metrics else "",
                "max_rel": r.metrics.max_rel if r.metrics else "",
                "max_abs": r.metrics.max_abs if r.metrics else "",
                "tags": " ".join(row.tags),
                "device_samples_us": json.dumps(list(c.device.samples)) if c.device else "",
            })
    return buffer.getvalue()
