"""``matprobe variants``: the kernel variants, their grids and (with ``--spec``)
whether each supports a spec."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from matprobe.cli.args import _add_plugin
from matprobe.spec import DTYPES, MatmulSpec


def cmd_variants(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.measure import device as device_mod
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


def register(sub: Any) -> None:
    """``matprobe variants``: its options, on the command's subparsers."""
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
