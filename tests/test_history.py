"""`matprobe report RUN` and `matprobe history`: a store's runs, rendered again as they
were reported, listed, and followed over time — always through a read-only store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import digest
from conftest import run_cli as matprobe
from matprobe.measure.timing import TimingPolicy
from matprobe.report.json_csv import to_json
from matprobe.report.markdown import render_markdown
from matprobe.report.stored_report import load_report
from matprobe.report.text import render_terminal
from matprobe.run.store import ResultStore, StoreError
from stored_runs import (
    BASELINE,
    GEMV,
    HOSTILE,
    HOSTILE_SHOWN,
    OURS,
    STANDARD,
    RunPlan,
    passed,
    profiled,
    samples,
    store_run,
)

# ---- report RUN ---------------------------------------------------------------------


def test_a_stored_run_is_reported_as_the_run_reported_it(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    original = store_run(db)
    with ResultStore(db, read_only=True) as store:
        again = load_report(store, original.run_id)
    assert render_terminal(again) == render_terminal(original)
    assert render_markdown(again) == render_markdown(original)
    data, expected = to_json(again), to_json(original)
    assert data.pop("policy")["fingerprint"] == expected.pop("policy")["fingerprint"]
    assert data == expected


def test_report_prints_any_form_and_writes_them_all(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db)
    code, text = matprobe("report", "1", "--store", str(db))
    assert code == 0 and text.startswith("matprobe run 1 on Test GPU")
    assert "\x1b" not in text and HOSTILE_SHOWN in text
    code, data = matprobe("report", "--store", str(db), "--format", "json")  # the latest run
    assert code == 0 and json.loads(data)["run_id"] == 1
    code, page = matprobe("report", f"{db}:1", "--format", "html", "--plots", "svg")
    assert code == 0 and page.startswith("<!DOCTYPE html>") and "<script" not in page
    out = tmp_path / "out"
    assert matprobe("report", str(db), "--out", str(out))[0] == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["report.csv", "report.html", "report.json", "report.md", "report.txt"]


def test_a_json_export_is_a_run_too(tmp_path: Path) -> None:
    """report.json (``run --out``, ``--json``) holds every figure: ``report`` renders it as
    the run did, and ``compare`` takes it like a stored run."""
    import gzip

    db = tmp_path / "r.sqlite"
    original = store_run(db)
    export = tmp_path / "report.json.gz"
    with gzip.open(export, "wt", encoding="utf-8") as f:
        json.dump(to_json(original), f)
    code, text = matprobe("report", str(export))
    assert code == 0 and text == render_terminal(original)
    code, text = matprobe("compare", str(export), "1", "--store", str(db))
    assert code == 0 and "9 pairs timed in both: 0 FASTER, 0 SLOWER, 9 SAME" in text
    broken = tmp_path / "broken.json"
    broken.write_text('{"specs": 3}')
    assert matprobe("report", str(broken))[0] == 2


def test_a_run_that_reused_the_cache_shows_its_cached_pairs(tmp_path: Path) -> None:
    """Run 2 measured nothing itself (everything cached): its report still has every pair."""
    db = tmp_path / "r.sqlite"
    first = store_run(db)
    with ResultStore(db) as store:
        run_id = store.start_run("matprobe run", {})
        record = store.run_report(1)
        assert record is not None
        store.put_run_report(run_id, {**record, "run_id": run_id, "plan": "11 pairs: 11 cached"})
        store.finish_run(run_id, "done")
    code, text = matprobe("report", "2", "--store", str(db))
    assert code == 0 and "11 pairs: 11 cached" in text
    assert text.count(" PASS ") == render_terminal(first).count(" PASS ") == 9


def test_a_later_run_under_the_same_key_does_not_rewrite_an_earlier_report(
    tmp_path: Path,
) -> None:
    """--force measures a pair again under the same key; run 1 still shows its own figures."""
    db = tmp_path / "r.sqlite"
    first = store_run(db, RunPlan(STANDARD.medians, seed=1))
    second = store_run(db, RunPlan(STANDARD.medians, seed=2, scale={OURS: 2.0}))
    with ResultStore(db, read_only=True) as store:
        assert render_terminal(load_report(store, 1)) == render_terminal(first)
        assert render_terminal(load_report(store, 2)) == render_terminal(second)


def test_a_run_that_kept_no_report_is_rebuilt_from_its_results(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    spec = profiled(GEMV)
    with ResultStore(db) as store:
        run_id = store.start_run("old matprobe", {"device": {"kind": "cpu", "name": "old box"}})
        for variant, us in ((BASELINE, 40.0), (OURS, 20.0)):
            store.put(passed(spec, variant, samples(us, 12, 1), run_id=run_id))
        store.finish_run(run_id, "done")
    code, text = matprobe("report", "1", "--store", str(db))
    assert code == 0
    assert "rebuilt from the results this run measured" in text
    assert f"{OURS}" in text and "[best-device]" in text and "[baseline]" in text


def test_a_store_from_before_run_reports_is_read(tmp_path: Path) -> None:
    """A store written before the run_reports and superseded_results tables existed."""
    db = tmp_path / "r.sqlite"
    store_run(db)
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE run_reports")
    conn.execute("DROP TABLE superseded_results")
    conn.commit()
    conn.close()
    code, text = matprobe("report", "1", "--store", str(db))
    assert code == 0 and "rebuilt from the results" in text
    assert matprobe("history", "--store", str(db))[0] == 0
    with ResultStore(db) as store:  # a writable open adds them
        store.put_run_report(1, {"format": 1})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "7"], "has no run 7 (runs 1–1)"),
        (["report", "x.sqlite:1"], "x.sqlite does not exist"),
        (["history", "--spec", "op=matmul | n=5"], "no run in"),
        (["history", "--spec", "not a key"], "not a key=value pair"),
        (["report", "1", "--format", "pdf"], "invalid choice: 'pdf'"),
        (["compare", "1", "9"], "has no run 9 (runs 1–1)"),
        (["compare", "1", "nosuch.sqlite"], "'nosuch.sqlite' is not a run"),
        (["compare", "1", "nosuch.sqlite:2"], "nosuch.sqlite does not exist"),
        (["compare", "1", "1", "--noise", "200"], "must be between 0 and 100"),
        (["compare", "1"], "the following arguments are required: B"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Every command that reads a store (``report``, ``history``, ``compare``)."""
    db = tmp_path / "r.sqlite"
    store_run(db)
    code, _ = matprobe(*argv, "--store", str(db))
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_file_that_is_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    before = digest(other)
    for argv in (["report", "1"], ["history"]):
        assert matprobe(*argv, "--store", str(other))[0] == 2
        assert "not a matprobe result store" in capsys.readouterr().err
    assert digest(other) == before


def test_reading_never_writes(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db)
    before = digest(db)
    spec = ["--spec", GEMV]
    for argv in (["report", "1", "--format", "html"], ["history"], ["history", *spec]):
        assert matprobe(*argv, "--store", str(db))[0] == 0
    assert digest(db) == before
    with ResultStore(db, read_only=True) as store, pytest.raises(StoreError, match="written"):
        store.put_run_report(1, {})


# ---- history ------------------------------------------------------------------------


def test_history_lists_every_run(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db, RunPlan(STANDARD.medians, seed=1))
    store_run(db, RunPlan(STANDARD.medians, seed=2, broken=frozenset({OURS})))
    code, text = matprobe("history", "--store", str(db))
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith("2 runs in")
    header, run1 = lines[1:3]
    for column in ("run", "started (UTC)", "status", "device", "policy", "pairs", "versions"):
        assert column in header
    assert run1.split()[0] == "1" and "done" in run1 and TimingPolicy().fingerprint in run1
    assert "torch 2.13.0, triton 3.6.0" in run1 and "11/11" in run1
    assert "\x1b" not in text and HOSTILE_SHOWN in text  # the device's hostile name
    data = json.loads(matprobe("history", "--store", str(db), "--format", "json")[1])
    counts = [(r["id"], r["pass"], r["fail"], r["error"]) for r in data["runs"]]
    assert counts == [(1, 9, 1, 1), (2, 6, 4, 1)]  # run 2: OURS failed on all three specs
    code, md = matprobe("history", "--store", str(db), "--format", "md")
    assert code == 0 and "| run |" in md and "<script>" not in md


def test_history_follows_a_spec_over_runs(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db, RunPlan(STANDARD.medians, seed=1))
    store_run(db, RunPlan(STANDARD.medians, seed=2, scale={OURS: 0.5}))
    # the key in another order and spacing names the same spec
    key = "op=matmul|batch=1|m=1|n=896|k=896|tA=0|tB=1|dtype=f16"
    code, text = matprobe("history", "--store", str(db), "--spec", key, "--format", "json")
    assert code == 0
    data = json.loads(text)
    assert data["spec_key"] == GEMV
    first, second = data["trend"]
    assert first["best"] == second["best"] == OURS
    assert first["baseline"] == second["baseline"] == BASELINE
    assert second["best_device_us"]["median_us"] == pytest.approx(
        first["best_device_us"]["median_us"] / 2, rel=0.05
    )
    code, text = matprobe("history", "--store", str(db), "--spec", key)
    trend = text[text.index("trend of") :].splitlines()
    assert len(trend) == 4 and OURS in trend[2] and OURS in trend[3]


def test_history_of_an_empty_store(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    ResultStore(db).close()
    code, text = matprobe("history", "--store", str(db))
    assert code == 0 and text.startswith("0 runs in")


def test_hostile_names_stay_text(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db)
    for fmt in ("text", "md"):
        code, text = matprobe("report", "1", "--store", str(db), "--format", fmt)
        assert code == 0 and "\x1b" not in text and HOSTILE not in text


# ---- history --spec: a key that names no dtype, or that is not stored -----------------

#: GEMV as a profile writes it: no dtype.
BARE = GEMV.removesuffix(" | dtype=f16")
GEMV_BF16 = GEMV.replace("dtype=f16", "dtype=bf16")


def test_a_key_without_dtype_follows_the_one_dtype_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db)
    code, text = matprobe("history", "--store", str(db), "--spec", BARE, "--format", "json")
    assert code == 0
    data = json.loads(text)
    assert data["spec_key"] == GEMV and [p["best"] for p in data["trend"]] == [OURS]
    err = capsys.readouterr().err
    assert err == f"matprobe: {BARE} names no dtype: showing {GEMV}, its one dtype stored\n"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (BARE, f"{BARE}; stored with dtype: {GEMV_BF16}, {GEMV} (give one as --spec)"),
        (
            GEMV.replace("f16", "q8_0"),
            f"{GEMV.replace('f16', 'q8_0')}; stored as: {GEMV_BF16}, {GEMV} (give one as --spec)",
        ),
        (BARE.replace("n=896", "n=895"), f"(nearest stored key: {GEMV}; 4 spec keys are stored"),
        ("op=attention | n=5", "| tB=? (4 spec keys are stored: `matprobe report` shows"),
    ],
    ids=["no-dtype-two-stored", "another-dtype", "nearest-key", "no-key-near"],
)
def test_a_spec_key_not_stored_says_which_keys_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, said: str
) -> None:
    """Issue 21: a key with no results gave no hint. Now the message names the keys of the
    same shape under any dtype, else the nearest key, in one line and exit status 2."""
    db = tmp_path / "r.sqlite"
    store_run(db)
    store_run(db, RunPlan({GEMV_BF16: {BASELINE: 4.3, OURS: 2.6}}, failures=False))
    code, out = matprobe("history", "--store", str(db), "--spec", spec)
    err = capsys.readouterr().err
    assert code == 2 and out == ""
    assert err.startswith(f"matprobe: error: no run in {db} measured ") and said in err
    assert len(err.splitlines()) == 1


def test_a_spec_key_in_an_empty_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    ResultStore(db).close()
    assert matprobe("history", "--store", str(db), "--spec", BARE)[0] == 2
    assert f"measured {BARE}: the store holds no results" in capsys.readouterr().err


def test_stored_keys_in_a_note_or_an_error_are_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile, shown = f"{GEMV} | note=\x1b[2J", f"{GEMV} | note=\\x1b[2J"
    db = tmp_path / "r.sqlite"
    store_run(db, RunPlan({hostile: {BASELINE: 4.3, OURS: 2.6}}, failures=False))
    bare = hostile.replace(" | dtype=f16", "")
    code, text = matprobe("history", "--store", str(db), "--spec", bare)
    err = capsys.readouterr().err
    assert code == 0 and f"showing {shown}, its one dtype stored" in err
    assert "\x1b" not in err + text
    other = hostile.replace("dtype=f16", "dtype=bf16")
    store_run(db, RunPlan({other: {BASELINE: 4.3}}, failures=False))
    assert matprobe("history", "--store", str(db), "--spec", bare)[0] == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("note=\\x1b[2J") == 3 and shown in err
