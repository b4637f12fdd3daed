"""The ``matprobe`` command.

Each subcommand is a small function over the library; this module only parses
options, picks the output form and turns user errors into one line on stderr
and exit status 2 (never a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from matprobe import __version__, cli_capture, cli_dispatch, cli_merge, cli_reports, cli_token
from matprobe.cli_args import WIDE_HELP, non_negative, positive, seed
from matprobe.errors import MatprobeError
from matprobe.profile.analysis import AnalyzeOptions, analyze, render_text, to_json
from matprobe.profile.jsonl import scan
from matprobe.safetext import term_safe
from matprobe.spec import DTYPES, MatmulSpec

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that points at --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _warn(message: str) -> None:
    # A warning may quote the profile's own text: its control bytes are shown, not sent.
    print(f"matprobe: warning: {term_safe(message)}", file=sys.stderr)


def _emit_json(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2)
    out.write("\n")


# ---- analyze -------------------------------------------------------------------


def cmd_analyze(args: argparse.Namespace, out: TextIO) -> int:
    options = AnalyzeOptions(
        top=args.top,
        kernel_top=args.kernel_top,
        include_kernel_totals=args.include_kernel_totals,
        kernel_filter=args.kernel_filter,
    )
    result = analyze(scan(args.profile), options)
    if args.json:
        _emit_json(to_json(result, options), out)
    else:
        out.write(render_text(result))
    if result.problems.total:
        _warn(f"{result.problems.total} problem lines in {args.profile} (listed at the end)")
    return 0


# ---- shapes --------------------------------------------------------------------


def _fmt_ms(value: float) -> str:
    return f"{value:.3f}"


def _fmt_bytes(spec: MatmulSpec) -> str:
    if not spec.is_complete or spec.dtype is None:
        return "?"
    return f"{spec.min_bytes() / 1e6:.3f}"


def _fmt_flops(spec: MatmulSpec) -> str:
    return f"{spec.flops() / 1e6:.3f}" if spec.is_complete else "?"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _matches_op(spec: MatmulSpec, ops: Sequence[str] | None) -> bool:
    return not ops or spec.op in ops or spec.kind in ops


def _check_ops(ops: Sequence[str] | None, specs: Sequence[MatmulSpec]) -> None:
    """An ``--op`` that matches no spec of the source is an error (as in ``run``),
    never an empty table with exit status 0."""
    for op in ops or ():
        if not any(_matches_op(spec, [op]) for spec in specs):
            seen = sorted({spec.op or "?" for spec in specs})
            raise MatprobeError(f"--op {op!r} matches no spec here (ops: {', '.join(seen)})")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _list_models(out: TextIO) -> int:
    """``--model list`` (shapes and run alike): the model configs known."""
    from matprobe.profile.models import MODELS

    rows = [
        [
            name,
            str(c.hidden),
            str(c.intermediate),
            f"{c.heads}/{c.kv_heads}",
            str(c.head_dim),
            str(c.vocab),
            str(c.layers),
            "yes" if c.qkv_bias else "no",
        ]
        for name, c in MODELS.items()
    ]
    headers = ["model", "hidden", "inter", "heads/kv", "head_dim", "vocab", "layers", "qkv bias"]
    out.write(_table(headers, rows, right={1, 2, 3, 4, 5, 6}) + "\n")
    return 0


def _shapes_from_model(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.profile.models import decode_specs, get_model

    if args.model == "list":
        return _list_models(out)
    config = get_model(args.model)
    shapes = decode_specs(
        config,
        context=args.context,
        dtype=args.dtype or "f16",
        fuse_qkv=not args.no_fuse_qkv,
        fuse_gate_up=not args.no_fuse_gate_up,
    )
    shapes = [s for s in shapes if s.count >= args.min_count and _matches_op(s.spec, args.op)]
    # No times in a config: order by bytes moved per token, what decode time follows.
    shapes.sort(key=lambda s: -s.count * s.spec.min_bytes())
    if args.json:
        _emit_json(
            {
                "source": f"model:{config.name}",
                "context": args.context,
                "specs": [{"role": s.role, "count": s.count, **s.spec.to_dict()} for s in shapes],
            },
            out,
        )
        return 0
    rows = [
        [
            s.role,
            str(s.count),
            _fmt_flops(s.spec),
            _fmt_bytes(s.spec),
            f"{s.count * s.spec.min_bytes() / 1e6:.2f}",
            s.spec.key(),
        ]
        for s in shapes
    ]
    total_mb = sum(s.count * s.spec.min_bytes() for s in shapes) / 1e6
    out.write(
        f"{config.name}: one decode token at context {args.context}, "
        f"dtype {args.dtype or 'f16'} ({len(shapes)} shapes, {total_mb:.1f} MB moved per token)\n"
    )
    headers = ["role", "count", "MFLOP", "min MB", "MB/token", "shape"]
    out.write(_table(headers, rows, right={1, 2, 3, 4}) + "\n")
    return 0


def cmd_shapes(args: argparse.Namespace, out: TextIO) -> int:
    if args.model is not None:
        if args.profile is not None:
            raise MatprobeError("give a PROFILE or --model, not both")
        return _shapes_from_model(args, out)
    from matprobe.profile.profiles import load_specs

    loaded = load_specs(args.profile, default_dtype=args.dtype)
    for warning in loaded.warnings:
        _warn(warning)
    _check_ops(args.op, loaded.specs)
    specs = [
        s
        for s in loaded.specs
        if (s.provenance.count if s.provenance else 0) >= args.min_count and _matches_op(s, args.op)
    ]
    if args.json:
        _emit_json({"source": loaded.source, "specs": [s.to_dict() for s in specs]}, out)
        return 0
    rows = []
    for spec in specs:
        prov = spec.provenance
        backends = term_safe(",".join(t.backend for t in prov.backends)) if prov else "?"
        rows.append(
            [
                _fmt_ms(prov.total_ms) if prov else "?",
                str(prov.count) if prov else "?",
                _fmt_ms(prov.avg_ms) if prov else "?",
                backends,
                _fmt_flops(spec),
                _fmt_bytes(spec),
                term_safe(spec.key()),
            ]
        )
    total_ms = sum(s.provenance.total_ms for s in specs if s.provenance)
    out.write(
        f"{term_safe(loaded.source)}: {len(specs)} matmul shapes, {total_ms:.2f} ms in production\n"
    )
    headers = ["total ms", "count", "avg ms", "backend", "MFLOP", "min MB", "shape"]
    out.write(_table(headers, rows, right={0, 1, 2, 4, 5}) + "\n")
    return 0


# ---- run / variants --------------------------------------------------------------


def _run_specs(args: argparse.Namespace) -> tuple[list[MatmulSpec], str, list[str]]:
    """The specs a run measures: a profile's, the built-in one's, or a model's."""
    if args.model is not None:
        if args.profile is not None:
            raise MatprobeError("give a PROFILE or --model, not both")
        from matprobe.profile.models import decode_specs, get_model

        config = get_model(args.model)
        shapes = decode_specs(config, context=args.context, dtype=args.dtype or "f16")
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
    from matprobe.report.html import render_html
    from matprobe.report.json_csv import to_csv
    from matprobe.report.json_csv import to_json as report_json
    from matprobe.report.markdown import render_markdown
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
    result = session.run(specs, source=source, tokens=tokens)
    report = result.report
    text = render_terminal(report, None if args.wide else REPORT_COLUMNS)
    # With '-', stdout holds the data alone (parseable); the report goes to stderr.
    (sys.stderr if to_stdout else out).write(text)
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
    if args.dispatch and not result.interrupted:
        from matprobe.cli_dispatch import export_tables

        export_tables(report, tuple(args.plugin or ()), Path(args.dispatch), sys.stderr)
    if result.interrupted:
        print("matprobe: interrupted; finished pairs are stored", file=sys.stderr)
        return 130
    problems = run_problems(report, strict=args.strict)
    for problem in problems[:10]:
        print(f"matprobe: {term_safe(problem)}", file=sys.stderr)
    if len(problems) > 10:
        print(f"matprobe: … and {len(problems) - 10} more", file=sys.stderr)
    return 1 if problems else 0


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


def _check_writable_file(path: Path) -> None:
    """Before a run, not after it: an output file that cannot be written is a usage
    error that costs nothing measured."""
    if path.is_dir():
        raise MatprobeError(f"cannot write {path}: it is a directory")
    _check_creatable(path.parent if str(path.parent) else Path("."), f"cannot write {path}")


def _check_writable_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise MatprobeError(f"cannot write reports to {path}: it is a file")
    _check_creatable(path, f"cannot write reports to {path}")


def _check_creatable(folder: Path, what: str) -> None:
    """``folder`` exists and is writable, or can be made: its nearest existing
    ancestor is a writable directory (a missing parent is found now, not after
    the run has been measured)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise MatprobeError(f"{what}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK):
        raise MatprobeError(f"{what}: {existing} is not writable")


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise MatprobeError(f"cannot write {path}: {exc.strerror or exc}") from None


def cmd_variants(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.harness import device as device_mod
    from matprobe.run.manifest import load_manifest_and_registry

    manifest, registry = load_manifest_and_registry(args.manifest, args.plugin or ())
    enabled = {v.id for v in manifest.variants(registry)}
    spec = MatmulSpec.parse(args.spec) if args.spec else None
    if spec is not None and spec.dtype is None:
        spec = spec.with_dtype(args.dtype or "f16")
    device = device_mod.detect(args.device) if spec is not None else None
    for family in registry.families():
        flags = [
            f
            for f, on in (
                ("baseline", family.baseline),
                ("peer", family.peer),
                (f"plugin {family.origin}", family.is_plugin),
            )
            if on
        ]
        grid = ", ".join(f"{k}={list(v)}" for k, v in family.grid.items()) or "no parameters"
        out.write(
            f"{family.name}{' [' + ', '.join(flags) + ']' if flags else ''}: {family.description}\n"
        )
        out.write(
            f"  ops {', '.join(sorted(family.ops))}; devices "
            f"{', '.join(sorted(family.devices))}; dtypes {', '.join(sorted(family.dtypes))}"
            f"; grid {grid}\n"
        )
        config = manifest.families.get(family.name)
        for variant in family.variants(config.grid if config else None):
            state = "enabled" if variant.id in enabled else "disabled"
            line = f"    {variant.id}  ({state}, fingerprint {variant.fingerprint})"
            if spec is not None and device is not None:
                reason = variant.unsupported_reason(spec, device)
                line += f": {'supported' if reason is None else 'unsupported: ' + reason}"
            out.write(line + "\n")
    return 0


# ---- synth-profile ----------------------------------------------------------------


def cmd_synth_profile(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.profile.synth import write_profile

    try:
        written = write_profile(args.out, events=args.events, seed=args.seed, broken=args.broken)
    except OSError as exc:
        raise MatprobeError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    out.write(f"wrote {written} events to {args.out}\n")
    return 0


# ---- wiring ------------------------------------------------------------------------


def _add_spec_source(p: argparse.ArgumentParser) -> None:
    """Where specs come from: a profile (default: the built-in one) or a model config."""
    p.add_argument(
        "profile",
        metavar="PROFILE",
        nargs="?",
        help="JSONL profile or text summary (default: the built-in profile)",
    )
    p.add_argument(
        "--model",
        metavar="NAME",
        help="one decode step of a model config instead ('--model list' names them)",
    )
    p.add_argument(
        "--context",
        type=positive,
        default=128,
        metavar="L",
        help="attention context length for --model (default 128)",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        help="weight format for --model (default f16), or the dtype of profile "
        "specs that do not state one",
    )


def _add_plugin(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        help="also the variant families of this module (its FAMILIES), importable "
        "from the current directory or sys.path; repeatable (a manifest may list "
        "them too: plugins = [...])",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="matprobe",
        description="A lab for the matmul kernels of LLM decode: read profiles, "
        "list the hot matmul shapes, probe kernels on them.",
    )
    parser.add_argument("--version", action="version", version=f"matprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser(
        "analyze",
        help="summarize a profiling JSONL file (per op, backend, kernel and matmul shape)",
        description="Stream a metallic profiling JSONL file and print the analyzer's "
        "sections: event types, backend selection, internal kernels, GPU kernels, matmul "
        "backends and shapes, waits, command buffers, sync. Unreadable lines are counted "
        "and reported at the end.",
    )
    p.add_argument("profile", metavar="PROFILE", help="JSONL profile (may be gzip-compressed)")
    p.add_argument(
        "--top", type=non_negative, default=20, help="rows per section (default 20; 0 = all)"
    )
    p.add_argument(
        "--kernel-top",
        type=non_negative,
        default=50,
        help="rows of the kernel aggregate view (default 50; 0 = all)",
    )
    p.add_argument(
        "--include-kernel-totals",
        action="store_true",
        help="include *_total and cb_wait synthetic kernels in the kernel aggregate",
    )
    p.add_argument(
        "--kernel-filter",
        default="",
        metavar="TEXT",
        help="keep kernels, backends and shapes whose name contains TEXT (case-insensitive)",
    )
    p.add_argument("--json", action="store_true", help="print the same figures as JSON")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser(
        "shapes",
        help="list the matmul shapes of a profile or of a model's decode step",
        description="The matmul specs of a profile (JSONL or analyzer text summary) sorted by "
        "production time, or of one decode step of a named model (--model). With neither, "
        "the built-in Qwen2.5-0.5B decode profile.",
    )
    _add_spec_source(p)
    p.add_argument(
        "--no-fuse-qkv", action="store_true", help="--model: separate Q, K, V projections"
    )
    p.add_argument(
        "--no-fuse-gate-up", action="store_true", help="--model: separate gate and up projections"
    )
    p.add_argument(
        "--min-count",
        type=non_negative,
        default=0,
        metavar="N",
        help="only shapes called at least N times",
    )
    p.add_argument(
        "--op",
        action="append",
        metavar="OP",
        help="only this op (repeatable; matmul_alpha_beta also matches its _cache form)",
    )
    p.add_argument("--json", action="store_true", help="print specs as JSON")
    p.set_defaults(func=cmd_shapes)

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
    p.add_argument(
        "--db",
        metavar="FILE",
        help="result store (default $MATPROBE_DB or ~/.cache/matprobe/results.sqlite)",
    )
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

    p = sub.add_parser(
        "variants",
        help="list the kernel variants, their grids and (with --spec) whether they support a spec",
        description="Every registered variant family with its ops, devices, dtypes and grid, "
        "and each variant's id and fingerprint.",
    )
    p.add_argument("--spec", metavar="KEY", help="a shape key: say for each variant if it runs it")
    p.add_argument("--dtype", choices=DTYPES, help="dtype for a --spec key without one (f16)")
    p.add_argument(
        "--device",
        choices=("cuda", "cpu", "mps"),
        help="device to check support on",
    )
    p.add_argument("--manifest", metavar="FILE", help="replace the default manifest")
    _add_plugin(p)
    p.set_defaults(func=cmd_variants)

    p = sub.add_parser(
        "synth-profile",
        help="write a synthetic metallic JSONL profile (for tests and benchmarks)",
        description="Write a deterministic, realistic Qwen2.5-0.5B-like decode profile.",
    )
    p.add_argument("out", metavar="OUT", help="file to write")
    p.add_argument("--events", type=positive, default=100_000, help="events (default 100000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--broken",
        action="store_true",
        help="sprinkle malformed lines, as a damaged log would have",
    )
    p.set_defaults(func=cmd_synth_profile)
    for module in (cli_reports, cli_dispatch, cli_token, cli_capture, cli_merge):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    stream = out if out is not None else sys.stdout
    try:
        code: int = args.func(args, stream)
        stream.flush()
        return code
    except MatprobeError as exc:
        print(f"matprobe: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("matprobe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `matprobe analyze big.jsonl | head`: the reader left; not an error.
        sys.stderr.close()
        return 0
