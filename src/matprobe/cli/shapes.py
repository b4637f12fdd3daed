"""``matprobe shapes``: the matmul shapes of a profile, or of one decode step of
a model's config."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from matprobe.cli.args import _add_spec_source, non_negative
from matprobe.cli.common import (
    _check_ops,
    _emit_json,
    _list_models,
    _matches_op,
    _warn,
)
from matprobe.errors import MatprobeError
from matprobe.report.tables import ruled_table
from matprobe.safetext import term_safe
from matprobe.spec import MatmulSpec


def _fmt_ms(value: float) -> str:
    return f"{value:.3f}"


def _fmt_bytes(spec: MatmulSpec) -> str:
    if not spec.is_complete or spec.dtype is None:
        return "?"
    return f"{spec.min_bytes() / 1e6:.3f}"


def _fmt_flops(spec: MatmulSpec) -> str:
    return f"{spec.flops() / 1e6:.3f}" if spec.is_complete else "?"


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
        layer=args.layer,
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
    out.write(ruled_table(headers, rows, right={1, 2, 3, 4}) + "\n")
    return 0


def cmd_shapes(args: argparse.Namespace, out: TextIO) -> int:
    if args.layer and args.model is None:
        raise MatprobeError("--layer lists a model's decode layer: give --model NAME")
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
    out.write(ruled_table(headers, rows, right={0, 1, 2, 4, 5}) + "\n")
    return 0


def register(sub: Any) -> None:
    """``matprobe shapes``: its options, on the command's subparsers."""
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
