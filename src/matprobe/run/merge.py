"""Merge result stores written elsewhere into one: results gathered on a fleet
come back to one place.

What is merged, source by source, each in one transaction of the target (a
source that fails half-way leaves the target as it was before that source):

* **runs** — renumbered in the target, keeping their times, status, command
  and environment. A run already there (same start time, command and
  environment: the environment names the host and process) is the same run and
  keeps its id, so merging a store twice adds nothing;
* **results** — one row per key (spec, variant, fingerprint, device, policy).
  The same measurement under one key is one row, silently (records are compared
  without their run id, which is renumbered). Two different measurements under
  one key are a :class:`Conflict`: the newer ``measured_at`` stays in
  ``results`` (on a tie, the row already in the target), the other goes to
  ``superseded_results``, where a run's report still finds what it measured.
  Merging the same stores again says no conflict twice: a measurement already
  superseded by the kept one is counted as settled;
* **superseded results** and **run reports** of the sources, their run ids
  remapped; **device info**, the most recently updated per device.

The sources are opened read-only and never written.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.run.store import ResultKey, ResultStore

_RUN_COLUMNS = "id, started_at, finished_at, status, command, environment"
_RESULT_COLUMNS = (
    "spec_key, variant_id, fingerprint, device, policy, status, run_id, measured_at, record"
)
_KEY_WHERE = "spec_key = ? AND variant_id = ? AND fingerprint = ? AND device = ? AND policy = ?"


@dataclass(frozen=True)
class Conflict:
    """Two different measurements under one result key: which one was kept."""

    key: ResultKey
    #: where each came from: "FILE run N, measured AT"
    kept: str
    superseded: str

    def line(self) -> str:
        k = self.key
        return (
            f"conflict: {k.spec_key} | {k.variant_id} on {k.device} (fingerprint "
            f"{k.fingerprint}, policy {k.policy}): kept {self.kept}; superseded {self.superseded}"
        )


@dataclass
class MergeSummary:
    into: Path
    sources: list[Path] = field(default_factory=list)
    runs_added: int = 0
    #: runs of a source the target already held (an earlier merge of the same store)
    runs_known: int = 0
    results_added: int = 0
    results_identical: int = 0
    history_added: int = 0
    reports_added: int = 0
    devices_merged: int = 0
    conflicts: list[Conflict] = field(default_factory=list)
    #: conflicts an earlier merge of the same rows already settled (not said again)
    conflicts_settled: int = 0
    #: where each row this merge wrote came from (a conflict names the source
    #: store, not the target it has since been copied into)
    origins: dict[tuple[Any, ...], str] = field(default_factory=dict, repr=False)

    def line(self) -> str:
        return (
            f"merged {len(self.sources)} store(s) into {self.into}: {self.runs_added} runs added "
            f"({self.runs_known} already there), {self.results_added} results added, "
            f"{self.results_identical} identical, {len(self.conflicts)} conflicts"
            + (
                f" ({self.conflicts_settled} more settled by an earlier merge)"
                if self.conflicts_settled
                else ""
            )
            + f", {self.history_added} superseded rows, {self.reports_added} run reports, "
            f"{self.devices_merged} device infos"
        )


def _dumps(value: Any) -> str:
    # As the store writes records: the standard json, which keeps NaN and ±Inf.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _with_run_id(record: str, run_id: int | None) -> str:
    """The record (a JSON object) with its run id replaced by the target's number."""
    data = json.loads(record)
    if isinstance(data, dict) and "run_id" in data:
        data["run_id"] = run_id
        return _dumps(data)
    return record


def _measurement(record: str) -> str:
    """What a record measured, whatever run it was filed under: the canonical JSON
    without ``run_id`` (NaN compares equal to itself as text, not as a float)."""
    data = json.loads(record)
    if isinstance(data, dict):
        data.pop("run_id", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _same_paths(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def merge_stores(sources: Sequence[str | Path], into: str | Path) -> MergeSummary:
    """Merge every store of ``sources`` into ``into`` (created if new); see the module
    docstring. Raises :class:`MatprobeError` (one line) for a missing file, a file that
    is not a store, or ``into`` among the sources — before anything is written."""
    paths = [Path(s).expanduser() for s in sources]
    target = Path(into).expanduser()
    if not paths:
        raise MatprobeError("merge: no store to merge")
    for i, path in enumerate(paths):
        if _same_paths(path, target):
            raise MatprobeError(f"merge: {path} is both a source and --into")
        if any(_same_paths(path, other) for other in paths[:i]):
            raise MatprobeError(f"merge: {path} is given twice")
    opened: list[ResultStore] = []
    try:
        # Every source is validated before the target is created or touched.
        for path in paths:
            opened.append(ResultStore(path, read_only=True))
        summary = MergeSummary(into=target, sources=paths)
        with ResultStore(target) as out:
            for source in opened:
                _merge_one(source, out, summary)
        return summary
    finally:
        for store in opened:
            store.close()


def _origin(path: Path, run_id: Any, measured_at: Any) -> str:
    run = f"run {run_id}" if run_id is not None else "no run"
    return f"{path} {run}, measured {measured_at}"


def _merge_one(source: ResultStore, out: ResultStore, summary: MergeSummary) -> None:
    runs = source.table_rows("runs", _RUN_COLUMNS)
    results = source.table_rows("results", _RESULT_COLUMNS)
    superseded = source.table_rows("superseded_results", _RESULT_COLUMNS)
    reports = source.table_rows("run_reports", "run_id, record")
    devices = source.table_rows("devices", "device, info, updated_at")
    with out.write_transaction(f"merging {source.path}") as conn:
        run_map = _merge_runs(conn, runs, summary)
        for row in results:
            _merge_result(conn, source.path, out.path, row, run_map, summary)
        for *key, status, run_id, measured_at, record in superseded:
            new_run = run_map.get(run_id)
            row = (*key, status, new_run, measured_at, _with_run_id(record, new_run))
            summary.history_added += _supersede(conn, row)
        for run_id, record in reports:
            if run_id not in run_map:
                continue  # the report of a run the source no longer lists
            cur = conn.execute(
                "INSERT INTO run_reports (run_id, record) VALUES (?, ?) "
                "ON CONFLICT (run_id) DO NOTHING",
                (run_map[run_id], _with_run_id(record, run_map[run_id])),
            )
            summary.reports_added += cur.rowcount
        for device, info, updated_at in devices:
            cur = conn.execute(
                "INSERT INTO devices (device, info, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (device) DO UPDATE SET info = excluded.info, "
                "updated_at = excluded.updated_at WHERE excluded.updated_at > devices.updated_at",
                (device, info, updated_at),
            )
            summary.devices_merged += cur.rowcount


def _supersede(conn: sqlite3.Connection, row: tuple[Any, ...]) -> int:
    """Keep ``row`` (result columns) in superseded_results, unless it is there
    already (the same store merged twice); how many rows were added."""
    *key, _status, run_id, measured_at, record = row
    found = conn.execute(
        f"SELECT 1 FROM superseded_results WHERE {_KEY_WHERE} AND run_id IS ? "
        "AND measured_at = ? AND record = ?",
        (*key, run_id, measured_at, record),
    ).fetchone()
    if found is not None:
        return 0
    conn.execute(
        f"INSERT INTO superseded_results ({_RESULT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        row,
    )
    return 1


def _merge_runs(
    conn: sqlite3.Connection, runs: list[tuple[Any, ...]], summary: MergeSummary
) -> dict[Any, int]:
    """Source run id → target run id, inserting the runs the target lacks."""
    run_map: dict[Any, int] = {}
    for run_id, started_at, finished_at, status, command, environment in runs:
        known = conn.execute(
            "SELECT id, finished_at FROM runs WHERE started_at = ? AND command = ? "
            "AND environment = ?",
            (started_at, command, environment),
        ).fetchone()
        if known is not None:
            run_map[run_id] = int(known[0])
            summary.runs_known += 1
            if known[1] is None and finished_at is not None:
                # Merged while it ran, merged again since it ended: take its end.
                conn.execute(
                    "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?",
                    (finished_at, status, known[0]),
                )
            continue
        cur = conn.execute(
            "INSERT INTO runs (started_at, finished_at, status, command, environment) "
            "VALUES (?, ?, ?, ?, ?)",
            (started_at, finished_at, status, command, environment),
        )
        assert cur.lastrowid is not None
        run_map[run_id] = int(cur.lastrowid)
        summary.runs_added += 1
    return run_map


def _merge_result(
    conn: sqlite3.Connection,
    source_path: Path,
    target_path: Path,
    row: tuple[Any, ...],
    run_map: dict[Any, int],
    summary: MergeSummary,
) -> None:
    *key, status, run_id, measured_at, record = row
    new_run = run_map.get(run_id)
    record = _with_run_id(record, new_run)
    existing = conn.execute(
        f"SELECT {_RESULT_COLUMNS} FROM results WHERE {_KEY_WHERE}", key
    ).fetchone()
    if existing is None:
        conn.execute(
            f"INSERT INTO results ({_RESULT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*key, status, new_run, measured_at, record),
        )
        summary.results_added += 1
        summary.origins[tuple(key)] = _origin(source_path, run_id, measured_at)
        return
    *_, old_run, old_measured_at, old_record = existing
    if _measurement(old_record) == _measurement(record):
        summary.results_identical += 1
        return
    result_key = ResultKey(*(str(part) for part in key))
    incoming_wins = str(measured_at) > str(old_measured_at)
    incoming = _origin(source_path, run_id, measured_at)
    present = summary.origins.get(tuple(key)) or _origin(target_path, old_run, old_measured_at)
    added = _supersede(
        conn, tuple(existing) if incoming_wins else (*key, status, new_run, measured_at, record)
    )
    if not incoming_wins and not added:
        # This very measurement lost to the kept one in an earlier merge: settled.
        summary.conflicts_settled += 1
        return
    if incoming_wins:
        conn.execute(
            f"UPDATE results SET status = ?, run_id = ?, measured_at = ?, record = ? "
            f"WHERE {_KEY_WHERE}",
            (status, new_run, measured_at, record, *key),
        )
        summary.conflicts.append(Conflict(result_key, kept=incoming, superseded=present))
        summary.origins[tuple(key)] = incoming
    else:
        summary.conflicts.append(Conflict(result_key, kept=present, superseded=incoming))
