from __future__ import annotations

import math
import multiprocessing
import os
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import digest
from matprobe.errors import MatprobeError
from matprobe.measure.results import (
    Clocks,
    ClockStats,
    ErrorKind,
    ErrorMetrics,
    PairResult,
    Status,
)
from matprobe.run.store import (
    ResultKey,
    ResultStore,
    RunRecord,
    StoreError,
    default_store_path,
)

SPEC = "gemv/f16/m1_n896_k4864_a1_b0"


def make_result(
    i: int = 0,
    *,
    spec_key: str = SPEC,
    status: Status = Status.PASS,
    **overrides: Any,
) -> PairResult:
    """A PairResult with every field set; ``i`` varies the variant and the numbers."""
    samples = [4.0 + 0.01 * ((i + j) % 13) for j in range(21)]
    fields: dict[str, Any] = {
        "spec_key": spec_key,
        "variant_id": f"triton.gemv_nt/bn{i}_bk128_w4",
        "family": "triton.gemv_nt",
        "params": {"bn": i, "bk": 128, "warps": 4, "split": None, "tag": "x"},
        "fingerprint": f"src-{i:04d}",
        "device": "H100-sm90-drv570-torch2.13",
        "policy": "graph-cold-3xL2-0.5pct",
        "status": status,
        "reason": "" if status is Status.PASS else "norm_rel 0.31 > tol 0.002",
        "error_kind": None,
        "metrics": ErrorMetrics(1e-3 * i, 2e-3, 1.5e-4, 0, 2e-3, 1e-2, 3),
        "clocks": Clocks(
            device=ClockStats.from_samples(samples, calls_per_sample=100),
            hot=ClockStats.from_samples([s * 0.8 for s in samples], calls_per_sample=100),
            host=ClockStats.from_samples([s + 20.0 for s in samples]),
            kernel=ClockStats.from_samples([s - 0.3 for s in samples]),
            notes=("sm clock 1980 MHz", "no throttling"),
        ),
        "baseline": i == 0,
        "run_id": 7,
        "measured_at": f"2026-11-26T12:00:{i % 60:02d}.000000Z",
    }
    fields.update(overrides)
    return PairResult(**fields)


def minimal_result(variant: str = "torch.matmul/default") -> PairResult:
    return PairResult(
        spec_key=SPEC,
        variant_id=variant,
        family=variant.split("/")[0],
        params={},
        fingerprint="fp",
        device="cpu",
        policy="pol",
        status=Status.ERROR,
        error_kind=ErrorKind.TIMEOUT,
        reason="timeout: no result after 300 s",
    )


def filled_store(path: Path, n: int = 200) -> Path:
    """A closed store of ``n`` results, large enough to span many pages."""
    with ResultStore(path) as store:
        run = store.start_run("matprobe bench", {"host": "test"})
        for i in range(n):
            store.put(make_result(i, run_id=run))
        store.finish_run(run, "done")
    return path


# --- round trips -----------------------------------------------------------


def test_round_trip_full_and_minimal(tmp_path: Path) -> None:
    full = make_result(3, status=Status.FAIL)
    minimal = minimal_result()
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.put(full)
        store.put(minimal)
        got = store.get(ResultKey.of_result(full))
        assert got == full
        assert got is not None and got.clocks.device is not None
        assert got.clocks.device.samples == full.clocks.device.samples  # type: ignore[union-attr]
        assert got.clocks.device.calls_per_sample == 100
        assert store.get(ResultKey.of_result(minimal)) == minimal
        absent = replace(ResultKey.of_result(full), fingerprint="other")
        assert store.get(absent) is None
    # and after reopening
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert store.get(ResultKey.of_result(full)) == full


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_round_trip_error_kinds(tmp_path: Path, kind: ErrorKind) -> None:
    result = make_result(
        1, status=Status.ERROR, error_kind=kind, metrics=None, clocks=Clocks(notes=("died",))
    )
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.put(result)
        assert store.get(ResultKey.of_result(result)) == result


def test_nonfinite_metrics_survive(tmp_path: Path) -> None:
    """A failed validation may have inf or NaN errors; they must not come back as null."""
    metrics = ErrorMetrics(math.inf, math.nan, math.inf, 17, 2e-3, 1e-2, 3)
    result = make_result(2, status=Status.FAIL, metrics=metrics)
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.put(result)
        got = store.get(ResultKey.of_result(result))
    assert got is not None and got.metrics is not None
    assert got.metrics.max_abs == math.inf and math.isnan(got.metrics.max_rel)
    assert got.metrics.nonfinite == 17


def test_get_many(tmp_path: Path) -> None:
    results = [make_result(i) for i in range(400)]  # more keys than one query takes
    with ResultStore(tmp_path / "r.sqlite") as store:
        for r in results[::2]:
            store.put(r)
        keys = [ResultKey.of_result(r) for r in results]
        found = store.get_many(iter(keys))
        assert set(found) == set(keys[::2])
        assert all(found[ResultKey.of_result(r)] == r for r in results[::2])
        assert store.get_many([]) == {}


def test_latest_keys_whatever_the_fingerprint_and_policy(tmp_path: Path) -> None:
    base = make_result(1)
    versions = [
        replace(base, fingerprint="v3", measured_at="2026-11-28T00:00:00.000000Z"),
        replace(base, policy="p-old", measured_at="2026-11-29T00:00:00.000000Z"),  # latest
        replace(base, fingerprint="v1", measured_at="2026-11-26T00:00:00.000000Z"),
        replace(base, device="h200", measured_at="2026-11-30T00:00:00.000000Z"),  # elsewhere
    ]
    with ResultStore(tmp_path / "r.sqlite") as store:
        for r in versions:
            store.put(r)
        pair = (base.spec_key, base.variant_id, base.device)
        absent = (base.spec_key, "triton.gemv_nt/other", base.device)
        latest = store.latest_keys(iter([pair, absent, pair]))
        assert latest == {pair: ResultKey.of_result(versions[1])}
        # The same timestamp: the row put later wins.
        store.put(replace(base, fingerprint="v4", measured_at=versions[1].measured_at))
        assert store.latest_keys([pair])[pair].fingerprint == "v4"
        assert store.latest_keys([]) == {}


def test_latest_keys_batches_many_pairs(tmp_path: Path) -> None:
    results = [make_result(i) for i in range(400)]  # more pairs than one query takes
    with ResultStore(tmp_path / "r.sqlite") as store:
        for r in results[::2]:
            store.put(r)
        pairs = [(r.spec_key, r.variant_id, r.device) for r in results]
        latest = store.latest_keys(pairs)
        assert set(latest) == set(pairs[::2])
        assert all(
            latest[p] == ResultKey.of_result(r)
            for p, r in zip(pairs[::2], results[::2], strict=True)
        )


def test_put_rejects_empty_key_parts(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(ValueError, match="empty fingerprint"):
            store.put(make_result(fingerprint=""))
        assert store.results() == []


# --- upsert and keys -------------------------------------------------------


def test_second_put_with_same_key_replaces(tmp_path: Path) -> None:
    first = make_result(5)
    second = replace(first, status=Status.FAIL, reason="wrong", measured_at="2026-11-27T00:00:00Z")
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.put(first)
        store.put(second)
        assert store.get(ResultKey.of_result(first)) == second
        assert store.results() == [second]


@pytest.mark.parametrize(
    "change",
    [
        {"fingerprint": "src-edited"},  # kernel source or parameters changed
        {"device": "H200-sm90-drv570-torch2.13"},
        {"policy": "graph-hot-1pct"},
        {"variant_id": "triton.gemv_nt/bn64_bk256_w8"},
        {"spec_key": "gemv/f16/m1_n896_k4864_a2_b1"},  # alpha/beta are in the spec key
        {"spec_key": "gemv/bf16/m1_n896_k4864_a1_b0"},  # so is the dtype
    ],
)
def test_any_key_change_is_a_separate_row(tmp_path: Path, change: dict[str, Any]) -> None:
    base = make_result(5)
    other = replace(base, **change)
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.put(base)
        assert store.get(ResultKey.of_result(other)) is None  # a cache miss: measure again
        store.put(other)
        assert store.get(ResultKey.of_result(base)) == base
        assert store.get(ResultKey.of_result(other)) == other
        assert len(store.results()) == 2


def test_results_filters_and_order(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        run_a = store.start_run("a", {})
        run_b = store.start_run("b", {})
        puts = [
            make_result(3, spec_key="s2", run_id=run_a),
            make_result(1, spec_key="s2", run_id=run_b),
            make_result(2, spec_key="s1", run_id=run_a, device="other"),
            make_result(4, spec_key="s1", run_id=run_b),
        ]
        for r in puts:
            store.put(r)
        order = [(r.spec_key, r.variant_id) for r in store.results()]
        assert order == sorted(order)
        assert {r.run_id for r in store.results(run_id=run_a)} == {run_a}
        assert [r.device for r in store.results(device="other")] == ["other"]
        assert {r.spec_key for r in store.results(spec_key="s1")} == {"s1"}
        assert len(store.results(run_id=run_b, spec_key="s2")) == 1
        assert store.results(spec_key="none") == []


def test_history_oldest_first(tmp_path: Path) -> None:
    base = make_result(1)
    versions = [
        replace(base, fingerprint="v3", measured_at="2026-11-28T00:00:00.000000Z"),
        replace(base, fingerprint="v1", measured_at="2026-11-26T00:00:00.000000Z"),
        replace(base, device="h200", measured_at="2026-11-27T00:00:00.000000Z"),
        replace(base, policy="p2", measured_at="2026-11-29T00:00:00.000000Z"),
    ]
    with ResultStore(tmp_path / "r.sqlite") as store:
        for r in versions:
            store.put(r)
        store.put(make_result(2))  # another variant
        history = store.history(base.spec_key, base.variant_id)
    assert history == sorted(versions, key=lambda r: r.measured_at)


# --- runs and devices ------------------------------------------------------


def test_runs(tmp_path: Path) -> None:
    env = {"torch": "2.13", "gpu": {"name": "H100", "sm": 90}, "flags": [1, 2], "none": None}
    with ResultStore(tmp_path / "r.sqlite") as store:
        first = store.start_run("matprobe bench --all", env)
        second = store.start_run("matprobe bench gemv", {})
        store.finish_run(first, "done")
        store.finish_run(second, "interrupted")
        with pytest.raises(ValueError, match="not one of"):
            store.finish_run(first, "ok")
        with pytest.raises(StoreError, match="no run 999"):
            store.finish_run(999, "failed")
    with ResultStore(tmp_path / "r.sqlite") as store:
        runs = store.runs()
    assert [r.id for r in runs] == [first, second]
    assert all(isinstance(r, RunRecord) for r in runs)
    assert runs[0].command == "matprobe bench --all"
    assert {k: v for k, v in runs[0].environment.items() if k != "owner"} == env
    assert runs[0].environment["owner"]["pid"] == os.getpid()
    assert [r.status for r in runs] == ["done", "interrupted"]
    assert all(r.finished_at and r.finished_at >= r.started_at for r in runs)


def test_running_run_is_listed_unfinished(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.start_run("x", {})
        (run,) = store.runs()
    assert run.status == "running" and run.finished_at is None


def test_a_killed_run_is_abandoned_not_running_forever(tmp_path: Path) -> None:
    """A run whose process was SIGKILLed never reaches finish_run; the listing says
    so once the process is gone."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, os, signal; from matprobe.run.store import ResultStore\n"
        "s = ResultStore(sys.argv[1]); s.start_run('matprobe run', {})\n"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.sqlite")], check=False)
    assert proc.returncode == -signal.SIGKILL
    with ResultStore(tmp_path / "r.sqlite") as store:
        live = store.start_run("still going", {})
        killed, running = store.runs()
    assert killed.status == "abandoned" and killed.finished_at is None
    assert running.id == live and running.status == "running"


def test_device_info(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert store.get_device_info("h100") is None
        store.put_device_info("h100", {"copy_gbps": 3020.0, "read_gbps": 3350.5})
        store.put_device_info("h100", {"copy_gbps": 3025.0})
        store.put_device_info("h200", {"copy_gbps": 4250.0})
        assert store.get_device_info("h100") == {"copy_gbps": 3025.0}
        assert store.get_device_info("h200") == {"copy_gbps": 4250.0}


@pytest.mark.parametrize(
    ("table", "column", "read", "what"),
    [
        ("devices", "info", lambda s, run: s.get_device_info("h100"), "info for device h100"),
        ("run_reports", "record", lambda s, run: s.run_report(run), "report of run 1"),
        ("runs", "environment", lambda s, run: s.runs(), "environment of run 1"),
    ],
)
@pytest.mark.parametrize(
    ("stored", "said"), [("{", "unreadable {}"), ("[1]", "{} is not an object")]
)
def test_a_stored_object_that_is_not_one_is_a_corrupt_store(
    tmp_path: Path,
    table: str,
    column: str,
    read: Callable[[ResultStore, int], object],
    what: str,
    stored: str,
    said: str,
) -> None:
    """Device info, a run's report and its environment are JSON objects: text that
    is not JSON, or JSON that is not an object, says which one is corrupt."""
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as store:
        run = store.start_run("x", {})
        store.put_device_info("h100", {"copy_gbps": 3020.0})
        store.put_run_report(run, {"sections": []})
    conn = sqlite3.connect(path)
    with conn:  # commits
        conn.execute(f"UPDATE {table} SET {column} = ?", (stored,))
    conn.close()
    with ResultStore(path) as store, pytest.raises(StoreError) as raised:
        read(store, run)
    assert str(raised.value) == f"{path} is corrupt: {said.format(what)}"


# --- durability and concurrency --------------------------------------------


def _put_range(path: str, start: int, count: int, barrier: Any) -> None:
    with ResultStore(path) as store:
        if barrier is not None:
            barrier.wait(timeout=30)
        for i in range(start, start + count):
            store.put(make_result(i, fingerprint=f"proc{start}-{i}"))


def _put_then_crash(path: str) -> None:
    store = ResultStore(path)
    store.put(make_result(1))
    os._exit(3)  # no close, no cleanup


def _ctx() -> Any:
    return multiprocessing.get_context("spawn")


def test_put_survives_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    ResultStore(path).close()
    proc = _ctx().Process(target=_put_then_crash, args=(str(path),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 3
    with ResultStore(path) as store:
        assert store.get(ResultKey.of_result(make_result(1))) == make_result(1)


@pytest.mark.parametrize("precreate", [True, False], ids=["existing", "new-file"])
def test_two_processes_write_at_once(tmp_path: Path, precreate: bool) -> None:
    path = tmp_path / "sub" / "r.sqlite"
    if precreate:
        ResultStore(path).close()
    ctx = _ctx()
    # Without a precreated store both processes create it at once (barrier after open
    # cannot synchronise creation, so start them back to back instead).
    barrier = ctx.Barrier(2) if precreate else None
    procs = [
        ctx.Process(target=_put_range, args=(str(path), start, 200, barrier)) for start in (0, 1000)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    with ResultStore(path) as store:
        stored = store.results()
    assert len(stored) == 400
    assert len({ResultKey.of_result(r) for r in stored}) == 400


def test_reader_while_writer_writes(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    ResultStore(path).close()
    proc = _ctx().Process(target=_put_range, args=(str(path), 0, 300, None))
    proc.start()
    counts = []
    with ResultStore(path) as store:
        while proc.is_alive():
            counts.append(len(store.results()))
            store.get_many(ResultKey.of_result(make_result(i)) for i in range(10))
        proc.join(60)
        counts.append(len(store.results()))
    assert proc.exitcode == 0
    assert counts == sorted(counts)  # never goes backwards, never fails
    assert counts[-1] == 300


# --- files that are not (good) stores ---------------------------------------


def _text(path: Path) -> None:
    path.write_text("spec,variant,us\ngemv,naive,4.2\n")


def _random(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def _foreign(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
    conn.execute("INSERT INTO moz_places (url) VALUES ('https://example.org')")
    conn.commit()
    conn.close()


def _foreign_meta(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (name TEXT, data BLOB)")
    conn.commit()
    conn.close()


def _truncated(path: Path) -> None:
    data = filled_store(path).read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _overwritten(path: Path) -> None:
    data = bytearray(filled_store(path).read_bytes())
    page = int.from_bytes(data[16:18], "big")
    middle = (len(data) // page // 2) * page  # a page boundary near the middle
    data[middle - 100 : middle + 200] = bytes(range(256)) + bytes(44)
    path.write_bytes(bytes(data))


def _newer(path: Path) -> None:
    filled_store(path, 3)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_text, r"is not a matprobe result store \(not an SQLite database\)"),
        (_random, r"is not a matprobe result store \(not an SQLite database\)"),
        (_foreign, r"is an SQLite database but not a matprobe result store"),
        (_foreign_meta, r"is an SQLite database but not a matprobe result store"),
        (_truncated, r"is corrupt: "),
        (_overwritten, r"is corrupt: "),
        (_newer, r"schema version 2, newer than this matprobe understands \(1\)"),
    ],
    ids=["text", "random", "foreign", "foreign-meta", "truncated", "overwritten", "newer"],
)
def test_bad_files_are_refused_untouched(
    tmp_path: Path, make: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "r.sqlite"
    make(path)
    before = digest(path)
    for _ in range(2):  # refusing twice changes nothing either
        with pytest.raises(StoreError, match=message) as info:
            ResultStore(path)
        text = str(info.value)
        assert text.startswith(str(path)) and "\n" not in text
        assert isinstance(info.value, MatprobeError)
    assert digest(path) == before


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        ResultStore(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_empty_file_and_new_path_are_initialised(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    blank = tmp_path / "blank.sqlite"  # an SQLite file with nothing in it
    conn = sqlite3.connect(blank)
    conn.execute("PRAGMA user_version = 0")
    conn.execute("VACUUM")
    conn.close()
    for path in (empty, blank, tmp_path / "a" / "b" / "new.sqlite"):
        with ResultStore(path) as store:
            store.put(minimal_result())
        with ResultStore(path) as store:
            assert store.results() == [minimal_result()]
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert dict(conn.execute("SELECT key, value FROM meta")) == {
            "app": "matprobe",
            "schema_version": "1",
        }
        conn.close()


def test_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(StoreError, match="cannot be written"):
        ResultStore(tmp_path / "f" / "r.sqlite")


def _permissions_bind(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.write_text("")
    probe.chmod(0o444)
    try:
        with probe.open("a"):
            return False  # root (CAP_DAC_OVERRIDE) or a file system without modes
    except PermissionError:
        return True
    finally:
        probe.chmod(0o644)
        probe.unlink()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_read_only_locations(tmp_path: Path) -> None:
    if not _permissions_bind(tmp_path):
        pytest.skip("file modes do not bind this process (root?)")
    store_path = filled_store(tmp_path / "ro" / "r.sqlite", 3)
    before = digest(store_path)
    os.chmod(store_path, 0o444)
    try:
        with pytest.raises(StoreError, match="cannot be written"):
            ResultStore(store_path)
        os.chmod(store_path, 0o644)
        os.chmod(store_path.parent, 0o555)
        with pytest.raises(StoreError, match="cannot be written"):
            ResultStore(store_path)
        with pytest.raises(StoreError, match="cannot be written"):
            ResultStore(store_path.parent / "new.sqlite")
        with pytest.raises(StoreError, match="cannot be written"):
            ResultStore(store_path.parent / "sub" / "new.sqlite")
    finally:
        os.chmod(store_path.parent, 0o755)
        os.chmod(store_path, 0o644)
    assert digest(store_path) == before


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_unwritable_location_even_for_root() -> None:
    with pytest.raises(StoreError, match="cannot be written"):
        ResultStore("/proc/self/matprobe-results.sqlite")


def test_closed_store(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "r.sqlite")
    store.close()
    store.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        store.results()


# --- default path ----------------------------------------------------------


def test_default_store_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MATPROBE_DB", str(tmp_path / "x.db"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_store_path() == tmp_path / "x.db"
    monkeypatch.delenv("MATPROBE_DB")
    assert default_store_path() == tmp_path / "cache" / "matprobe" / "results.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # invalid per the XDG spec
    assert default_store_path() == Path.home() / ".cache" / "matprobe" / "results.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".cache" / "matprobe" / "results.sqlite"
    monkeypatch.setenv("MATPROBE_DB", "~/db.sqlite")
    assert default_store_path() == tmp_path / "home" / "db.sqlite"


def test_two_openers_of_one_new_store_never_wait_each_other_out(tmp_path: Path) -> None:
    """Two runs creating one store at once: both switched the new file to WAL, and
    SQLite answered one "locked" (after the whole busy timeout, 60 s in CI) in half
    of 40 tries. The switch now comes first and retries: every pair opens."""
    import threading

    problems: list[str] = []

    def open_and_write(path: Path, start: threading.Barrier) -> None:
        try:
            start.wait()
            with ResultStore(path) as store:
                store.start_run("t", {})
        except Exception as exc:  # a StoreError is the bug; anything else too
            problems.append(repr(exc))

    for attempt in range(25):
        path, start = tmp_path / f"s{attempt}.sqlite", threading.Barrier(2)
        threads = [threading.Thread(target=open_and_write, args=(path, start)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        with ResultStore(path, read_only=True) as store:
            assert len(store.runs()) == 2 or problems
    assert problems == []
