"""Harness benchmarks on a GPU (issue 3): run time from an empty store and cached,
and repeatability of cuBLAS on the five Qwen2.5 fp16 GEMV shapes.

    PYTHONPATH=src python3 benchmarks/harness_gpu.py OUT_DIR
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from matprobe.kernels.peers.torch_ref import torch_matmul
from matprobe.measure.device import detect
from matprobe.measure.pair import PairContext, measure_pair
from matprobe.measure.timing import TimingPolicy
from matprobe.spec import MatmulSpec

SHAPES = {
    "gate_up": "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1 | dtype=f16",
    "down": "op=matmul | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1 | dtype=f16",
    "o_proj": "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16",
    "qkv": "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | dtype=f16",
    "lm_head": "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=1 | dtype=f16",
}


def timed_run(out: Path, name: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "matprobe",
            "run",
            "--db",
            str(out / "bench.sqlite"),
            "--out",
            str(out / name),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    (out / f"{name}.stderr").write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed: {proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    cold = timed_run(out, "fresh")
    warm = timed_run(out, "cached")
    device = detect("cuda")
    ctx = PairContext(device, TimingPolicy())
    variant = torch_matmul.variants()[0]
    rows = []
    for role, key in SHAPES.items():
        spec = MatmulSpec.parse(key)
        first, second = (measure_pair(spec, variant, ctx) for _ in range(2))
        a, b = (r.clocks.device for r in (first, second))
        assert a is not None and b is not None
        rows.append(
            {
                "shape": role,
                "first_us": a.median_us,
                "second_us": b.median_us,
                "diff_pct": 100 * abs(a.median_us - b.median_us) / a.median_us,
                "first_spread": a.spread,
                "second_spread": b.spread,
                "n": [a.n, b.n],
            }
        )
    summary = {
        "device": device.to_dict(),
        "fresh_run_s": cold,
        "cached_run_s": warm,
        "repeatability": rows,
    }
    (out / "harness_bench.json").write_text(json.dumps(summary, indent=2))
    print(f"{device.name}: fresh run {cold:.1f} s, cached run {warm:.1f} s")
    print(f"{'shape':8s} {'1st µs':>8s} {'2nd µs':>8s} {'diff':>6s}  spread1 spread2 n")
    for r in rows:
        print(
            f"{r['shape']:8s} {r['first_us']:8.2f} {r['second_us']:8.2f} "
            f"{r['diff_pct']:5.2f}%  {r['first_spread']:.3f}   {r['second_spread']:.3f}  "
            f"{r['n']}"
        )


if __name__ == "__main__":
    main()
