"""The SQLite result store: every measured (spec, variant) pair, in one file.

A result is identified by its :class:`ResultKey` — spec key, variant id,
variant fingerprint (source and parameters), device fingerprint and timing
policy — so a change to any of them (an edited kernel, alpha/beta or a dtype
in the spec key, another GPU or driver, another timing policy) misses the
cache and the pair is measured again; the original harness re-reported stale
results because its keys ignored alpha/beta and manifest edits (DESIGN.md §4).
Only pass/fail/error results exist, so there is no "empty" result to cache.

Every :meth:`ResultStore.put` commits at once (a crash later loses nothing
already put). The file is in WAL mode with a busy timeout, so several
processes may read and write it at the same time. Opening a file that is not
a store, a store of a newer schema or a corrupt store raises
:class:`StoreError` with a one-line message and leaves the file's bytes as
they were: it is validated through a read-only connection before anything is
written.

Open one :class:`ResultStore` per process (and per thread); a store opened
before a ``fork`` must not be used in the child.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.harness.results import PairResult, Status

APP = "matprobe"
SCHEMA_VERSION = 1
#: How long a writer waits for another process's write lock before giving up.
BUSY_TIMEOUT_S = 60.0
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


_SQLITE_MAGIC = b"SQLite format 3\x00"
_KEY_COLUMNS = ("spec_key", "variant_id", "fingerprint", "device", "policy")
_STORED_STATUSES = tuple(s.value for s in Status)
#: keys per query in get_many (5 bound variables each, well under SQLite's limit)
_KEYS_PER_QUERY = 150

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        status TEXT NOT NULL,
        command TEXT NOT NULL,
        environment TEXT NOT NULL
    )""",
    # run_id is deliberately not a foreign key: a result may come from a run
    # recorded elsewhere (or from none), and it must still be storable.
    f"""CREATE TABLE results (
        spec_key TEXT NOT NULL,
        variant_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        device TEXT NOT NULL,
        policy TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN {_STORED_STATUSES!r}),
        run_id INTEGER,
        measured_at TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (spec_key, variant_id, fingerprint, device, policy)
    )""",
    "CREATE INDEX results_by_run ON results (run_id)",
    "CREATE INDEX results_by_device ON results (device)",
    """CREATE TABLE devices (
        device TEXT PRIMARY KEY,
        info TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
)
_TABLES = frozenset({"meta", "runs", "results", "devices"})
#: What each run reported, to render it again later (``matprobe report RUN``): its
#: specs with their provenance, the keys of its results (cached ones included),
#: its unsupported pairs with their reasons. Optional: a store written before it
#: existed lacks it (created on the next writable open), and nothing else needs it.
_RUN_REPORTS = """CREATE TABLE IF NOT EXISTS run_reports (
    run_id INTEGER PRIMARY KEY,
    record TEXT NOT NULL
)"""
#: A result replaced by another run's measurement under the same key (``--force``,
#: or an error retried), kept so that the older run's report and a comparison
#: of the two runs still see what that run measured. Optional, as run_reports.
_SUPERSEDED = (
    """CREATE TABLE IF NOT EXISTS superseded_results (
    spec_key TEXT NOT NULL,
    variant_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    device TEXT NOT NULL,
    policy TEXT NOT NULL,
    status TEXT NOT NULL,
    run_id INTEGER,
    measured_at TEXT NOT NULL,
    record TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS superseded_by_run ON superseded_results (run_id)",
    "CREATE INDEX IF NOT EXISTS superseded_by_key ON superseded_results "
    "(spec_key, variant_id, fingerprint, device, policy)",
)
#: Pairs a live run has taken on: a second run on the same store waits for their
#: results instead of measuring them again. Optional, as run_reports; a claim
#: whose run has ended or whose process is gone is void.
_CLAIMS = """CREATE TABLE IF NOT EXISTS claims (
    spec_key TEXT NOT NULL,
    variant_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    device TEXT NOT NULL,
    policy TEXT NOT NULL,
    run_id INTEGER NOT NULL,
    PRIMARY KEY (spec_key, variant_id, fingerprint, device, policy)
)"""
_RESULT_COLUMNS = (
    "spec_key, variant_id, fingerprint, device, policy, status, run_id, measured_at, record"
)


class StoreError(MatprobeError):
    """A result store that cannot be opened, read or written; the message names the file."""


@dataclass(frozen=True)
class RunRecord:
    """One invocation of the harness: what was run, where, and how it ended."""

    id: int
    started_at: str  # RFC 3339, UTC
    finished_at: str | None
    status: str  # "running", then "done", "interrupted" or "failed"; "abandoned" if killed
    command: str
    environment: dict[str, Any]


@dataclass(frozen=True)
class ResultKey:
    """What identifies a stored result; change any field and the pair is measured again."""

    spec_key: str
    variant_id: str
    fingerprint: str
    device: str
    policy: str

    @classmethod
    def of_result(cls, r: PairResult) -> ResultKey:
        return cls(r.spec_key, r.variant_id, r.fingerprint, r.device, r.policy)

    def as_tuple(self) -> tuple[str, str, str, str, str]:
        return (self.spec_key, self.variant_id, self.fingerprint, self.device, self.policy)


def default_store_path() -> Path:
    """``$MATPROBE_DB``, else ``$XDG_CACHE_HOME/matprobe/results.sqlite``, else ``~/.cache/…``."""
    explicit = os.environ.get("MATPROBE_DB")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored.
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    return base / "matprobe" / "results.sqlite"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dumps(value: Any) -> str:
    # The standard library's json, not orjson: orjson writes NaN and ±Inf as
    # null, and a failed validation legitimately has max_rel = inf or NaN.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _describe(path: Path, exc: sqlite3.Error, action: str) -> str:
    """A one-line message for an SQLite error met while doing ``action`` on ``path``."""
    name = getattr(exc, "sqlite_errorname", "")  # Python ≥ 3.11
    msg = _one_line(str(exc))
    low = msg.lower()
    if name == "SQLITE_NOTADB" or "file is not a database" in low:
        return f"{path} is not a matprobe result store (not an SQLite database)"
    if name.startswith("SQLITE_CORRUPT") or "malformed" in low:
        return f"{path} is corrupt: {msg}"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in low:
        return f"{path} is locked by another process (waited {BUSY_TIMEOUT_S:g} s while {action})"
    if name.startswith("SQLITE_READONLY") or "readonly" in low or "read-only" in low:
        return f"{path} cannot be written: {msg}"
    if name == "SQLITE_FULL" or "disk is full" in low:
        return f"{path} cannot be written: the disk is full"
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in low:
        return f"{path} cannot be opened: {msg}"
    return f"{path}: {action} failed: {msg}"


def _schema_objects(conn: sqlite3.Connection) -> dict[str, str]:
    """Name → type of every user object (tables, indexes, views, triggers)."""
    rows = conn.execute(
        "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ).fetchall()
    return {str(name): str(kind) for name, kind in rows}


def _check_meta(path: Path, conn: sqlite3.Connection) -> bool:
    """Whether ``conn`` holds a usable store (True) or an empty database (False).

    Raises StoreError for another application's database, a newer schema or
    a store with tables missing.
    """
    objects = _schema_objects(conn)
    if not objects:
        return False  # a fresh SQLite file with nothing in it: ours to initialise
    foreign = f"{path} is an SQLite database but not a matprobe result store"
    if objects.get("meta") != "table":
        raise StoreError(foreign)
    try:
        meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    except sqlite3.OperationalError:  # a "meta" table of another shape
        raise StoreError(foreign) from None
    if meta.get("app") != APP:
        raise StoreError(foreign)
    raw = meta.get("schema_version", "")
    try:
        version = int(raw)
    except ValueError:
        raise StoreError(f"{path} is corrupt: schema_version {raw!r} is not a number") from None
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has result-store schema version {version}, newer than this matprobe "
            f"understands ({SCHEMA_VERSION}); upgrade matprobe or use another store"
        )
    if version < 1:
        raise StoreError(f"{path} is corrupt: unknown schema_version {version}")
    missing = sorted(t for t in _TABLES if objects.get(t) != "table")
    if missing:
        raise StoreError(f"{path} is corrupt: table(s) {', '.join(missing)} missing")
    return True


def _validate_existing(path: Path, conn: sqlite3.Connection | None = None) -> None:
    """Check a non-empty file without writing to it: SQLite, ours, readable schema, intact.
    ``conn``: a read-only connection to check through (kept open), else one of its own."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if head != _SQLITE_MAGIC:
        raise StoreError(f"{path} is not a matprobe result store (not an SQLite database)")
    own = conn is None
    if conn is None:
        try:
            # mode=ro: nothing here can change the file (no journal rollback, no
            # checkpoint). In WAL mode SQLite may still leave empty -wal/-shm files.
            conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S
            )
        except sqlite3.Error as exc:
            raise StoreError(_describe(path, exc, "opening")) from None
    try:
        # quick_check reads every page, so opening costs O(file size): 0.37 s
        # for a 210 MB store of 100k results with the file in the page cache,
        # more from a cold disk. integrity_check (which also cross-checks
        # indexes against tables) is slower still and is deliberately not run.
        rows = conn.execute("PRAGMA quick_check(10)").fetchall()
        problems = [
            line.strip()
            for row in rows
            for line in str(row[0]).splitlines()
            if line.strip() and not line.startswith("*** in database")
        ]
        if problems != ["ok"]:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            first = problems[0] if problems else "quick_check failed"
            raise StoreError(f"{path} is corrupt: {first}{more}")
        _check_meta(path, conn)
    except sqlite3.Error as exc:
        raise StoreError(_describe(path, exc, "checking")) from None
    finally:
        if own:
            conn.close()


def _check_writable(path: Path) -> None:
    """Fail early, with a clear message, where SQLite would only fail at the first write."""
    where = path.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"{path} cannot be written: cannot create {where}: {exc.strerror or exc}"
        ) from None
    if not os.access(where, os.W_OK | os.X_OK):
        # WAL needs to create -wal and -shm files beside the database.
        raise StoreError(f"{path} cannot be written: directory {where} is read-only")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise StoreError(f"{path} cannot be written: the file is read-only")


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write. A WAL store needs its -shm file to be read
    (SQLite creates an empty -wal and the -shm beside it if they are missing; the
    store itself is never written); where they cannot be created (a read-only
    folder), no writer can be using the store, and it is opened as immutable."""
    uri = path.resolve().as_uri()
    try:
        return _connect_and_read(f"{uri}?mode=ro")
    except sqlite3.Error:
        pass
    try:
        return _connect_and_read(f"{uri}?mode=ro&immutable=1")
    except sqlite3.Error as exc:
        raise StoreError(_describe(path, exc, "opening read-only")) from None


def _connect_and_read(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def _journal_mode_wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL (a no-op once the file is WAL) and say which mode holds.

    First, outside any transaction, and retried: two openers switching a new
    file at once both hold a shared lock and want an exclusive one, so SQLite
    answers one of them "locked" at once or after the busy timeout, whatever
    that is (CI: two runs that created one store together; half of 40 such
    pairs failed). The loser's statement has ended and released its lock by
    then, and the winner's switch is quick: a retry finds the file in WAL."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.01
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


class ResultStore:
    """Measured results, runs and device facts in one SQLite file.

    ``ResultStore(path)`` creates the file (and its parent directories) or
    opens and validates an existing one. ``read_only=True`` opens an existing
    store through SQLite's ``mode=ro``: nothing can write to it (a missing file
    is an error, not a new store), so a report never touches a store it reads.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path).expanduser()
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a matprobe result store")
        try:
            existing = self.path.exists() and self.path.stat().st_size > 0
        except OSError as exc:
            raise StoreError(f"{self.path} cannot be read: {exc.strerror or exc}") from None
        if read_only:
            if not existing:
                what = "is empty" if self.path.exists() else "does not exist"
                raise StoreError(f"{self.path} {what}: no matprobe result store there")
            conn = _connect_read_only(self.path)
            try:
                _validate_existing(self.path, conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            return
        if existing:
            _validate_existing(self.path)
        _check_writable(self.path)
        try:
            conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(_describe(self.path, exc, "opening")) from None
        try:
            self._initialise(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _initialise(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA busy_timeout = 100")  # the switch retries itself
            mode = _journal_mode_wal(conn)
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            # Under the write lock, so that two processes creating the same new
            # store at once neither fail nor create it twice. A file that was
            # empty, or has become a store since the read-only check, passes.
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not _check_meta(self.path, conn):
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.executemany(
                        "INSERT INTO meta (key, value) VALUES (?, ?)",
                        [("app", APP), ("schema_version", str(SCHEMA_VERSION))],
                    )
                for statement in (_RUN_REPORTS, *_SUPERSEDED, _CLAIMS):
                    conn.execute(statement)
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise StoreError(_describe(self.path, exc, "opening")) from None
        if mode != "wal":
            raise StoreError(
                f"{self.path} cannot be used: SQLite refused WAL journal mode ({mode}); "
                "is it on a network file system?"
            )
        # synchronous stays at SQLite's default (FULL): each put is durable
        # even against power loss, and costs one fsync — nothing beside a
        # measurement.

    # --- lifetime --------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

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

    # --- plumbing --------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError(f"result store {self.path} is closed")
        return self._conn

    @contextmanager
    def _sqlite(self, action: str) -> Iterator[sqlite3.Connection]:
        """The connection, with SQLite errors turned into one-line StoreErrors."""
        conn = self._db()
        try:
            yield conn
        except sqlite3.Error as exc:
            raise StoreError(_describe(self.path, exc, action)) from exc

    @contextmanager
    def _snapshot(self, action: str) -> Iterator[sqlite3.Connection]:
        """A read transaction: several queries that see one consistent state."""
        with self._sqlite(action) as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    @contextmanager
    def write_transaction(self, action: str) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``), rolled back if
        anything in it fails: for a change of many rows that must land whole (a merge)."""
        with self._sqlite(action) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def has_table(self, name: str) -> bool:
        """Whether the store has table ``name`` (optional tables are missing in older stores)."""
        with self._sqlite("reading the schema") as conn:
            return _schema_objects(conn).get(name) == "table"

    def table_rows(self, table: str, columns: str) -> list[tuple[Any, ...]]:
        """Every row of ``table`` as tuples of ``columns`` (raw, as stored), in rowid
        order: what a merge copies. An optional table that is missing gives no rows."""
        with self._snapshot(f"reading {table}") as conn:
            if _schema_objects(conn).get(table) != "table":
                return []
            return [
                tuple(row) for row in conn.execute(f"SELECT {columns} FROM {table} ORDER BY rowid")
            ]

    def _decode(self, record: str, what: str) -> PairResult:
        try:
            return PairResult.from_dict(json.loads(record))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(
                f"{self.path} is corrupt: unreadable result record for {what}: "
                f"{_one_line(str(exc))}"
            ) from exc

    # --- runs ------------------------------------------------------------

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
            try:
                environment = json.loads(env)
            except ValueError as exc:
                raise StoreError(
                    f"{self.path} is corrupt: unreadable environment of run {run_id}"
                ) from exc
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
        try:
            record = json.loads(row[0])
        except ValueError as exc:
            raise StoreError(f"{self.path} is corrupt: unreadable report of run {run_id}") from exc
        if not isinstance(record, dict):
            raise StoreError(f"{self.path} is corrupt: the report of run {run_id} is not an object")
        return record

    def results_as_of(self, keys: Iterable[ResultKey], run_id: int) -> dict[ResultKey, PairResult]:
        """For each of ``keys``, the result run ``run_id`` saw: the one stored by the
        latest run up to it (itself, or an earlier run it took from the cache), even
        where a later run has replaced it. Keys with no such result are missing."""
        wanted = list(dict.fromkeys(keys))
        best: dict[ResultKey, tuple[int, str]] = {}
        with self._snapshot("reading results") as conn:
            tables = ["results"]
            if "superseded_results" in _schema_objects(conn):
                tables.append("superseded_results")
            for start in range(0, len(wanted), _KEYS_PER_QUERY):
                chunk = wanted[start : start + _KEYS_PER_QUERY]
                values = ", ".join(["(?, ?, ?, ?, ?)"] * len(chunk))
                params = [v for k in chunk for v in k.as_tuple()]
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
        wanted = list(dict.fromkeys(keys))
        found: dict[ResultKey, PairResult] = {}
        with self._snapshot("reading results") as conn:
            for start in range(0, len(wanted), _KEYS_PER_QUERY):
                chunk = wanted[start : start + _KEYS_PER_QUERY]
                values = ", ".join(["(?, ?, ?, ?, ?)"] * len(chunk))
                rows = conn.execute(
                    "SELECT spec_key, variant_id, fingerprint, device, policy, record "
                    "FROM results WHERE (spec_key, variant_id, fingerprint, device, policy) "
                    f"IN (VALUES {values})",
                    [v for k in chunk for v in k.as_tuple()],
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
            for start in range(0, len(wanted), _KEYS_PER_QUERY):
                chunk = wanted[start : start + _KEYS_PER_QUERY]
                values = ", ".join(["(?, ?, ?)"] * len(chunk))
                # Oldest first, so the last row seen for a pair is its latest
                # (rowid breaks a tie of timestamps: the later insert wins).
                rows = conn.execute(
                    "SELECT spec_key, variant_id, fingerprint, device, policy FROM results "
                    f"WHERE (spec_key, variant_id, device) IN (VALUES {values}) "
                    "ORDER BY measured_at, rowid",
                    [v for pair in chunk for v in pair],
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
        try:
            info = json.loads(row[0])
        except ValueError as exc:
            raise StoreError(
                f"{self.path} is corrupt: unreadable info for device {device}"
            ) from exc
        if not isinstance(info, dict):
            raise StoreError(f"{self.path} is corrupt: info for device {device} is not an object")
        return info
