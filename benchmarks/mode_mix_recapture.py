"""Would capturing every mode's graph again, once all are built, take the
two-state effect out of ``matprobe token``? (issue 23, twenty-ninth session:
in a process that measured the read ceiling and then built four modes, the
eager graph captured first read 1938 µs and the same step captured again
2303, the lone-graph figure; layer+pdl, captured last, still read 441.)
The ceiling, then MODES built in order and timed (plain clock,
``mode_mix_probe.median_replay_us``), then every mode captured again in the
same order and timed, then once more in reverse order and timed.
Not yet run on a card.
    PYTHONPATH=src python benchmarks/mode_mix_recapture.py [MODES] OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
from mode_mix_probe import median_replay_us  # a sibling: this folder is sys.path[0]

from matprobe.profile.models import get_model
from matprobe.token.bench import TokenBench
from matprobe.token.floor import measure_read_ceiling
from matprobe.token.modes import Mode, mode_named
from matprobe.token.timing import TokenCall

DEFAULT_MODES = "eager,eager-none,compile-none,layer+pdl"


def build_all(bench: TokenBench, modes: list[Mode]) -> dict[str, TokenCall]:
    return {mode.name: bench.build(mode) for mode in modes}


def main() -> None:
    names = (sys.argv[1] if len(sys.argv) > 2 else DEFAULT_MODES).split(",")
    modes = [mode_named(name) for name in names]
    if any(mode is None for mode in modes):
        raise SystemExit(f"unknown mode among {names}")
    ordered = [mode for mode in modes if mode is not None]
    bench = TokenBench(get_model("qwen2.5-0.5b"), context=128, dtype="f16", device="cuda")
    measure_read_ceiling()
    rows: dict[str, dict[str, float]] = {}
    for label, order in (("built", ordered), ("again", ordered), ("reversed", ordered[::-1])):
        calls = build_all(bench, order)
        rows[label] = {name: median_replay_us(call) for name, call in calls.items()}
        print(label, rows[label], flush=True)
    with open(sys.argv[-1], "w") as out:
        json.dump({"card": torch.cuda.get_device_name(), "modes": names, "rows": rows}, out,
                  indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
