"""The report as terminal text, 100 columns unless ``--wide``.

What a kernel engineer reads first, so it is built to be read in a terminal:
the tables leave out columns that hold nothing, then the least telling ones
(:mod:`matprobe.report.tables`), and the header says which; a variant's
tags sit beside its verdict; spec keys and long lines break between fields and
words, never inside one. Notes and the reasons pairs are unsupported — the same
few sentences under every spec of a run — are cited by number in each section
and said once, after the last. ``width=None`` (``--wide``) prints every column
and every note in place, one line each: the layout of the Markdown report.

The last lines say what the run can tell: its verdict, its saving, and on the
CPU what a CPU run cannot tell (:func:`matprobe.report.cells.scope_line`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from matprobe.measure.results import Status
from matprobe.report import cells
from matprobe.report.model import Report, Row, SpecSection, pair_base_tag
from matprobe.report.tables import (
    REPORT_COLUMNS,
    Column,
    plain_table,
    render_table,
    wrap,
    wrap_at,
)

#: A variant's row in a narrow table; drop ranks: lowest is left out first.
NARROW_COLUMNS = (
    Column("variant", breaks="/_"),
    Column("verdict", breaks=" "),
    Column("device µs"),
    Column("spread", 7),  # (p90 − p10) / median, what the stop rule watches
    Column("n", 6),
    Column("hot µs", 4),
    Column("host µs", 5),
    Column("GB/s", 1),
    Column("%read", 9),
    Column("TFLOP/s", 2),
    Column("vs base", breaks=" "),
    Column("vs prod", 3),  # another device's figure, on its spec's line too
    Column("norm err", 8),
    Column("max rel", 0),
)
#: Narrowed first where the table is too wide: the verdict counts ("33 pass," and
#: "83 unsup" on two lines); then the widest of the rest.
SUMMARY_COLUMNS = (
    Column("shape", breaks=" ", break_rank=1),
    Column("count", 1),
    Column("best variant", breaks="/_", break_rank=1),
    Column("best µs", 4),
    Column("baseline µs", 5),
    Column("speed-up", breaks=" ", break_rank=1),
    Column("best peer", 3),
    Column("peer µs", 2),
    Column("verdicts", breaks=","),
)
IMPACT_COLUMNS = (
    Column("shape", breaks=" "),
    Column("count", 1),
    Column("calls/token", 3),
    Column("baseline µs", 4),
    Column("best µs", 5),
    Column("best variant", breaks="/_"),
    Column("saved µs/call", 6),
    Column("saved ms/run", 2),
    Column("saved µs/token"),
)


def render_terminal(report: Report, width: int | None = REPORT_COLUMNS) -> str:
    """The report in lines of at most ``width`` columns where its words allow
    (None: every column, one line per note)."""
    notes, reasons = _Citations("n"), _Citations("u")
    left_out: Counter[str] = Counter()  # header: how many tables left it out

    def table(wide_headers: Sequence[str], wide_rows: list[list[str]], narrow: Narrow) -> str:
        if width is None:
            return plain_table(wide_headers, wide_rows)
        fitted = render_table(narrow[0], narrow[1], width)
        left_out.update(fitted.left_out)
        return fitted.text

    body: list[str] = []
    for section in report.sections:
        body.append("")
        body.extend(wrap_at(section.spec.key().split(" | "), " | ", width, "== ", "     "))
        if details := cells.spec_lines(section, report):
            body.extend(wrap_at(details, " · ", width, "   ", "   "))
        if section.rows:
            wide = [cells.row_cells(r) for r in section.rows]
            shared = _shared_tags(section.rows) if width is not None else []
            narrow = [_narrow_cells(r, shared) for r in section.rows]
            body.append(table(cells.HEADERS, wide, (NARROW_COLUMNS, narrow)))
            if shared:
                body.append("  every row: " + " ".join(f"[{t}]" for t in shared))
            if width is not None:
                for row in section.rows:
                    if row.pair_base_us is not None:
                        said = (
                            f"  {row.result.variant_id}: its vs base is to the baseline timed "
                            f"in its own rounds, {row.pair_base_us:.4g} µs"
                        )
                        body.extend(wrap(said, width, "", "    "))
        else:
            body.append("  (no supported variant)")
        for line in cells.failure_lines(section):
            body.extend(wrap(line, width, "", "      "))
        if width is None:
            body.extend(cells.section_notes(section))
            if line := cells.unsupported_line(section):
                body.append(line)
        else:
            body.extend(_cited_lines(section, notes, reasons, width))
    body += notes.legend("Notes, cited above by number:", width)
    body += reasons.legend("Unsupported pairs by reason (not failures), cited above:", width)
    summary = cells.summary_rows(report)
    body += ["", *wrap(SUMMARY_TITLE, width)]
    body.append(table(cells.SUMMARY_HEADERS, summary, (SUMMARY_COLUMNS, _counted(summary))))
    body += ["", *wrap(IMPACT_TITLE, width)]
    if impact := cells.impact_rows(report):
        body.append(table(cells.IMPACT_HEADERS, impact, (IMPACT_COLUMNS, impact)))
    closing = [cells.verdict_line(report), cells.impact_total(report)]
    closing += [report.per_token_basis] if report.per_token_basis else []
    closing += [scope] if (scope := cells.scope_line(report)) else []
    body += [line for text in closing for line in wrap(text, width, "  ", "    ")]

    out = [line for text in cells.header_lines(report) for line in wrap(text, width, "", "  ")]
    if left_out:
        said = ", ".join(h for h, _ in left_out.most_common())
        out += wrap(f"columns left out to fit {width} (--wide shows them): {said}", width, "", "  ")
    return "\n".join(out + body) + "\n"


Narrow = tuple[Sequence[Column], Sequence[Sequence[str]]]

SUMMARY_TITLE = (
    "Summary (device clock; best = our fastest validated variant, never a peer nor the baseline):"
)
IMPACT_TITLE = "Impact (call count × (baseline − our best validated variant), device clock):"


def _shared_tags(rows: Sequence[Row]) -> list[str]:
    """Tags every row of a table carries (``host-gap`` on an H100's GEMV rows):
    said once under it rather than on every line."""
    if len(rows) < 2:
        return []
    return [t for t in rows[0].tags if all(t in r.tags for r in rows[1:])]


def _narrow_cells(row: Row, shared: Sequence[str]) -> list[str]:
    """:func:`cells.row_cells` with the device clock's median, spread and n apart (the first
    is kept, the others may go), and the tags — but those every row shares — beside
    the verdict."""
    wide = cells.row_cells(row)
    status = row.result.status.value.upper()
    clock = row.result.clocks.device if row.result.status is Status.PASS else None
    return [
        wide[0],
        " ".join([status, *(f"[{t}]" for t in _narrow_tags(row, status) if t not in shared)]),
        "-" if clock is None else f"{clock.median_us:.2f}",
        "-" if clock is None else f"{clock.spread:.0%}",
        "-" if clock is None else str(clock.n),
        *wide[3:12],
    ]


def _narrow_tags(row: Row, status: str) -> list[str]:
    """The row's tags but its status, and a baseline's [peer]: a baseline is never
    crowned whether or not it is a peer (the wide report keeps both)."""
    return [
        t
        for t in row.tags
        if t != status
        and not (t == "peer" and row.is_baseline)
        and not (row.pair_base_us is not None and t == pair_base_tag(row.pair_base_us))
    ]


def _counted(summary: list[list[str]]) -> list[list[str]]:
    """The summary's rows with their four counts in one cell (``2 pass, 12 unsup``)."""
    rows = []
    for row in summary:
        counts = zip(("pass", "FAIL", "ERROR", "unsup"), row[8:12], strict=True)
        rows.append([*row[:8], ", ".join(f"{n} {what}" for what, n in counts if n != "0")])
    return rows


class _Citations:
    """Texts said once, after the sections, and cited by number in each."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.numbers: dict[str, int] = {}
        self.pairs: Counter[str] = Counter()

    def cite(self, text: str, pairs: int = 1) -> str:
        number = self.numbers.setdefault(text, len(self.numbers) + 1)
        self.pairs[text] += pairs
        return f"[{self.prefix}{number}]"

    def legend(self, title: str, width: int | None) -> list[str]:
        if not self.numbers:
            return []
        lines = ["", *wrap(title, width)]
        for text, number in self.numbers.items():
            pairs = self.pairs[text]
            said = f"[{self.prefix}{number}] {text}" + (f" ({pairs} pairs)" if pairs > 1 else "")
            lines += wrap(said, width, "  ", "       ")
        return lines


def _cited_lines(
    section: SpecSection, notes: _Citations, reasons: _Citations, width: int
) -> list[str]:
    lines = []
    if by_note := section.variants_by_note():
        cited = [f"{notes.cite(n, len(ids))} {', '.join(ids)}" for n, ids in by_note.items()]
        lines += wrap_at(cited, "; ", width, "  notes: ", "    ")
    if section.unsupported:
        counts = Counter(reason for _, reason in section.unsupported)
        cited = [reasons.cite(r, n) + (f"×{n}" if n > 1 else "") for r, n in counts.items()]
        pairs = len(section.unsupported)
        said = f"  unsupported (not failures): {pairs} pair{'s' if pairs > 1 else ''} — "
        lines += wrap_at(cited, " ", width, said, "    ")
    return lines
