"""Does the untimed call before each of the token's timed calls move its figures?
(twenty-sixth session, issue 23).

On one H200 (call 1) the eager Qwen2.5-0.5B token read 2297 µs timed right after
the other modes and 1941 µs right after an untimed call of itself; on another
card, with the untimed call on an input of its own (the code since), 2299 µs.
This runs ``matprobe token`` with three protocols, alternated ``--repeats``
times in one call on one card, and prints each mode's median per run:

- ``none``: no untimed call (the code before the twenty-sixth session, where no
  table's modes run apart);
- ``posed``: the untimed call on the input the timed call is then given;
- ``own``: the untimed call on an input of its own (the code as it is).

Usage: ``PYTHONPATH=src python3 benchmarks/token_warm.py [--modes M] [--rounds N]
[--repeats N] [--device cpu --small] [OUT_DIR]`` (the JSON of every run in OUT_DIR).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: Each protocol as a patch applied before the command runs (none for ``own``).
PATCHES = {
    "none": ("import matprobe.token.bench as b\nb.aside = lambda apart, timer, warm: timer\n"),
    "posed": (
        "from matprobe.token.judge import ReplayJudge\n"
        "ReplayJudge.elsewhere = lambda self, call: call()\n"
    ),
    "own": "",
}


def run(protocol: str, args: argparse.Namespace, out: Path) -> dict[str, float]:
    path = out / f"{protocol}.json"
    command = [
        "token", *(["--small"] if args.small else ["--model", args.model]),
        "--modes", args.modes, "--rounds", str(args.rounds), "--json", str(path),
        "--device", args.device,
    ]  # fmt: skip
    code = f"{PATCHES[protocol]}from matprobe.cli import main\nraise SystemExit(main({command!r}))"
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    data = json.loads(path.read_text(encoding="utf-8"))
    return {m["name"]: m["median_us"] for m in data["modes"] if m.get("median_us")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--modes", default="eager,compile,compile-none,layer+pdl")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="the small test model")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="token-warm-"))
    out.mkdir(parents=True, exist_ok=True)
    medians: dict[str, dict[str, list[float]]] = {p: {} for p in PATCHES}
    for repeat in range(args.repeats):
        for protocol in PATCHES:
            where = out / f"run{repeat}"
            where.mkdir(exist_ok=True)
            figures = run(protocol, args, where)
            for mode, us in figures.items():
                medians[protocol].setdefault(mode, []).append(us)
            shown = "; ".join(f"{m} {us:.1f}" for m, us in figures.items())
            print(f"run {repeat} {protocol:>5}: {shown}", flush=True)
    for protocol, modes in medians.items():
        shown = "; ".join(f"{m} {statistics.median(v):.1f}" for m, v in modes.items())
        print(f"{protocol:>5} (median of runs): {shown}")


if __name__ == "__main__":
    main()
