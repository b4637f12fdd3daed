"""``matprobe report``, ``compare`` and ``history``: what a store already holds.

These commands only read. Every store is opened read-only (SQLite ``mode=ro``),
so they work on a store that cannot be written and never change one. A run
is named as ``N`` (run N of ``--store``), ``STORE:N``, or ``STORE`` alone (its
latest run). Mistakes — an unknown run, a missing file, a file that is not a
store — are a :class:`~matprobe.errors.MatprobeError` (one line, exit status
2, said by ``cli.main``); a comparison with no pair in common says so on stderr
and exits 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from matprobe.cli.args import WIDE_HELP, _add_store
from matprobe.errors import MatprobeError

EXIT_OK = 0
EXIT_NOTHING_TO_COMPARE = 1

TEXT_FORMATS = ("text", "md", "json")
FORMATS = (*TEXT_FORMATS, "html")


@dataclass(frozen=True)
class RunRef:
    """A run named on the command line: a store and a run id (None: its latest), or a
    report's JSON export (``report.json[.gz]``)."""

    store: Path
    run_id: int | None
    export: Path | None = None


def parse_run_ref(text: str, default_store: Path) -> RunRef:
    """``N`` → run N of ``default_store``; ``STORE:N`` → run N of STORE; ``STORE`` →
    its latest run; ``FILE.json`` or ``FILE.json.gz`` → a report's JSON export.
    Digits alone are always a run id, never a file named so."""
    if re.fullmatch(r"\d+", text):
        return RunRef(default_store, int(text))
    store, sep, run = text.rpartition(":")
    if sep and store and re.fullmatch(r"\d+", run):
        return RunRef(Path(store), int(run))
    path = Path(text).expanduser()
    if text and path.exists():
        if path.name.endswith((".json", ".json.gz")):
            return RunRef(path, None, export=path)
        return RunRef(path, None)
    raise MatprobeError(
        f"{text!r} is not a run: give a run id (of --store), a store file (its latest "
        f"run), STORE:RUN or a report's JSON export"
    )


def _store_path(args: argparse.Namespace) -> Path:
    from matprobe.run.store import default_store_path

    return Path(args.store).expanduser() if args.store else default_store_path()


def _open(path: Path) -> Any:
    from matprobe.run.store import ResultStore

    return ResultStore(path, read_only=True)


def _known_peers() -> set[str]:
    """Peer families of the shipped catalogue: a run that kept no report does not
    say which of its families are peers (never crowned best)."""
    from matprobe.kernels.catalogue import shipped_families

    return {family.name for family in shipped_families() if family.peer}


def _load_export(path: Path) -> tuple[Any, str]:
    """The report in a JSON export, and a name for it."""
    import gzip

    from matprobe.report.stored_report import report_from_json

    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, EOFError) as exc:
        raise MatprobeError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise MatprobeError(f"{path} is not a matprobe report in JSON")
    report = report_from_json(data)
    return report, f"run {report.run_id} of {path}"


def _load_ref(ref: RunRef) -> tuple[Any, str]:
    """The report ``ref`` names, and a name for it."""
    if ref.export is not None:
        return _load_export(ref.export)
    with _open(ref.store) as store:
        return _load(store, ref)


def _load(store: Any, ref: RunRef) -> tuple[Any, str]:
    """The report of ``ref`` from an open ``store``, and a name for it."""
    from matprobe.report.stored_report import load_report

    run_id = ref.run_id
    if run_id is None:
        runs = store.runs()
        if not runs:
            raise MatprobeError(f"{store.path} holds no runs")
        run_id = runs[-1].id
    report = load_report(store, run_id, known_peers=_known_peers())
    return report, f"run {run_id} of {store.path}"


def _emit(out: TextIO, fmt: str, renders: dict[str, Callable[[], str]]) -> None:
    out.write(renders[fmt]())


def _write_all(folder: Path, stem: str, renders: dict[str, Callable[[], str]]) -> None:
    suffix = {"text": "txt", "md": "md", "json": "json", "csv": "csv", "html": "html"}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for fmt, render in renders.items():
            (folder / f"{stem}.{suffix[fmt]}").write_text(render(), encoding="utf-8")
    except OSError as exc:
        raise MatprobeError(f"cannot write to {folder}: {exc.strerror or exc}") from None
    names = ",".join(suffix[fmt] for fmt in renders)
    print(f"matprobe: wrote {folder}/{stem}.{{{names}}}", file=sys.stderr)


def _json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


# ---- report ------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.report.html import render_html
    from matprobe.report.json_csv import to_csv, to_json
    from matprobe.report.markdown import render_markdown
    from matprobe.report.tables import REPORT_COLUMNS
    from matprobe.report.text import render_terminal

    default = _store_path(args)
    ref = parse_run_ref(args.run, default) if args.run else RunRef(default, None)
    report, _ = _load_ref(ref)
    renders: dict[str, Callable[[], str]] = {
        "text": lambda: render_terminal(report, None if args.wide else REPORT_COLUMNS),
        "md": lambda: render_markdown(report),
        "json": lambda: _json(to_json(report)),
        "csv": lambda: to_csv(report),
        "html": lambda: render_html(report),
    }
    if args.out:
        _write_all(Path(args.out), "report", renders)
    _emit(out, args.format, renders)
    return EXIT_OK


# ---- compare -----------------------------------------------------------------------


def _fraction(text: str) -> float:
    """A percentage on the command line (``2`` or ``2%``) as a fraction."""
    try:
        value = float(text.removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100 (%), got {text}")
    return value / 100


def cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.report.compare import (
        Thresholds,
        compare_json,
        compare_reports,
        render_compare_markdown,
        render_compare_text,
    )
    from matprobe.report.html import render_compare_html

    default = _store_path(args)
    refs = [parse_run_ref(args.a, default), parse_run_ref(args.b, default)]
    (a, a_name), (b, b_name) = (_load_ref(ref) for ref in refs)
    thresholds = Thresholds(noise=args.noise, resolution=max(args.resolution, args.noise))
    c = compare_reports(a, b, a_name=a_name, b_name=b_name, thresholds=thresholds)
    if c.empty:
        print(
            f"matprobe: nothing to compare: no (spec, variant) pair of {a_name} is in {b_name} too",
            file=sys.stderr,
        )
        return EXIT_NOTHING_TO_COMPARE
    renders: dict[str, Callable[[], str]] = {
        "text": lambda: render_compare_text(c),
        "md": lambda: render_compare_markdown(c),
        "json": lambda: _json(compare_json(c)),
        "html": lambda: render_compare_html(c),
    }
    if args.out:
        _write_all(Path(args.out), "compare", renders)
    _emit(out, args.format, renders)
    return EXIT_OK


# ---- history -----------------------------------------------------------------------


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.report.history import (
        History,
        history_json,
        list_runs,
        render_history_markdown,
        render_history_text,
        resolve_spec_key,
        spec_trend,
    )

    with _open(_store_path(args)) as store:
        runs = list_runs(store)
        key, note = resolve_spec_key(store, args.spec) if args.spec else (None, None)
        if note:
            print(f"matprobe: {note}", file=sys.stderr)
        trend = spec_trend(store, key, known_peers=_known_peers()) if key else []
        history = History(str(store.path), runs, key, trend)
    renders: dict[str, Callable[[], str]] = {
        "text": lambda: render_history_text(history),
        "md": lambda: render_history_markdown(history),
        "json": lambda: _json(history_json(history)),
    }
    _emit(out, args.format, renders)
    return EXIT_OK


# ---- wiring ------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``report``, ``compare`` and ``history`` to ``matprobe``'s subcommands."""
    p = subparsers.add_parser(
        "report",
        help="render a stored run's report again (text, Markdown, JSON or HTML)",
        description="The report of a run kept in a result store (or in a report.json "
        "export), as the run printed it, in any form; --out DIR writes "
        "report.{txt,md,json,csv,html}. The store is only read.",
    )
    p.add_argument(
        "run",
        metavar="RUN",
        nargs="?",
        help="N (run N of --store), STORE:N, STORE (its latest run) or a report's JSON "
        "export (report.json[.gz]); default: the latest run of --store",
    )
    _add_store(p, "result store, opened read-only", ("--store", "--db"))
    p.add_argument("--format", choices=FORMATS, default="text", help="what to print (text)")
    p.add_argument("--out", metavar="DIR", help="also write every form there")
    p.add_argument("--wide", action="store_true", help=WIDE_HELP)
    # The HTML report's plots are inline SVG, the one kind; the option stays so that
    # a script passing it still runs (plotly, dropped, is refused by its choices).
    p.add_argument("--plots", choices=("auto", "svg"), default="auto", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_report)

    p = subparsers.add_parser(
        "compare",
        help="compare two runs pair by pair: ratio, interval, FASTER/SLOWER/SAME/UNSURE",
        description="For every (spec, variant) timed in both runs, B ÷ A of the device "
        "time with a 99 % interval from the raw samples (Hodges–Lehmann, Mann–Whitney) and "
        "a verdict: FASTER/SLOWER (the interval excludes 1, the change exceeds --noise), "
        "SAME (the 90 % interval lies within ±--resolution) or UNSURE. Exit status 1 "
        "when the runs have no pair in common.",
    )
    p.add_argument("a", metavar="A", help="N, STORE:N, STORE (its latest run) or report.json")
    p.add_argument("b", metavar="B", help="N, STORE:N, STORE (its latest run) or report.json")
    _add_store(p, "result store, opened read-only", ("--store", "--db"))
    p.add_argument("--format", choices=FORMATS, default="text", help="what to print (text)")
    p.add_argument("--out", metavar="DIR", help="also write compare.{txt,md,json,html} there")
    p.add_argument(
        "--noise",
        type=_fraction,
        default=0.02,
        metavar="PCT",
        help="changes smaller than this are noise, never FASTER/SLOWER (default 2%%)",
    )
    p.add_argument(
        "--resolution",
        type=_fraction,
        default=0.10,
        metavar="PCT",
        help="SAME needs the 90%% interval within ±PCT of 1, else UNSURE (default 10%%)",
    )
    p.set_defaults(func=cmd_compare)

    p = subparsers.add_parser(
        "history",
        help="the runs in a store, and a spec's best variant and baseline over them",
        description="Every run in the store (device, date, versions, policy, status, pairs); "
        "with --spec, that spec's best validated variant and baseline in each run.",
    )
    _add_store(p, "result store, opened read-only", ("--store", "--db"))
    p.add_argument(
        "--spec",
        metavar="KEY",
        help="a spec key, e.g. 'op=matmul | batch=1 | …'; one without dtype= (as a profile "
        "writes it) is the stored key of that shape when the store has it under one dtype",
    )
    p.add_argument("--format", choices=TEXT_FORMATS, default="text", help="what to print (text)")
    p.set_defaults(func=cmd_history)
