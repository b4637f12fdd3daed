"""The analyzer on damaged and hostile profiles: the same verdict whatever the file's
size or compression, values no measurement can have kept out of the statistics,
a truncated .gz analysed up to its break."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from matprobe.errors import ProfileError
from matprobe.profile import jsonl
from matprobe.profile.analysis import AnalyzeOptions, analyze, render_text, to_json
from matprobe.profile.jsonl import scan
from matprobe.profile.synth import SynthConfig, generate

ALL = AnalyzeOptions(top=0, kernel_top=0, include_kernel_totals=True)


def event(op: str, duration: Any) -> str:
    return json.dumps(
        {
            "timestamp": "2025-11-03T14:00:00.000000Z",
            "span_id": None,
            "parent_span_id": None,
            "span_name": None,
            "event": {
                "type": "GpuOpCompleted",
                "data": {"op_name": op, "backend": "metal", "duration_us": duration},
            },
        }
    )


def figures(path: Path, workers: int = 1) -> dict[str, Any]:
    return to_json(analyze(scan(path, workers=workers), ALL), ALL)


@pytest.mark.parametrize("bad", ["-5000", "1e300", "12345678901234567890123", "1e999"])
def test_impossible_durations_are_input_problems_not_statistics(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "p.jsonl"
    good = [event("Generation Loop/k", 100) for _ in range(3)]
    hostile = event("Generation Loop/k", 0).replace('"duration_us": 0', f'"duration_us": {bad}')
    path.write_text("\n".join([*good, hostile]) + "\n")
    result = figures(path)
    kernels = {row["label"]: row for row in result["sections"]["gpu_kernels"]}
    assert kernels["Generation Loop/k"]["count"] == 3
    assert kernels["Generation Loop/k"]["total_ms"] == pytest.approx(0.3)
    problems = result["problems"]
    assert ("bad_value" in problems and problems["bad_value"]["first_lines"] == [4]) or (
        "not_json" in problems  # a parser that refuses the number outright
    )
    text = render_text(analyze(scan(path), ALL))
    assert max(len(line) for line in text.splitlines()) < 400


def test_a_large_plain_file_is_judged_like_the_same_file_gzipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Split across processes, a file whose first chunk holds only long lines that
    are not events (fewer than the sniffing window) is still a profile, as it is
    when read in one pass (gzipped)."""
    lines, _ = generate(SynthConfig(tokens=2, layers=2, seed=5))
    junk = ["# " + "x" * 40_000 for _ in range(5)]
    text = "\n".join([*junk, *lines]) + "\n"
    plain = tmp_path / "big.jsonl"
    plain.write_text(text)
    packed = tmp_path / "big.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    monkeypatch.setattr(jsonl, "PARALLEL_MIN_BYTES", 1)
    clean = tmp_path / "clean.jsonl"
    clean.write_text("\n".join(lines) + "\n")
    split = figures(plain, workers=4)
    whole = figures(packed, workers=4)
    assert split["total_events"] == whole["total_events"] == figures(clean)["total_events"] > 0
    assert split["sections"] == whole["sections"]
    assert split["problems"] == whole["problems"]


def test_a_split_file_with_no_event_at_all_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "junk.jsonl"
    path.write_text("\n".join("# " + "y" * 20_000 for _ in range(8)) + "\n")
    monkeypatch.setattr(jsonl, "PARALLEL_MIN_BYTES", 1)
    with pytest.raises(ProfileError, match="not a JSONL profile"):
        scan(path, workers=4)


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_a_truncated_gzip_is_analysed_up_to_the_break(tmp_path: Path, keep: float) -> None:
    lines, _ = generate(SynthConfig(tokens=3, layers=2, seed=9))
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: int(len(data) * keep)])
    result = figures(path)
    assert 0 < result["total_events"] < len(lines)
    assert result["problems"]["truncated"]["count"] == 1
    text = render_text(analyze(scan(path), ALL))
    assert "compressed stream ends early" in text


def test_a_gzip_broken_before_its_first_event_is_a_clear_error(tmp_path: Path) -> None:
    lines, _ = generate(SynthConfig(tokens=1, layers=1, seed=1))
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "stub.jsonl.gz"
    path.write_bytes(data[:20])
    with pytest.raises(ProfileError, match="breaks before its first event"):
        scan(path)


def test_hostile_names_reach_the_terminal_as_text(tmp_path: Path) -> None:
    """ESC sequences, newlines and markup in a profile's names are shown escaped:
    they cannot clear the screen or forge a row of the analysis."""
    hostile = "Generation Loop/\x1b[2J<b>mlx</b>\nforged row: count=999`"
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join([event(hostile, 100), event("Generation Loop/k", 50)]) + "\n")
    text = render_text(analyze(scan(path), ALL))
    assert "\x1b" not in text and "\\x1b[2J" in text
    assert not any(line.startswith("forged row") for line in text.splitlines())
    assert "\\nforged row" in text
