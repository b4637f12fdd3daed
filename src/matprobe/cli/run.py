"""``matprobe run``: every kernel variant on every spec — validated, timed,
stored and reported (the run itself is :class:`~matprobe.run.session.RunSession`'s)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from matprobe.cli.args import WIDE_HELP, _add_plugin, _add_spec_source, _add_store, positive, seed
from matprobe.cli.common import (
    _check_ops,
    _check_writable_dir,
    _check_writable_file,
    _list_models,
    _matches_op,
    _warn,
    _write,
)
from matprobe.errors import MatprobeError
from matprobe.safetext import term_safe
from matprobe.spec import MatmulSpec


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _run_specs(args: argparse.Namespace) -> tuple[list[MatmulSpec], str, list[str]]:
    """The specs a run measures: a profile's, the built-in one's, or a model's."""
    if args.layer and args.model is None:
        raise MatprobeError("--layer lists a model's decode layer: give --model NAME")
    if args.model is not None:
        if args.profile is not None:
            raise MatprobeError("give a PROFILE or --model, not both")
        from matprobe.profile.models import decode_specs, get_model

        config = get_model(args.model)
        shapes = decode_specs(
            config, context=args.context, dtype=args.dtype or "f16", layer=args.layer
        )
        return [s.spec for s in shapes], f"model {config.name} (counts per token)", []
    from matprobe.profile.profiles import load_specs

    loaded = load_specs(args.profile, default_dtype=args.dtype)
    return loaded.specs, loaded.source, loaded.warnings


def _infer_tokens(specs: Sequence[MatmulSpec]) -> int | None:
    """Tokens in a profiled run: the lm_head — the widest batch-1 GEMV — runs once a
    token while the per-layer GEMVs run once a layer. None when the profile does not
    show that pattern (then per-token figures need --tokens)."""
    gemvs = [
        s
        for s in specs
        if s.batch == 1 and s.m == 1 and s.n_total and s.provenance and s.provenance.count
    ]
    if len(gemvs) < 2:
        return None
    counts = [s.provenance.count for s in gemvs if s.provenance]
    widest = max(gemvs, key=lambda s: s.n_total or 0)
    tokens = widest.provenance.count if widest.provenance else 0
    return tokens if tokens == min(counts) < max(counts) else None


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.report.model import run_problems
    from matprobe.report.tables import REPORT_COLUMNS
    from matprobe.report.text import render_terminal
    from matprobe.run.session import RunOptions, RunSession

    if args.model == "list":
        return _list_models(out)
    specs, source, warnings = _run_specs(args)
    for warning in warnings:
        _warn(warning)
    tokens = args.tokens or (1 if args.model else _infer_tokens(specs))
    _check_ops(args.op, specs)
    specs = [s for s in specs if _matches_op(s, args.op)]
    if not specs:
        raise MatprobeError("no specs to run (check --op)")
    session = RunSession(
        RunOptions(
            variants=tuple(args.variants or ()),
            every_point=args.every_point,
            device=args.device,
            manifest=args.manifest,
            plugins=tuple(args.plugin or ()),
            db=args.db,
            force=args.force,
            kernel_clock=args.kernel_clock,
            trials=args.trials,
            seed=args.seed,
            timeout_s=args.timeout,
            command=" ".join(["matprobe", *sys.argv[1:]]),
            gpus=args.gpus,
            ray=args.ray,
        )
    )
    if args.dry_run:
        return _print_plan(session, specs, out)
    to_stdout = _check_outputs(args)
    result = session.run(specs, source=source, tokens=tokens)
    report = result.report
    text = render_terminal(report, None if args.wide else REPORT_COLUMNS)
    # With '-', stdout holds the data alone (parseable); the report goes to stderr.
    (sys.stderr if to_stdout else out).write(text)
    _write_reports(args, report, text, out)
    if args.dispatch and not result.interrupted:
        from matprobe.cli.dispatch import export_tables

        db = Path(args.db) if args.db else None
        export_tables(report, tuple(args.plugin or ()), Path(args.dispatch), sys.stderr, db)
    if result.interrupted:
        print("matprobe: interrupted; finished pairs are stored", file=sys.stderr)
        return 130
    problems = run_problems(report, strict=args.strict)
    for problem in problems[:10]:
        print(f"matprobe: {term_safe(problem)}", file=sys.stderr)
    if len(problems) > 10:
        print(f"matprobe: … and {len(problems) - 10} more", file=sys.stderr)
    return 1 if problems else 0


def _check_outputs(args: argparse.Namespace) -> list[str]:
    """Before anything is measured: every file and folder the run will write is
    writable, and at most one export goes to stdout. The exports to stdout."""
    to_stdout = [name for name in ("json", "csv") if getattr(args, name) == "-"]
    if len(to_stdout) > 1:
        raise MatprobeError("only one of --json and --csv can be '-' (stdout)")
    for name in ("json", "csv"):
        target = getattr(args, name)
        if target and target != "-":
            _check_writable_file(Path(target))
    for folder in (args.out, args.dispatch):
        if folder:
            _check_writable_dir(Path(folder))
    return to_stdout


def _write_reports(args: argparse.Namespace, report: Any, text: str, out: TextIO) -> None:
    """The JSON and CSV exports (a file, or stdout for '-') and ``--out``'s folder of
    every rendering."""
    from matprobe.report.html import render_html
    from matprobe.report.json_csv import to_csv
    from matprobe.report.json_csv import to_json as report_json
    from matprobe.report.markdown import render_markdown

    exports: dict[str, Callable[[], str]] = {
        "json": lambda: json.dumps(report_json(report), indent=2) + "\n",
        "csv": lambda: to_csv(report),
    }
    for name, render in exports.items():
        target = getattr(args, name)
        if target == "-":
            out.write(render())
        elif target:
            _write(Path(target), render())
    if args.out:
        folder = Path(args.out)
        _write(folder / "report.txt", text)
        _write(folder / "report.md", render_markdown(report))
        _write(folder / "report.html", render_html(report))
        for name, render in exports.items():
            _write(folder / f"report.{name}", render())


def _print_plan(session: Any, specs: Sequence[MatmulSpec], out: TextIO) -> int:
    """``run --dry-run``: every pair's state and reason, nothing measured or stored."""
    plan, device = session.plan(specs)
    out.write(f"plan on {term_safe(device.name)} ({device.kind}): {plan.summary()}\n")
    for pair in plan.pairs:
        why = f" — {term_safe(pair.reason)}" if pair.reason else ""
        out.write(
            f"  {pair.state.value:11s} {pair.variant.id}  {term_safe(pair.spec.key())}{why}\n"
        )
    return 0


def register(sub: Any) -> None:
    """``matprobe run``: its options, on the command's subparsers."""
    p = sub.add_parser(
        "run",
        help="run every kernel variant on every spec: validate, time, store, report",
        description="The probe harness. With no arguments: the built-in Qwen2.5-0.5B decode "
        "profile, every enabled variant, on the GPU if there is one, else the CPU. Results are "
        "stored (SQLite) and reused while the spec, the variant's source and parameters, the "
        "device and the timing policy are unchanged.",
    )
    _add_spec_source(p)
    p.add_argument(
        "--variants",
        nargs="+",
        metavar="GLOB",
        help="only variants whose id or family matches (e.g. 'triton.*')",
    )
    p.add_argument("--op", action="append", metavar="OP", help="only specs of this op")
    p.add_argument(
        "--device",
        choices=("cuda", "cpu", "mps"),
        help="default: cuda if present; mps: Apple silicon through PyTorch's MPS backend "
        "(the torch.matmul baseline and families that declare mps)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--gpus",
        metavar="all|0,1,…",
        help="measure on these CUDA cards in parallel, one worker per card (a candidate and "
        "its baseline on the same card); every result goes to the one store",
    )
    where.add_argument(
        "--ray",
        metavar="ADDRESS|auto",
        help="measure on the cards of a Ray cluster ('auto': the one this machine belongs "
        "to), one pair per Ray task; this process plans and stores (needs matprobe[ray])",
    )
    p.add_argument("--manifest", metavar="FILE", help="replace the default manifest")
    p.add_argument("--force", action="store_true", help="re-run pairs that are cached")
    _add_store(p)
    p.add_argument("--out", metavar="DIR", help="write report.{txt,md,json,csv,html} there")
    p.add_argument("--wide", action="store_true", help=WIDE_HELP)
    p.add_argument(
        "--dispatch",
        metavar="DIR",
        help="also write the winners as dispatch tables there (see matprobe dispatch)",
    )
    p.add_argument("--json", metavar="FILE", help="JSON export with raw samples ('-': stdout)")
    p.add_argument("--csv", metavar="FILE", help="CSV export with raw samples ('-': stdout)")
    p.add_argument(
        "--kernel-clock",
        action="store_true",
        help="also time kernels with the PyTorch profiler (cross-check)",
    )
    p.add_argument(
        "--trials",
        type=positive,
        default=3,
        help="validation trials with fresh inputs (default 3)",
    )
    p.add_argument(
        "--seed",
        type=seed,
        default=None,
        help="the run's seed, which every drawn value comes from (default: one from the "
        "operating system, stored with the run; pass it with --force to replay a run exactly)",
    )
    p.add_argument(
        "--every-point",
        action="store_true",
        help="on the CPU, validate every grid point of the Triton families (default: one "
        "each, unless --variants names points as 'FAMILY/…')",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print every pair's state (run, cached, unsupported) and reason; run nothing",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on any FAIL or ERROR (default: only when a baseline fails or nothing passed)",
    )
    p.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=300.0,
        metavar="S",
        help="seconds one pair may take, compile included (default 300)",
    )
    p.add_argument(
        "--tokens",
        type=positive,
        metavar="N",
        help="tokens in the profiled run, for per-token impact (default: the lm_head's call count)",
    )
    _add_plugin(p)
    p.set_defaults(func=cmd_run)
