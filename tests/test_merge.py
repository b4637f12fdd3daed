"""``matprobe merge``: stores from many machines into one, nothing measured lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import digest
from matprobe.cli import main
from matprobe.measure.results import PairResult
from matprobe.run.merge import merge_stores
from matprobe.run.store import ResultKey, ResultStore
from test_store import make_result


def store_with(path: Path, results: list[PairResult], command: str = "matprobe run") -> int:
    """A store holding one finished run that measured ``results``; the run's id."""
    with ResultStore(path) as store:
        run_id = store.start_run(command, {"host": path.name})
        for result in results:
            store.put(PairResult.from_dict({**result.to_dict(), "run_id": run_id}))
        store.put_run_report(run_id, {"run_id": run_id, "source": path.name})
        store.put_device_info(results[0].device, {"read_gbps": 3000.0})
        store.finish_run(run_id, "done")
    return run_id


def merge_cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["merge", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_identical_rows_become_one_row_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same measurement, filed by two runs (copies of one store merged from two
    # machines): one row, no conflict, both runs kept.
    same = make_result(1)
    a, b, into = tmp_path / "a.sqlite", tmp_path / "b.sqlite", tmp_path / "c.sqlite"
    store_with(a, [same])
    store_with(b, [same])
    before = digest(a), digest(b)
    code, out, _ = merge_cli(str(a), str(b), "--into", str(into), capsys=capsys)
    assert code == 0, out
    assert "conflict" not in out.replace("0 conflicts", "")
    assert (digest(a), digest(b)) == before  # the inputs are never written
    with ResultStore(into, read_only=True) as store:
        assert len(store.results()) == 1
        assert [r.status for r in store.runs()] == ["done", "done"]
        assert [r.environment["host"] for r in store.runs()] == ["a.sqlite", "b.sqlite"]


def test_conflicting_rows_keep_the_newer_and_supersede_the_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = make_result(2, measured_at="2026-11-26T10:00:00.000000Z")
    newer = make_result(2, measured_at="2026-11-27T10:00:00.000000Z", reason="", baseline=True)
    a, b, into = tmp_path / "a.sqlite", tmp_path / "b.sqlite", tmp_path / "c.sqlite"
    # The newer one comes first, so "newer wins" is not "last merged wins".
    store_with(a, [newer])
    store_with(b, [older])
    code, out, _ = merge_cli(str(a), str(b), "--into", str(into), capsys=capsys)
    assert code == 1  # merged, with conflicts
    key = ResultKey.of_result(newer)
    conflict_lines = [line for line in out.splitlines() if line.startswith("conflict:")]
    assert len(conflict_lines) == 1 and key.variant_id in conflict_lines[0]
    assert f"kept {a} run 1" in conflict_lines[0] and f"superseded {b} run 1" in out
    with ResultStore(into, read_only=True) as store:
        kept = store.get(key)
        assert kept is not None and kept.measured_at == newer.measured_at
        b_run = store.runs()[1].id
        # The older measurement is not lost: run b's results still show it.
        (theirs,) = store.results_of_run(b_run)
        assert theirs.measured_at == older.measured_at and theirs.run_id == b_run


def test_disjoint_rows_all_arrive_under_renumbered_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, into = tmp_path / "a.sqlite", tmp_path / "b.sqlite", tmp_path / "c.sqlite"
    store_with(a, [make_result(i) for i in range(3)])
    store_with(b, [make_result(i) for i in range(3, 7)])
    code, out, _ = merge_cli(str(a), str(b), "--into", str(into), capsys=capsys)
    assert code == 0 and "7 results added" in out
    with ResultStore(into, read_only=True) as store:
        runs = store.runs()
        assert [r.id for r in runs] == [1, 2]  # both were run 1 at home
        for run, expected in zip(runs, (3, 4), strict=True):
            mine = store.results_of_run(run.id)
            assert len(mine) == expected and {r.run_id for r in mine} == {run.id}
            report = store.run_report(run.id)
            assert report is not None and report["run_id"] == run.id
        assert store.get_device_info(make_result(0).device) == {"read_gbps": 3000.0}


def test_merging_into_an_existing_store_keeps_its_rows_and_twice_adds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, into = tmp_path / "a.sqlite", tmp_path / "c.sqlite"
    store_with(into, [make_result(0)], command="matprobe run --here")
    store_with(a, [make_result(1), make_result(2)])
    first = merge_stores([a], into)
    assert (first.runs_added, first.results_added, first.conflicts) == (1, 2, [])
    again = merge_stores([a], into)
    assert (again.runs_added, again.runs_known, again.results_added) == (0, 1, 0)
    assert again.results_identical == 2 and again.history_added == 0
    with ResultStore(into, read_only=True) as store:
        assert [r.command for r in store.runs()] == ["matprobe run --here", "matprobe run"]
        assert len(store.results()) == 3


def test_a_conflict_merged_twice_is_kept_once(tmp_path: Path) -> None:
    a, b, into = tmp_path / "a.sqlite", tmp_path / "b.sqlite", tmp_path / "c.sqlite"
    store_with(a, [make_result(2, measured_at="2026-11-27T10:00:00.000000Z")])
    store_with(b, [make_result(2, measured_at="2026-11-26T10:00:00.000000Z")])
    merge_stores([a, b], into)
    merge_stores([a, b], into)
    with ResultStore(into, read_only=True) as store:
        assert store.table_rows("superseded_results", "spec_key") == [(make_result(2).spec_key,)]


@pytest.mark.parametrize("bad", ["not-a-store", "missing", "same-as-into", "twice"])
def test_bad_inputs_are_a_one_line_usage_error_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    good, into = tmp_path / "a.sqlite", tmp_path / "c.sqlite"
    store_with(good, [make_result(0)])
    other = {
        "not-a-store": tmp_path / "notes.txt",
        "missing": tmp_path / "nowhere.sqlite",
        "same-as-into": into,
        "twice": good,
    }[bad]
    (tmp_path / "notes.txt").write_text("hello\n")
    if bad == "same-as-into":
        store_with(into, [make_result(5)])
    before = digest(into) if into.exists() else None
    code, out, err = merge_cli(str(good), str(other), "--into", str(into), capsys=capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("matprobe: error:"), err
    assert (digest(into) if into.exists() else None) == before


def test_into_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["merge", "a.sqlite"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("newer_first", [True, False])
def test_merging_the_same_stores_again_says_no_conflict_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], newer_first: bool
) -> None:
    """Re-running one merge reported the same 21 conflicts again: a measurement that
    already lost to the kept one is settled, counted, not a new conflict."""
    newer = make_result(2, measured_at="2026-11-27T10:00:00.000000Z")
    older = make_result(2, measured_at="2026-11-26T10:00:00.000000Z")
    a, b, into = tmp_path / "a.sqlite", tmp_path / "b.sqlite", tmp_path / "c.sqlite"
    store_with(a, [newer if newer_first else older])
    store_with(b, [older if newer_first else newer])
    code, out, _ = merge_cli(str(a), str(b), "--into", str(into), capsys=capsys)
    assert code == 1 and out.count("conflict:") == 1
    code, out, _ = merge_cli(str(a), str(b), "--into", str(into), capsys=capsys)
    assert code == 0 and "conflict:" not in out
    assert "0 conflicts (1 more settled by an earlier merge)" in out
    with ResultStore(into, read_only=True) as store:
        kept = store.get(ResultKey.of_result(newer))
        assert kept is not None and kept.measured_at == newer.measured_at
        assert len(store.table_rows("superseded_results", "spec_key")) == 1
