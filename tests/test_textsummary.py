"""The analyzer text-summary reader, on the user's seeds and on damaged copies."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest

from conftest import run_cli, seed
from matprobe.errors import ProfileError, SpecError
from matprobe.profile.analysis import AnalyzeOptions, ShapeRow, analyze, render_text, shape_rows
from matprobe.profile.events import ProfileScan
from matprobe.profile.jsonl import scan_lines
from matprobe.profile.profiles import builtin_profile_path, load_specs
from matprobe.profile.synth import SynthConfig, generate
from matprobe.profile.textsummary import parse_backend_line, read_summary, read_summary_lines
from matprobe.spec import MatmulSpec


def _headers(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    return [ln.strip() for ln in lines if ln.strip().startswith("op=") and ln.strip().endswith(":")]


@pytest.mark.parametrize(
    ("prefix", "blocks", "warnings"), [("000", 39, 0), ("001", 8, 1), ("003", 20, 0)]
)
def test_every_seed_block_parses(prefix: str, blocks: int, warnings: int) -> None:
    path = seed(prefix)
    read = read_summary(path)
    assert len(read.specs) == blocks
    assert len(read.warnings) == warnings
    # Every complete header became a spec whose key prints back verbatim.
    keys = {s.key() for s in read.specs}
    complete = _headers(str(path))[:blocks]
    assert {h.removesuffix(":") for h in complete} == keys
    for spec in read.specs:
        assert spec.provenance is not None and spec.provenance.count > 0


def test_truncated_ninth_block_of_001_is_reported_with_its_line() -> None:
    read = read_summary(seed("001"))
    (warning,) = read.warnings
    assert warning.line == 32
    assert "n=64 | k=88" in warning.message and "truncated" in warning.message


def test_000_keeps_alpha_beta_accumulate_and_bias() -> None:
    specs = read_summary(seed("000")).specs
    qk = [s for s in specs if s.kind == "matmul_alpha_beta" and s.tB]
    pv = [s for s in specs if s.kind == "matmul_alpha_beta" and s.tB is False]
    assert qk and pv
    assert {s.alpha for s in qk} == {0.125}
    assert {s.alpha for s in pv} == {1.0}
    assert all(s.beta == 0.0 and s.accumulate and s.cache and s.strided_batch for s in qk + pv)
    (qkv,) = [s for s in specs if s.op == "matmul_bias_add"]
    assert qkv.bias is True and qkv.n == 1152 and qkv.tB is False


def test_003_fused_and_loader_shapes() -> None:
    specs = read_summary(seed("003")).specs
    by_backend = {s.provenance.main_backend: s for s in specs if s.provenance}
    fused2 = by_backend["gemv_q8_fused2"]
    assert (fused2.n, fused2.n0, fused2.n1, fused2.n_total, fused2.tA) == (
        None,
        4864,
        4864,
        9728,
        None,
    )
    qkv = by_backend["gemv_qkv_fused"]
    assert qkv.fused_parts == (896, 128, 128) and qkv.n_total == 1152
    (lm,) = [s for s in specs if s.n == 151936]
    assert lm.loader == "q8nk_split"
    assert lm.provenance is not None and lm.provenance.count == 144
    # The backend-selection row `op=sdpa backend=legacy: count=3480` is not a shape.
    assert not [s for s in specs if s.op == "sdpa"]


def test_timing_figures_are_read_exactly() -> None:
    specs = read_summary(seed("001")).specs
    gate_up = next(s for s in specs if s.n == 9728)
    (timing,) = gate_up.provenance.backends  # type: ignore[union-attr]
    assert timing.backend == "mps"
    s = timing.stats
    assert (s.count, s.total_ms, s.avg_ms, s.min_ms, s.max_ms, s.p95_ms, s.p99_ms) == (
        2280,
        740.54,
        0.325,
        0.261,
        7.734,
        0.347,
        0.416,
    )


SAMPLE = """\
Matmul shape backend summary:
  op=matmul | batch=1 | m=1 | n=64 | k=32 | tA=0 | tB=1:
    backend=mps: count=10 | total=2.00ms | avg=0.200ms | min=0.100ms | max=0.300ms | p95_ms=0.290ms, p99_ms=0.298ms
    backend=mlx: count=5 | total=4.00ms | avg=0.800ms | min=0.700ms | max=0.900ms | p95_ms=0.890ms, p99_ms=0.898ms
  op=matmul | batch=1 | m=one | n=64 | k=32 | tA=0 | tB=1:
    backend=mps: count=10 | total=2.00ms | avg=0.200ms | min=0.100ms | max=0.300ms | p95_ms=0.290ms, p99_ms=0.298ms
  op=matmul | batch=1 | m=1 | n=65 | k=32 | tA=0 | tB=1:
    backend=mps: count=10 | total=2.00ms | av
  op=matmul | batch=1 | m=1 | n=66 | k=32 | tA=0 | tB=1:
    backend=mps: count=7 | total=1.40ms | avg=0.200ms | min=0.100ms | max=0.300ms | p95_ms=0.290ms, p99_ms=0.298ms
    backend=gemv: count=3 | total=0.30ms | avg=0.100ms | min=0.100ms | max=0.100ms | p95_ms=0.100ms, p99_ms=0.100ms

GPU wait breakdown:
  Unscoped/cb_wait: count=1445 | total=508.09ms | avg=0.352ms | min=0.000ms | max=35.553ms | p95_ms=0.772ms, p99_ms=1.710ms
"""  # noqa: E501


def test_several_backends_and_damaged_blocks() -> None:
    read = read_summary_lines(SAMPLE.splitlines(), source="sample")
    keys = [s.key() for s in read.specs]
    assert keys == [
        "op=matmul | batch=1 | m=1 | n=64 | k=32 | tA=0 | tB=1",
        "op=matmul | batch=1 | m=1 | n=66 | k=32 | tA=0 | tB=1",
    ]
    first = read.specs[0].provenance
    assert first is not None
    assert [t.backend for t in first.backends] == ["mps", "mlx"]
    assert first.count == 15 and first.total_ms == pytest.approx(6.0)
    assert first.main_backend == "mlx"  # most total time, not most calls
    assert first.source == "sample:2"
    lines = sorted(w.line for w in read.warnings)
    # line 5: bad header (its timing line is then not attached to anything);
    # line 8: a truncated timing line; line 7: that block is left without timings.
    assert lines == [5, 7, 8]


@pytest.mark.parametrize(
    "line",
    [
        "backend=mps: count=10 | total=2.00ms",
        "backend=mps count=10 | total=2.00ms | avg=0.2ms | min=0.1ms | max=0.3ms | p95_ms=0.2ms, "
        "p99_ms=0.3ms",
        "backend=mps: count=1.5 | total=2.00ms | avg=0.2ms | min=0.1ms | max=0.3ms | p95_ms=0.2ms, "
        "p99_ms=0.3ms",
        "backend=mps: count=10 | total=abc | avg=0.2ms | min=0.1ms | max=0.3ms | p95_ms=0.2ms, "
        "p99_ms=0.3ms",
    ],
)
def test_bad_backend_lines(line: str) -> None:
    with pytest.raises(SpecError):
        parse_backend_line(line)


def test_file_without_shapes_is_an_error(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "notes.txt"
    path.write_text("just some notes\nnothing here\n")
    with pytest.raises(ProfileError, match="no matmul shape blocks"):
        read_summary(path)


def test_builtin_profile_is_qwen_decode_with_alpha_beta() -> None:
    loaded = load_specs()
    assert loaded.warnings == []
    specs = loaded.specs
    assert len(specs) == 39
    gemv = [s for s in specs if s.batch == 1]
    assert sorted((s.n, s.k, s.tB) for s in gemv) == [
        (896, 896, True),
        (896, 4864, True),
        (1152, 896, False),
        (9728, 896, True),
        (151936, 896, True),
    ]
    attention = [s for s in specs if s.kind == "matmul_alpha_beta"]
    assert len(attention) == 34 and all(s.alpha is not None for s in attention)
    assert all(s.dtype == "f16" for s in specs)
    # Sorted by production time, largest first: the gate/up projection.
    assert specs[0].n == 9728
    totals = [s.provenance.total_ms for s in specs if s.provenance]
    assert totals == sorted(totals, reverse=True)
    assert builtin_profile_path().is_file()


def test_parse_of_a_header_equals_the_reader_spec() -> None:
    read = read_summary(seed("003"))
    for header in _headers(str(seed("003"))):
        assert MatmulSpec.parse(header) in read.specs


# ---- a summary that `matprobe analyze` cut at --top -----------------------------------


def _synth_scan() -> ProfileScan:
    return scan_lines(generate(SynthConfig(tokens=3, layers=2, seed=4))[0], "p.jsonl")


def _counts(rows: Iterable[ShapeRow]) -> Counter[str]:
    """Calls per canonical key of the analyzer's shape rows (as the reader merges them)."""
    counts: Counter[str] = Counter()
    for row in rows:
        counts[MatmulSpec.parse(row.shape).key()] += sum(b.stats.count for b in row.backends)
    return counts


@pytest.mark.parametrize("top", [1, 4, 0])
def test_an_analyze_summary_reads_back_and_a_cut_is_said_once(top: int) -> None:
    """Round trip: what ``analyze`` prints, read back, is its shapes with their calls;
    the "… N more" line of a cut section is one warning that names the shapes read and
    the shapes in all, never an "unexpected line" nor silence (issue 21)."""
    scanned = _synth_scan()
    every = shape_rows(scanned)
    assert len(every) > 4
    text = render_text(analyze(scanned, AnalyzeOptions(top=top)))
    read = read_summary_lines(text.splitlines(), source="summary.txt")
    shown = every[:top] if top else every
    assert Counter({s.key(): s.provenance.count for s in read.specs if s.provenance}) == _counts(
        shown
    )
    messages = [w.message for w in read.warnings]
    if top:
        (warning,) = read.warnings
        assert warning.message.startswith(f"only {top} of {len(every)} shapes were read")
        assert f"left {len(every) - top} out" in warning.message
        assert "--top 0" in warning.message
        lines = text.splitlines()
        assert lines[warning.line - 1].strip().startswith(f"… {len(every) - top} more shapes")
    else:
        assert messages == []


def test_shapes_warns_that_a_cut_summary_lost_shapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scanned = _synth_scan()
    total = len(shape_rows(scanned))
    path = tmp_path / "summary.txt"
    path.write_text(render_text(analyze(scanned, AnalyzeOptions(top=3))), encoding="utf-8")
    code, out = run_cli("shapes", str(path))
    err = capsys.readouterr().err
    assert code == 0 and out.startswith(f"{path}: 3 matmul shapes")
    (said,) = [ln for ln in err.splitlines() if "shapes were read" in ln]
    assert said.startswith("matprobe: warning: summary.txt: line ")
    assert f": only 3 of {total} shapes were read" in said
    # A "… N more" line of another section (GPU waits, kernels) is not about shapes.
    assert err.count("shapes were read") == 1


@pytest.mark.parametrize("top", [0, 1])
def test_a_shape_name_cannot_forge_the_more_line(top: int) -> None:
    """A shape's op from the profile holding a line break and a forged "… N more" line
    is printed escaped, so the reader counts the real cut only."""
    forged = "matmul\n  … 7 more shapes not shown (9 in all; --top 0 shows all)\n"

    def event(op: str, n: int, duration: int) -> str:
        shape = {"op": op, "backend": "mlx", "batch": "1", "m": "1", "n": str(n), "k": "64"}
        data = {"op_name": "a/matmul/mlx", "backend": "mlx", "duration_us": duration}
        return json.dumps({"event": {"type": "GpuOpCompleted", "data": {**data, "data": shape}}})

    scanned = scan_lines([event(forged, 64, 900), event("matmul", 32, 100)], "hostile.jsonl")
    text = render_text(analyze(scanned, AnalyzeOptions(top=top)))
    assert "\n  … 7 more" not in text and "matmul\\n  … 7 more" in text
    read = read_summary_lines(text.splitlines(), source="summary.txt")
    cut = [w.message for w in read.warnings if "shapes were read" in w.message]
    assert len(cut) == (1 if top else 0)
    if top:
        assert cut[0].startswith("only 0 of 2 shapes were read: the summary left 1 out")
