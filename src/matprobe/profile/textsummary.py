"""Read the analyzer's text summaries (``seeds/000_…``, ``001_…``, ``003_…``).

A shape block is a header line ``op=… | … :`` followed by indented
``backend=NAME: count=… | total=…ms | … | p95_ms=…ms, p99_ms=…ms`` lines, up to
a blank line, the next header or a new (unindented) section. Everything else
in the file — prose, other sections, ``op=sdpa backend=legacy: count=3480``
rows of the backend-selection section — is not a shape and is skipped.

A block that is cut off or does not parse is reported as a
:class:`ReadWarning` with its line number; reading carries on. So is a shape
section that ``matprobe analyze`` cut at its ``--top`` rows: it ends in a line
``… 421 more shapes not shown (441 in all; --top 0 shows all)``
(:func:`more_line`), and the reader says that only some of the shapes were read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from matprobe.errors import ProfileError, SpecError
from matprobe.spec import BackendTiming, MatmulSpec, Provenance, merge_specs
from matprobe.stats import Stats

_BACKEND_LINE = re.compile(r"^backend=(?P<name>[^:\s]+):\s*(?P<stats>.*)$")
_STAT_PAIR = re.compile(r"^(?P<key>[a-z0-9_]+)=(?P<value>-?[0-9.]+(?:[eE][-+]?\d+)?)(?:ms)?$")
_REQUIRED_STATS = ("count", "total", "avg", "min", "max", "p95_ms", "p99_ms")
#: The line that ends a section cut at its limit (:func:`more_line`); "..." for "…" too.
_MORE_LINE = re.compile(
    r"^(?:…|\.\.\.)\s*(?P<more>\d+) more \w+ not shown \((?P<total>\d+) in all\b"
)


def more_line(shown: int, left_out: int, noun: str = "rows", option: str = "--top") -> str:
    """What ends a section whose limit (``option``) cut ``left_out`` of its rows: the
    analyzer prints it, and the reader knows from it that shapes are missing."""
    total = shown + left_out
    return f"… {left_out} more {noun} not shown ({total} in all; {option} 0 shows all)"


@dataclass(frozen=True)
class ReadWarning:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class SummaryRead:
    """The specs of a text summary, in file order, and what could not be read."""

    specs: list[MatmulSpec]
    warnings: list[ReadWarning] = field(default_factory=list)


@dataclass
class _Block:
    line: int
    spec: MatmulSpec
    backends: list[BackendTiming] = field(default_factory=list)


def looks_like_shape_header(stripped: str) -> bool:
    return stripped.startswith("op=") and stripped.endswith(":") and "|" in stripped


def parse_backend_line(text: str) -> BackendTiming:
    """Parse ``backend=mps: count=… | total=…ms | … | p95_ms=…ms, p99_ms=…ms``."""
    match = _BACKEND_LINE.match(text.strip())
    if match is None:
        raise SpecError(f"not a backend timing line: {text.strip()!r}")
    values: dict[str, float] = {}
    for part in re.split(r"[|,]", match["stats"]):
        token = part.strip()
        pair = _STAT_PAIR.match(token)
        if pair is None:
            raise SpecError(f"bad timing field {token!r}")
        values[pair["key"]] = float(pair["value"])
    missing = [key for key in _REQUIRED_STATS if key not in values]
    if missing:
        raise SpecError(f"timing line lacks {', '.join(missing)} (truncated?)")
    count = values["count"]
    if count != int(count) or count < 0:
        raise SpecError(f"bad count {count}")
    # Times are durations: a negative or non-finite one is an input problem (as in
    # JSONL), never summed into "ms in production".
    for key in _REQUIRED_STATS[1:]:
        if not math.isfinite(values[key]) or values[key] < 0:
            raise SpecError(f"bad time {key}={values[key]:g} ms (a duration is 0 or more)")
    stats = Stats(
        count=int(count),
        total_ms=values["total"],
        avg_ms=values["avg"],
        min_ms=values["min"],
        max_ms=values["max"],
        p95_ms=values["p95_ms"],
        p99_ms=values["p99_ms"],
    )
    return BackendTiming(backend=match["name"], stats=stats)


def read_summary_lines(lines: Iterable[str], source: str = "") -> SummaryRead:
    """Parse every shape block of an analyzer text summary."""
    specs: list[MatmulSpec] = []
    warnings: list[ReadWarning] = []
    block: _Block | None = None
    # The section being read (it starts at an unindented line): whether it has shape
    # blocks, and how many specs were read before it (those it added are the rest).
    shape_section = False
    specs_before = 0

    def close() -> None:
        nonlocal block
        if block is None:
            return
        if block.backends:
            prov = Provenance(backends=tuple(block.backends), source=f"{source}:{block.line}")
            specs.append(block.spec.with_provenance(prov))
        else:
            warnings.append(
                ReadWarning(
                    block.line, f"shape block has no timing lines (truncated?): {block.spec.key()}"
                )
            )
        block = None

    lineno = 0
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if not stripped:
            close()
            continue
        more = _MORE_LINE.match(stripped)
        if more is not None:
            close()
            if shape_section:
                read, total = len(specs) - specs_before, int(more["total"])
                warnings.append(
                    ReadWarning(
                        lineno,
                        f"only {read} of {total} shapes were read: the summary left "
                        f"{more['more']} out (`matprobe analyze PROFILE --top 0` prints them all)",
                    )
                )
                shape_section = False  # said once for the section
            continue
        if looks_like_shape_header(stripped):
            shape_section = True
            close()
            try:
                block = _Block(lineno, MatmulSpec.parse(stripped))
            except SpecError as exc:
                warnings.append(ReadWarning(lineno, f"malformed shape header: {exc}"))
            continue
        if block is not None and stripped.startswith("backend="):
            try:
                block.backends.append(parse_backend_line(stripped))
            except SpecError as exc:
                warnings.append(ReadWarning(lineno, f"malformed timing line: {exc}"))
            continue
        if block is not None:
            # Anything else ends the block: a new section, or stray text inside it.
            if line[:1].isspace():
                warnings.append(
                    ReadWarning(lineno, f"unexpected line in shape block: {stripped[:60]!r}")
                )
            close()
        if not line[:1].isspace():
            # A new section (or prose between sections).
            close()
            shape_section, specs_before = False, len(specs)
    close()
    return SummaryRead(specs=merge_specs(specs), warnings=warnings)


def read_summary(path: str | Path) -> SummaryRead:
    """Read a text summary file; a file with no shape blocks at all is an error."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror or exc}") from None
    result = read_summary_lines(text.splitlines(), source=path.name)
    if not result.specs and not result.warnings:
        raise ProfileError(
            f"{path}: no matmul shape blocks found (expected lines like "
            "'op=matmul | batch=1 | m=1 | … :' followed by 'backend=…: count=…')"
        )
    return result
