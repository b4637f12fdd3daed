"""Where a layer-mode token's time goes, site by site, from a timeline written by
``benchmarks/token_timeline.py``: kernels in launch order are norm+qkv,
attention, o_proj+res, norm+SwiGLU, down+res per layer, then norm+lm_head. With
kernels launched early their spans overlap, so each kernel is charged the time
from the previous kernel's end to its own end (its share of the replay's
critical path); the sum of the charges is the replay's span.

    python3 benchmarks/timeline_sites.py TIMELINE.json [BYTES_PER_LAYER_SITE...]
"""

from __future__ import annotations

import json
import statistics
import sys

SITES = ("norm+qkv", "attention", "o_proj+res", "norm+swiglu", "down+res")


def main() -> None:
    with open(sys.argv[1]) as f:
        data = json.load(f)
    kernels = data["kernels"]
    charged: dict[str, list[float]] = {site: [] for site in (*SITES, "norm+lm_head")}
    previous_end = kernels[0]["start_us"]
    for i, kernel in enumerate(kernels):
        end = kernel["start_us"] + kernel["us"]
        site = "norm+lm_head" if i == len(kernels) - 1 else SITES[i % len(SITES)]
        charged[site].append(end - previous_end)
        previous_end = max(previous_end, end)
    span = data["span_us"]
    print(f"{sys.argv[1]}: {data['mode']}, span {span:.1f} µs")
    for site, times in charged.items():
        total = sum(times)
        print(f"  {site:13s} {total:7.1f} µs ({total / span:5.1%})  {len(times):3d} × median "
              f"{statistics.median(times):6.2f} [{min(times):.2f}–{max(times):.2f}]")  # fmt: skip


if __name__ == "__main__":
    main()
