"""The result store's file: its schema, the key that identifies a result
(:class:`ResultKey`), how values are written in it, and the checks that an
existing file is a store this matprobe can use — SQLite, ours, of a schema no
newer than :data:`SCHEMA_VERSION`, intact — made without writing to it. Every
SQLite error becomes a one-line :class:`StoreError` that names the file
(:func:`_describe`)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.measure.results import PairResult, Status

APP = "matprobe"
SCHEMA_VERSION = 1
#: How long a writer waits for another process's write lock before giving up.
BUSY_TIMEOUT_S = 60.0


_SQLITE_MAGIC = b"SQLite format 3\x00"
_KEY_COLUMNS = ("spec_key", "variant_id", "fingerprint", "device", "policy")
_STORED_STATUSES = tuple(s.value for s in Status)


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
