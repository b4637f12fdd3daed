"""The broken lines of a synthetic profile (``broken=True``): the kinds a damaged
log holds, where they go, what each looks like and what the truth records for
it. They come from their own generators and are written with the emitter's
:meth:`~matprobe.profile.synth.emitter._Emitter.line`, which leaves its clock
alone, so removing them from a broken file gives the clean file of the same seed.
"""

from __future__ import annotations

import json
import random
from typing import Any, Final

from matprobe.profile.synth.emitter import _Emitter, _envelope
from matprobe.profile.synth.model import SynthConfig

#: Kinds of broken line, in the order they are planned (one of each per run).
BROKEN_KINDS: Final[tuple[str, ...]] = (
    "log_line",
    "truncated",
    "json_array",
    "json_null",
    "json_string",
    "no_event",
    "event_not_object",
    "no_type",
    "data_not_object",
    "unknown_type",
    "gpu_no_duration",
    "gpu_no_op_name",
    "internal_no_parent",
    "internal_no_kernel",
    "backend_no_reason",
    "blank",
    "blank",
)


def broken_plan(config: SynthConfig) -> dict[int, list[str]]:
    """Which broken kinds follow which block slot (token × layer), from the broken RNG."""
    if not config.broken:
        return {}
    slots = max(1, config.tokens * config.layers)
    rng = random.Random(f"plan:{config.seed}")
    plan: dict[int, list[str]] = {}
    for kind in BROKEN_KINDS:
        plan.setdefault(rng.randrange(slots), []).append(kind)
    return plan


def write_broken(e: _Emitter, kind: str) -> None:
    """One planned bad (or blank) line; uses its own RNG and leaves the clock alone."""
    t = e.truth
    ts = e.timestamp()
    category: str | None
    rng = e.bad_rng
    if kind == "blank":
        e.line("")
        e.invalid.append(len(e.out) - 1)
        if t is not None:
            t.blank_lines.append(e.line_no)
        return
    if kind == "log_line":
        text, category = "[metallic] profiling: flushed 4096 events to disk", "not_json"
    elif kind == "truncated":
        full = _envelope(
            ts,
            "GpuOpCompleted",
            json.dumps({"op_name": "Generation Loop/block_1/cb_wait", "duration_us": 301}),
        )
        text, category = full[: len(full) * 2 // 3], "not_json"
    elif kind == "json_array":
        text, category = "[1, 2, 3]", "not_an_event"
    elif kind == "json_null":
        text, category = "null", "not_an_event"
    elif kind == "json_string":
        text, category = json.dumps("GpuOpCompleted"), "not_an_event"
    elif kind == "no_event":
        text = json.dumps(
            {"timestamp": ts, "span_id": None, "parent_span_id": None, "span_name": None}
        )
        category = "not_an_event"
    elif kind == "event_not_object":
        text = json.dumps({"timestamp": ts, "event": "GpuOpCompleted"})
        category = "not_an_event"
    elif kind == "no_type":
        text = json.dumps(
            {"timestamp": ts, "event": {"data": {"op_name": "rogue", "duration_us": 12}}}
        )
        category = "not_an_event"
    elif kind == "data_not_object":
        text = _envelope(ts, "GpuOpCompleted", json.dumps("Generation Loop/block_0/cb_wait"))
        category = "not_an_event"
    else:
        _write_broken_event(e, kind, ts, rng)
        return
    e.line(text)
    e.invalid.append(len(e.out) - 1)
    if t is not None:
        t.bad_lines[category].append(e.line_no)


def _write_broken_event(e: _Emitter, kind: str, ts: str, rng: random.Random) -> None:
    """A line that is still a valid event, but of an unknown type or missing a field."""
    t = e.truth
    d = rng.randrange(80, 600)
    data: dict[str, Any]
    if kind == "unknown_type":
        event_type, category = "FutureEventKind", "unknown_type"
        data = {"op_name": "Generation Loop/future_op", "duration_us": d, "version": 2}
    elif kind == "gpu_no_duration":
        event_type, category = "GpuOpCompleted", "missing_field"
        data = {"op_name": "Generation Loop/block_0/sdpa_block_0_op", "backend": "metal"}
    elif kind == "gpu_no_op_name":
        event_type, category = "GpuOpCompleted", "missing_field"
        data = {"backend": "metal", "duration_us": d}
    elif kind == "internal_no_parent":
        event_type, category = "InternalKernelCompleted", "missing_field"
        data = {"internal_kernel_name": "token_decode", "duration_us": d}
    elif kind == "internal_no_kernel":
        event_type, category = "InternalKernelCompleted", "missing_field"
        data = {"parent_op_name": "decoding", "duration_us": d}
    elif kind == "backend_no_reason":
        event_type, category = "KernelBackendSelected", "missing_field"
        data = {"op_name": "sdpa", "backend": "legacy"}
    else:  # pragma: no cover - the plan only holds known kinds
        raise AssertionError(kind)
    e.line(_envelope(ts, event_type, json.dumps(data)))
    if t is None:
        return
    t.bad_lines[category].append(e.line_no)
    has_duration = "duration_us" in data
    t._count(event_type, d if has_duration else None)
    if kind == "gpu_no_op_name":
        t._add("gpu_kernels", "<unknown>", d)
        t._add("gpu_kernel_types", "<unknown>", d)
    elif kind == "internal_no_parent":
        t._add("internal_by_parent", "<unknown>", d)
        t._add("internal_by_parent_op", "<unknown> :: token_decode", d)
        t._add("kernel_aggregate", "token_decode", d)
    elif kind == "internal_no_kernel":
        t._add("internal_by_parent", "decoding", d)
        t._add("internal_by_parent_op", "decoding :: <unknown>", d)
        t._add("kernel_aggregate", "<unknown>", d)
    elif kind == "backend_no_reason":
        t.backend_by_backend["legacy"] += 1
        t.backend_by_reason["<unknown>"] += 1
        t.backend_by_op_backend[("sdpa", "legacy")] += 1
