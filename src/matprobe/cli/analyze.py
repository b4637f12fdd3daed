"""``matprobe analyze``: a profiling JSONL file summarized (per op, backend,
kernel and matmul shape)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from matprobe.cli.args import non_negative
from matprobe.cli.common import (
    _emit_json,
    _warn,
)
from matprobe.profile.analysis import AnalyzeOptions, analyze, render_text, to_json
from matprobe.profile.jsonl import scan


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


def register(sub: Any) -> None:
    """``matprobe analyze``: its options, on the command's subparsers."""
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
