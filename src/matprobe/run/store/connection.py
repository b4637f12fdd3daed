"""Opening a result store: a new file created (and switched to WAL under the
write lock), an existing one validated through a read-only connection first,
or opened read-only; and the transactions every query and write runs in
(:class:`StoreFile`, what :class:`~matprobe.run.store.results.ResultStore`
is built on)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from matprobe.run.store.schema import (
    _CLAIMS,
    _RUN_REPORTS,
    _SCHEMA,
    _SUPERSEDED,
    APP,
    BUSY_TIMEOUT_S,
    SCHEMA_VERSION,
    StoreError,
    _check_meta,
    _describe,
    _schema_objects,
    _validate_existing,
)


def default_store_path() -> Path:
    """``$MATPROBE_DB``, else ``$XDG_CACHE_HOME/matprobe/results.sqlite``, else ``~/.cache/…``."""
    explicit = os.environ.get("MATPROBE_DB")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored.
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    return base / "matprobe" / "results.sqlite"


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


class StoreFile:
    """An open result store file: ``StoreFile(path)`` creates it (and its parent
    directories) or opens and validates an existing one; ``read_only=True`` opens
    an existing store through SQLite's ``mode=ro``, so that nothing can write to
    it (a missing file is an error, not a new store). Its connection is reached
    only through the transactions below, which turn SQLite errors into
    :class:`StoreError`."""

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

    # --- lifetime --------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- plumbing --------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError(f"result store {self.path} is closed")
        return self._conn

    def _stored_object(self, text: str, what: str) -> dict[str, Any]:
        """The JSON object the store keeps as ``text`` (``what``: which one, for the
        message); anything else means the store is corrupt."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise StoreError(f"{self.path} is corrupt: unreadable {what}") from exc
        if not isinstance(data, dict):
            raise StoreError(f"{self.path} is corrupt: {what} is not an object")
        return data

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
