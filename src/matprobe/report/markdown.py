"""The report as Markdown: the run's header, per spec its table, failures and
notes, then the summary and the impact. Text from a profile (spec keys, backend
names) passes :func:`md_safe` before it reaches the page."""

from __future__ import annotations

from matprobe.report import cells
from matprobe.report.model import Report
from matprobe.report.tables import md_table
from matprobe.safetext import md_safe


def render_markdown(report: Report) -> str:
    out = ["# matprobe report", ""]
    out += [f"- {md_safe(line)}" for line in cells.header_lines(report)]
    for section in report.sections:
        out += ["", f"## {md_safe(section.spec.key())}", ""]
        details = cells.spec_lines(section, report)
        if details:
            out += [md_safe(" · ".join(details)), ""]
        if section.rows:
            out.append(md_table(cells.HEADERS, [cells.row_cells(r) for r in section.rows]))
        failures = cells.failure_lines(section)
        if failures:
            out += [""] + [f"- **{md_safe(line.strip())}**" for line in failures]
        out += [f"- {md_safe(line.strip())}" for line in cells.section_notes(section)]
        if line := cells.unsupported_line(section):
            out += ["", f"- {md_safe(line.strip())}"]
    out += [
        "",
        "## Summary",
        "",
        "Best = our fastest validated variant, never a peer nor the baseline.",
        "",
        md_table(cells.SUMMARY_HEADERS, cells.summary_rows(report)),
    ]
    impact = cells.impact_rows(report)
    out += ["", "## Impact", ""]
    if impact:
        out += [md_table(cells.IMPACT_HEADERS, impact), ""]
    out += [f"{md_safe(cells.verdict_line(report))}. {md_safe(cells.impact_total(report))}."]
    if report.per_token_basis:
        out += ["", md_safe(report.per_token_basis) + "."]
    if scope := cells.scope_line(report):
        out += ["", md_safe(scope)]
    return "\n".join(out) + "\n"
