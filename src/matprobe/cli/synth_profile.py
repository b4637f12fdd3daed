"""``matprobe synth-profile``: a synthetic metallic JSONL profile written (for
tests and benchmarks)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from matprobe.cli.args import positive
from matprobe.errors import MatprobeError


def cmd_synth_profile(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.profile.synth import write_profile

    try:
        written = write_profile(args.out, events=args.events, seed=args.seed, broken=args.broken)
    except OSError as exc:
        raise MatprobeError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    out.write(f"wrote {written} events to {args.out}\n")
    return 0


def register(sub: Any) -> None:
    """``matprobe synth-profile``: its options, on the command's subparsers."""
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
