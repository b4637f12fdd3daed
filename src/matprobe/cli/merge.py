"""``matprobe merge A.sqlite B.sqlite … --into C.sqlite``: stores gathered on many
machines, merged into one (see :mod:`matprobe.run.merge`)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from matprobe.safetext import term_safe

#: Exit status when every store merged but some keys held different measurements.
EXIT_CONFLICTS = 1


def cmd_merge(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.run.merge import merge_stores

    summary = merge_stores(args.stores, args.into)
    for conflict in summary.conflicts:
        out.write(term_safe(conflict.line()) + "\n")
    out.write(term_safe(summary.line()) + "\n")
    return EXIT_CONFLICTS if summary.conflicts else 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="merge result stores written elsewhere into one",
        description="Merge matprobe result stores (read-only, never modified) into --into "
        "(created if new): runs renumbered, one row per result key, identical rows once; "
        "a key measured differently in two stores is a conflict, listed per key: the newer "
        "measurement is kept and the other kept as superseded. Exit status: 0 merged, "
        "1 merged with conflicts, 2 usage error.",
    )
    p.add_argument("stores", nargs="+", metavar="STORE", help="stores to merge (read-only)")
    p.add_argument("--into", required=True, metavar="FILE", help="the store to merge into")
    p.set_defaults(func=cmd_merge)
