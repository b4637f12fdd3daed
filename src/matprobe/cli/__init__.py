"""The ``matprobe`` command: :func:`main` parses the options, runs the
subcommand and turns user errors into one line on stderr and exit status 2
(never a traceback).

Each subcommand is a small function over the library, in a module of its own
here — ``analyze``, ``shapes``, ``run``, ``variants``, ``synth_profile``,
``reports`` (``report``, ``compare``, ``history``), ``dispatch``, ``token``,
``capture``, ``merge`` — which adds its options with ``register``; what they
share is in :mod:`~matprobe.cli.common` and :mod:`~matprobe.cli.args`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from matprobe import __version__
from matprobe.cli import (
    analyze,
    capture,
    dispatch,
    merge,
    reports,
    run,
    shapes,
    synth_profile,
    token,
    variants,
)
from matprobe.cli.common import EXIT_USAGE, _Parser
from matprobe.errors import MatprobeError

#: The subcommands, in the order ``matprobe --help`` lists them.
SUBCOMMANDS = (
    analyze,
    shapes,
    run,
    variants,
    synth_profile,
    reports,
    dispatch,
    token,
    capture,
    merge,
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="matprobe",
        description="A lab for the matmul kernels of LLM decode: read profiles, "
        "list the hot matmul shapes, probe kernels on them.",
    )
    parser.add_argument("--version", action="version", version=f"matprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in SUBCOMMANDS:
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
