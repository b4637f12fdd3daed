"""``matprobe capture``: the matmul shapes of one decode step of a live PyTorch model.

Kept apart from :mod:`matprobe.cli`, which calls :func:`register`; the capture
machinery (torch, transformers) is imported only when the command runs.
Exit status: 0 done (and, with ``--check``, every difference explained); 1 when
``--check`` finds a difference it cannot explain; 2 for a usage error, said in
one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from matprobe.cli.args import positive
from matprobe.errors import MatprobeError
from matprobe.safetext import term_safe

#: Mirrors capture.hf's lists, so that building the parser imports no torch.
_DTYPES = ("f16", "bf16", "f32")
_DEVICES = ("cpu", "cuda")


def register(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``capture`` subcommand to the ``matprobe`` parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "capture",
        help="record the matmuls of one decode step of a transformers model as a profile",
        description="Build a Hugging Face transformers model from its config with random "
        "weights (nothing is downloaded), prefill a KV cache with --context tokens, run one "
        "new token and record every matmul (mm, addmm, bmm, baddbmm, and attention as its "
        "Q·Kᵀ and P·V products) with its shape, layout, dtype and count. --out writes them as "
        "a profile that `matprobe shapes` and `matprobe run` read; --check compares them with "
        "`matprobe shapes --model`. Needs the capture extra (transformers).",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="NAME|config.json",
        help="a model `matprobe shapes --model list` names, or a transformers config.json "
        "(model_type qwen2 or llama)",
    )
    p.add_argument(
        "--context",
        type=positive,
        default=128,
        metavar="L",
        help="tokens in the KV cache before the new one (default 128)",
    )
    p.add_argument("--dtype", choices=_DTYPES, default="f16", help="weights and activations")
    p.add_argument(
        "--layers",
        type=positive,
        metavar="N",
        help="build N layers instead of the config's (small CPU captures)",
    )
    p.add_argument("--device", choices=_DEVICES, default="cpu", help="default cpu")
    p.add_argument("--out", metavar="FILE.jsonl", help="write the calls as a JSONL profile")
    p.add_argument(
        "--check",
        action="store_true",
        help="compare with `matprobe shapes --model` for the same model; exit 1 on a "
        "difference it cannot explain",
    )
    p.set_defaults(func=cmd_capture)
    return p


def _check_writable(path: Path) -> None:
    """Before the capture, not after it: a bad --out costs nothing run."""
    folder = path.parent
    if path.is_dir():
        raise MatprobeError(f"cannot write {term_safe(str(path))}: it is a directory")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        shown = term_safe(str(folder))
        raise MatprobeError(
            f"cannot write {term_safe(str(path))}: {shown} is not a writable folder"
        )


def cmd_capture(args: argparse.Namespace, out: TextIO) -> int:
    if args.out:
        _check_writable(Path(args.out))
    from matprobe.profile.capture import (
        capture_decode,
        compare_capture,
        render_comparison,
        write_profile,
    )

    capture = capture_decode(
        args.model, context=args.context, dtype=args.dtype, layers=args.layers, device=args.device
    )
    for message in capture.warnings:
        print(f"matprobe: warning: transformers: {term_safe(message)}", file=sys.stderr)
    model = capture.model
    versions = ", ".join(f"{name} {version}" for name, version in capture.versions)
    calls = len(capture.calls)
    counts = capture.counts()
    out.write(
        f"captured {term_safe(model.name)} ({capture.architecture}, {model.layers} layers): one "
        f"decode token after {capture.cached} cached tokens, {capture.dtype} on {capture.device}"
        f" — {len(counts)} matmul shapes, {calls} calls ({versions})\n"
    )
    out.write(_table(capture.sites(), counts))
    for name, count in capture.unhandled:
        print(
            f"matprobe: warning: {count} calls of {name} look like matmuls and were not recorded",
            file=sys.stderr,
        )
    if args.out:
        written = write_profile(capture, args.out)
        out.write(f"wrote {written} events to {term_safe(args.out)}\n")
    if not args.check:
        return 0
    comparison = compare_capture(capture)
    out.write(render_comparison(comparison))
    return 0 if comparison.ok else 1


def _table(sites: dict[Any, tuple[str, ...]], counts: dict[Any, int]) -> str:
    """count, shape, and the modules that ran it: the shape keys line up, the
    module paths (of varying length) come last."""
    rows = [(str(counts[spec]), spec.key(), ", ".join(where)) for spec, where in sites.items()]
    headers = ("count", "shape", "where")
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: tuple[str, str, str]) -> str:
        count, shape, where = cells
        return f"{count.rjust(widths[0])}  {shape.ljust(widths[1])}  {where}".rstrip()

    rule = ("-" * widths[0], "-" * widths[1], "-" * widths[2])
    return "\n".join([line(headers), line(rule), *(line(r) for r in rows)]) + "\n"
