"""Sweep a variant family's grid on the Qwen2.5 decode shapes, beside cuBLAS.

Every point goes through the harness (validation against float64, then the
device clock: graph replay over cold inputs), so a fast wrong kernel shows as
FAIL, never as a time.

    PYTHONPATH=src python3 benchmarks/sweep.py FAMILY_MODULE:ATTR 'GRID_JSON' [SHAPE …] > out.txt

e.g. ``matprobe.kernels.triton.gemv:GEMV_NT '{"bn": [4, 8, 16], "bk": [512, 1024], "w": [4, 8]}'
gate_up down``. Shapes: gate_up, down, o_proj, qkv, lm_head, qk16 … (see SHAPES).
"""

from __future__ import annotations

import importlib
import json
import sys
import time

from matprobe.kernels.peers.torch_ref import torch_matmul
from matprobe.measure.device import detect
from matprobe.measure.pair import PairContext, measure_pair_safely
from matprobe.measure.results import Status
from matprobe.measure.timing import TimingPolicy
from matprobe.spec import MatmulSpec


def _attention(kind: str, length: int) -> str:
    if kind == "qk":
        return (
            f"op=matmul_alpha_beta | batch=14 | m=1 | n={length} | k=64 | tA=0 | tB=1 | "
            "alpha=0.1250 | beta=0.0000 | dtype=f16 | strided_batch=true"
        )
    return (
        f"op=matmul_alpha_beta | batch=14 | m=1 | n=64 | k={length} | tA=0 | tB=0 | "
        "alpha=1.0000 | beta=0.0000 | dtype=f16 | strided_batch=true"
    )


SHAPES = {
    "gate_up": "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1 | dtype=f16",
    "down": "op=matmul | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1 | dtype=f16",
    "o_proj": "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16",
    "qkv": "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | dtype=f16",
    "lm_head": "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=1 | dtype=f16",
    **{f"qk{n}": _attention("qk", n) for n in (16, 64, 130, 1024)},
    **{f"pv{n}": _attention("pv", n) for n in (16, 64, 130, 1024)},
}


def main() -> None:
    target, grid_text, *names = sys.argv[1:]
    module_name, attr = target.split(":")
    family = getattr(importlib.import_module(module_name), attr)
    if isinstance(family, tuple):  # a module's FAMILIES: its first family
        family = family[0]
    grid = json.loads(grid_text) or None  # {}: the family's default grid
    names = names or ["gate_up", "down", "o_proj", "qkv", "lm_head"]
    device = detect("cuda")
    ctx = PairContext(device, TimingPolicy(budget_s=0.1))
    print(
        f"# {device.name} {device.versions} family {family.name} grid {grid or dict(family.grid)}"
    )
    for name in names:
        spec = MatmulSpec.parse(SHAPES[name])
        base = measure_pair_safely(spec, torch_matmul.variants()[0], ctx)
        base_us = base.clocks.device.median_us if base.clocks.device else float("nan")
        rows = []
        started = time.perf_counter()
        for variant in family.variants(grid):
            reason = variant.unsupported_reason(spec, device)
            if reason:
                continue
            result = measure_pair_safely(spec, variant, ctx)
            clock = result.clocks.device
            if result.status is Status.PASS and clock:
                rows.append((clock.median_us, variant.tag, f"{clock.spread:.3f}", ""))
            else:
                rows.append((float("inf"), variant.tag, "-", result.reason[:90]))
        rows.sort()
        bytes_ = spec.min_bytes()
        print(
            f"\n## {name}: cuBLAS {base_us:.2f} µs ({bytes_ / base_us / 1e3:.0f} GB/s); "
            f"{len(rows)} variants in {time.perf_counter() - started:.0f} s"
        )
        for us, tag, spread, note in rows[:12]:
            ratio = us / base_us
            gbps = bytes_ / us / 1e3
            print(
                f"  {tag:32s} {us:8.2f} µs  {ratio:5.2f}×  {gbps:6.0f} GB/s  spread {spread} {note}"
            )
        failed = [r for r in rows if r[0] == float("inf")]
        if failed:
            print(f"  ({len(failed)} not timed: {failed[0][3]})")


if __name__ == "__main__":
    main()
