"""Do narrower K tiles (no masks at k = 896, every load 16 bytes) speed up the
fp16 GEMV winners? gemv_nt over bk × bn × w on the decode weight shapes, each
against cuBLAS with the harness's clock, in one process.

    PYTHONPATH=src python3 benchmarks/gemv_tiles.py OUT.json
"""

from __future__ import annotations

import itertools
import json
import sys

from matprobe.kernels.catalogue import shipped_registry
from matprobe.measure.device import detect
from matprobe.measure.pair import PairContext, measure_pair_safely
from matprobe.measure.timing import TimingPolicy
from matprobe.spec import MatmulSpec

SHAPES = {
    "gate_up": "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1 | dtype=f16",
    "lm_head": "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=1 | dtype=f16",
    "down": "op=matmul | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1 | dtype=f16",
}
GRID = {"bk": (128, 256, 512, 1024), "bn": (1, 2, 4), "w": (2, 4, 8)}


def main() -> None:
    registry = shipped_registry()
    device = detect("cuda")
    ctx = PairContext(device, TimingPolicy())
    baseline = registry.family("torch.matmul").variants()[0]
    family = registry.family("triton.gemv_nt")
    rows = []
    for name, key in SHAPES.items():
        spec = MatmulSpec.parse(key)
        for bk, bn, w in itertools.product(*GRID.values()):
            (variant,) = family.variants({"bn": (bn,), "bk": (bk,), "w": (w,), "pdl": (0,)})
            if variant.unsupported_reason(spec, device):
                continue
            result = measure_pair_safely(spec, variant, ctx, baseline)
            ratio = result.clocks.vs_baseline
            clock = result.clocks.device
            rows.append(
                {
                    "shape": name,
                    "variant": variant.id,
                    "status": result.status.value,
                    "us": clock.median_us if clock else None,
                    "p10": clock.p10_us if clock else None,
                    "p90": clock.p90_us if clock else None,
                    "ratio": [ratio.median, ratio.lo, ratio.hi] if ratio else None,
                }
            )
            print(name, variant.id, result.status.value, rows[-1]["us"], rows[-1]["ratio"],
                  flush=True)  # fmt: skip
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        json.dump({"device": device.name, "rows": rows}, fh, indent=1)
    for name in SHAPES:
        timed = [r for r in rows if r["shape"] == name and r["ratio"]]
        best = min(timed, key=lambda r: r["ratio"][0])
        print("best", name, best["variant"], f"{best['us']:.2f} µs", best["ratio"])


if __name__ == "__main__":
    main()
