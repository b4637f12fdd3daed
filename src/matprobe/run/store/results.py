"""The results a store holds, and the queries on them: a result put under its
:class:`~matprobe.run.store.schema.ResultKey` (the one it replaces, if another
run measured it, kept apart so that the older run's report still sees it),
results by key, by run, by pair, and facts measured once per device."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from matprobe.measure.results import PairResult, Status
from matprobe.run.store.runs import RunLog
from matprobe.run.store.schema import (
    _KEY_COLUMNS,
    _RESULT_COLUMNS,
    ResultKey,
    StoreError,
    _dumps,
    _now,
    _one_line,
    _schema_objects,
)

#: keys per query (5 bound variables each, well under SQLite's limit)
_KEYS_PER_QUERY = 150


def _values_in_chunks(rows: Sequence[tuple[str, ...]]) -> Iterator[tuple[str, list[str]]]:
    """``rows`` (of one length) as an SQL ``VALUES`` list's places (``(?, ?), (?, ?)``)
    and the values to bind, :data:`_KEYS_PER_QUERY` rows at a time: SQLite caps
    the variables of one statement."""
    for start in range(0, len(rows), _KEYS_PER_QUERY):
        chunk = rows[start : start + _KEYS_PER_QUERY]
        places = "(" + ", ".join(["?"] * len(chunk[0])) + ")"
        yield ", ".join([places] * len(chunk)), [value for row in chunk for value in row]


class ResultStore(RunLog):
    """Measured results, runs and device facts in one SQLite file.

    ``ResultStore(path)`` creates the file (and its parent directories) or
    opens and validates an existing one. ``read_only=True`` opens an existing
    store through SQLite's ``mode=ro``: nothing can write to it (a missing file
    is an error, not a new store), so a report never touches a store it reads.
    Use it as a context manager, or call :meth:`close`.
    """

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"ResultStore({str(self.path)!r}, {state})"

    def _decode(self, record: str, what: str) -> PairResult:
        try:
            return PairResult.from_dict(json.loads(record))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(
                f"{self.path} is corrupt: unreadable result record for {what}: "
                f"{_one_line(str(exc))}"
            ) from exc

    # --- results ---------------------------------------------------------

    def put(self, result: PairResult) -> None:
        """Insert or replace the result stored under its key; committed on return."""
        key = ResultKey.of_result(result)
        for column, value in zip(_KEY_COLUMNS, key.as_tuple(), strict=True):
            if not value:
                # An empty fingerprint or policy would make a key that survives
                # the very edits it exists to detect.
                raise ValueError(f"cannot store a result with an empty {column}: {key}")
        status = Status(result.status).value
        try:
            record = _dumps(result.to_dict())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"result for {key} is not JSON-serialisable: {exc}") from exc
        with self._sqlite("storing a result") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # The row this replaces, if another run measured it, is kept apart.
                conn.execute(
                    f"INSERT INTO superseded_results ({_RESULT_COLUMNS}) "
                    f"SELECT {_RESULT_COLUMNS} FROM results WHERE spec_key = ? AND "
                    "variant_id = ? AND fingerprint = ? AND device = ? AND policy = ? "
                    "AND run_id IS NOT ?",
                    (*key.as_tuple(), result.run_id),
                )
                conn.execute(
                    """INSERT INTO results (spec_key, variant_id, fingerprint, device, policy,
                                            status, run_id, measured_at, record)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT (spec_key, variant_id, fingerprint, device, policy)
                       DO UPDATE SET status = excluded.status, run_id = excluded.run_id,
                                     measured_at = excluded.measured_at,
                                     record = excluded.record""",
                    (*key.as_tuple(), status, result.run_id, result.measured_at, record),
                )
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def get(self, key: ResultKey) -> PairResult | None:
        """The result stored under ``key``, or None."""
        with self._sqlite("reading a result") as conn:
            row = conn.execute(
                "SELECT record FROM results WHERE spec_key = ? AND variant_id = ? "
                "AND fingerprint = ? AND device = ? AND policy = ?",
                key.as_tuple(),
            ).fetchone()
        return None if row is None else self._decode(row[0], str(key))

    def get_many(self, keys: Iterable[ResultKey]) -> dict[ResultKey, PairResult]:
        """The stored results among ``keys`` (absent keys are simply missing)."""
        wanted = [key.as_tuple() for key in dict.fromkeys(keys)]
        found: dict[ResultKey, PairResult] = {}
        with self._snapshot("reading results") as conn:
            for values, params in _values_in_chunks(wanted):
                rows = conn.execute(
                    "SELECT spec_key, variant_id, fingerprint, device, policy, record "
                    "FROM results WHERE (spec_key, variant_id, fingerprint, device, policy) "
                    f"IN (VALUES {values})",
                    params,
                ).fetchall()
                for *parts, record in rows:
                    key = ResultKey(*(str(p) for p in parts))
                    found[key] = self._decode(record, str(key))
        return found

    def latest_keys(
        self, pairs: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], ResultKey]:
        """The key of the most recently measured row of each ``(spec_key,
        variant_id, device)`` among ``pairs``, whatever its fingerprint and
        policy (absent pairs are simply missing): what a cache miss is compared
        with, to say why the pair runs again."""
        wanted = list(dict.fromkeys(pairs))
        latest: dict[tuple[str, str, str], ResultKey] = {}
        with self._snapshot("reading results") as conn:
            for values, params in _values_in_chunks(wanted):
                # Oldest first, so the last row seen for a pair is its latest
                # (rowid breaks a tie of timestamps: the later insert wins).
                rows = conn.execute(
                    "SELECT spec_key, variant_id, fingerprint, device, policy FROM results "
                    f"WHERE (spec_key, variant_id, device) IN (VALUES {values}) "
                    "ORDER BY measured_at, rowid",
                    params,
                ).fetchall()
                for row in rows:
                    key = ResultKey(*(str(v) for v in row))
                    latest[(key.spec_key, key.variant_id, key.device)] = key
        return latest

    def results(
        self,
        *,
        run_id: int | None = None,
        device: str | None = None,
        spec_key: str | None = None,
    ) -> list[PairResult]:
        """Stored results matching every filter given, ordered by spec key, then variant."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("run_id", run_id), ("device", device), ("spec_key", spec_key)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        with self._sqlite("reading results") as conn:
            rows = conn.execute(
                f"SELECT record, spec_key, variant_id FROM results {where}"
                "ORDER BY spec_key, variant_id, fingerprint, device, policy",
                params,
            ).fetchall()
        return [self._decode(record, f"{sk} {vid}") for record, sk, vid in rows]

    def history(self, spec_key: str, variant_id: str) -> list[PairResult]:
        """Every stored result of one pair, any fingerprint/device/policy, oldest first."""
        with self._sqlite("reading a history") as conn:
            rows = conn.execute(
                "SELECT record FROM results WHERE spec_key = ? AND variant_id = ? "
                "ORDER BY measured_at, fingerprint, device, policy",
                (spec_key, variant_id),
            ).fetchall()
        return [self._decode(row[0], f"{spec_key} {variant_id}") for row in rows]

    # --- results by run ----------------------------------------------------

    def results_as_of(self, keys: Iterable[ResultKey], run_id: int) -> dict[ResultKey, PairResult]:
        """For each of ``keys``, the result run ``run_id`` saw: the one stored by the
        latest run up to it (itself, or an earlier run it took from the cache), even
        where a later run has replaced it. Keys with no such result are missing."""
        wanted = [key.as_tuple() for key in dict.fromkeys(keys)]
        best: dict[ResultKey, tuple[int, str]] = {}
        with self._snapshot("reading results") as conn:
            tables = ["results"]
            if "superseded_results" in _schema_objects(conn):
                tables.append("superseded_results")
            for values, params in _values_in_chunks(wanted):
                for table in tables:
                    rows = conn.execute(
                        "SELECT spec_key, variant_id, fingerprint, device, policy, "
                        f"COALESCE(run_id, 0), record FROM {table} WHERE (spec_key, "
                        f"variant_id, fingerprint, device, policy) IN (VALUES {values}) "
                        "AND COALESCE(run_id, 0) <= ?",
                        [*params, run_id],
                    ).fetchall()
                    for *parts, by_run, record in rows:
                        key = ResultKey(*(str(p) for p in parts))
                        if key not in best or int(by_run) > best[key][0]:
                            best[key] = (int(by_run), record)
        return {key: self._decode(record, str(key)) for key, (_, record) in best.items()}

    def results_of_run(self, run_id: int, spec_key: str | None = None) -> list[PairResult]:
        """Every result run ``run_id`` measured itself, kept or since replaced, ordered
        by spec key, then variant."""
        with self._snapshot("reading results") as conn:
            tables = ["results"]
            if "superseded_results" in _schema_objects(conn):
                tables.append("superseded_results")
            found = []
            for table in tables:
                where = "run_id = ?" + (" AND spec_key = ?" if spec_key is not None else "")
                params = [run_id] + ([spec_key] if spec_key is not None else [])
                found += conn.execute(
                    f"SELECT spec_key, variant_id, record FROM {table} WHERE {where}", params
                ).fetchall()
        found.sort(key=lambda row: (row[0], row[1]))
        return [self._decode(record, f"{sk} {vid}") for sk, vid, record in found]

    def spec_keys(self) -> list[str]:
        """Every spec key the store has results of (kept or since replaced), sorted."""
        with self._snapshot("reading spec keys") as conn:
            union = (
                " UNION SELECT spec_key FROM superseded_results"
                if "superseded_results" in _schema_objects(conn)
                else ""
            )
            rows = conn.execute(f"SELECT spec_key FROM results{union}").fetchall()
        return sorted(str(row[0]) for row in rows)

    def run_result_counts(self) -> dict[int, dict[str, int]]:
        """Per run id: how many results it measured (kept or since replaced), by status
        (``pass``, ``fail``, ``error``) and by timing policy (``policy:<fingerprint>``)."""
        with self._sqlite("counting results") as conn:
            union = (
                " UNION ALL SELECT run_id, status, policy FROM superseded_results"
                if "superseded_results" in _schema_objects(conn)
                else ""
            )
            rows = conn.execute(
                "SELECT run_id, status, policy, COUNT(*) FROM (SELECT run_id, status, policy "
                f"FROM results{union}) WHERE run_id IS NOT NULL GROUP BY run_id, status, policy"
            ).fetchall()
        counts: dict[int, dict[str, int]] = {}
        for run_id, status, policy, count in rows:
            mine = counts.setdefault(int(run_id), {})
            for name in (str(status), f"policy:{policy}"):
                mine[name] = mine.get(name, 0) + int(count)
        return counts

    # --- devices ---------------------------------------------------------

    def put_device_info(self, device: str, info: Mapping[str, Any]) -> None:
        """Store facts measured once per device fingerprint (e.g. peak copy/read bandwidth)."""
        data = _dumps(dict(info))
        with self._sqlite("storing device info") as conn:
            conn.execute(
                "INSERT INTO devices (device, info, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (device) DO UPDATE SET info = excluded.info, "
                "updated_at = excluded.updated_at",
                (device, data, _now()),
            )

    def get_device_info(self, device: str) -> dict[str, Any] | None:
        with self._sqlite("reading device info") as conn:
            row = conn.execute("SELECT info FROM devices WHERE device = ?", (device,)).fetchone()
        if row is None:
            return None
        return self._stored_object(row[0], f"info for device {device}")
