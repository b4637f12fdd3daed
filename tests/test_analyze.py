"""The JSONL analyzer against an independent computation.

The synthetic generator records, as it emits each event, which groups the
event belongs to (its `Truth`); here every figure of the analyzer's JSON is
recomputed from those raw durations with numpy and compared. Nothing in the
truth comes from parsing the emitted lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from matprobe.profile.analysis import AnalyzeOptions, analyze, render_text, to_json
from matprobe.profile.jsonl import kernel_type, legacy_matmul_meta, scan, scan_lines
from matprobe.profile.profiles import specs_from_scan
from matprobe.profile.synth import SynthConfig, Truth, generate
from matprobe.spec import MatmulSpec
from matprobe.stats import Stats

ALL = AnalyzeOptions(top=0, kernel_top=0, include_kernel_totals=True)


def expected(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples, dtype=np.float64)
    p95, p99 = np.percentile(values, [95, 99])
    return {
        "count": len(values),
        "total_ms": values.sum() / 1000,
        "avg_ms": values.mean() / 1000,
        "min_ms": values.min() / 1000,
        "max_ms": values.max() / 1000,
        "p95_ms": p95 / 1000,
        "p99_ms": p99 / 1000,
    }


def assert_stats(row: dict[str, Any], samples: list[float], label: str) -> None:
    want = expected(samples)
    for key, value in want.items():
        assert row[key] == pytest.approx(value, rel=1e-12, abs=1e-12), f"{label}: {key}"


def rows_by(section: list[dict[str, Any]], key: str = "label") -> dict[str, dict[str, Any]]:
    out = {row[key]: row for row in section}
    assert len(out) == len(section), "duplicate labels in a section"
    return out


def analysed(config: SynthConfig, tmp_path: Path, workers: int = 1) -> tuple[dict[str, Any], Truth]:
    lines, truth = generate(config)
    path = tmp_path / "profile.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = analyze(scan(path, workers=workers), ALL)
    return to_json(result, ALL), truth


CONFIGS = [
    SynthConfig(tokens=3, layers=2, seed=0),
    SynthConfig(tokens=5, layers=3, seed=7, legacy=False),
    SynthConfig(tokens=2, layers=1, seed=11, broken=False, prompt_tokens=1),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"seed{c.seed}")
def test_every_group_matches_the_truth(config: SynthConfig, tmp_path: Path) -> None:
    data, truth = analysed(config, tmp_path)
    sections = data["sections"]
    assert data["total_events"] == truth.total_events

    # event types: every type counted, durations where there are any
    events = rows_by(sections["event_types"], "type")
    assert {t: int(r["events"]) for t, r in events.items()} == dict(truth.event_counts)
    for event_type, samples in truth.groups["event_types"].items():
        assert_stats(events[event_type], samples, event_type)

    simple = {
        "internal_by_parent": "internal_by_parent",
        "internal_by_parent_op": "internal_by_parent_op",
        "kernel_aggregate": "kernel_aggregate",
        "gpu_kernels": "gpu_kernels",
        "gpu_kernel_types": "gpu_kernel_types",
        "gpu_waits": "gpu_waits",
        "cb_gpu": "cb_gpu",
        "matmul_op_backends": "matmul_op_backends",
    }
    for section, group in simple.items():
        rows = rows_by(sections.get(section, []))
        assert set(rows) == set(truth.groups[group]), section
        for label, samples in truth.groups[group].items():
            assert_stats(rows[label], samples, f"{section}/{label}")

    backends = rows_by(sections["matmul_backends"], "backend")
    assert set(backends) == set(truth.groups["matmul_backends"])
    for backend, samples in truth.groups["matmul_backends"].items():
        assert_stats(backends[backend], samples, backend)

    shapes = rows_by(sections["matmul_shapes"], "shape")
    assert set(shapes) == set(truth.shape_backends)
    for shape, by_backend in truth.shape_backends.items():
        rows = {b["backend"]: b for b in shapes[shape]["backends"]}
        assert set(rows) == set(by_backend)
        for backend, samples in by_backend.items():
            assert_stats(rows[backend], samples, f"{shape} @ {backend}")
        total = sum(sum(s) for s in by_backend.values()) / 1000
        assert shapes[shape]["total_ms"] == pytest.approx(total, rel=1e-12)

    sync = truth.groups["sync"].get("sync", [])
    if sync:
        assert_stats(data["sync"], sync, "sync")
    else:
        assert data["sync"]["count"] == 0

    selection = sections.get("backend_selection", [])
    assert {r["backend"]: r["count"] for r in selection} == dict(truth.backend_by_backend)
    reasons = sections.get("backend_selection_reasons", [])
    assert {r["reason"]: r["count"] for r in reasons} == dict(truth.backend_by_reason)
    by_op = sections.get("backend_selection_by_op", [])
    assert {(r["op"], r["backend"]): r["count"] for r in by_op} == dict(truth.backend_by_op_backend)

    problems = data["problems"]
    for kind, lines in truth.bad_lines.items():
        if not lines:
            assert kind not in problems
            continue
        assert problems[kind]["count"] == len(lines), kind
        assert problems[kind]["first_lines"] == sorted(lines)[:5], kind


def test_sections_sorted_and_limited_like_the_original(tmp_path: Path) -> None:
    lines, _ = generate(SynthConfig(tokens=4, layers=3, seed=2))
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines))
    result = scan(path, workers=1)
    data = to_json(analyze(result, AnalyzeOptions(top=3, kernel_top=2)), AnalyzeOptions())
    for name, rows in data["sections"].items():
        limit = 2 if name == "kernel_aggregate" else 3
        if name != "event_types":
            assert len(rows) <= limit, name
        key = (
            "count"
            if name.startswith("backend_selection") or name == "event_types"
            else ("total_ms")
        )
        if name == "event_types":
            values = [int(r["events"]) for r in rows]
        else:
            values = [r[key] for r in rows]
        assert values == sorted(values, reverse=True), name


@pytest.mark.parametrize(("top", "kernel_top"), [(3, 2), (1, 40), (0, 0)])
def test_a_cut_section_says_how_many_rows_it_left_out(top: int, kernel_top: int) -> None:
    """Every section the limit cut ends in a line that says how many rows are missing,
    of how many, and which option shows them; the JSON says the same. An uncut section
    has no such line (issue 21: 20 of 441 shapes, and nothing said)."""
    result = scan_lines(generate(SynthConfig(tokens=3, layers=2, seed=2))[0], "p.jsonl")
    every = to_json(analyze(result, AnalyzeOptions(top=0, kernel_top=0)), ALL)["sections"]
    options = AnalyzeOptions(top=top, kernel_top=kernel_top)
    analysis = analyze(result, options)
    blocks = {b.split("\n")[0]: b.split("\n")[1:] for b in render_text(analysis).split("\n\n")}
    left_out = to_json(analysis, options)["left_out"]
    limits = {"kernel_aggregate": ("--kernel-top", kernel_top), "event_types": ("--top", 0)}
    said = 0
    for section in analysis.sections:
        total = len(every[section.key])
        option, limit = limits.get(section.key, ("--top", top))
        missing = total - limit if 0 < limit < total else 0
        rows = blocks[section.title]
        assert len(section.rows) == total - missing
        assert left_out.get(section.key, 0) == missing, section.key
        cut = [ln for ln in rows if "more" in ln and "not shown" in ln]
        if missing:
            noun = "shapes" if section.key == "matmul_shapes" else "rows"
            want = f"  … {missing} more {noun} not shown ({total} in all; {option} 0 shows all)"
            assert cut == [want] and rows[-1] == want, section.key
            said += 1
        else:
            assert cut == [], section.key
    assert (said > 0) == (top > 0)  # the synthetic profile has more than 3 rows to cut
    assert (left_out.get("matmul_shapes", 0) > 0) == (top > 0)


def test_kernel_aggregate_hides_totals_unless_asked(tmp_path: Path) -> None:
    lines, truth = generate(SynthConfig(tokens=2, layers=2, seed=5))
    result = scan_lines(lines)
    hidden = to_json(analyze(result, AnalyzeOptions(top=0, kernel_top=0)), ALL)
    shown = to_json(analyze(result, ALL), ALL)
    hidden_names = {r["label"] for r in hidden["sections"]["kernel_aggregate"]}
    shown_names = {r["label"] for r in shown["sections"]["kernel_aggregate"]}
    synthetic = {
        n for n in truth.groups["kernel_aggregate"] if n.endswith("_total") or n.endswith("cb_wait")
    }
    assert synthetic, "the generator should emit *_total kernels"
    assert hidden_names == shown_names - synthetic
    assert shown_names == set(truth.groups["kernel_aggregate"])


def test_kernel_filter_is_case_insensitive_substring(tmp_path: Path) -> None:
    lines, _ = generate(SynthConfig(tokens=2, layers=2, seed=5))
    result = scan_lines(lines)
    options = AnalyzeOptions(top=0, kernel_top=0, kernel_filter="GEMV")
    data = to_json(analyze(result, options), options)
    for name in ("gpu_kernels", "gpu_kernel_types", "matmul_backends"):
        rows = data["sections"][name]
        assert rows, name
        assert all("gemv" in r["label"].lower() for r in rows), name
    for row in data["sections"]["matmul_shapes"]:
        assert "gemv" in row["shape"].lower() or any(
            "gemv" in b["backend"].lower() for b in row["backends"]
        )
    none = AnalyzeOptions(kernel_filter="no-such-kernel")
    text = render_text(analyze(result, none))
    assert "(no kernels matched)" in text


def test_parallel_scan_equals_single_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matprobe.profile.jsonl as jsonl

    lines, truth = generate(SynthConfig(tokens=8, layers=3, seed=9))
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(jsonl, "PARALLEL_MIN_BYTES", 0)  # split even a small file
    single = to_json(analyze(scan(path, workers=1), ALL), ALL)
    for workers in (2, 3):
        split = to_json(analyze(scan(path, workers=workers), ALL), ALL)
        assert split == single, workers
    # Problem line numbers are global, not per chunk.
    assert single["problems"]["not_json"]["first_lines"] == sorted(truth.bad_lines["not_json"])[:5]


def test_text_output_has_the_original_look(tmp_path: Path) -> None:
    lines, _ = generate(SynthConfig(tokens=2, layers=2, seed=1))
    text = render_text(analyze(scan_lines(lines, "x.jsonl")))
    titles = [ln for ln in text.splitlines() if ln and not ln.startswith(" ")]
    order = [
        "=== Analyzing x.jsonl ===",
        "Total events:",
        "Event type summary:",
        "Backend selection summary:",
        "Backend selection reasons:",
        "Backend selection by op/backend:",
        "Internal kernel by parent:",
        "Internal kernel by parent/op:",
        "Kernel aggregate (all parents):",
        "GPU kernel durations (excluding waits):",
        "GPU kernel aggregate (by kernel type):",
        "Matmul backend summary:",
        "Matmul op/backend summary:",
        "Matmul shape backend summary:",
        "GPU wait breakdown:",
        "Command buffer GPU timing:",
        "Sync operations:",
        "Input problems",
    ]
    assert [t for t in titles if t.startswith(tuple(order))] == titles
    positions = [next(i for i, o in enumerate(order) if t.startswith(o)) for t in titles]
    assert positions == sorted(positions)
    row = next(ln for ln in text.splitlines() if ln.startswith("    backend="))
    assert " | total=" in row and "ms | avg=" in row and ", p99_ms=" in row


@pytest.mark.parametrize(
    ("op_name", "kind"),
    [
        ("Generation Loop/block_3/sdpa_block_3_op", "sdpa"),
        ("forward_cpu_block_8", "forward_cpu"),
        ("Generation Loop/block_19/x/mlp_down_proj_block_19_op", "mlp_down_proj"),
        (
            "a/b/metallic::kernels::matmul_gemv::base::MatmulGemvAddmmOp/matmul/gemv_addmm (Q)",
            "gemv_addmm (Q)",
        ),
        ("tensor_staging_prepare", "tensor_staging_prepare"),
        ("x/attn_rearrange_block_12_op", "attn_rearrange"),
    ],
)
def test_kernel_type(op_name: str, kind: str) -> None:
    assert kernel_type(op_name) == kind


def test_legacy_path_shape() -> None:
    meta = legacy_matmul_meta(
        "Generation Loop/block_2/matmul/op=matmul/backend=mps/m=1/n=9728#3/k=896/tB=1/x::Y/z=1"
    )
    assert meta == {"op": "matmul", "backend": "mps", "m": "1", "n": "9728", "k": "896", "tB": "1"}
    assert legacy_matmul_meta("a/matmul/mlx (Q)") is None
    assert legacy_matmul_meta("a/rmsnorm") is None


def test_shapes_from_jsonl_become_specs(tmp_path: Path) -> None:
    lines, truth = generate(SynthConfig(tokens=3, layers=2, seed=4))
    specs, warnings = specs_from_scan(scan_lines(lines, "p.jsonl"))
    assert warnings == []
    assert {s.key() for s in specs} == {MatmulSpec.parse(k).key() for k in truth.shape_backends}
    for spec in specs:
        want = sum(
            len(v)
            for k, by in truth.shape_backends.items()
            if MatmulSpec.parse(k) == spec
            for v in by.values()
        )
        assert spec.provenance is not None and spec.provenance.count == want


def test_durations_that_are_not_numbers_are_problems() -> None:
    lines = [
        json.dumps(
            {"event": {"type": "GpuOpCompleted", "data": {"op_name": "a/b", "duration_us": "12"}}}
        ),
        json.dumps(
            {"event": {"type": "GpuOpCompleted", "data": {"op_name": "a/b", "duration_us": True}}}
        ),
        json.dumps(
            {"event": {"type": "GpuOpCompleted", "data": {"op_name": "a/b", "duration_us": 7}}}
        ),
    ]
    result = scan_lines(lines)
    assert result.problems.counts["missing_field"] == 2
    assert list(result.gpu_kernels["a/b"]) == [7.0]
    assert Stats.from_us(result.event_durations["GpuOpCompleted"]).count == 1


def test_a_text_file_with_one_json_line_late_is_still_a_profile() -> None:
    lines = ["garbage"] * 50 + [
        json.dumps({"event": {"type": "GgufFileMmap", "data": {"size_bytes": 1}}})
    ]
    result = scan_lines(lines)
    assert result.total_events == 1 and result.problems.counts["not_json"] == 50
