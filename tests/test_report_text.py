"""The terminal report fits 100 columns: the CPU main job's report as a new user
read it (rows over 200 characters, columns of ``-`` and ``0.00``, the same
600-character unsupported list under every shape, a closing line that never said
a CPU run cannot pick GPU winners) — and ``--wide`` still shows everything."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from matprobe.cli import main
from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import Clocks, ClockStats, PairResult, Ratio
from matprobe.measure.timing import TimingPolicy
from matprobe.report.build import build_report
from matprobe.report.cells import HEADERS
from matprobe.report.markdown import render_markdown
from matprobe.report.model import Report
from matprobe.report.tables import Column, render_table, ruled_table, wrap, wrap_at
from matprobe.report.text import render_terminal
from matprobe.run.runner import PairState, Plan, PlannedPair, RunOutcome
from matprobe.run.store import ResultStore
from test_report_verdicts import (
    BASE,
    NUMPY,
    OURS,
    profiled,
    ratio,
    report_of,
    result,
    variant_of,
    words,
)

CPU = DeviceInfo(kind="cpu", name="x86_64")
LONG_TRITON = "triton.gemv_stream_p2_w8_pdl0"  # as long as the CPU job's longest id
ATTENTION = (
    "op=matmul_alpha_beta_cache | batch=14 | m=1 | n=90 | k=64 | tA=0 | tB=1 | accumulate=1 | "
    "alpha=0.1250 | beta=0.0000 | cache=1 | dtype=f16 | strided_batch=true"
)
GEMV = "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16"
REASONS = [
    "runs on cuda, not cpu",
    "CPU: not validated here — the interpreter checks triton.attn_bmv on one spec "
    f"({ATTENTION}); --every-point checks every spec",
    "needs k <= 4096 and n <= 4096 (got k=896, n=9728): built for attention rows (head_dim, "
    "context L) that a few tiles cover; a GEMV/GEMM family fits better",
]
CPU_NOTE = "CPU: device clock is wall time per call; caches not flushed"
INTERPRETED = "Triton interpreter on the CPU: validated, not timed"


def cpu_result(spec: Any, family: str, us: float, spread: float, **kw: Any) -> PairResult:
    """As the CPU job measures: wall-clock samples with a spread, notes, GB/s ≈ 1."""
    base = result(spec, family, us, **kw)
    samples = [us * (1 - spread / 2), us, us, us * (1 + spread / 2)] * 10
    clocks = Clocks(
        device=ClockStats.from_samples(samples),
        hot=ClockStats.from_samples([us * 0.9] * 5),
        host=ClockStats.from_samples([us * 0.8] * 5),
        vs_baseline=base.clocks.vs_baseline,
        notes=(CPU_NOTE,),
    )
    return dataclasses.replace(base, clocks=clocks)


def interpreted(spec: Any, variant_id: str) -> PairResult:
    r = result(spec, LONG_TRITON, 1.0)
    clocks = Clocks(notes=(INTERPRETED,))
    return dataclasses.replace(r, variant_id=variant_id, clocks=clocks)


def cpu_job_report() -> Report:
    """Three specs as the CPU main job reports them: a noisy baseline, a peer whose
    interval is wide, interpreted Triton rows with the longest ids, the same
    unsupported reasons under every spec, and an attention spec's long key."""
    pairs, results = [], {}
    wide_ratio = Ratio(f"{BASE}/default", 1.38, 0.71, 13.79, 20, 171.18)
    for key in (GEMV, ATTENTION, GEMV.replace("896 | k=896", "9728 | k=896")):
        spec = profiled(key, count=2280)
        rows = [
            cpu_result(spec, BASE, 171.18, 0.6),
            cpu_result(spec, NUMPY, 2964.53, 0.3, ratio=wide_ratio),
            interpreted(spec, f"{LONG_TRITON}/default"),
        ]
        for r in rows:
            pairs.append(PlannedPair(spec, variant_of(r.family), PairState.RUN))
            results[(spec.key(), r.variant_id)] = r
        for i, reason in enumerate(REASONS * 2):
            pairs.append(PlannedPair(spec, variant_of(f"f{i}"), PairState.UNSUPPORTED, reason))
    plan = Plan(pairs)
    baselines = dict.fromkeys(("matmul", "matmul_alpha_beta"), BASE)
    return build_report(
        plan,
        RunOutcome(1, plan, results),
        baselines=baselines,
        device=CPU,
        policy=TimingPolicy(seed=632613084907304529),
        tokens=95,
        peers={BASE, NUMPY},
        source="built-in profile qwen2.5-0.5b-decode",
    )


def test_the_cpu_jobs_report_fits_100_columns() -> None:
    text = render_terminal(cpu_job_report())
    too_wide = [line for line in text.splitlines() if len(line) > 100]
    assert not too_wide, too_wide


#: The longest ids of the default job on an H100 (2026-11-27): tables of 107 and a
#: summary of 122 columns before cells could break.
SPLITK = "triton.gemv_splitk/modeatomic_last_split0_bn32_bk256_w8"
ATTENTION_SCORES = ATTENTION.replace("n=90 | k=64", "n=86 | k=64")


def gpu_job_report() -> Report:
    cases = []
    for key in (GEMV.replace("n=896 | k=896", "n=896 | k=4864"), ATTENTION_SCORES):
        spec = profiled(key, count=2280)
        rows = [result(spec, BASE, 8.0)]
        for i, family in enumerate((SPLITK.split("/")[0], "triton.attn_bmv")):
            r = result(spec, family, 5.0 + i, ratio=ratio(0.61 + i / 10, 0.6, 0.8, 8.0))
            variant = SPLITK if i == 0 else f"{family}/bn16_bk1024_w4_pdl0"
            rows.append(dataclasses.replace(r, variant_id=variant))
        cases.append((spec, rows))
    return report_of(cases)


def test_the_gpu_jobs_report_fits_100_columns_and_keeps_every_id_whole() -> None:
    """A variant id or a shape too long for its column continues on the next line,
    indented, broken only after ``/``, ``_`` or a space: nothing is cut."""
    text = render_terminal(gpu_job_report())
    lines = text.splitlines()
    assert not [line for line in lines if len(line) > 100]
    assert SPLITK not in text  # it had to break …
    first = next(i for i, line in enumerate(lines) if "triton.gemv_splitk/" in line)
    joined = lines[first].split()[0] + lines[first + 1].strip()
    assert joined == SPLITK  # … and reads whole across its two lines
    assert render_terminal(gpu_job_report(), width=None).count(SPLITK) >= 2  # --wide: one line


@pytest.mark.parametrize("width", [40, 48, 60])  # the narrowest: 12-wide broken cells
def test_a_breakable_column_continues_its_cells_under_them(width: int) -> None:
    columns = [Column("id", breaks="/_"), Column("figure"), Column("prose", breaks=" ")]
    rows = [["family.name/param_one_param_two", "1.25", "said in a few words"], ["s", "2.5", "ok"]]
    lines = render_table(columns, rows, width).text.splitlines()
    assert all(len(line) <= width for line in lines), lines
    first = next(i for i, line in enumerate(lines) if "1.25" in line)
    second = next(i for i, line in enumerate(lines) if "2.5" in line and "1.25" not in line)
    own = lines[first:second]  # the row's first line, then its continued cells
    assert all(line.startswith("    ") for line in own[1:])  # indented under the cell
    figure_at, prose_at = lines[0].index("figure"), lines[0].index("prose")
    ids = [line[2:figure_at].strip() for line in own]
    assert "".join(ids) == "family.name/param_one_param_two"
    assert all(piece.endswith(("/", "_")) for piece in ids[:-1] if piece)  # after / or _ only
    prose = " ".join(line[prose_at:].strip() for line in own)
    assert prose.split() == ["said", "in", "a", "few", "words"]


def test_a_cell_with_no_break_point_stays_whole_and_keeps_the_table_wider() -> None:
    columns = [Column("id", breaks="/_"), Column("figure")]
    lines = render_table(columns, [["unbreakableidentifier" * 2, "1.25"]], 30).text.splitlines()
    assert "unbreakableidentifier" * 2 in lines[1] and "1.25" in lines[1]
    assert len(lines) == 2


def test_a_ruled_table_aligns_its_figures_right_under_a_rule() -> None:
    """token's modes table: every column as wide as its widest cell, figures right."""
    text = ruled_table(("mode", "µs", "note"), [["eager", "12.5", "PASS"], ["f", "3", ""]], {1})
    assert text.split("\n") == [
        "mode     µs  note",
        "-----  ----  ----",
        "eager  12.5  PASS",
        "f         3",
    ]
    assert ruled_table(("a", "bb"), []) == "a  bb\n-  --"  # no rows: the header and rule


def test_what_holds_nothing_or_little_is_left_out_and_said() -> None:
    text = render_terminal(cpu_job_report())
    first_table = text[text.index("  variant") :].splitlines()[0]
    assert "%read" not in first_table  # every cell '-': no peaks on a CPU
    assert "TFLOP/s" not in first_table and "max rel" not in first_table
    assert "columns left out to fit 100 (--wide shows them):" in text
    assert "%read" not in text.split("columns left out")[1].splitlines()[0]  # empty: not said


def test_each_unsupported_reason_and_note_is_said_once_and_cited_per_spec() -> None:
    text = render_terminal(cpu_job_report())
    for reason in REASONS:
        assert words(text).count(words(reason)) == 1, reason
    assert words(text).count(CPU_NOTE) == 1
    assert text.count("unsupported (not failures): 6 pairs — [u1]×2 [u2]×2 [u3]×2") == 3
    assert "[u1] runs on cuda, not cpu (6 pairs)" in text
    assert text.count("notes: [n1] torch.matmul/default, numpy.matmul/default") == 3


def test_a_spec_key_breaks_between_fields_and_tags_sit_beside_the_verdict() -> None:
    text = render_terminal(cpu_job_report())
    key_lines = text[text.index("== op=matmul_alpha_beta_cache") :].splitlines()[:2]
    fields = [f.strip() for line in key_lines for f in line.removeprefix("==").split("|")]
    assert [f for f in fields if f] == ATTENTION.split(" | ")
    assert "PASS [baseline] [noisy]" in text  # a baseline's [peer] is said by --wide
    assert "PASS [peer]" in text


def test_the_last_lines_say_what_a_cpu_run_can_and_cannot_tell() -> None:
    report = cpu_job_report()
    text = render_terminal(report)
    closing = words("\n".join(text.splitlines()[-8:]))
    assert "no spec judged, so no saving is claimed" in closing
    assert "What it cannot tell: which kernel wins on a GPU" in closing
    assert "What it cannot tell" in render_markdown(report)
    gpu = render_terminal(dataclasses.replace(report, device=DeviceInfo(kind="cuda", name="g")))
    assert "What it cannot tell" not in gpu


def test_wide_shows_every_column_and_every_reason_in_place() -> None:
    text = render_terminal(cpu_job_report(), None)
    header = next(line for line in text.splitlines() if line.startswith("  variant"))
    assert all(h in header for h in HEADERS)
    assert "columns left out" not in text and "[u1]" not in text
    assert text.count(f"1 × {REASONS[0]}") == 0 and text.count(f"2 × {REASONS[0]}") == 3


def test_report_and_run_take_wide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    spec = profiled(GEMV, count=240)
    with ResultStore(db) as store:
        run_id = store.start_run("t", {"device": {"kind": "cpu", "name": "box"}})
        for family, us in ((BASE, 40.0), (OURS, 20.0)):
            r = dataclasses.replace(cpu_result(spec, family, us, 0.1), run_id=run_id)
            store.put(r)
        store.finish_run(run_id, "done")
    assert main(["report", "1", "--store", str(db), "--wide"]) == 0
    wide = capsys.readouterr().out
    assert main(["report", "1", "--store", str(db)]) == 0
    narrow = capsys.readouterr().out

    def header(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("  variant"))

    assert "max rel" in header(wide) and "max rel" not in header(narrow)
    assert max(map(len, narrow.splitlines())) <= 100 < max(map(len, wide.splitlines()))


# ---- the table and the wrapping ----------------------------------------------------------


def test_a_table_leaves_out_empty_columns_then_the_lowest_ranked() -> None:
    columns = [Column("name"), Column("empty", 9), Column("low", 1), Column("high", 2)]
    rows = [["a", "-", "x" * 30, "y" * 30], ["b", "", "x", "y"]]
    assert render_table(columns, rows, None).text.splitlines()[0].split() == [
        "name",
        "empty",
        "low",
        "high",
    ]
    fits = render_table(columns, rows, 40)
    assert fits.text.splitlines()[0].split() == ["name", "high"]
    assert fits.left_out == ("low",)  # the empty one is not worth saying
    assert render_table(columns, rows, 70).left_out == ()


def test_required_columns_stay_even_when_too_wide() -> None:
    columns = [Column("name"), Column("figure"), Column("extra", 0)]
    rows = [["n" * 60, "f" * 60, "e"]]
    fitted = render_table(columns, rows, 100)
    assert fitted.left_out == ("extra",)
    assert "f" * 60 in fitted.text


def test_a_cells_width_is_what_is_printed() -> None:
    fitted = render_table([Column("name"), Column("v")], [["a\x1b[31mb", "1"], ["c", "2"]], 100)
    lines = fitted.text.splitlines()
    assert "\x1b" not in fitted.text and "a\\x1b[31mb  1" in lines[1]
    assert lines[2].rindex("2") == lines[1].rindex("1")


@pytest.mark.parametrize("width", [40, 64, 100])
def test_wrapped_lines_fit_and_never_cut_a_word(width: int) -> None:
    text = "every call of every timed replay judged vs float64; seed 632613084907304529 (--seed)"
    lines = wrap(text, width, "", "  ")
    assert all(len(line) <= width for line in lines)
    assert words(" ".join(lines)) == text
    parts = ATTENTION.split(" | ")
    keyed = wrap_at(parts, " | ", width, "== ", "     ")
    assert all(len(line) <= width for line in keyed)
    found = [f.strip() for line in keyed for f in line.removeprefix("==").split("|") if f.strip()]
    assert found == parts


def test_wrapping_escapes_control_bytes() -> None:
    (line,) = wrap("a\x07b", 100)
    assert line == "a\\x07b"
    assert wrap_at(["x\x1bq", "y"], " · ", 100, "", "") == ["x\\x1bq · y"]


def test_a_tag_every_row_carries_is_said_once_under_the_table() -> None:
    spec = profiled(GEMV, count=10)

    def launch_bound(family: str, us: float) -> PairResult:
        r = result(spec, family, us)
        host = ClockStats.from_samples([us * 10] * 5)
        return dataclasses.replace(r, clocks=dataclasses.replace(r.clocks, host=host))

    report = report_of([(spec, [launch_bound(BASE, 8.0), launch_bound(OURS, 5.0)])])
    text = render_terminal(report)
    assert "[host-gap]" not in text.split("every row:")[0]
    assert "  every row: [host-gap]" in text
    assert render_terminal(report, None).count("[host-gap]") == 2
