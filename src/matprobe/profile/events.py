"""The metallic profile's events (DESIGN.md §3.2) and what a scan of them
gathers: the schema's event types and the fields the analysis needs, the
problems a scan counts (lines it could not use), and :class:`ProfileScan`,
the per-group duration samples every analysis section is computed from.
:mod:`~matprobe.profile.jsonl` fills one from a file."""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Final

#: Event types of the metallic schema (DESIGN.md §3.2), in the schema's order; the
#: synthetic generator (``matprobe.profile.synth``) emits each. Others are counted and reported.
EVENT_TYPES: tuple[str, ...] = (
    "GpuOpCompleted",
    "InternalKernelCompleted",
    "GpuKernelDispatched",
    "KernelBackendSelected",
    "ResourceCacheAccess",
    "ResourceCacheSummary",
    "CacheEviction",
    "GgufFileMmap",
    "ModelWeights",
    "ForwardStep",
    "TensorMemory",
    "HostMemory",
    "TensorPreparationStats",
)
KNOWN_EVENT_TYPES = frozenset(EVENT_TYPES)

#: Fields an event of a known type must carry for the analysis to use it.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "GpuOpCompleted": ("op_name", "duration_us"),
    "InternalKernelCompleted": ("parent_op_name", "internal_kernel_name", "duration_us"),
    "KernelBackendSelected": ("op_name", "backend", "reason"),
}


#: Problem categories, in report order.
PROBLEM_KINDS: dict[str, str] = {
    "not_json": "not JSON (skipped)",
    "not_an_event": "JSON but not an event: no event.type, or data not an object (skipped)",
    "unknown_type": "unknown event type (counted in the event types only)",
    "missing_field": "event missing a required field (used as far as it goes)",
    "bad_value": "duration negative, not finite or over a day (left out of every statistic)",
    "truncated": "compressed stream ends early (analysed up to the break)",
}
#: The longest duration believed (µs): a day. Beyond it a value is a corrupt field,
#: not a measurement; summed in, one such value moves every total it touches.
MAX_DURATION_US = 86_400e6
FIRST_LINES_KEPT = 5


Samples = array  # array('d') of durations in microseconds


def _samples() -> array[float]:
    return array("d")


#: The scan's per-key sample groups that the analyzer prints as a section of the
#: same name (the synthetic generator's answer key names its sections after them).
SECTION_GROUPS: Final[tuple[str, ...]] = (
    "internal_by_parent",
    "internal_by_parent_op",
    "gpu_kernels",
    "gpu_kernel_types",
    "gpu_waits",
    "cb_gpu",
    "matmul_backends",
    "matmul_op_backends",
)


@dataclass
class Problems:
    """Lines the scan could not use: counts and the first few line numbers."""

    counts: Counter[str] = field(default_factory=Counter)
    first_lines: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    details: Counter[str] = field(default_factory=Counter)

    def add(self, kind: str, lineno: int, detail: str = "") -> None:
        self.counts[kind] += 1
        lines = self.first_lines[kind]
        if len(lines) < FIRST_LINES_KEPT:
            lines.append(lineno)
        if detail:
            self.details[f"{kind}:{detail}"] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def merge_after(self, other: Problems, line_offset: int) -> None:
        """Fold in the problems of a later chunk whose line 1 is ``line_offset + 1``."""
        self.counts.update(other.counts)
        self.details.update(other.details)
        for kind, lines in other.first_lines.items():
            mine = self.first_lines.setdefault(kind, [])
            mine.extend(line + line_offset for line in lines)
            del mine[FIRST_LINES_KEPT:]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind in PROBLEM_KINDS:
            if self.counts[kind]:
                details = {
                    key.split(":", 1)[1]: n
                    for key, n in sorted(self.details.items())
                    if key.startswith(kind + ":")
                }
                out[kind] = {
                    "count": self.counts[kind],
                    "first_lines": list(self.first_lines[kind]),
                    "details": details,
                }
        return out


@dataclass
class ProfileScan:
    """Everything the analysis sections are computed from."""

    path: str
    total_events: int = 0
    lines: int = 0
    event_counts: Counter[str] = field(default_factory=Counter)
    event_durations: dict[str, array[float]] = field(default_factory=lambda: defaultdict(_samples))
    sync: array[float] = field(default_factory=_samples)
    selection_by_backend: Counter[str] = field(default_factory=Counter)
    selection_by_reason: Counter[str] = field(default_factory=Counter)
    selection_by_op_backend: Counter[tuple[str, str]] = field(default_factory=Counter)
    internal_by_parent: dict[str, array[float]] = field(
        default_factory=lambda: defaultdict(_samples)
    )
    internal_by_parent_op: dict[tuple[str, str], array[float]] = field(
        default_factory=lambda: defaultdict(_samples)
    )
    kernels: dict[str, array[float]] = field(default_factory=lambda: defaultdict(_samples))
    gpu_kernels: dict[str, array[float]] = field(default_factory=lambda: defaultdict(_samples))
    gpu_kernel_types: dict[str, array[float]] = field(default_factory=lambda: defaultdict(_samples))
    gpu_waits: dict[str, array[float]] = field(default_factory=lambda: defaultdict(_samples))
    cb_gpu: dict[str, array[float]] = field(default_factory=lambda: defaultdict(_samples))
    matmul_backends: dict[str, array[float]] = field(default_factory=lambda: defaultdict(_samples))
    matmul_op_backends: dict[tuple[str, str], array[float]] = field(
        default_factory=lambda: defaultdict(_samples)
    )
    #: shape key → backend → samples
    matmul_shapes: dict[str, dict[str, array[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(_samples))
    )
    problems: Problems = field(default_factory=Problems)

    _GROUPS = ("event_durations", "kernels", *SECTION_GROUPS)
    _COUNTERS = (
        "event_counts",
        "selection_by_backend",
        "selection_by_reason",
        "selection_by_op_backend",
    )

    def plain(self) -> ProfileScan:
        """Plain dicts in place of defaultdicts, so the scan can be pickled."""
        for name in self._GROUPS:
            setattr(self, name, dict(getattr(self, name)))
        self.matmul_shapes = {key: dict(b) for key, b in self.matmul_shapes.items()}
        self.problems.first_lines = dict(self.problems.first_lines)
        return self

    def merge(self, later: ProfileScan) -> None:
        """Fold in the scan of the chunk that follows this one in the file."""
        for name in self._GROUPS:
            mine, theirs = getattr(self, name), getattr(later, name)
            for key, samples in theirs.items():
                mine.setdefault(key, array("d")).extend(samples)
        for key, backends in later.matmul_shapes.items():
            mine_b = self.matmul_shapes.setdefault(key, {})
            for backend, samples in backends.items():
                mine_b.setdefault(backend, array("d")).extend(samples)
        for name in self._COUNTERS:
            getattr(self, name).update(getattr(later, name))
        self.sync.extend(later.sync)
        self.problems.merge_after(later.problems, self.lines)
        self.total_events += later.total_events
        self.lines += later.lines
