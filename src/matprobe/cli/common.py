"""What every subcommand of ``matprobe`` shares: the parser that says a usage
error in one line, warnings on stderr, JSON and files written, output paths
checked before anything is measured, plain tables, ``--op`` filters and
``--model list``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from matprobe.errors import MatprobeError
from matprobe.report.tables import ruled_table
from matprobe.safetext import term_safe
from matprobe.spec import MatmulSpec

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


def _matches_op(spec: MatmulSpec, ops: Sequence[str] | None) -> bool:
    return not ops or spec.op in ops or spec.kind in ops


def _check_ops(ops: Sequence[str] | None, specs: Sequence[MatmulSpec]) -> None:
    """An ``--op`` that matches no spec of the source is an error (as in ``run``),
    never an empty table with exit status 0."""
    for op in ops or ():
        if not any(_matches_op(spec, [op]) for spec in specs):
            seen = sorted({spec.op or "?" for spec in specs})
            raise MatprobeError(f"--op {op!r} matches no spec here (ops: {', '.join(seen)})")


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
    out.write(ruled_table(headers, rows, right={1, 2, 3, 4, 5, 6}) + "\n")
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
