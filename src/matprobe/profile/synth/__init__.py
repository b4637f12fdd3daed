"""Synthetic metallic profiling JSONL: realistic, deterministic, with its own answer key.

:func:`generate` emits a plausible Qwen2.5-0.5B (Q8_0) decode run in metallic's
profiling JSONL (DESIGN.md §3.2) — a few header events, a short prompt phase,
then ``tokens × layers`` decoder blocks — and returns, next to the lines, the
:class:`Truth`: what an analyzer must find in them. The truth is recorded from
the generator's own decisions while it emits (which template, which label,
which shape key: written out literally, not derived from the emitted text), so
a test that compares an analyzer's figures with it compares two independent
computations.

:func:`iter_lines` streams the same lines without the truth (for large files)
and :func:`write_profile` writes exactly ``events`` valid events to a file in
constant memory (the speed benchmark and ``matprobe synth-profile``).

Only the standard library is used; one ``random.Random(seed)`` drives every
duration, so a seed always gives the same bytes. Broken lines (when enabled)
come from a second generator and do not move the clock, so removing them from
a broken file gives exactly the clean file of the same seed.
"""

from matprobe.profile.events import EVENT_TYPES
from matprobe.profile.synth.model import (
    BAD_CATEGORIES,
    SECTIONS,
    SynthConfig,
    SynthError,
    Truth,
)
from matprobe.profile.synth.writer import generate, iter_lines, write_profile

__all__ = [
    "BAD_CATEGORIES",
    "EVENT_TYPES",
    "SECTIONS",
    "SynthConfig",
    "SynthError",
    "Truth",
    "generate",
    "iter_lines",
    "write_profile",
]
