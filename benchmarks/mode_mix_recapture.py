"""Would capturing every mode's graph again, once all are built, take the
two-state effect out of ``matprobe token``? (issue 23, twenty-ninth session:
in a process that measured the read ceiling and then built four modes, the
eager graph captured first read 1938 µs and the same step captured again
2303, the lone-graph figure; layer+pdl, captured last, still read 441.)
The ceiling, then MODES built in order and timed (plain clock,
``mode_mix_probe.median_replay_us``), then every mode captured again in the
same order and timed, then (REVERSED=1) once more in reverse order and timed.
CEILING says what comes before the builds: ``measure`` (the read ceiling, as
``matprobe token`` does), ``alloc`` (only its 2 GiB allocated and given back,
nothing streamed) or ``none``. Each stage records the caching allocator's
segments. First run: thirtieth session, call 1 (every re-captured mode read the
lone-graph figure).
    PYTHONPATH=src [CEILING=measure] python benchmarks/mode_mix_recapture.py [MODES] OUT.json
"""

from __future__ import annotations

import json
import os
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


def before_builds(what: str) -> None:
    if what == "measure":
        measure_read_ceiling()
    elif what == "alloc":  # the ceiling's buffer without its reads: 2 GiB, given back
        buf = torch.empty(2**30, dtype=torch.float16, device="cuda")
        del buf
        torch.cuda.empty_cache()
    elif what != "none":
        raise SystemExit(f"CEILING={what}: measure, alloc or none")


def segments() -> dict[str, float]:
    """The caching allocator's segments now: how many, and their sizes (MiB)."""
    sizes = [seg["total_size"] / 2**20 for seg in torch.cuda.memory_snapshot()]
    return {"count": len(sizes), "mib": round(sum(sizes), 1), "largest_mib": max(sizes, default=0)}


def main() -> None:
    names = (sys.argv[1] if len(sys.argv) > 2 else DEFAULT_MODES).split(",")
    modes = [mode_named(name) for name in names]
    if any(mode is None for mode in modes):
        raise SystemExit(f"unknown mode among {names}")
    ordered = [mode for mode in modes if mode is not None]
    bench = TokenBench(get_model("qwen2.5-0.5b"), context=128, dtype="f16", device="cuda")
    ceiling = os.environ.get("CEILING", "measure")
    before_builds(ceiling)
    stages = [("built", ordered), ("again", ordered)]
    if os.environ.get("REVERSED"):
        stages.append(("reversed", ordered[::-1]))
    rows: dict[str, dict[str, float]] = {}
    held: dict[str, dict[str, float]] = {}
    for label, order in stages:
        calls = build_all(bench, order)
        rows[label] = {name: median_replay_us(call) for name, call in calls.items()}
        held[label] = segments()
        print(label, rows[label], held[label], flush=True)
    with open(sys.argv[-1], "w") as out:
        json.dump({"card": torch.cuda.get_device_name(), "modes": names, "ceiling": ceiling,
                   "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                   "rows": rows, "segments": held}, out, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
