"""Tables: for a terminal of a given width (the report's 100 columns), and in
Markdown (:func:`md_table`).

A report's tables carry more columns than a terminal holds. Rather than wrap
rows (unreadable) or cut cells (a variant id or a figure cut short is wrong),
a table that is too wide leaves out whole columns: first those that hold
nothing (every cell ``-``), then the optional ones in the order their
:class:`Column` gives, until the rows fit. The caller says which were left out
(``--wide`` shows them all). Columns without a drop rank are never left out;
where those are still too wide, a column that says where its cells may break
(a variant id after ``/`` or ``_``, prose after a space) is narrowed, in the
order the columns give, its cells continued on lines of their own, indented,
under the cell — never cut. Only a cell with no break point left can keep a table wider.

Every cell passes :func:`term_safe` before its width is taken: text from a
profile can neither drive the terminal nor misalign the table.

:func:`ruled_table` is the plain layout of a small table of figures (``token``'s
modes): numbers aligned right, a rule under the header.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from matprobe.safetext import md_safe, term_safe

#: The report's width unless ``--wide``: what a terminal split in two still shows.
REPORT_COLUMNS = 100

EMPTY_CELLS = frozenset({"", "-"})


@dataclass(frozen=True)
class Column:
    header: str
    #: None: always shown; else left out when the table is too wide, lowest first
    drop_rank: int | None = None
    #: characters after which a cell may be continued on the next line when the
    #: table is still too wide (empty: never broken); columns are narrowed lowest
    #: ``break_rank`` first, the widest first among equals
    breaks: str = ""
    break_rank: int = 0
    #: cells (and the header) aligned right, as figures are in a ruled table
    right: bool = False


#: The narrowest a breakable column is made, and the indent of a continued cell.
MIN_BROKEN_WIDTH = 12
CONTINUED = "  "


@dataclass(frozen=True)
class FittedTable:
    text: str
    #: headers of columns left out though they held something (the caller says so)
    left_out: tuple[str, ...]


def render_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int | None,
    indent: str = "  ",
    rule: bool = False,
) -> FittedTable:
    """The table, narrowed to ``width`` as the module says (None: every column);
    with ``rule``, a line of dashes under the header."""
    cells = [[term_safe(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != len(columns):
            raise ValueError(f"a row of {len(row)} cells for {len(columns)} columns")
    keep = list(range(len(columns)))
    left_out: list[str] = []
    if width is not None:
        # The first column names the row: kept even when empty.
        keep = [i for i in keep if i == 0 or not _empty(cells, i)]
        optional = sorted(
            (i for i in keep if columns[i].drop_rank is not None),
            key=lambda i: columns[i].drop_rank or 0,
        )
        while optional and _width(columns, cells, keep, indent) > width:
            dropped = optional.pop(0)
            keep.remove(dropped)
            left_out.append(columns[dropped].header)
    pieces = [[[cell] for cell in row] for row in cells]
    if width is not None:
        _narrow(columns, pieces, keep, width - len(indent) - 2 * (len(keep) - 1))
    return FittedTable(_lines(columns, pieces, keep, indent, rule), tuple(left_out))


def _narrow(
    columns: Sequence[Column], pieces: list[list[list[str]]], keep: Sequence[int], room: int
) -> None:
    """Breaks the cells of breakable columns (widest first) until the kept columns'
    widths sum to ``room`` or nothing more can break; in place."""

    def width_of(i: int) -> int:
        return max([len(columns[i].header), *(len(p) for row in pieces for p in row[i])])

    breakable = [i for i in keep if columns[i].breaks]
    for i in sorted(breakable, key=lambda i: (columns[i].break_rank, -width_of(i))):
        excess = sum(width_of(j) for j in keep) - room
        if excess <= 0:
            return
        limit = max(MIN_BROKEN_WIDTH, len(columns[i].header), width_of(i) - excess)
        for row in pieces:
            row[i] = _broken(row[i][0], limit, columns[i].breaks)


def _broken(cell: str, limit: int, breaks: str) -> list[str]:
    """``cell`` in pieces of at most ``limit`` characters, each ending at one of
    ``breaks`` (the pieces after the first indented by :data:`CONTINUED`); a run with
    no break point stays whole."""
    if len(cell) <= limit:
        return [cell]
    runs = re.findall(f"[^{re.escape(breaks)}]*[{re.escape(breaks)}]|[^{re.escape(breaks)}]+$",
                      cell)  # fmt: skip
    lines = [""]
    for run in runs:
        room = limit - (len(CONTINUED) if len(lines) > 1 else 0)
        if lines[-1] and len(lines[-1]) + len(run.rstrip()) > room:
            lines.append("")
        lines[-1] += run
    return [lines[0].rstrip()] + [CONTINUED + line.strip() for line in lines[1:]]


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Every column, as wide as its widest cell."""
    return render_table([Column(h) for h in headers], rows, None, indent).text


def ruled_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()
) -> str:
    """Every column, as wide as its widest cell, the columns numbered in ``right``
    aligned right (figures), a rule under the header, no indent."""
    columns = [Column(h, right=i in right) for i, h in enumerate(headers)]
    return render_table(columns, rows, None, indent="", rule=True).text


def _empty(cells: Sequence[Sequence[str]], i: int) -> bool:
    return all(row[i] in EMPTY_CELLS for row in cells)


def _widths(
    columns: Sequence[Column], cells: Sequence[Sequence[str]], keep: Sequence[int]
) -> list[int]:
    return [max([len(columns[i].header), *(len(row[i]) for row in cells)]) for i in keep]


def _width(
    columns: Sequence[Column], cells: Sequence[Sequence[str]], keep: Sequence[int], indent: str
) -> int:
    return len(indent) + sum(_widths(columns, cells, keep)) + 2 * (len(keep) - 1)


def _lines(
    columns: Sequence[Column], pieces: Sequence[Sequence[list[str]]], keep: Sequence[int],
    indent: str, rule: bool = False,
) -> str:  # fmt: skip
    """The header (and its rule) and the rows; a row whose cells were broken takes a
    line per piece."""
    widths = [
        max([len(columns[i].header), *(len(p) for row in pieces for p in row[i])]) for i in keep
    ]
    table = [[columns[i].header for i in keep]]
    if rule:
        table.append(["-" * w for w in widths])
    for row in pieces:
        depth = max(len(row[i]) for i in keep)
        table += [[row[i][d] if d < len(row[i]) else "" for i in keep] for d in range(depth)]
    right = [columns[i].right for i in keep]

    def joined(line: Sequence[str]) -> str:
        cells = zip(line, widths, right, strict=True)
        return (indent + "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in cells)).rstrip()

    return "\n".join(joined(line) for line in table)


def wrap(text: str, width: int | None, indent: str = "", hanging: str = "    ") -> list[str]:
    """``text`` (escaped) in lines of at most ``width`` where its words allow, the
    first after ``indent``, the rest after ``hanging``; None: one line. Words are
    never cut, nor split at hyphens (a spec key or a command stays whole)."""
    text = term_safe(text)
    if width is None:
        return [indent + text]
    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=hanging,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent.rstrip()]


def wrap_at(
    parts: Sequence[str], separator: str, width: int | None, indent: str, hanging: str
) -> list[str]:
    """``parts`` joined by ``separator``, a new line (after ``hanging``) before a
    part that would pass ``width``: a spec key breaks only between its fields."""
    parts = [term_safe(p) for p in parts]
    if width is None:
        return [indent + separator.join(parts)]
    lines: list[str] = []
    line = indent + (parts[0] if parts else "")
    for i, part in enumerate(parts[1:], start=2):
        # Room for the separator that ends the line if another part follows.
        tail = len(separator.rstrip()) if i < len(parts) else 0
        if len(line) + len(separator) + len(part) + tail <= width:
            line += separator + part
        else:
            lines.append(line + separator.rstrip())
            line = hanging + part
    lines.append(line)
    return lines


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table, every cell through :func:`md_safe`."""
    lines = ["| " + " | ".join(md_safe(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md_safe(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
