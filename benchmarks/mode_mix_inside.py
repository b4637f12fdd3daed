"""The mode-mix effect from inside ``matprobe token``'s process (issue 23,
twenty-ninth session). Runs ``TokenBench.run`` with the modes given, then times
every graph it built with plain CUDA events (4 replays back to back behind a
1 ms lead, static input, median of 15), in the same process: if the plain
clock reads what the token's rounds read, the process's state moved the
figure; if it reads the figure of a lone graph, the rounds did.
    PYTHONPATH=src python benchmarks/mode_mix_inside.py eager,layer+pdl OUT.json [ceiling]
(``ceiling``: the read ceiling measured between the bench and its run, as the CLI does.)
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
from mode_mix_probe import median_replay_us  # a sibling: this folder is sys.path[0]

from matprobe.profile.models import get_model
from matprobe.token.bench import TokenBench
from matprobe.token.modes import Mode, pdl_problem, select_modes, triton_problem
from matprobe.token.timing import TokenCall


def main() -> None:
    names = sys.argv[1].split(",")
    bench = TokenBench(get_model("qwen2.5-0.5b"), context=128, dtype="f16", device="cuda")
    built: dict[str, TokenCall] = {}
    build = bench.build

    def recording(mode: Mode) -> TokenCall:
        built[mode.name] = build(mode)
        return built[mode.name]

    bench.build = recording  # type: ignore[method-assign]
    selection = select_modes(
        names, device_kind="cuda", have_table=False,
        triton_problem=triton_problem("cuda"), pdl_problem=pdl_problem("cuda"),
    )  # fmt: skip
    if len(sys.argv) > 3 and sys.argv[3] == "ceiling":  # as `matprobe token` did until
        from matprobe.token.floor import measure_read_ceiling  # the thirtieth session

        measure_read_ceiling()
    token = bench.run(selection, rounds=20)
    rounds = {r.mode.name: round(statistics.median(r.samples_us), 1) for r in token.modes
              if r.samples_us}  # fmt: skip
    after = {name: median_replay_us(call) for name, call in built.items()}
    row = {"modes": names, "token_rounds": rounds, "plain_after": after,
           "card": torch.cuda.get_device_name()}  # fmt: skip
    print(row, flush=True)
    with open(sys.argv[2], "w") as out:
        json.dump(row, out, indent=1)


if __name__ == "__main__":
    main()
