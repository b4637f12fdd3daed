"""Matmul shapes from a live PyTorch model: ``matprobe capture``.

One decode step of a transformers model built from its config (random weights,
nothing downloaded) runs with every matmul-family call recorded — its spec
(shape, layout from strides, dtype) and the module that ran it — then is
written as a profile that ``shapes`` and ``run`` read, and compared with what
decode_specs predicts for the same model.

* :mod:`~matprobe.profile.capture.aten` — a call's spec, and the recording modes;
* :mod:`~matprobe.profile.capture.hf` — the model from a name or a config.json, and the run;
* :mod:`~matprobe.profile.capture.compare` — the capture against decode_specs;
* :mod:`~matprobe.profile.capture.profile` — the capture as JSONL events.
"""

from __future__ import annotations

from matprobe.profile.capture.compare import (
    Comparison,
    Difference,
    compare_capture,
    compare_counts,
    render_comparison,
)
from matprobe.profile.capture.hf import (
    ARCHITECTURES,
    CAPTURE_DTYPES,
    DEVICES,
    capture_decode,
    resolve_model,
)
from matprobe.profile.capture.profile import BACKEND, profile_events, write_profile
from matprobe.profile.capture.record import Capture, CapturedCall

__all__ = [
    "ARCHITECTURES",
    "BACKEND",
    "CAPTURE_DTYPES",
    "DEVICES",
    "Capture",
    "CapturedCall",
    "Comparison",
    "Difference",
    "capture_decode",
    "compare_capture",
    "compare_counts",
    "profile_events",
    "render_comparison",
    "resolve_model",
    "write_profile",
]
