"""The runs a result store records: who ran (host, pid, start time — a run
whose process is gone is shown as abandoned, never as running forever), how
each ended and what it learnt; the claims by which concurrent runs on one
store share the work; and what each run reported, to render it again later."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matprobe.run.store.connection import StoreFile
from matprobe.run.store.schema import ResultKey, StoreError, _dumps, _now, _schema_objects

RUN_STATUSES = frozenset({"done", "interrupted", "failed"})
#: A run recorded as running whose process is gone (killed, machine restarted):
#: shown as such, never as running forever.
ABANDONED = "abandoned"
#: Key of the run's environment that names its process (host, pid, start time).
OWNER_KEY = "owner"


def process_owner(pid: int | None = None) -> dict[str, Any]:
    """Who runs: host, pid and (on Linux) the process's start time, so a later
    process that reuses the pid is not mistaken for it."""
    import socket

    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "pid": pid, "started": _process_start(pid)}


def _process_start(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # Field 22 (start time in clock ticks), counted after the ")" that ends the name.
    return stat.rsplit(")", 1)[-1].split()[19]


def owner_alive(owner: Mapping[str, Any]) -> bool | None:
    """Whether the recorded process still runs; None when it cannot be told here
    (another host, or no owner recorded)."""
    import socket

    if not owner or owner.get("host") != socket.gethostname():
        return None
    pid = int(owner.get("pid", 0))
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    started = str(owner.get("started", ""))
    return not started or _process_start(pid) in ("", started)


@dataclass(frozen=True)
class RunRecord:
    """One invocation of the harness: what was run, where, and how it ended."""

    id: int
    started_at: str  # RFC 3339, UTC
    finished_at: str | None
    status: str  # "running", then "done", "interrupted" or "failed"; "abandoned" if killed
    command: str
    environment: dict[str, Any]


class RunLog(StoreFile):
    """A store's runs, their claims and their reports (see the module doc)."""

    def start_run(self, command: str, environment: Mapping[str, Any]) -> int:
        """Record the start of a run; returns its id for :meth:`finish_run` and results."""
        env = _dumps({**environment, OWNER_KEY: process_owner()})
        with self._sqlite("starting a run") as conn:
            cur = conn.execute(
                "INSERT INTO runs (started_at, finished_at, status, command, environment) "
                "VALUES (?, NULL, 'running', ?, ?)",
                (_now(), command, env),
            )
        run_id = cur.lastrowid
        assert run_id is not None
        return int(run_id)

    def finish_run(self, run_id: int, status: str) -> None:
        """Mark a run ended: ``"done"``, ``"interrupted"`` or ``"failed"``."""
        if status not in RUN_STATUSES:
            raise ValueError(
                f"run status {status!r} is not one of {', '.join(sorted(RUN_STATUSES))}"
            )
        with self._sqlite("finishing a run") as conn:
            cur = conn.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?",
                (_now(), status, run_id),
            )
        if cur.rowcount == 0:
            raise StoreError(f"{self.path} has no run {run_id}")

    def add_to_run(self, run_id: int, facts: Mapping[str, Any]) -> None:
        """Add what a run learnt while it ran (its card's peaks) to its environment."""
        with self._sqlite("updating a run") as conn:
            row = conn.execute("SELECT environment FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"{self.path} has no run {run_id}")
            conn.execute(
                "UPDATE runs SET environment = ? WHERE id = ?",
                (_dumps({**json.loads(row[0]), **facts}), run_id),
            )

    def runs(self) -> list[RunRecord]:
        """Every recorded run, oldest first."""
        with self._sqlite("listing runs") as conn:
            rows = conn.execute(
                "SELECT id, started_at, finished_at, status, command, environment "
                "FROM runs ORDER BY id"
            ).fetchall()
        out = []
        for run_id, started, finished, status, command, env in rows:
            environment = self._stored_object(env, f"environment of run {run_id}")
            if status == "running" and owner_alive(environment.get(OWNER_KEY) or {}) is False:
                status = ABANDONED
            out.append(RunRecord(int(run_id), started, finished, status, command, environment))
        return out

    def run(self, run_id: int) -> RunRecord | None:
        """One recorded run, or None."""
        return next((r for r in self.runs() if r.id == run_id), None)

    # --- claims: concurrent runs share the work ------------------------------

    def claim(self, keys: Iterable[ResultKey], run_id: int) -> set[ResultKey]:
        """Take ``keys`` for run ``run_id``: the ones it now holds (a key held by
        another live running run stays with it). Claims of runs that are no longer
        running — finished, or their process gone — are cleared first."""
        wanted = list(dict.fromkeys(keys))
        live = {r.id for r in self.runs() if r.status == "running"}
        with self._sqlite("claiming pairs") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                holders = {row[0] for row in conn.execute("SELECT DISTINCT run_id FROM claims")}
                for dead in holders - live - {run_id}:
                    conn.execute("DELETE FROM claims WHERE run_id = ?", (dead,))
                conn.executemany(
                    "INSERT OR IGNORE INTO claims (spec_key, variant_id, fingerprint, device, "
                    "policy, run_id) VALUES (?, ?, ?, ?, ?, ?)",
                    [(*key.as_tuple(), run_id) for key in wanted],
                )
                mine = {
                    ResultKey(*(str(v) for v in row))
                    for row in conn.execute(
                        "SELECT spec_key, variant_id, fingerprint, device, policy FROM claims "
                        "WHERE run_id = ?",
                        (run_id,),
                    )
                }
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        return {key for key in wanted if key in mine}

    def release(self, run_id: int) -> None:
        """Drop every claim of run ``run_id`` (its pairs are done or given up)."""
        with self._sqlite("releasing claims") as conn:
            conn.execute("DELETE FROM claims WHERE run_id = ?", (run_id,))

    # --- what a run reported ---------------------------------------------

    def put_run_report(self, run_id: int, record: Mapping[str, Any]) -> None:
        """Keep what run ``run_id`` reported (see :data:`_RUN_REPORTS`); replaces any."""
        with self._sqlite("storing a run's report") as conn:
            conn.execute(
                "INSERT INTO run_reports (run_id, record) VALUES (?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET record = excluded.record",
                (run_id, _dumps(dict(record))),
            )

    def run_report(self, run_id: int) -> dict[str, Any] | None:
        """What run ``run_id`` reported, or None (not recorded, or an older store)."""
        with self._sqlite("reading a run's report") as conn:
            if "run_reports" not in _schema_objects(conn):
                return None
            row = conn.execute(
                "SELECT record FROM run_reports WHERE run_id = ?", (run_id,)
            ).fetchone()
        if row is None:
            return None
        return self._stored_object(row[0], f"report of run {run_id}")
