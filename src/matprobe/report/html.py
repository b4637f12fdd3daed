"""The HTML report: one self-contained file that works offline.

What the text report says, as a page: the run's device, versions, policy and
notes; the summary and the impact per token; per spec a plot of every
validated variant's device time (median, p10–p90) against the baseline and
the production figure, with its share of the read ceiling as a roofline-style
bar; the full table with FAIL/ERROR reasons and the unsupported pairs.

Plots: :mod:`matprobe.report.svg_plot` draws them as inline SVG, each mark
with its figures as a tooltip — the one plot path (an interactive plotly
renderer beside it was dropped: a second drawing of the same figures, a 4.8 MB
script in every file and an extra to install).

Names from a profile, a manifest or a plugin are data, never markup: every
text goes through :func:`~matprobe.report.svg_plot.esc`. The page holds no
script, and its Content-Security-Policy allows none and no network access, so
even a name that slipped through could neither run nor fetch anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matprobe import __version__
from matprobe.measure.results import Status
from matprobe.report import cells
from matprobe.report.compare import (
    COMPARE_HEADERS,
    Comparison,
    change_line,
    compare_cells,
    run_line,
    shift_line,
    summary_line,
)
from matprobe.report.model import Report, Row, SpecSection
from matprobe.report.svg_plot import RatioRow, TimedRow, esc, ratio_chart, timing_chart

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;
max-width:1280px;padding:0 20px 40px;color:#1b1b1b;background:#fff}
h1{font-size:22px;margin:18px 0 6px}h2{font-size:17px;margin:28px 0 4px}
.facts,.notes{margin:4px 0;padding-left:18px}.facts li,.notes li{margin:2px 0}
code,.key{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.key{color:#555;margin:0 0 4px;word-break:break-all}
table{border-collapse:collapse;margin:8px 0;font-size:12px}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3;position:sticky;top:0}
tr.fail td{background:#fde8e8}tr.error td{background:#fff1dc}
tr.baseline td:first-child{border-left:4px solid #e67e00}
tr.best td:first-child{border-left:4px solid #2ca02c}
td.v-FASTER{color:#1a7f1a;font-weight:600}td.v-SLOWER{color:#c62828;font-weight:600}
td.v-UNSURE{color:#777}
.failures li{color:#b71c1c}
nav{columns:2;font-size:12px;margin:8px 0;padding:8px 12px;background:#fafafa;border:1px solid #eee}
nav a{display:block}
figure.plot{margin:8px 0;overflow-x:auto}
svg.chart{font-size:11px;font-family:inherit}
svg .label{text-anchor:end}svg .label.best{font-weight:600}
svg .tick,svg .axis-title,svg .empty{text-anchor:middle;fill:#444}
svg .axis{stroke:#888}svg .grid{stroke:#eee}svg .ref{stroke-dasharray:4 3;stroke-width:1.5}
svg .whisker{stroke-width:2}svg .bar-bg{fill:#f1f1f1}svg .bar{fill:#8fb8de}
svg .bar.over{fill:#d62728}svg .bar-label{fill:#111;font-size:10px}
svg .band{fill:#e8f0fb}svg .one{stroke:#333}
details{margin:6px 0}summary{cursor:pointer}
footer{margin-top:32px;color:#777;font-size:12px}
"""


#: No network, no plugins, no forms, no script.
_CSP = (
    "default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)


def _page(title: str, body: Sequence[str]) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(_CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + f"\n<footer>matprobe {esc(__version__)} · one self-contained file: it loads "
        "nothing from the network</footer>\n</body></html>\n"
    )


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], classes: Sequence[str] = ()
) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        css = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
        body.append(f"<tr{css}>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _row_class(row: Row) -> str:
    classes = []
    if row.result.status is not Status.PASS:
        classes.append(row.result.status.value)
    if row.is_baseline:
        classes.append("baseline")
    if "best-device" in row.tags:
        classes.append("best")
    return " ".join(classes)


def _kind(row: Row) -> str:
    if row.is_baseline:
        return "baseline"
    if "best-device" in row.tags:
        return "best"
    return "peer" if row.peer else "ours"


def _timed_rows(section: SpecSection) -> list[TimedRow]:
    rows = []
    for row in section.rows:
        clock = row.result.clocks.device
        if row.timed and clock is not None:
            rows.append(
                TimedRow(
                    row.result.variant_id,
                    clock.median_us,
                    clock.p10_us,
                    clock.p90_us,
                    clock.n,
                    _kind(row),
                    row.pct_read,
                )
            )
    return rows


def _production(section: SpecSection) -> tuple[float | None, str]:
    prov = section.spec.provenance
    backend = prov.main_backend if prov else None
    label = f"production ({backend}, another device)" if backend else "production"
    return section.production_us, label


def _header(report: Report) -> list[str]:
    lines = cells.header_lines(report)
    return [
        f"<h1>{esc(lines[0])}</h1>",
        '<ul class="facts">' + "".join(f"<li>{esc(line)}</li>" for line in lines[1:]) + "</ul>",
    ]


def _summary(report: Report) -> list[str]:
    out = [
        '<section id="summary"><h2>Summary</h2>',
        "<p>Device clock; best = our fastest validated variant, never a peer nor the baseline.</p>",
        _table(cells.SUMMARY_HEADERS, cells.summary_rows(report)),
        "</section>",
        '<section id="impact"><h2>Impact per token</h2>',
        "<p>Call count × (baseline − our best validated variant), device clock.</p>",
    ]
    impact = cells.impact_rows(report)
    if impact:
        out.append(_table(cells.IMPACT_HEADERS, impact))
    out.append('<ul class="notes">')
    out += [
        f"<li>{esc(line)}</li>" for line in (cells.verdict_line(report), cells.impact_total(report))
    ]
    if report.per_token_basis:
        out.append(f"<li>{esc(report.per_token_basis)}</li>")
    out += ["</ul>", "</section>"]
    return out


def _unsupported(section: SpecSection) -> str:
    if not section.unsupported:
        return ""
    items = "".join(
        f"<li>{len(ids)} × {esc(reason)}: <code>{esc(', '.join(ids))}</code></li>"
        for reason, ids in section.unsupported_by_reason().items()
    )
    return (
        f"<details><summary>{len(section.unsupported)} unsupported pairs (not failures)"
        f"</summary><ul>{items}</ul></details>"
    )


def _spec_section(report: Report, section: SpecSection, index: int) -> list[str]:
    read_ceiling = bool(report.peaks and report.peaks.get("read_gbps"))
    label = cells.short_label(section.spec)
    out = [
        f'<section class="spec" id="spec-{index}"><h2>{esc(label)}</h2>',
        f'<p class="key">{esc(section.spec.key())}</p>',
    ]
    if details := cells.spec_lines(section, report):
        out.append(f"<p>{esc(' · '.join(details))}</p>")
    production, production_label = _production(section)
    chart = timing_chart(
        f"device time per call: {label}",
        _timed_rows(section),
        baseline_us=section.baseline_us,
        production_us=production,
        production_label=production_label,
        read_ceiling=read_ceiling,
    )
    out.append(f'<figure class="plot">{chart}</figure>')
    if not read_ceiling:
        out.append("<p>% of read ceiling: no read ceiling was measured in this run (CPU).</p>")
    if section.rows:
        table = [[*cells.row_cells(row), row.result.reason] for row in section.rows]
        classes = [_row_class(row) for row in section.rows]
        out.append(_table([*cells.HEADERS, "reason"], table, classes))
    else:
        out.append("<p>(no supported variant)</p>")
    failures = [
        f"<li>✗ {esc(row.result.variant_id)}: {esc(row.result.status.value.upper())} — "
        f"{esc(row.result.reason)}</li>"
        for row in section.rows
        if row.result.status is not Status.PASS
    ]
    if failures:
        out.append('<ul class="failures">' + "".join(failures) + "</ul>")
    notes = cells.section_notes(section)
    if notes:
        out.append(
            '<ul class="notes">' + "".join(f"<li>{esc(n.strip())}</li>" for n in notes) + "</ul>"
        )
    if unsupported := _unsupported(section):
        out.append(unsupported)
    out.append("</section>")
    return out


def render_html(report: Report, *, comparison: Comparison | None = None) -> str:
    """The report as one HTML page; ``comparison`` adds its section after the summary."""
    body = _header(report)
    nav = ['<a href="#summary">Summary</a>', '<a href="#impact">Impact per token</a>']
    if comparison is not None:
        nav.append('<a href="#compare">Comparison</a>')
    nav += [
        f'<a href="#spec-{i}">{esc(cells.short_label(s.spec))}</a>'
        for i, s in enumerate(report.sections)
    ]
    body.append("<nav>" + "".join(nav) + "</nav>")
    body += _summary(report)
    if comparison is not None:
        body += compare_section(comparison)
    for i, section in enumerate(report.sections):
        body += _spec_section(report, section, i)
    return _page(f"matprobe run {report.run_id} on {report.device.name}", body)


# ---- comparison --------------------------------------------------------------------


def compare_section(c: Comparison) -> list[str]:
    """The comparison as a section: what was compared, how, a ratio chart per spec, the
    table and the pairs whose status changed."""
    out = [
        '<section id="compare"><h2>Comparison</h2><ul class="facts">',
        f"<li>A = {esc(c.a_name)}: {esc(run_line('A', c.a))}</li>",
        f"<li>B = {esc(c.b_name)}: {esc(run_line('B', c.b))}</li>",
        f"<li>{esc(c.thresholds.describe())}</li>",
        f"<li>{esc(summary_line(c))}</li>",
    ]
    if shift := shift_line(c):
        out.append(f"<li>{esc(shift)}</li>")
    out.append("</ul>")
    by_spec: dict[str, list[Any]] = {}
    for pair in c.pairs:
        by_spec.setdefault(pair.label, []).append(pair)
    for label, pairs in by_spec.items():
        rows = [RatioRow(p.variant_id, p.ratio, p.lo, p.hi, p.verdict.value) for p in pairs]
        chart = ratio_chart(f"B ÷ A: {label}", rows, c.thresholds.noise)
        out.append(f'<h3>{esc(label)}</h3><figure class="plot">{chart}</figure>')
    if c.pairs:
        cells = [compare_cells(p) for p in c.pairs]
        out.append(_verdict_table(cells))
    if c.status_changes:
        out.append('<h3>Status changed (not timed in both)</h3><ul class="failures">')
        out += [f"<li>{esc(change_line(s))}</li>" for s in c.status_changes]
        out.append("</ul>")
    out.append("</section>")
    return out


def _verdict_table(rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in COMPARE_HEADERS)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{esc(c)}</td>" for c in row[:-1])
        + f'<td class="v-{esc(row[-1])}">{esc(row[-1])}</td></tr>'
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_compare_html(c: Comparison) -> str:
    """The comparison alone, as one page."""
    return _page(f"matprobe compare: {c.a_name} → {c.b_name}", compare_section(c))
