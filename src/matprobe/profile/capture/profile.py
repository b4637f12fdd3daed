"""A capture as a metallic-format profile (DESIGN.md §3.2) that ``shapes``,
``run`` and ``analyze`` read.

One ``GpuOpCompleted`` event per matmul call, in the order they ran: the op
name is the module path and the call (``capture/model.layers.0.mlp.up_proj/mm``),
the nested ``data`` holds the shape key's pairs as strings, as metallic writes
them. A capture counts calls; it does not time them: ``duration_us`` is 0, so
the profile adds no production time (``matprobe run FILE`` times the shapes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.profile.capture.record import Capture

#: The backend name a captured call carries.
BACKEND = "torch"


def profile_events(
    capture: Capture, *, timestamp: datetime | None = None
) -> Iterator[dict[str, Any]]:
    """The capture's events, each an envelope of the metallic schema."""
    stamp = (timestamp or datetime.now(timezone.utc)).isoformat()
    for call in capture.calls:
        shape = dict(call.spec.items())
        yield {
            "timestamp": stamp,
            "span_id": None,
            "parent_span_id": None,
            "span_name": None,
            "event": {
                "type": "GpuOpCompleted",
                "data": {
                    "op_name": f"capture/{call.site or 'model'}/{call.call}",
                    "backend": BACKEND,
                    "duration_us": 0,
                    "data": {**shape, "backend": BACKEND},
                },
            },
        }


def write_profile(capture: Capture, path: str | Path) -> int:
    """Write the capture's events to ``path`` as JSONL; the number of events."""
    lines = [json.dumps(event) + "\n" for event in profile_events(capture)]
    try:
        with Path(path).open("w", encoding="utf-8") as handle:
            handle.writelines(lines)
    except OSError as exc:
        raise MatprobeError(f"cannot write {path}: {exc.strerror or exc}") from None
    return len(lines)
