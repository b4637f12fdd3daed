"""What the synthetic profile generator is asked for (:class:`SynthConfig`) and what
it records as the answer key (:class:`Truth`), with the event and section names."""

from __future__ import annotations

import calendar
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from matprobe.errors import MatprobeError
from matprobe.profile.events import SECTION_GROUPS
from matprobe.profile.models import MODELS


class SynthError(MatprobeError, ValueError):
    """Options the generator cannot honour (negative counts and the like)."""


#: Section names of :attr:`Truth.groups` (all present, possibly empty).
SECTIONS: Final[tuple[str, ...]] = ("event_types", "sync", "kernel_aggregate", *SECTION_GROUPS)

#: Categories of :attr:`Truth.bad_lines` (all present, possibly empty).
BAD_CATEGORIES: Final[tuple[str, ...]] = (
    "not_json",
    "not_an_event",
    "unknown_type",
    "missing_field",
)

# The model the synthetic engine decodes, Qwen2.5-0.5B (DESIGN.md §2): its sizes
# come from the model table, not a second copy of the published config. (The
# shapes in :mod:`.shapes` stay written out: they are the answer key.)
_QWEN: Final = MODELS["qwen2.5-0.5b"]
HIDDEN: Final = _QWEN.hidden
INTERMEDIATE: Final = _QWEN.intermediate
HEADS: Final = _QWEN.heads
KV_HEADS: Final = _QWEN.kv_heads
HEAD_DIM: Final = _QWEN.head_dim
VOCAB: Final = _QWEN.vocab

_Q8_BYTES_PER_WEIGHT: Final = 34 / 32
_START_EPOCH_S: Final = calendar.timegm((2025, 11, 3, 14, 0, 0, 0, 0, 0))

_KERNEL: Final = 0  # GpuOpCompleted counted as a GPU kernel
_WAIT: Final = 1  # ... as a host wait (cb_wait, or a name ending in "wait")
_CB_GPU: Final = 2  # ... as command-buffer GPU time ("/cb_gpu")


@dataclass
class SynthConfig:
    """What to generate. ``tokens`` decode tokens of ``layers`` blocks each."""

    tokens: int = 6
    layers: int = 3
    seed: int = 0
    broken: bool = True
    legacy: bool = True
    prompt_tokens: int = 2

    def validate(self) -> None:
        if self.tokens < 0 or self.prompt_tokens < 0:
            raise SynthError(
                f"tokens and prompt_tokens must be >= 0, got {self.tokens}, {self.prompt_tokens}"
            )
        if self.layers < 1:
            raise SynthError(f"layers must be >= 1, got {self.layers}")


def _empty_groups() -> dict[str, dict[str, list[float]]]:
    return {section: {} for section in SECTIONS}


def _empty_bad() -> dict[str, list[int]]:
    return {category: [] for category in BAD_CATEGORIES}


@dataclass
class Truth:
    """What an analyzer must find in the generated lines.

    ``groups[section][label]`` holds durations in µs, in emission order; every
    name of :data:`SECTIONS` is a key. ``bad_lines[category]`` holds 1-based
    line numbers; every name of :data:`BAD_CATEGORIES` is a key. Blank lines
    appear nowhere (they are neither events nor bad).
    """

    total_events: int = 0
    event_counts: Counter[str] = field(default_factory=Counter)
    groups: dict[str, dict[str, list[float]]] = field(default_factory=_empty_groups)
    backend_by_backend: Counter[str] = field(default_factory=Counter)
    backend_by_reason: Counter[str] = field(default_factory=Counter)
    backend_by_op_backend: Counter[tuple[str, str]] = field(default_factory=Counter)
    shape_backends: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    bad_lines: dict[str, list[int]] = field(default_factory=_empty_bad)
    blank_lines: list[int] = field(default_factory=list)

    def _add(self, section: str, label: str, duration_us: int) -> None:
        self.groups[section].setdefault(label, []).append(float(duration_us))

    def _count(self, event_type: str, duration_us: int | None) -> None:
        self.total_events += 1
        self.event_counts[event_type] += 1
        if duration_us is not None:
            self._add("event_types", event_type, duration_us)
