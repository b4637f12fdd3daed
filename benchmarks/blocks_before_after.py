"""Did the shared Triton building blocks (issue 9) slow any kernel? One process
measures a fixed list of (spec, family, parameters) pairs against the cuBLAS
baseline with the harness's own interleaved device clock, and writes the
ratios; run it once with the old package and once with the new, alternating.

    PYTHONPATH=OLD/src python3 benchmarks/blocks_before_after.py --label before --out A.json
    PYTHONPATH=src     python3 benchmarks/blocks_before_after.py --label after  --out B.json
    python3 benchmarks/blocks_before_after.py --compare A.json B.json [C.json D.json …]

Ratios to the baseline measured in the same process are what is compared:
they cancel the card's drift between processes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

QKV = "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | dtype=f16"
O_PROJ = "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16"
GATE_UP = "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1 | dtype=f16"
DOWN = "op=matmul | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1 | dtype=f16"
LM_HEAD = "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=1 | dtype=f16"
SCORES = (
    "op=matmul_alpha_beta | batch=14 | m=1 | n=1024 | k=64 | tA=0 | tB=1 | alpha=0.125 "
    "| beta=0 | strided_batch=1 | dtype=f16"
)
VALUES = (
    "op=matmul_alpha_beta | batch=14 | m=1 | n=64 | k=1024 | tA=0 | tB=0 | alpha=1 "
    "| beta=0 | strided_batch=1 | dtype=f16"
)
PREFILL = "op=matmul | batch=1 | m=128 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16"

PAIRS: list[tuple[str, str, dict[str, Any]]] = [
    (GATE_UP, "triton.gemv_nt", {"bn": 2, "bk": 1024, "w": 4, "pdl": 0}),
    (DOWN, "triton.gemv_nt", {"bn": 1, "bk": 1024, "w": 8, "pdl": 0}),
    (LM_HEAD, "triton.gemv_nt", {"bn": 2, "bk": 1024, "w": 4, "pdl": 0}),
    (O_PROJ, "triton.gemv_nt", {"bn": 1, "bk": 1024, "w": 4, "pdl": 1}),
    (O_PROJ, "triton.gemv_stream", {"bn": 2, "p": 4, "w": 8, "pdl": 0, "pf": 0}),
    (GATE_UP, "triton.gemv_stream", {"bn": 8, "p": 2, "w": 8, "pdl": 1, "pf": 1}),
    (QKV, "triton.attn_bmv", {"bn": 16, "bk": 1024, "w": 4, "pdl": 0}),
    (SCORES, "triton.attn_bmv", {"bn": 16, "bk": 64, "w": 4, "pdl": 0}),
    (VALUES, "triton.attn_bmv", {"bn": 16, "bk": 64, "w": 4, "pdl": 0}),
    (VALUES, "triton.attn_bmv", {"bn": 16, "bk": 1024, "w": 4, "pdl": 0}),
    (QKV, "triton.gemv_tn", {"bn": 32, "bk": 64, "split": 0, "w": 4, "fin": "last"}),
    (QKV, "triton.gemv_tn", {"bn": 32, "bk": 64, "split": 0, "w": 4, "fin": "kernel"}),
    (QKV, "triton.gemv_tn", {"bn": 128, "bk": 64, "split": 1, "w": 4, "fin": "last"}),
    (VALUES, "triton.gemv_tn", {"bn": 32, "bk": 64, "split": 0, "w": 4, "fin": "last"}),
    (DOWN, "triton.gemv_splitk", {"mode": "atomic_last", "split": 0, "bn": 16, "bk": 256, "w": 8}),
    (DOWN, "triton.gemv_splitk", {"mode": "atomic", "split": 0, "bn": 32, "bk": 256, "w": 8}),
    (DOWN, "triton.gemv_splitk", {"mode": "twopass", "split": 0, "bn": 16, "bk": 256, "w": 8}),
    (PREFILL, "triton.gemm", {"bm": 64, "bn": 64, "bk": 64, "w": 4, "s": 3}),
    # pdl=1 on the down projection (two came out 8–9 % slower against another
    # session's run): measured again, before and after, in one call (--only pdl1).
    (DOWN, "triton.gemv_nt", {"bn": 1, "bk": 8192, "w": 8, "pdl": 1}),
    (DOWN, "triton.gemv_stream", {"bn": 2, "p": 4, "w": 8, "pdl": 1, "pf": 0}),
]


def measure(label: str, out: str, only: str | None = None) -> None:
    from matprobe.kernels.catalogue import shipped_registry
    from matprobe.measure.device import detect
    from matprobe.measure.pair import PairContext, measure_pair_safely
    from matprobe.measure.timing import TimingPolicy
    from matprobe.spec import MatmulSpec

    registry = shipped_registry()
    device = detect("cuda")
    ctx = PairContext(device, TimingPolicy())
    baseline = registry.family("torch.matmul").variants()[0]
    rows = []
    for key, family_name, params in PAIRS:
        family = registry.family(family_name)
        (variant,) = family.variants({name: (value,) for name, value in params.items()})
        if only and not re.search(only, variant.id):
            continue
        spec = MatmulSpec.parse(key)
        result = measure_pair_safely(spec, variant, ctx, baseline)
        ratio = result.clocks.vs_baseline
        device_clock = result.clocks.device
        rows.append(
            {
                "spec": key,
                "variant": variant.id,
                "status": result.status.value,
                "reason": result.reason,
                "us": device_clock.median_us if device_clock else None,
                "ratio": [ratio.median, ratio.lo, ratio.hi] if ratio else None,
            }
        )
        print(label, variant.id, result.status.value, rows[-1]["us"], rows[-1]["ratio"],
              flush=True)  # fmt: skip
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"label": label, "device": device.name, "rows": rows}, fh, indent=1)


def compare(paths: list[str]) -> None:
    runs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    labels = sorted({run["label"] for run in runs})
    ratios: dict[tuple[str, str, str], list[float]] = {}
    order: list[tuple[str, str]] = []
    for run in runs:
        for row in run["rows"]:
            pair = (row["spec"], row["variant"])
            if pair not in order:
                order.append(pair)
            if row["ratio"]:
                ratios.setdefault((run["label"], *pair), []).append(row["ratio"][0])
    print(f"{'spec':22s} {'variant':58s} " + " ".join(f"{lb:>22s}" for lb in labels) + "   Δ")
    for key, variant in order:
        cells, means = [], []
        for lb in labels:
            meds = ratios.get((lb, key, variant), [])
            means.append(sum(meds) / len(meds) if meds else None)
            cells.append(f"{' '.join(f'{m:.3f}' for m in meds) or 'n/a':>22s}")
        first, second = [*means, None, None][:2]
        delta = f"{first / second - 1:+.1%}" if first and second else ""
        parts = [p.strip() for p in key.split("|")]
        short = f"{parts[0][3:]} {parts[3]} {parts[4]}"
        print(f"{short[:22]:22s} {variant[:58]:58s} " + " ".join(cells) + f"   {delta}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--label")
    parser.add_argument("--out")
    parser.add_argument("--compare", nargs="+")
    parser.add_argument("--only", help="a regular expression: measure only the variants it finds")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare)
    elif args.label and args.out:
        measure(args.label, args.out, args.only)
    else:
        sys.exit("give --label and --out, or --compare FILES")
