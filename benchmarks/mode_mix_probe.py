"""Why does a token mode's figure depend on how many modes share its process?
(issue 23, twenty-ninth session: eager 2297 / compile 1043 / layer+pdl 428 µs
with two or three modes, 1942 / 931 / 442 with four, on one H200, clocks the
same). Times the eager graph (and layer+pdl's) by plain CUDA events, 4 replays
back to back, median of 15, after each further graph is built in the same
process, then with the extra graphs dropped, then with 3 GiB more allocated:
which step moves eager's figure, if any.
    PYTHONPATH=src python benchmarks/mode_mix_probe.py OUT.json
"""

from __future__ import annotations

import gc
import json
import statistics
import sys

import torch

from matprobe.profile.models import get_model
from matprobe.token.bench import TokenBench
from matprobe.token.modes import mode_named
from matprobe.token.timing import TokenCall, _elapsed_us


def replay_us(call: TokenCall, times: int = 15, window: int = 4) -> list[float]:
    """µs a replay of ``call``: ``times`` windows of ``window`` replays back to back,
    each queued behind the token clock's 1 ms GPU sleep, between two CUDA events."""
    device = torch.device("cuda")

    def replays() -> None:
        for _ in range(window):
            call()

    return [_elapsed_us(replays, device) / window for _ in range(times)]


def median_replay_us(call: TokenCall) -> float:
    return round(statistics.median(replay_us(call)), 1)


def main() -> None:
    bench = TokenBench(get_model("qwen2.5-0.5b"), context=128, dtype="f16", device="cuda")
    built: dict[str, TokenCall] = {}
    steps: list[dict[str, object]] = []

    def measure(label: str) -> None:
        row: dict[str, object] = {
            "step": label,
            "graphs": len(built),
            "allocated_gib": torch.cuda.memory_allocated() / 2**30,
        }
        for name in ("eager", "layer+pdl"):
            if name in built:
                s = replay_us(built[name])
                row[name] = [statistics.median(s), min(s), max(s)]
        steps.append(row)
        print(row, flush=True)

    for name in ("eager", "layer+pdl", "compile-none", "eager-none", "compile", "fused"):
        mode = mode_named(name)
        assert mode is not None
        built[name] = bench.build(mode)
        measure(f"built {name}")
    for name in ("fused", "compile", "eager-none", "compile-none"):
        del built[name]
        gc.collect()
        measure(f"dropped {name}")
    torch.cuda.empty_cache()
    measure("empty_cache")
    ballast = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
    measure("3 GiB ballast")
    del ballast
    # the rounds of matprobe token replay other graphs between eager's windows
    other = bench.build(mode_named("eager-none"))  # type: ignore[arg-type]
    for between in (0, 1, 2, 3):
        s = []
        for _ in range(15):
            for _ in range(between):
                other()
            s.extend(replay_us(built["eager"], times=1))
        steps.append(
            {
                "step": f"eager after {between} eager-none replays",
                "eager": [statistics.median(s), min(s), max(s)],
            }
        )
        print(steps[-1], flush=True)
    with open(sys.argv[1], "w") as out:
        json.dump(
            {"card": torch.cuda.get_device_name(), "torch": torch.__version__, "steps": steps},
            out,
            indent=1,
        )


if __name__ == "__main__":
    main()
