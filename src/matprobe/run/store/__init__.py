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

Its modules, from the file up: :mod:`~matprobe.run.store.schema` (the schema,
the key, the checks of an existing file), :mod:`~matprobe.run.store.connection`
(opening, transactions), :mod:`~matprobe.run.store.runs` (runs, claims, run
reports) and :mod:`~matprobe.run.store.results` (results and device facts:
:class:`ResultStore`, the one class callers open).
"""

from __future__ import annotations

from matprobe.run.store.connection import default_store_path
from matprobe.run.store.results import ResultStore
from matprobe.run.store.runs import RunRecord
from matprobe.run.store.schema import ResultKey, StoreError

__all__ = ["ResultKey", "ResultStore", "RunRecord", "StoreError", "default_store_path"]
