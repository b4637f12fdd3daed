"""The SwiGLU form of gate/up (silu(x·W_gateᵀ) ⊙ x·W_upᵀ in one kernel) against the
eager PyTorch form (two matmul outputs, silu, mul), fp16 and Q8_0, every grid
point of triton.gemv_swiglu, with the harness's clock, in one process.

    PYTHONPATH=src python3 benchmarks/swiglu_gpu.py OUT.json
"""

from __future__ import annotations

import json
import sys

from matprobe.kernels.catalogue import shipped_registry
from matprobe.measure.device import detect
from matprobe.measure.pair import PairContext, measure_pair_safely
from matprobe.measure.timing import TimingPolicy
from matprobe.spec import MatmulSpec

KEY = "op=matmul_swiglu | batch=1 | m=1 | n=? | k=896 | tA=0 | tB=1 | n0=4864 | n1=4864"


def main() -> None:
    registry = shipped_registry()
    device = detect("cuda")
    ctx = PairContext(device, TimingPolicy())
    baseline = registry.family("torch.matmul").variants()[0]
    rows = []
    for dtype in ("f16", "q8_0"):
        spec = MatmulSpec.parse(KEY).with_dtype(dtype)
        for variant in [baseline, *registry.family("triton.gemv_swiglu").variants()]:
            if variant.unsupported_reason(spec, device):
                continue
            result = measure_pair_safely(spec, variant, ctx, baseline)
            clock, ratio = result.clocks.device, result.clocks.vs_baseline
            rows.append(
                {
                    "dtype": dtype,
                    "variant": variant.id,
                    "status": result.status.value,
                    "reason": result.reason,
                    "us": clock.median_us if clock else None,
                    "p10": clock.p10_us if clock else None,
                    "p90": clock.p90_us if clock else None,
                    "ratio": [ratio.median, ratio.lo, ratio.hi] if ratio else None,
                }
            )
            print(dtype, variant.id, result.status.value, rows[-1]["us"], rows[-1]["ratio"],
                  result.reason[:80], flush=True)  # fmt: skip
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        json.dump({"device": device.name, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
