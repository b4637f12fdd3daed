"""The profile analysis: sections computed from a scan, rendered as text or JSON.

The text has the look of metallic's analyzer (``seeds/003_…``): same section
titles, same row format, same sort orders (largest total first; counts for the
backend-selection tables), so an engineer used to the original reads it at a
glance. ``--json`` carries the same rows with the same limits, in machine form.
A section cut at its limit says so: text ends it with ``… N more rows not shown
(M in all; --top 0 shows all)``, which the text-summary reader understands, and
JSON has ``left_out`` by section.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from matprobe.profile.events import PROBLEM_KINDS, Problems, ProfileScan
from matprobe.profile.textsummary import more_line
from matprobe.safetext import term_safe
from matprobe.stats import Stats

#: Synthetic kernels the aggregate view hides unless asked (they double-count).
_TOTAL_KERNELS = frozenset({"iteration_total", "forward_step_total"})
NO_MATCH = "(no kernels matched)"


@dataclass(frozen=True)
class AnalyzeOptions:
    top: int = 20  # rows per section; 0 = all
    kernel_top: int = 50  # rows of the kernel aggregate; 0 = all
    include_kernel_totals: bool = False
    kernel_filter: str = ""  # case-insensitive substring


@dataclass(frozen=True)
class StatRow:
    label: str
    stats: Stats
    fields: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, **self.fields, **self.stats.to_dict()}


@dataclass(frozen=True)
class CountRow:
    label: str
    count: int
    fields: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, **self.fields, "count": self.count}


@dataclass(frozen=True)
class ShapeRow:
    shape: str
    backends: tuple[StatRow, ...]

    @property
    def total_ms(self) -> float:
        return sum(row.stats.total_ms for row in self.backends)

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "total_ms": self.total_ms,
            "backends": [{"backend": r.label, **r.stats.to_dict()} for r in self.backends],
        }


Row = StatRow | CountRow | ShapeRow


@dataclass(frozen=True)
class Section:
    key: str  # JSON name
    title: str  # text heading
    rows: tuple[Row, ...]
    note: str = ""  # printed when there are no rows (e.g. the filter matched none)
    #: rows its limit left out: said in a "… N more" line (:func:`more_line`), never
    #: dropped silently
    left_out: int = 0
    limit_option: str = "--top"  # the option that sets the limit (0 shows every row)


@dataclass(frozen=True)
class Analysis:
    path: str
    total_events: int
    lines: int
    sections: tuple[Section, ...]
    sync: Stats
    problems: Problems


def _stat_rows(
    groups: Mapping[Any, array[float]],
    label: Callable[[Any], str] = str,
    fields: Callable[[Any], Mapping[str, str]] = lambda _: {},
    keep: Callable[[Any], bool] = lambda _: True,
) -> list[StatRow]:
    rows = [
        StatRow(label(key), Stats.from_us(samples), fields(key))
        for key, samples in groups.items()
        if keep(key)
    ]
    rows.sort(key=lambda row: (-row.stats.total_ms, row.label))
    return rows


def _count_rows(
    counter: Counter[Any],
    label: Callable[[Any], str],
    fields: Callable[[Any], Mapping[str, str]] = lambda _: {},
) -> list[CountRow]:
    rows = [CountRow(label(key), n, fields(key)) for key, n in counter.items()]
    rows.sort(key=lambda row: (-row.count, row.label))
    return rows


def analyze(scan: ProfileScan, options: AnalyzeOptions = AnalyzeOptions()) -> Analysis:
    """Compute every section of the report from a scan, in the analyzer's order."""
    needle = options.kernel_filter.lower()
    matches = _name_filter(needle)
    out = _Sections(options.top)
    _add_event_types(out, scan)
    if scan.selection_by_backend:
        _add_backend_selection(out, scan)
    if scan.internal_by_parent:
        _add_internal_kernels(out, scan)
    if scan.kernels:
        _add_kernel_aggregate(out, scan, options, matches)
    _add_named_durations(out, _GPU_KERNEL_GROUPS, scan, matches)
    if scan.matmul_backends:
        _add_matmuls(out, scan, needle, matches)
    _add_named_durations(out, _HOST_SIDE_GROUPS, scan, None)
    return Analysis(
        path=scan.path,
        total_events=scan.total_events,
        lines=scan.lines,
        sections=tuple(out.sections),
        sync=Stats.from_us(scan.sync),
        problems=scan.problems,
    )


def _name_filter(needle: str) -> Callable[..., bool]:
    """Whether any of some names holds ``--kernel-filter``'s text (ignoring case);
    every name does when there is none."""

    def matches(*names: str) -> bool:
        return not needle or any(needle in name.lower() for name in names)

    return matches


@dataclass
class _Sections:
    """The report's sections in order, each cut at its limit."""

    top: int  # ``--top``: rows per section (0 = all)
    sections: list[Section] = field(default_factory=list)

    def add(
        self,
        key: str,
        title: str,
        rows: Iterable[Row],
        limit: tuple[str, int] | None = None,
        filtered: bool = False,
    ) -> None:
        """A section of the first ``limit`` rows (an option and its value, ``--top``
        when not given; 0 = all) of ``rows``, which keeps how many the limit left
        out. A ``filtered`` section the filter emptied says so."""
        every = tuple(rows)
        option, n = limit if limit is not None else ("--top", self.top)
        shown = every if n <= 0 else every[:n]
        note = NO_MATCH if filtered and not shown else ""
        self.sections.append(Section(key, title, shown, note, len(every) - len(shown), option))


def _add_event_types(out: _Sections, scan: ProfileScan) -> None:
    event_rows = [
        StatRow(
            f"{event_type} (count={count})",
            Stats.from_us(scan.event_durations.get(event_type, array("d"))),
            {"type": event_type, "events": str(count)},
        )
        for event_type, count in sorted(scan.event_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    out.add("event_types", "Event type summary:", event_rows, ("", 0))  # a few types: all


def _add_backend_selection(out: _Sections, scan: ProfileScan) -> None:
    out.add(
        "backend_selection",
        "Backend selection summary:",
        _count_rows(scan.selection_by_backend, lambda b: f"backend={b}", lambda b: {"backend": b}),
    )
    out.add(
        "backend_selection_reasons",
        "Backend selection reasons:",
        _count_rows(scan.selection_by_reason, lambda r: f"reason={r}", lambda r: {"reason": r}),
    )
    out.add(
        "backend_selection_by_op",
        "Backend selection by op/backend:",
        _count_rows(
            scan.selection_by_op_backend,
            lambda ob: f"op={ob[0]} backend={ob[1]}",
            lambda ob: {"op": ob[0], "backend": ob[1]},
        ),
    )


def _add_internal_kernels(out: _Sections, scan: ProfileScan) -> None:
    out.add("internal_by_parent", "Internal kernel by parent:", _stat_rows(scan.internal_by_parent))
    out.add(
        "internal_by_parent_op",
        "Internal kernel by parent/op:",
        _stat_rows(
            scan.internal_by_parent_op,
            lambda pk: f"{pk[0]} :: {pk[1]}",
            lambda pk: {"parent": pk[0], "kernel": pk[1]},
        ),
    )


def _add_kernel_aggregate(
    out: _Sections, scan: ProfileScan, options: AnalyzeOptions, matches: Callable[..., bool]
) -> None:
    def keep_kernel(name: str) -> bool:
        synthetic = name.endswith("_total") or name.endswith("cb_wait") or name in _TOTAL_KERNELS
        return (options.include_kernel_totals or not synthetic) and matches(name)

    out.add(
        "kernel_aggregate",
        "Kernel aggregate (all parents):",
        _stat_rows(scan.kernels, keep=keep_kernel),
        ("--kernel-top", options.kernel_top),
        filtered=True,
    )


#: Sections of durations by name alone, as (JSON key, which names the scan's group
#: too, title): GPU kernels, which ``--kernel-filter`` narrows, and the host's side
#: of the GPU (waits, command buffers), never filtered. An empty group has none.
_GPU_KERNEL_GROUPS = (
    ("gpu_kernels", "GPU kernel durations (excluding waits):"),
    ("gpu_kernel_types", "GPU kernel aggregate (by kernel type):"),
)
_HOST_SIDE_GROUPS = (
    ("gpu_waits", "GPU wait breakdown:"),
    ("cb_gpu", "Command buffer GPU timing:"),
)


def _add_named_durations(
    out: _Sections,
    groups: tuple[tuple[str, str], ...],
    scan: ProfileScan,
    matches: Callable[..., bool] | None,
) -> None:
    """A section for each group that has samples, filtered by ``matches`` when given."""
    for key, title in groups:
        samples: Mapping[str, array[float]] = getattr(scan, key)
        if not samples:
            continue
        if matches is None:
            out.add(key, title, _stat_rows(samples))
        else:
            out.add(key, title, _stat_rows(samples, keep=matches), filtered=True)


def _add_matmuls(
    out: _Sections, scan: ProfileScan, needle: str, matches: Callable[..., bool]
) -> None:
    out.add(
        "matmul_backends",
        "Matmul backend summary:",
        _stat_rows(
            scan.matmul_backends,
            lambda b: f"backend={b}",
            lambda b: {"backend": b},
            keep=matches,
        ),
        filtered=True,
    )
    out.add(
        "matmul_op_backends",
        "Matmul op/backend summary:",
        _stat_rows(
            scan.matmul_op_backends,
            lambda ob: f"{ob[0]} @ {ob[1]}",
            lambda ob: {"op": ob[0], "backend": ob[1]},
            keep=lambda ob: matches(f"{ob[0]} @ {ob[1]}"),
        ),
        filtered=True,
    )
    out.add(
        "matmul_shapes", "Matmul shape backend summary:", shape_rows(scan, needle), filtered=True
    )


def shape_rows(scan: ProfileScan, needle: str = "") -> list[ShapeRow]:
    """Matmul shapes, largest total first; backends within a shape likewise."""
    rows = []
    for shape, backends in scan.matmul_shapes.items():
        if (
            needle
            and needle not in shape.lower()
            and not any(needle in backend.lower() for backend in backends)
        ):
            continue
        rows.append(ShapeRow(shape, tuple(_stat_rows(backends, lambda b: b))))
    rows.sort(key=lambda row: (-row.total_ms, row.shape))
    return rows


# ---- rendering ---------------------------------------------------------------


def _render_row(row: Row) -> list[str]:
    # Every name comes from the profile: shown, never obeyed (see safetext).
    if isinstance(row, ShapeRow):
        return [f"  {term_safe(row.shape)}:"] + [
            r.stats.render(f"backend={term_safe(r.label)}", 4) for r in row.backends
        ]
    if isinstance(row, CountRow):
        return [f"  {term_safe(row.label)}: count={row.count}"]
    return [row.stats.render(term_safe(row.label), 2)]


def render_text(analysis: Analysis) -> str:
    out = [
        f"\n=== Analyzing {term_safe(str(analysis.path))} ===",
        f"Total events: {analysis.total_events}",
    ]
    for section in analysis.sections:
        out.append(f"\n{section.title}")
        for row in section.rows:
            out.extend(_render_row(row))
        if section.left_out:
            noun = "shapes" if section.key == "matmul_shapes" else "rows"
            shown = len(section.rows)
            out.append(f"  {more_line(shown, section.left_out, noun, section.limit_option)}")
        if section.note:
            out.append(f"  {section.note}")
    out.append("\nSync operations:")
    out.append(analysis.sync.render("sync kernels", 2))
    problems = analysis.problems
    if problems.total:
        out.append(f"\nInput problems ({problems.total} of {analysis.lines} lines):")
        for kind, text in PROBLEM_KINDS.items():
            count = problems.counts[kind]
            if not count:
                continue
            lines = ", ".join(str(n) for n in problems.first_lines[kind])
            more = ", …" if count > len(problems.first_lines[kind]) else ""
            out.append(f"  {text}: {count} (line {lines}{more})")
            details = problems.to_dict()[kind]["details"]
            for detail, n in details.items():
                out.append(f"    {term_safe(detail)}: {n}")
    return "\n".join(out) + "\n"


def to_json(analysis: Analysis, options: AnalyzeOptions) -> dict[str, Any]:
    return {
        "file": analysis.path,
        "total_events": analysis.total_events,
        "lines": analysis.lines,
        "options": {
            "top": options.top,
            "kernel_top": options.kernel_top,
            "include_kernel_totals": options.include_kernel_totals,
            "kernel_filter": options.kernel_filter,
        },
        "sections": {s.key: [row.to_dict() for row in s.rows] for s in analysis.sections},
        # rows a section's limit cut, by section (only sections that were cut)
        "left_out": {s.key: s.left_out for s in analysis.sections if s.left_out},
        "sync": analysis.sync.to_dict(),
        "problems": analysis.problems.to_dict(),
    }
