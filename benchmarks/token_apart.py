"""What running a table's modes apart costs the token's figures (issue 20).

Two dispatch tables with the same entries — the baseline (``torch.matmul``) on
every weight site, which needs no store — one naming no plugin (its modes run in
the token's own process, as before) and one naming a plugin (an honest family
no entry uses: the table's modes then run in a process of their own,
``matprobe.dispatch.apart``). The same kernels run in both; what differs is the
process and the clock (CUDA events or the host clock around the call here, the
wall clock around a message there). Runs ``matprobe token --table`` with each,
alternated, ``--repeats`` times, and prints each mode's median µs per token
(and, on a card, after a sync) per run, with the quotient apart ÷ in process.

Usage: ``PYTHONPATH=src python3 benchmarks/token_apart.py [--device cuda]
[--small] [--rounds N] [--repeats N] [OUT_DIR]`` (the JSON of every run there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

PLUGIN = """
from matprobe.measure.variants import variant_family


@variant_family(name="apart_bench.unused", ops=("matmul",), devices=("cpu", "cuda"))
def unused(spec, params, device):
    def run(inputs, out):
        raise AssertionError("no entry names this family")

    return run


FAMILIES = (unused,)
"""

MODES = "eager,eager-none,eager+table,compile,compile-none,compile+table"


def tables(where: Path, device: str, small: bool, model: str) -> dict[str, Path]:
    from matprobe.dispatch import DispatchTable, Entry
    from matprobe.measure.device import detect
    from matprobe.profile.models import get_model
    from matprobe.token.step import WEIGHT_SITES, site_specs
    from matprobe.token.weights import small_config

    config = small_config() if small else get_model(model)
    specs = site_specs(config, context=128, dtype="f16")
    here = detect(device)
    entries = tuple(
        Entry(specs[site].key(), "torch.matmul", {}, "torch.matmul/default", 1.0, 1.0, 1.0)
        for site in WEIGHT_SITES
    )
    (where / "apart_bench_plugin.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    made = {}
    for name, plugins in (("in-process", ()), ("apart", ("apart_bench_plugin",))):
        table = DispatchTable(
            device={"name": here.name, "kind": here.kind, "capability": here.capability},
            versions=dict(here.versions), dtype="f16", policy="p", families={},
            entries=entries, plugins=plugins,
        )  # fmt: skip
        made[name] = where / f"{name}.json"
        table.write(made[name])
    return made


def token(table: Path, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    size = ["--small"] if args.small else ["--model", args.model]
    modes = args.modes or (MODES if args.device == "cuda" else "eager,eager-none,eager+table")
    command = [
        sys.executable, "-m", "matprobe", "token", *size, "--device", args.device,
        "--modes", modes, "--rounds", str(args.rounds), "--table", str(table), "--json", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(table.parent), *sys.path])}
    subprocess.run(command, check=True, cwd=table.parent, env=env, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--modes")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out = (args.out or Path(tempfile.mkdtemp(prefix="token-apart-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    made = tables(out, args.device, args.small, args.model)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in made}
    for repeat in range(args.repeats):
        for name, table in made.items():
            data = token(table, args, out / f"{name}-{repeat}.json")
            runs[name].append(data)
            figures = {
                m["name"]: (m["median_us"], m["latency_us"], m["status"]) for m in data["modes"]
            }
            print(f"{name:>10} run {repeat}: " + "; ".join(
                f"{mode} {us:.1f}" + (f" (sync {lat:.1f})" if lat else "") + f" {status}"
                for mode, (us, lat, status) in figures.items() if us is not None
            ), flush=True)  # fmt: skip
    for mode in ("eager", "eager+table", "compile", "compile+table"):
        medians = {
            name: [m["median_us"] for r in rs for m in r["modes"] if m["name"] == mode]
            for name, rs in runs.items()
        }
        if all(medians.values()) and all(None not in v for v in medians.values()):
            here, apart = (statistics.median(medians[n]) for n in ("in-process", "apart"))
            print(f"{mode}: in process {here:.1f} µs, apart {apart:.1f} µs: {apart / here:.3f}×")


if __name__ == "__main__":
    main()
