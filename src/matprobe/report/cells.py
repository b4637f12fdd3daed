"""What every human-readable rendering of a report shares: its cells (times,
ratios, verdicts), its tables' headers and rows (per spec, the summary, the
impact) and its lines (the header, a spec's details, failures, notes, the
verdict and the total saved). The terminal text (:mod:`~matprobe.report.text`),
Markdown (:mod:`~matprobe.report.markdown`) and HTML
(:mod:`~matprobe.report.html`) lay them out each in its own way; text from a
profile is escaped there, by :func:`term_safe` or :func:`md_safe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matprobe.measure.results import PairResult, Ratio, Status
from matprobe.report.model import Report, Row, SpecSection
from matprobe.spec import MatmulSpec


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


def ratio_cell(ratio: Ratio) -> str:
    """``0.79× [0.78–0.80]``: median and interval of candidate ÷ baseline."""
    return f"{ratio.median:.2f}× [{ratio.lo:.2f}–{ratio.hi:.2f}]"


def _vs_base_cell(row: Row) -> str:
    return ratio_cell(row.ratio) if row.ratio is not None else _ratio(row.vs_baseline)


def _pct_read_cell(row: Row) -> str:
    if row.pct_read is None:
        return "-"
    return ">100%!" if row.exceeds_read_ceiling else f"{row.pct_read:.0f}%"


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


HEADERS = [
    "variant",
    "verdict",
    "device µs (p10–p90, n)",
    "hot µs",
    "host µs",
    "GB/s",
    "%read",
    "TFLOP/s",
    "vs base",
    "vs prod",
    "norm err",
    "max rel",
    "tags",
]


def row_cells(row: Row) -> list[str]:
    r = row.result
    return [
        r.variant_id,
        r.status.value.upper(),
        _device_cell(r) if r.status is Status.PASS else "-",
        _clock_cell(r, "hot"),
        _clock_cell(r, "host"),
        "-" if row.gbps is None else f"{row.gbps:.0f}",
        _pct_read_cell(row),
        "-" if row.tflops is None else f"{row.tflops:.2f}",
        _vs_base_cell(row),
        _ratio(row.vs_production),
        _sci(r.metrics.norm_rel if r.metrics else None),
        _sci(r.metrics.max_rel if r.metrics else None),
        " ".join(f"[{t}]" for t in row.tags),
    ]


def _peaks_line(peaks: Mapping[str, Any]) -> str:
    def num(key: str) -> float:
        return float(peaks.get(key) or 0.0)

    line = (
        f"measured peaks (this run): copy {num('copy_gbps'):.0f} GB/s (read+write), "
        f"streaming read {num('read_gbps'):.0f} GB/s"
    )
    if peaks.get("read_config"):
        line += f" ({peaks['read_config']}, {num('size_bytes') / 2**20:.0f} MiB buffer)"
    if peaks.get("torch_sum_gbps"):
        line += f"; torch.sum {num('torch_sum_gbps'):.0f} GB/s"
    return line


def header_lines(report: Report) -> list[str]:
    d = report.device
    cap = f" sm_{d.capability[0]}{d.capability[1]}" if d.capability else ""
    versions = ", ".join(f"{k} {v}" for k, v in sorted(d.versions.items()))
    lines = [
        f"matprobe run {report.run_id} on {d.name} ({d.kind}{cap}"
        + (f", driver {d.driver}" if d.driver else "")
        + f"); {versions}",
        f"plan: {report.plan_summary}; {report.seconds:.1f} s"
        + ("; INTERRUPTED: partial results" if report.interrupted else ""),
    ]
    if report.peaks:
        lines.append(_peaks_line(report.peaks))
    p = report.policy
    clock = (
        f"device = per call after a producer kernel that writes its input (producer "
        f"time subtracted), CUDA-graph replays of ≥ {p.min_calls_per_sample} calls, inputs "
        f"rotated over > {p.cold_l2_factor:g}× L2 (cold), interleaved with the baseline"
        if d.kind == "cuda"
        else "device = wall time per call on the CPU, interleaved with the baseline"
    )
    lines.append(
        f"timing policy {p.fingerprint}: {clock}; ≥ {p.min_samples} rounds, stop at "
        f"spread < {p.target_spread:.0%} and ratio ±{p.target_spread:.0%} or "
        f"{p.budget_s:g} s; {p.trials} validation trials vs float64; every call of "
        f"every timed replay judged vs float64, each with a fresh x and a prefilled output"
        + (
            f"; seed {p.seed} (run --seed {p.seed} --force replays it)"
            if p.seed is not None
            else ""
        )
    )
    lines.extend(report.notes)
    return lines


def spec_lines(section: SpecSection, report: Report) -> list[str]:
    spec = section.spec
    parts = []
    if section.count:
        if spec.provenance and not spec.provenance.backends:
            parts.append(f"{section.count} calls per token")
        else:
            per_token = report.calls_per_token(section)
            parts.append(
                f"{section.count} calls in the profile"
                + (f" ({per_token:.3g} per token)" if per_token is not None else "")
            )
    prov = spec.provenance
    if prov and prov.avg_ms > 0:
        parts.append(
            f"production {prov.main_backend} {prov.avg_ms * 1000:.1f} µs avg "
            f"(another device's figure)"
        )
    if spec.is_complete and spec.dtype:
        parts.append(f"{spec.min_bytes() / 1e6:.3f} MB, {spec.flops() / 1e6:.3f} MFLOP per call")
    return parts


def failure_lines(section: SpecSection) -> list[str]:
    return [
        f"  ✗ {row.result.variant_id}: {row.result.status.value.upper()} — {row.result.reason}"
        for row in section.rows
        if row.result.status is not Status.PASS
    ]


def section_notes(section: SpecSection) -> list[str]:
    by_note = section.variants_by_note()
    return [f"  note: {note} ({', '.join(ids)})" for note, ids in by_note.items()]


def unsupported_line(section: SpecSection) -> str:
    if not section.unsupported:
        return ""
    by_reason = section.unsupported_by_reason()
    text = "; ".join(f"{len(ids)} × {reason}" for reason, ids in by_reason.items())
    return f"  unsupported (not failures): {text}"


def short_label(spec: MatmulSpec) -> str:
    """``matmul 1×9728×896 NT f16``: op (``norm+`` with an RMSNorm prologue), m×n×k
    (batch× when > 1), layout, epilogue, dtype."""
    layout = ("T" if spec.tA else "N") + ("T" if spec.tB else "N")
    batch = f"{spec.batch}×" if spec.batch and spec.batch > 1 else ""
    extra = "+bias" if spec.has_bias else ""
    if spec.alpha is not None and spec.alpha != 1.0:
        extra += f" α={spec.alpha:g}"
    if spec.reads_c0:
        extra += "+C₀" if spec.beta_value == 1.0 else f" β={spec.beta_value:g}"
    kind = f"norm+{spec.kind}" if spec.rmsnorm is not None else spec.kind
    return f"{kind} {batch}{spec.m}×{spec.n_total}×{spec.k} {layout}{extra} {spec.dtype or '?'}"


def verdict(section: SpecSection) -> str:
    """``faster``, ``same`` (interval holds 1.0), ``slower`` (the baseline is at least
    as fast) or ``unjudged`` (no timed variant of ours, or no baseline time)."""
    if section.best_id is None:
        return "unjudged"
    if section.same_within_noise:
        return "same"
    saving = section.saving_us
    if saving is None:
        return "unjudged"
    return "faster" if saving > 0 else "slower"


def impact_rows(report: Report) -> list[list[str]]:
    """Specs where our validated variant beats the baseline, biggest saving first."""
    rows = []
    for s in sorted(report.sections, key=lambda s: -s.gain_us * s.count):
        if s.gain_us <= 0:
            continue
        ratio = s.best_ratio
        base_us = ratio.baseline_us if ratio else s.baseline_us
        best_us = ratio.baseline_us * ratio.median if ratio else s.best_us
        weight = report.calls_per_token(s)
        rows.append(
            [
                short_label(s.spec),
                str(s.count),
                "-" if weight is None else f"{weight:.3g}",
                _us(base_us),
                _us(best_us),
                s.best_id or "-",
                _us(s.gain_us) + ("" if ratio else " (not interleaved)"),
                f"{s.gain_us * s.count / 1000:.3f}",
                "-" if weight is None else f"{s.gain_us * weight:.2f}",
            ]
        )
    return rows


def verdict_line(report: Report) -> str:
    counts = {name: 0 for name in ("faster", "same", "slower", "unjudged")}
    for section in report.sections:
        counts[verdict(section)] += 1
    return (
        f"ours beat the baseline on {counts['faster']} of {len(report.sections)} specs; "
        f"SAME within noise on {counts['same']}; the baseline is at least as fast on "
        f"{counts['slower']}; not judged on {counts['unjudged']} (no validated, timed "
        f"variant of ours, or no baseline time)"
    )


IMPACT_HEADERS = [
    "shape",
    "count",
    "calls/token",
    "baseline µs",
    "best µs",
    "best variant",
    "saved µs/call",
    "saved ms/run",
    "saved µs/token",
]


def impact_total(report: Report) -> str:
    def saved(total_ms: float, per_token_us: float | None) -> str:
        text = f"{total_ms:.3f} ms saved per profiled run"
        if per_token_us is not None:
            text += f" = {per_token_us:.1f} µs per token"
        return text

    if all(verdict(s) == "unjudged" for s in report.sections):
        return "total: no spec judged, so no saving is claimed"
    text = f"total: {saved(report.impact_ms(), report.impact_us_per_token())}"
    if report.tokens:
        text += f" over {report.tokens} tokens"
    text += (
        " (device clock, our best validated variant vs the baseline, interleaved ratios "
        "where measured; SAME within noise counts 0)"
    )
    return text


SUMMARY_HEADERS = [
    "shape",
    "count",
    "best variant",
    "best µs",
    "baseline µs",
    "speed-up",
    "best peer",
    "peer µs",
    "pass",
    "fail",
    "error",
    "unsupported",
]


def _inverse(value: float) -> float:
    return 1.0 / value if value > 0 else float("inf")


def _speedup_cell(section: SpecSection) -> str:
    """Baseline ÷ best: from the interleaved ratio with its interval where measured."""
    ratio = section.best_ratio
    best = section.best_row
    warning = " NOISY: spread > 50% of the median" if best and "noisy" in best.tags else ""
    if ratio is not None:
        # The column's figure either way (baseline ÷ best): a SAME cell once showed
        # best ÷ baseline, so a best 1.25× faster in the median read "0.80×".
        inverse = (
            f"{_inverse(ratio.median):.2f}× [{_inverse(ratio.hi):.2f}–{_inverse(ratio.lo):.2f}]"
        )
        if section.same_within_noise:
            return f"SAME within noise ({inverse})"
        return inverse + warning
    if section.baseline_us and section.best_us:
        return f"{section.baseline_us / section.best_us:.2f}× (not interleaved){warning}"
    return "-"


def summary_rows(report: Report) -> list[list[str]]:
    """One line a spec: which of ours wins, by how much, the best peer, and how many
    variants did what."""
    rows = []
    for s in report.sections:
        statuses = [row.result.status for row in s.rows]
        rows.append(
            [
                short_label(s.spec),
                str(s.count),
                s.best_id or "-",
                _us(s.best_us),
                _us(s.baseline_us),
                _speedup_cell(s),
                s.best_peer_id or "-",
                _us(s.best_peer_us),
                str(statuses.count(Status.PASS)),
                str(statuses.count(Status.FAIL)),
                str(statuses.count(Status.ERROR)),
                str(len(s.unsupported)),
            ]
        )
    return rows


def scope_line(report: Report) -> str | None:
    """What a run on this device cannot tell, where that is not obvious: a CPU run
    validates every kernel but times only what runs natively on the CPU."""
    if report.device.kind != "cpu":
        return None
    return (
        "What this CPU run tells: which variants compute the right answer (each judged "
        "against float64; Triton kernels in the interpreter) and how the libraries that "
        "run natively compare on this CPU. What it cannot tell: which kernel wins on a "
        "GPU — interpreted kernels are validated, not timed, and CPU times say nothing "
        "of a GPU's. Rank GPU kernels with matprobe run on a CUDA machine."
    )
