"""Is the twenty-ninth session's two-state effect matprobe's or the driver's?
(issue 23) In one process: the read ceiling measured, then the token's modes
built — four (``fast``: the state where eager read 1940 µs) or two (``slow``:
2297) — and then, in that state, timed with plain CUDA events (4 replays back
to back behind a 1 ms lead, median of 15): the eager graph built before, the
same step captured again now, and a plain torch graph of 1000 tiny kernels
(an fp16 [896] vector scaled and shifted) captured now: whether a graph made
after the state is reached carries it, and whether plain torch kernels do.
    PYTHONPATH=src python benchmarks/mode_mix_micro.py fast|slow OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
from mode_mix_probe import median_replay_us  # a sibling: this folder is sys.path[0]

from matprobe.profile.models import get_model
from matprobe.token.bench import TokenBench
from matprobe.token.floor import measure_read_ceiling
from matprobe.token.modes import mode_named
from matprobe.token.timing import GraphToken, TokenCall

MODES = {
    "fast": ("eager", "eager-none", "compile-none", "layer+pdl"),
    "slow": ("eager", "layer+pdl"),
}


def tiny_kernels(count: int = 1000) -> TokenCall:
    x = torch.ones(896, dtype=torch.float16, device="cuda")

    def step() -> torch.Tensor:
        y = x
        for _ in range(count):
            y = y * 0.999 + 0.001
        return y

    return GraphToken(step)


def main() -> None:
    state = sys.argv[1]
    bench = TokenBench(get_model("qwen2.5-0.5b"), context=128, dtype="f16", device="cuda")
    measure_read_ceiling()
    built = {}
    for name in MODES[state]:
        mode = mode_named(name)
        assert mode is not None
        built[name] = bench.build(mode)
    eager = mode_named("eager")
    assert eager is not None
    row = {
        "state": state,
        "modes": MODES[state],
        "card": torch.cuda.get_device_name(),
        "eager built before": median_replay_us(built["eager"]),
        "layer+pdl built before": median_replay_us(built["layer+pdl"]),
        "tiny kernels x1000, captured now": median_replay_us(tiny_kernels()),
        "eager captured again now": median_replay_us(bench.build(eager)),
    }
    print(row, flush=True)
    with open(sys.argv[2], "w") as out:
        json.dump(row, out, indent=1)


if __name__ == "__main__":
    main()
