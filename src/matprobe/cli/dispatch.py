"""``matprobe dispatch``: a stored run's winners as dispatch tables (and the
``run --dispatch DIR`` export, which writes them at the end of a run)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from matprobe.cli.args import _add_store
from matprobe.errors import MatprobeError
from matprobe.safetext import term_safe


def export_tables(
    report: Any, plugins: Sequence[str], out_dir: Path, out: TextIO, db: Path | None = None
) -> int:
    """Write one table per dtype of ``report`` into ``out_dir`` and list them; 1 when
    the run gave nothing to export (no spec with a timed baseline). ``db``: the store
    that holds the run (what its witness let stand; default: the default store)."""
    from matprobe.dispatch.export import tables_from_report, write_tables
    from matprobe.run.plugin_process import described_registry
    from matprobe.run.store import ResultStore, default_store_path
    from matprobe.run.witness import stood_apart

    registry = described_registry(plugins=plugins)  # the plugins imported in a child only
    witnessed: set[tuple[str, str]] = set()
    if plugins:
        with ResultStore(db or default_store_path(), read_only=True) as store:
            record = store.run(report.run_id)
        witnessed = stood_apart(record.environment) if record is not None else set()
    tables = tables_from_report(
        report, registry, plugins=plugins, source=report.source, witnessed=witnessed
    )
    if not tables:
        out.write("matprobe dispatch: no spec with a timed baseline in this run: no table\n")
        return 1
    try:
        paths = write_tables(tables, out_dir)
    except OSError as exc:
        raise MatprobeError(f"cannot write tables to {out_dir}: {exc.strerror or exc}") from None
    for table, path in zip(tables, paths, strict=True):
        won = [e for e in table.entries if e.family != table.baseline]
        out.write(
            f"dispatch table {term_safe(str(path))}: {len(table.entries)} shapes, "
            f"{len(won)} to our kernels, {len(table.entries) - len(won)} to "
            f"{term_safe(table.baseline)}\n"
        )
        for entry in won:
            ratio = f"{entry.ratio:.2f}×" if entry.ratio is not None else "n/a"
            out.write(
                f"  {term_safe(entry.spec)}\n    → {term_safe(entry.variant_id)}  "
                f"{entry.us:.2f} µs vs {entry.baseline_us:.2f} µs ({ratio})\n"
            )
    return 0


def cmd_dispatch(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.report.stored_report import load_report
    from matprobe.run.store import ResultStore, default_store_path

    db = Path(args.db) if args.db else default_store_path()
    if not db.is_file():
        raise MatprobeError(f"no result store at {db}")
    with ResultStore(db, read_only=True) as store:  # exporting never writes the store
        runs = store.runs()
        if not runs:
            raise MatprobeError(f"{db} holds no run")
        run_id = args.run if args.run is not None else runs[-1].id
        report = load_report(store, run_id)
    return export_tables(report, tuple(args.plugin or ()), Path(args.out), out, db)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "dispatch",
        help="export a stored run's winners as dispatch tables an engine loads",
        description="One JSON table per device and dtype: per shape, the run's best own "
        "variant where it beats the baseline beyond noise, else the baseline; with the "
        "device, versions, policy and family fingerprints, so a table from another card "
        "or from changed kernels is refused when loaded (matprobe.dispatch.load).",
    )
    _add_store(p)
    p.add_argument("--run", type=int, metavar="N", help="the run (default: the latest)")
    p.add_argument("--out", required=True, metavar="DIR", help="where the tables go")
    p.add_argument(
        "--plugin", action="append", metavar="MODULE", help="a module with the run's families"
    )
    p.set_defaults(func=cmd_dispatch)
