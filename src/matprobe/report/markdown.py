"""The report as Markdown: the run's header, per spec its table, failures and
notes, then the summary and the impact. Text from a profile (spec keys, backend
names) passes :func:`md_safe` before it reaches the page."""

from __future__ import annotations

from matprobe.report.cells import (
    HEADERS,
    IMPACT_HEADERS,
    SUMMARY_HEADERS,
    _cells,
    _failure_lines,
    _header_lines,
    _impact_rows,
    _impact_total,
    _notes,
    _spec_lines,
    _summary_rows,
    _unsupported_line,
    _verdict_line,
    scope_line,
)
from matprobe.report.model import Report
from matprobe.report.tables import md_table
from matprobe.safetext import md_safe


def render_markdown(report: Report) -> str:
    out = ["# matprobe report", ""]
    out += [f"- {md_safe(line)}" for line in _header_lines(report)]
    for section in report.sections:
        out += ["", f"## {md_safe(section.spec.key())}", ""]
        details = _spec_lines(section, report)
        if details:
            out += [md_safe(" · ".join(details)), ""]
        if section.rows:
            out.append(md_table(HEADERS, [_cells(r) for r in section.rows]))
        failures = _failure_lines(section)
        if failures:
            out += [""] + [f"- **{md_safe(line.strip())}**" for line in failures]
        out += [f"- {md_safe(line.strip())}" for line in _notes(section)]
        if line := _unsupported_line(section):
            out += ["", f"- {md_safe(line.strip())}"]
    out += [
        "",
        "## Summary",
        "",
        "Best = our fastest validated variant, never a peer nor the baseline.",
        "",
        md_table(SUMMARY_HEADERS, _summary_rows(report)),
    ]
    impact = _impact_rows(report)
    out += ["", "## Impact", ""]
    if impact:
        out += [md_table(IMPACT_HEADERS, impact), ""]
    out += [f"{md_safe(_verdict_line(report))}. {md_safe(_impact_total(report))}."]
    if report.per_token_basis:
        out += ["", md_safe(report.per_token_basis) + "."]
    if scope := scope_line(report):
        out += ["", md_safe(scope)]
    return "\n".join(out) + "\n"
