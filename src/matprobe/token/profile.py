"""A token's kernels as a metallic-format profile (DESIGN.md §3.2), so that
``matprobe analyze``, ``shapes`` and ``run`` read what this machine recorded.

The step runs eagerly under the PyTorch profiler with each part of each layer
marked as a profiler range (``block_3/qkv``, …, ``lm_head``). A range becomes:

* one ``GpuOpCompleted`` named ``Generation Loop/block_3/qkv``, its duration the
  sum of the range's kernels — device times from CUPTI on CUDA, the CPU ops'
  own times on the CPU; a matmul range (the weight matmuls and the attention
  products) carries its spec's key fields in ``data`` (the key
  :func:`~matprobe.profile.models.decode_specs` gives, dtype included) and its backend,
  so the analyzer's shape summary and ``matprobe shapes``/``run`` see one call
  of that spec;
* one ``InternalKernelCompleted`` per kernel (or CPU op) of the range, its
  parent the range's name;
* and once per matmul range, a ``KernelBackendSelected`` saying which backend
  the mode chose and why.

A range that ran nothing (a matmul left out) writes nothing. Durations are
µs as floats (the recorded figures are a few µs; metallic writes whole µs,
the readers take either). Compiled modes are not recorded: Inductor fuses
across the ranges, so a kernel no longer belongs to one part.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch

from matprobe.errors import MatprobeError
from matprobe.spec import MatmulSpec
from matprobe.token.linear import LinearFn
from matprobe.token.step import ATTENTION_SITES, WEIGHT_SITES, DecodeStep, Region

#: Prefix of the token's profiler ranges (tells them from the profiler's own).
RANGE_PREFIX = "token:"
#: The scope every op name starts with, as metallic's decode loop does.
SCOPE = "Generation Loop"


@dataclass
class RangeSample:
    """One recorded range: its label, start (µs from the profile's start) and the
    kernels it ran (name, µs)."""

    label: str
    start_us: float
    kernels: list[tuple[str, float]] = field(default_factory=list)

    @property
    def part(self) -> str:
        return self.label.rsplit("/", 1)[-1]

    @property
    def duration_us(self) -> float:
        return sum(us for _, us in self.kernels)


def _region(label: str) -> Any:
    return torch.profiler.record_function(RANGE_PREFIX + label)


@contextlib.contextmanager
def _synced_region(label: str) -> Iterator[None]:
    """A profiler range that ends only when its kernels have: every kernel launched
    inside it then starts and ends within the range's CPU span on the profiler's
    (common) clock — Triton's too, which no aten op owns. The kernels' own
    durations are what the profile keeps; the token is slower while recorded."""
    with torch.profiler.record_function(RANGE_PREFIX + label):
        yield
        torch.cuda.synchronize()


def record_token(
    step: DecodeStep, linear: LinearFn, *, tokens: int, device_kind: str
) -> list[list[RangeSample]]:
    """Run ``tokens`` eager steps under the profiler; each token's ranges in order."""
    from torch.profiler import DeviceType, ProfilerActivity

    from matprobe.quiet_profiler import quiet_profile

    if tokens < 1:
        raise MatprobeError(f"a profile needs at least one token, got {tokens}")
    region: Region = _synced_region if device_kind == "cuda" else _region
    step.forward(linear)  # warm-up outside the profile (first-call allocations, BLAS set-up)
    activities = [ProfilerActivity.CPU]
    if device_kind == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with quiet_profile(activities) as prof:
        for _ in range(tokens):
            step.forward(linear, region)
        if device_kind == "cuda":
            torch.cuda.synchronize()
    # CPU-side ranges only: on CUDA the profiler also draws each range on the
    # device's timeline (a gpu_user_annotation of the same name)
    ranges = sorted(
        (
            e
            for e in prof.events()
            if e.device_type == DeviceType.CPU and str(e.name).startswith(RANGE_PREFIX)
        ),
        key=lambda e: float(e.time_range.start),
    )
    samples = [
        RangeSample(
            str(e.name)[len(RANGE_PREFIX) :],
            float(e.time_range.start),
            _kernels(e, device_kind),
        )
        for e in ranges
    ]
    if device_kind == "cuda":
        kernels_by_span(prof.events(), ranges, samples)
    per_token = len(samples) // tokens
    if per_token * tokens != len(samples):
        raise MatprobeError(f"profiler saw {len(samples)} ranges, not a multiple of {tokens}")
    return [samples[i * per_token : (i + 1) * per_token] for i in range(tokens)]


def kernels_by_span(events: Any, ranges: Sequence[Any], samples: list[RangeSample]) -> None:
    """Each range's kernels: the device kernels (and memcpy/memset) that start
    inside its CPU span — sound because every range synchronizes before it ends
    (:func:`_synced_region`), and needed because kernels launched outside any aten
    op (Triton's: the dispatch table's) are in no op's list of kernels."""
    from torch.profiler import DeviceType

    timeline = sorted(
        (float(e.time_range.start), str(e.name), float(e.time_range.elapsed_us()))
        for e in events
        if e.device_type == DeviceType.CUDA and _is_kernel(e)
    )
    starts = [start for start, _, _ in timeline]
    for sample, event in zip(samples, ranges, strict=True):
        lo = bisect.bisect_left(starts, float(event.time_range.start))
        hi = bisect.bisect_left(starts, float(event.time_range.end))
        sample.kernels = [(name, us) for _, name, us in timeline[lo:hi]]


def _is_kernel(event: Any) -> bool:
    name = str(event.name)
    return not name.startswith(RANGE_PREFIX) and not name.startswith("gpu_user_annotation")


def _kernels(event: Any, device_kind: str) -> list[tuple[str, float]]:
    """The kernels of a range as the op tree has them: on CUDA the device kernels
    CUPTI tied to an op inside it (replaced by :func:`kernels_by_span`); on the
    CPU the ops called directly inside it, with their times."""
    if device_kind != "cuda":
        return [(str(c.name), float(c.time_range.elapsed_us())) for c in event.cpu_children]
    found: list[tuple[str, float]] = []
    stack = [event]
    while stack:
        node = stack.pop()
        found.extend((str(k.name), float(k.duration)) for k in node.kernels)
        stack.extend(node.cpu_children)
    return found


def _envelope(timestamp: str, event_type: str, data: Mapping[str, Any]) -> str:
    return json.dumps(
        {
            "timestamp": timestamp,
            "span_id": None,
            "parent_span_id": None,
            "span_name": None,
            "event": {"type": event_type, "data": data},
        }
    )


def _shape_data(spec: MatmulSpec, backend: str) -> dict[str, str]:
    """The spec's key fields as the profile carries them (string values), so the
    reader's key is exactly ``spec.key()``."""
    return {**dict(spec.items()), "backend": backend}


def _rfc3339(start: dt.datetime, offset_us: float) -> str:
    moment = start + dt.timedelta(microseconds=offset_us)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_profile(
    out: TextIO,
    tokens: Sequence[Sequence[RangeSample]],
    specs: Mapping[str, MatmulSpec],
    *,
    backend_of: Callable[[str], str],
    reason: str,
    weight_bytes: int | None = None,
    started: dt.datetime | None = None,
) -> int:
    """Write the recorded ``tokens`` as JSONL to ``out``; returns the events written.

    ``backend_of(role)`` names the backend of a matmul site (``qkv``, ``attn_qk``,
    …); ``reason`` is the KernelBackendSelected reason of the weight matmuls."""
    start = started or dt.datetime.now(dt.timezone.utc)
    written = 0

    def emit(offset_us: float, event_type: str, data: Mapping[str, Any]) -> None:
        nonlocal written
        out.write(_envelope(_rfc3339(start, offset_us), event_type, data) + "\n")
        written += 1

    if weight_bytes is not None:
        emit(0.0, "ModelWeights", {"total_bytes": weight_bytes, "breakdown": {}})
    announced: set[str] = set()
    for token in tokens:
        for sample in token:
            if not sample.kernels:
                continue
            op_name = f"{SCOPE}/{sample.label}"
            role = sample.part
            data: dict[str, Any] = {
                "op_name": op_name,
                "backend": "torch",
                "duration_us": round(sample.duration_us, 3),
            }
            if role in WEIGHT_SITES or role in ATTENTION_SITES:
                backend = backend_of(role)
                data["backend"] = backend
                data["data"] = _shape_data(specs[role], backend)
                if op_name not in announced and role in WEIGHT_SITES:
                    announced.add(op_name)
                    emit(
                        sample.start_us,
                        "KernelBackendSelected",
                        {"op_name": op_name, "backend": backend, "reason": reason},
                    )
            emit(sample.start_us, "GpuOpCompleted", data)
            for name, us in sample.kernels:
                emit(
                    sample.start_us,
                    "InternalKernelCompleted",
                    {
                        "parent_op_name": op_name,
                        "internal_kernel_name": name,
                        "duration_us": round(us, 3),
                    },
                )
    return written


def save_profile(
    path: str | Path,
    tokens: Sequence[Sequence[RangeSample]],
    specs: Mapping[str, MatmulSpec],
    *,
    backend_of: Callable[[str], str],
    reason: str,
    weight_bytes: int | None = None,
) -> int:
    """:func:`write_profile` into a file (a one-line error when it cannot be written)."""
    try:
        with Path(path).open("w", encoding="utf-8") as out:
            return write_profile(
                out, tokens, specs, backend_of=backend_of, reason=reason, weight_bytes=weight_bytes
            )
    except OSError as exc:
        raise MatprobeError(f"cannot write {path}: {exc.strerror or exc}") from None
