"""The synthetic profile generator: determinism, coverage, and an honest answer key.

The answer key (:class:`~matprobe.profile.synth.Truth`) is recorded from the
generator's decisions; here a small, separate reading of the emitted lines
(the rules of DESIGN.md §3.2 as the brief states them) must agree with it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from matprobe.profile.synth import (
    BAD_CATEGORIES,
    EVENT_TYPES,
    SECTIONS,
    SynthConfig,
    SynthError,
    Truth,
    generate,
    iter_lines,
    write_profile,
)

KNOWN_TYPES = frozenset(EVENT_TYPES)
REQUIRED = {
    "GpuOpCompleted": ("op_name", "duration_us"),
    "InternalKernelCompleted": ("parent_op_name", "internal_kernel_name", "duration_us"),
    "KernelBackendSelected": ("op_name", "backend", "reason"),
}
BASE_KEYS = ("op", "batch", "m", "n", "k", "tA", "tB")
RFC3339_US = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def classify(text: str) -> tuple[str, dict[str, Any] | None]:
    """('blank' | 'not_json' | 'not_an_event' | 'event', parsed event or None)."""
    if not text.strip():
        return "blank", None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError:
        return "not_json", None
    if not isinstance(payload, dict):
        return "not_an_event", None
    event = payload.get("event")
    if not isinstance(event, dict) or not event.get("type"):
        return "not_an_event", None
    if not isinstance(event.get("data", {}), dict):
        return "not_an_event", None
    return "event", event


def shape_of(op_name: str, data: Any) -> dict[str, str] | None:
    if isinstance(data, dict):
        inner = data.get("data")
        if isinstance(inner, dict) and "op" in inner:
            return inner
        if "op" in data:
            return data
    for marker in ("matmul_cache/", "matmul/"):
        at = op_name.find(marker)
        if at != -1:
            meta: dict[str, str] = {}
            for segment in op_name[at:].split("/")[1:]:
                if "::" in segment:
                    break
                token = segment.split("#", 1)[0]
                if "=" in token:
                    key, value = token.split("=", 1)
                    meta[key] = value
            return meta or None
    return None


def shape_key(meta: dict[str, str]) -> str:
    parts = [f"{key}={meta.get(key, '?')}" for key in BASE_KEYS]
    extras = sorted((k, v) for k, v in meta.items() if k not in BASE_KEYS and k != "backend")
    return " | ".join(parts + [f"{k}={v}" for k, v in extras])


def kernel_type(op_name: str) -> str:
    base = re.sub(r"_block_\d+", "", op_name.split("/")[-1])
    if base.endswith("_op"):
        base = base[:-3]
    return base.rstrip("_")


def reread(lines: list[str]) -> Truth:
    """An independent reading of the lines by the brief's rules."""
    truth = Truth()

    def add(section: str, label: str, value: float) -> None:
        truth.groups[section].setdefault(label, []).append(value)

    for number, text in enumerate(lines, start=1):
        kind, event = classify(text)
        if kind == "blank":
            truth.blank_lines.append(number)
            continue
        if event is None:
            truth.bad_lines[kind].append(number)
            continue
        event_type = event["type"]
        data = event.get("data", {})
        truth.total_events += 1
        truth.event_counts[event_type] += 1
        if event_type not in KNOWN_TYPES:
            truth.bad_lines["unknown_type"].append(number)
        elif any(name not in data for name in REQUIRED.get(event_type, ())):
            truth.bad_lines["missing_field"].append(number)
        duration = data.get("duration_us")
        timed = isinstance(duration, (int, float)) and not isinstance(duration, bool)
        if timed:
            add("event_types", event_type, float(duration))
            name = data.get("internal_kernel_name") or data.get("op_name") or ""
            if "sync" in name.lower():
                add("sync", "sync", float(duration))
        if event_type == "InternalKernelCompleted" and timed:
            parent = data.get("parent_op_name", "<unknown>")
            kernel = data.get("internal_kernel_name", "<unknown>")
            add("internal_by_parent", parent, float(duration))
            add("internal_by_parent_op", f"{parent} :: {kernel}", float(duration))
            add("kernel_aggregate", kernel, float(duration))
        if event_type == "GpuOpCompleted" and timed:
            op_name = data.get("op_name", "<unknown>")
            if "/cb_gpu" in op_name:
                add("cb_gpu", op_name, float(duration))
            elif "cb_wait" in op_name or op_name.endswith("wait"):
                add("gpu_waits", op_name, float(duration))
            else:
                add("gpu_kernels", op_name, float(duration))
                add("gpu_kernel_types", kernel_type(op_name), float(duration))
                meta = shape_of(op_name, data.get("data"))
                if meta is not None:
                    backend = meta.get("backend") or data.get("backend") or "<unknown>"
                    add("matmul_backends", backend, float(duration))
                    add("matmul_op_backends", f"{meta['op']} @ {backend}", float(duration))
                    per = truth.shape_backends.setdefault(shape_key(meta), {})
                    per.setdefault(backend, []).append(float(duration))
        if event_type == "KernelBackendSelected":
            op_name = data.get("op_name", "<unknown>")
            backend = data.get("backend", "<unknown>")
            truth.backend_by_backend[backend] += 1
            truth.backend_by_reason[data.get("reason", "<unknown>")] += 1
            truth.backend_by_op_backend[(op_name, backend)] += 1
    return truth


@pytest.fixture(scope="module")
def default_run() -> tuple[list[str], Truth]:
    return generate(SynthConfig())


def test_same_seed_same_bytes_and_truth() -> None:
    a_lines, a_truth = generate(SynthConfig(seed=7))
    b_lines, b_truth = generate(SynthConfig(seed=7))
    assert a_lines == b_lines
    assert a_truth == b_truth
    c_lines, _ = generate(SynthConfig(seed=8))
    assert c_lines != a_lines


def test_iter_lines_streams_the_same_lines(default_run: tuple[list[str], Truth]) -> None:
    lines, _ = default_run
    assert list(iter_lines(SynthConfig())) == lines


def test_every_design_event_type_appears(default_run: tuple[list[str], Truth]) -> None:
    lines, truth = default_run
    assert set(EVENT_TYPES) <= set(truth.event_counts)
    seen = Counter(event["type"] for _, event in map(classify, lines) if event is not None)
    assert set(EVENT_TYPES) <= set(seen)


def test_line_accounting(default_run: tuple[list[str], Truth]) -> None:
    lines, truth = default_run
    assert set(truth.groups) == set(SECTIONS)
    assert set(truth.bad_lines) == set(BAD_CATEGORIES)
    not_events = len(truth.bad_lines["not_json"]) + len(truth.bad_lines["not_an_event"])
    assert len(lines) == truth.total_events + not_events + len(truth.blank_lines)
    assert truth.total_events == sum(truth.event_counts.values())
    assert all(lines[n - 1] == "" for n in truth.blank_lines)
    assert sum(1 for text in lines if text == "") == len(truth.blank_lines)
    assert lines[-1] == ""  # the trailing blank line


def test_every_broken_kind_is_present(default_run: tuple[list[str], Truth]) -> None:
    _, truth = default_run
    assert len(truth.bad_lines["not_json"]) >= 2
    assert len(truth.bad_lines["not_an_event"]) >= 5
    assert truth.bad_lines["unknown_type"]
    assert len(truth.bad_lines["missing_field"]) >= 4
    assert len(truth.blank_lines) >= 2
    assert truth.event_counts["FutureEventKind"] == 1


def test_broken_lines_sit_where_the_truth_says(default_run: tuple[list[str], Truth]) -> None:
    lines, truth = default_run
    for category in ("not_json", "not_an_event"):
        for number in truth.bad_lines[category]:
            assert classify(lines[number - 1])[0] == category, (category, number)
    for number in truth.bad_lines["unknown_type"]:
        kind, event = classify(lines[number - 1])
        assert kind == "event" and event is not None and event["type"] not in KNOWN_TYPES
    for number in truth.bad_lines["missing_field"]:
        kind, event = classify(lines[number - 1])
        assert kind == "event" and event is not None
        assert any(f not in event["data"] for f in REQUIRED[event["type"]]), number


def test_an_independent_reading_agrees_with_the_truth(
    default_run: tuple[list[str], Truth],
) -> None:
    lines, truth = default_run
    reread_truth = reread(lines)
    assert reread_truth.bad_lines == truth.bad_lines
    assert reread_truth.blank_lines == truth.blank_lines
    assert reread_truth.total_events == truth.total_events
    assert reread_truth.event_counts == truth.event_counts
    for section in SECTIONS:
        assert reread_truth.groups[section] == truth.groups[section], section
    assert reread_truth.shape_backends == truth.shape_backends
    assert reread_truth.backend_by_backend == truth.backend_by_backend
    assert reread_truth.backend_by_reason == truth.backend_by_reason
    assert reread_truth.backend_by_op_backend == truth.backend_by_op_backend


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("legacy", [False, True])
def test_agreement_holds_for_other_seeds_and_sizes(seed: int, legacy: bool) -> None:
    config = SynthConfig(tokens=4, layers=5, seed=seed, legacy=legacy, prompt_tokens=1)
    lines, truth = generate(config)
    assert reread(lines) == truth


def test_clean_run_is_the_broken_run_without_its_bad_lines() -> None:
    broken_lines, truth = generate(SynthConfig(seed=4, broken=True))
    clean_lines, clean_truth = generate(SynthConfig(seed=4, broken=False))
    drop = {n for numbers in truth.bad_lines.values() for n in numbers} | set(truth.blank_lines)
    kept = [text for n, text in enumerate(broken_lines, start=1) if n not in drop]
    assert kept == clean_lines
    assert not any(clean_truth.bad_lines.values()) and not clean_truth.blank_lines


def test_realistic_shapes_and_names(default_run: tuple[list[str], Truth]) -> None:
    _, truth = default_run
    shapes = truth.shape_backends
    assert (
        "gemv_qkv_fused"
        in shapes[
            "op=matmul | batch=1 | m=1 | n=? | k=896 | tA=? | tB=? | nk=128 | nq=896 | nv=128"
        ]
    )
    assert (
        "gemv_q8_fused2"
        in shapes["op=matmul | batch=1 | m=1 | n=? | k=896 | tA=? | tB=? | n0=4864 | n1=4864"]
    )
    assert "gemv" in shapes["op=matmul | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1"]
    assert {"gemv", "mlx"} <= set(shapes["op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1"])
    lm_head = "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=0 | loader=q8nk_split"
    assert statistics_mean(shapes[lm_head]["mlx"]) > 1500  # ~2.4 ms, as in seeds/003
    # attention: context length grows with the token (prompt 2 → L = 3 … 8)
    for length in range(3, 9):
        assert any(
            key.startswith(f"op=matmul_alpha_beta | batch=14 | m=1 | n={length} | k=64")
            for key in shapes
        )
    kinds = set(truth.groups["gpu_kernel_types"])
    assert {"sdpa", "forward_cpu", "gemv_addmm (Q)", "mlx (D)", "mlx (Q)"} <= kinds
    assert truth.groups["sync"]["sync"]
    assert truth.groups["gpu_waits"] and truth.groups["cb_gpu"]


def statistics_mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_envelope_timestamps_and_string_shape_values(default_run: tuple[list[str], Truth]) -> None:
    lines, _ = default_run
    stamps = []
    for text in lines:
        if classify(text)[0] != "event":
            continue
        payload = json.loads(text)
        assert list(payload) == ["timestamp", "span_id", "parent_span_id", "span_name", "event"]
        assert payload["span_id"] is None and payload["span_name"] is None
        assert RFC3339_US.match(payload["timestamp"])
        stamps.append(payload["timestamp"])
        data = payload["event"]["data"]
        shape = shape_of(data.get("op_name", ""), data.get("data"))
        if isinstance(data.get("data"), dict):
            assert shape is not None
            assert all(isinstance(v, str) for v in shape.values())
        if isinstance(data.get("duration_us"), int):
            assert data["duration_us"] >= 0
    assert stamps == sorted(stamps)


def test_legacy_off_emits_no_path_shapes() -> None:
    lines, truth = generate(SynthConfig(legacy=False, broken=False))
    assert not any("/op=" in text for text in lines)
    assert "matmul_cache @ mps" not in truth.groups["matmul_op_backends"]


def test_zero_tokens_and_bad_options() -> None:
    lines, truth = generate(SynthConfig(tokens=0, prompt_tokens=0))
    assert reread(lines) == truth
    with pytest.raises(SynthError):
        generate(SynthConfig(layers=0))
    with pytest.raises(SynthError):
        generate(SynthConfig(tokens=-1))


@pytest.mark.parametrize("broken", [False, True])
def test_write_profile_writes_exactly_the_asked_events(tmp_path: Path, broken: bool) -> None:
    path = tmp_path / "profile.jsonl"
    assert write_profile(path, events=5000, seed=3, broken=broken) == 5000
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # newline-terminated
    kinds = Counter(classify(text)[0] for text in lines[:-1])
    assert kinds["event"] == 5000
    assert bool(kinds["not_json"] + kinds["not_an_event"]) == broken
    if not broken:  # the file is the head of the stream iter_lines gives for its settings
        config = SynthConfig(tokens=50, layers=24, seed=3, broken=False, prompt_tokens=4)
        assert list(islice(iter_lines(config), len(lines) - 1)) == lines[:-1]


def test_write_profile_small_and_invalid(tmp_path: Path) -> None:
    path = tmp_path / "tiny.jsonl"
    assert write_profile(path, events=1) == 1
    assert len(path.read_text(encoding="utf-8").splitlines()) == 1
    assert write_profile(path, events=0) == 0
    assert path.read_text(encoding="utf-8") == ""
    with pytest.raises(SynthError):
        write_profile(path, events=-5)
