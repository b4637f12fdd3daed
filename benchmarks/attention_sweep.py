"""Which tiling of ``triton.decode_attention`` reads a long cache fastest, on a GPU?

Issue 23's context-4096 target (≤ 1.15× the context-128 token) is missed because
the attention takes ~12.6 µs a layer at 4096 (2 MB of Qwen2.5-0.5B cache) against
~4.5 at 128. This sweeps the kernel's knobs — positions a tile (``BLOCK_L``),
positions a program (``chunk``), chunks the merging program reads at once
(``MERGE``) and warps — for each model and context, every variant checked against
float64 first. Each variant is a stack of ``REPEAT`` × the model's layers, each
layer with caches of its own (3 × 24 × 2 MB at 4096: past the 50 MB L2, so
the cache is read cold as in a token), captured as one CUDA graph; 7 rounds of
10 replays, the variants interleaved and rotated each round; median [min–max]
µs a layer.

    PYTHONPATH=src OUT=dir python3 benchmarks/attention_sweep.py
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from decode_attention_probe import caches, exact, interleaved_us

from matprobe.kernels.triton import _decode_attention as da
from matprobe.measure.peaks import _graph_of

#: The tiles and merge widths swept (``BLOCKS=32,64,128 MERGES=8,16`` by default).
BLOCKS = tuple(int(b) for b in os.environ.get("BLOCKS", "32,64,128").split(","))
MERGES = tuple(int(m) for m in os.environ.get("MERGES", "8,16").split(","))
#: What is swept, model:context:full (full: every MERGE and warp count).
PLAN = os.environ.get(
    "PLAN",
    "qwen2.5-0.5b:4096:1 qwen2.5-0.5b:1024:0 qwen2.5-0.5b:128:0 llama-3.2-1b:4096:0 "
    "llama-3.2-1b:128:0",
)

MODELS = {"qwen2.5-0.5b": (14, 2, 24), "llama-3.2-1b": (32, 8, 16)}
D = 64
REPEAT = 3


def variants(context: int, full: bool) -> list[tuple[int, int, int, int]]:
    """(BLOCK_L, chunk, MERGE, warps) worth trying at ``context`` (``full``: every
    MERGE and warp count, else 8 and 4 only)."""
    out = []
    for block_l, chunk, merge, warps in itertools.product(
        BLOCKS, (64, 128, 256, 512, 1024), MERGES, (4, 8)
    ):
        if chunk < block_l or chunk > context or (context // chunk) > 64:
            continue
        if (not full or context <= 128) and (merge, warps) != (MERGES[0], 4):
            continue
        out.append((block_l, chunk, merge, warps))
    return out


def measure(model: str, context: int, full: bool) -> dict[str, object]:
    heads, kvh, layers = MODELS[model]
    layers *= REPEAT
    qkvs, kcs, vcs, cos, sin, pos, scale = caches(heads, kvh, layers, context, torch.float16)
    want = exact(qkvs[0], kcs[0], vcs[0], cos, sin, heads, pos, scale)
    peak = float(want.abs().max())
    # the launcher's own choice first (its merge width follows the chunk count)
    own = (da.BLOCK_L, da.MERGE, da.MERGE_WIDE)
    default = (da.BLOCK_L, da.default_chunk(context, kvh), 0, 4)
    graphs, errors = {}, {}
    for block_l, chunk, merge, warps in [default, *variants(context, full)]:
        name = f"L{block_l} c{chunk} m{merge or 'auto'} w{warps}"
        if name in graphs:
            continue
        da.BLOCK_L, da.MERGE, da.MERGE_WIDE = (block_l, merge, merge) if merge else own

        def stack(chunk: int = chunk, warps: int = warps) -> list[torch.Tensor]:
            return [
                da.decode_attention(
                    q, k, v, cos, sin, heads=heads, pos=pos, scale=scale, chunk=chunk, warps=warps
                )
                for q, k, v in zip(qkvs, kcs, vcs, strict=True)
            ]

        try:
            got = da.decode_attention(qkvs[0], kcs[0].clone(), vcs[0].clone(), cos, sin,
                                      heads=heads, pos=pos, scale=scale, chunk=chunk,
                                      warps=warps)  # fmt: skip
            errors[name] = float((got.double() - want).abs().max()) / peak
            graphs[name] = _graph_of(stack)
        except Exception as exc:  # a tiling the compiler refuses: said, not timed
            print(f"  {name}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
    da.BLOCK_L, da.MERGE, da.MERGE_WIDE = own
    times = interleaved_us(graphs, layers, replays=10)
    rows = sorted(
        ({"variant": n, "median": statistics.median(t), "min": min(t), "max": max(t),
          "max_rel_err": errors[n]} for n, t in times.items()),
        key=lambda row: float(row["median"]),  # type: ignore[arg-type]
    )  # fmt: skip
    default_name = f"L{default[0]} c{default[1]} mauto w4"
    print(f"{model} ctx {context}: default {default_name} "
          f"{statistics.median(times[default_name]):.2f} µs/layer", flush=True)  # fmt: skip
    for row in rows[:8]:
        print(f"  {row['variant']:>22} {row['median']:.2f} [{row['min']:.2f}–{row['max']:.2f}] "
              f"err {row['max_rel_err']:.1e}", flush=True)  # fmt: skip
    return {"model": model, "context": context, "default": default_name, "rows": rows}


def main() -> None:
    cases = [case.split(":") for case in PLAN.split()]
    out = [measure(model, int(context), full == "1") for model, context, full in cases]
    with open(os.path.join(os.environ.get("OUT", "."), "attention_sweep.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "results": out}, f, indent=1)


if __name__ == "__main__":
    main()
