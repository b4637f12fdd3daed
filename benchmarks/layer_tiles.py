"""The `layer+pdl` token under other GEMV tiles (issue 23): is the token's own tile
choice (`token.fused.default_tile`) what the per-site harness runs crowned?

One process, one card: a TokenBench per dtype, then for each tile policy the
`layer+pdl` mode validated and timed against eager (`TokenBench.run`, every
timed replay judged), the default policy first and last (drift). Writes
`$OUT/layer_tiles-<dtype>.json` and prints one line a policy.

    OUT=/tmp/x DTYPES="f16 q8_0" ROUNDS=10 PYTHONPATH=src python3 benchmarks/layer_tiles.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys

from matprobe.kernels.triton.decode import DecodeTile
from matprobe.profile.models import get_model
from matprobe.token.bench import TokenBench
from matprobe.token.fused import DecodeKernels
from matprobe.token.modes import select_modes

SITES = ("qkv", "o_proj", "gate_up", "down", "lm_head")

#: Per-site winners of `matprobe run --model qwen2.5-0.5b --layer` on an H100
#: (fourteenth session, BENCHMARKS.md "The decode layer's sites as specs"):
#: triton.gemv_decode's best point of each site (down: the best gemv_decode
#: point was not printed; gemv_nt's bn1_bk1024_w8 won the site).
WINNERS_F16 = {
    "qkv": DecodeTile(4, 512, 4),
    "o_proj": DecodeTile(2, 1024, 4),
    "gate_up": DecodeTile(1, 512, 4),
    "down": DecodeTile(1, 1024, 8),
    "lm_head": DecodeTile(4, 512, 4),
}


def policies(dtype: str) -> dict[str, dict[str, DecodeTile]]:
    if os.environ.get("ISOLATE"):  # which of the winners' sites make the difference
        return isolating(dtype)
    if os.environ.get("SWEEP") == "warps":  # fewer warps: wider loads a thread
        return warps_and_rows(dtype)
    if os.environ.get("SWEEP") == "lm_head":  # around the warps sweep's winners
        return around_the_lm_head(dtype)
    if os.environ.get("SWEEP") == "h100":  # the card's own tiles against an H100's
        h100 = {"lm_head": DecodeTile(0, 0, 4)}
        if dtype == "q8_0":
            h100["down"] = DecodeTile(0, 0, 8)
        return {"default": {}, "h100-tiles": h100, "default-again": {}, "h100-again": h100}
    if dtype == "q8_0":
        return {
            "default": {},
            "bk512": {s: DecodeTile(0, 512, 4) for s in SITES},  # bn 0: keep the default's
            "down-w8": {"down": DecodeTile(0, 0, 8)},
            "wide-bn2": {"gate_up": DecodeTile(2, 0, 0), "lm_head": DecodeTile(2, 0, 0)},
            "small-bn4": {"qkv": DecodeTile(4, 0, 0), "o_proj": DecodeTile(4, 0, 0)},
            "default-again": {},
        }
    return {
        "default": {},
        "winners": dict(WINNERS_F16),
        "winners-but-down": {s: t for s, t in WINNERS_F16.items() if s != "down"},
        "gate_up-bn1-bk512": {"gate_up": DecodeTile(1, 512, 4)},
        "small-bn4-bk512": {"qkv": DecodeTile(4, 512, 4), "o_proj": DecodeTile(4, 512, 4)},
        "down-w8": {"down": DecodeTile(1, 1024, 8)},
        "default-again": {},
    }


def candidate_rule(n: int, k: int, *, quantized: bool) -> DecodeTile:
    """A shape rule that gives Qwen2.5-0.5B's in-token winners (`winners` above):
    long rows (down) w8; the LM head's width 4 rows of bk 512; other wide rows one
    row of bk 512; below WIDE Qwen's qkv (bn4 bk512) and o_proj (bn2 bk1024)."""
    if k >= 4096:
        return DecodeTile(1, 1024, 8)
    if n >= 65536:
        return DecodeTile(4, 512, 4)
    if n >= 2048:
        return DecodeTile(1, 512, 4)
    return DecodeTile(4, 512, 4) if n > 1024 else DecodeTile(2, 1024, 4)


def ruled(bench: TokenBench) -> dict[str, DecodeTile]:
    kernels = DecodeKernels(bench.weights, bench.specs, pdl=True)
    quantized = bench.dtype == "q8_0"
    return {
        site: candidate_rule(kernels._outputs(site), bench.specs[site].k or 0, quantized=quantized)
        for site in SITES
    }


def isolating(dtype: str) -> dict[str, dict[str, DecodeTile]]:
    if dtype == "q8_0":
        down_w8 = {"down": DecodeTile(0, 0, 8)}
        return {
            "default": {},
            "down-w8": down_w8,
            "down-w8+small-bn4": {
                **down_w8,
                "qkv": DecodeTile(4, 0, 0),
                "o_proj": DecodeTile(4, 0, 0),
            },
            "down-w8-again": down_w8,
            "default-again": {},
        }
    winners = dict(WINNERS_F16)
    return {
        "default": {},
        "winners": winners,
        "winners-but-lm_head": {s: t for s, t in winners.items() if s != "lm_head"},
        "lm_head-only": {"lm_head": winners["lm_head"]},
        "down-w8+lm_head": {"down": winners["down"], "lm_head": winners["lm_head"]},
        "winners-again": winners,
        "default-again": {},
    }


def warps_and_rows(dtype: str) -> dict[str, dict[str, DecodeTile]]:
    """Two warps (a thread's loads twice as wide as with four) and other row counts,
    site by site (twenty-first session)."""
    w2 = DecodeTile(0, 0, 2)
    chosen = {
        "default": {},
        "all-w2": {s: w2 for s in SITES},
        "gate_up-w2": {"gate_up": w2},
        "lm_head-w2": {"lm_head": w2},
        "qkv+o_proj-w2": {"qkv": w2, "o_proj": w2},
        "down-w4": {"down": DecodeTile(0, 0, 4)},
    }
    if dtype == "q8_0":
        chosen |= {
            "gate_up-bn2": {"gate_up": DecodeTile(2, 0, 0)},
            "gate_up-bn8": {"gate_up": DecodeTile(8, 0, 0)},
            "qkv+o_proj-bn2": {"qkv": DecodeTile(2, 0, 0), "o_proj": DecodeTile(2, 0, 0)},
        }
    return chosen | {"default-again": {}}


def around_the_lm_head(dtype: str) -> dict[str, dict[str, DecodeTile]]:
    """The LM head's tiles with two warps, and (Q8_0) the warps sweep's other
    winners together (twenty-first session)."""
    w2 = DecodeTile(0, 0, 2)
    chosen: dict[str, dict[str, DecodeTile]] = {
        "default": {},
        "lm_head-w2": {"lm_head": w2},
        "lm_head-bn8-w2": {"lm_head": DecodeTile(8, 0, 2)},
        "lm_head-bn2-w2": {"lm_head": DecodeTile(2, 0, 2)},
        "lm_head-bk1024-w2": {"lm_head": DecodeTile(0, 1024, 2)},
        "lm_head-w1": {"lm_head": DecodeTile(0, 0, 1)},
    }
    if dtype == "q8_0":
        both = {"lm_head": w2, "down": DecodeTile(0, 0, 4)}
        chosen |= {
            "lm_head-w2+down-w4": both,
            "those+small-bn2": {**both, "qkv": DecodeTile(2, 0, 0), "o_proj": DecodeTile(2, 0, 0)},
        }
    return chosen | {"default-again": {}, "lm_head-w2-again": {"lm_head": w2}}


def merged(default: dict[str, DecodeTile], change: dict[str, DecodeTile]) -> dict[str, DecodeTile]:
    """``change`` over ``default``; a 0 field keeps the default's."""
    out = dict(default)
    for site, tile in change.items():
        base = default[site]
        out[site] = DecodeTile(tile.bn or base.bn, tile.bk or base.bk, tile.warps or base.warps)
    return out


def main() -> int:
    out_dir = os.environ.get("OUT", "/tmp/layer_tiles")
    rounds = int(os.environ.get("ROUNDS", "10"))
    model = os.environ.get("MODEL", "qwen2.5-0.5b")
    for dtype in os.environ.get("DTYPES", "f16").split():
        bench = TokenBench(get_model(model), context=128, dtype=dtype, device="cuda", trials=2)
        default = DecodeKernels(bench.weights, bench.specs, pdl=True).tiles
        rows = []
        chosen = policies(dtype)
        if os.environ.get("RULE"):  # the candidate shape rule against the token's own
            chosen = {"default": {}, "rule": ruled(bench), "default-again": {}, "rule-again": {}}
            chosen["rule-again"] = chosen["rule"]
        for name, change in chosen.items():
            tiles = merged(default, change)
            bench._decode_kernels[False, True] = DecodeKernels(
                bench.weights, bench.specs, pdl=True, tiles=tiles
            )
            selection = select_modes(
                ["layer+pdl"], device_kind="cuda", have_table=False, dtype=dtype, pdl_problem=None
            )
            result = bench.run(selection, rounds=rounds)
            row = result.get("layer+pdl")
            assert row is not None
            samples = sorted(row.samples_us)
            figure = statistics.median(samples) if samples else float("nan")
            spread = (
                (samples[len(samples) // 10], samples[-1 - len(samples) // 10]) if samples else ()
            )
            rows.append({
                "policy": name, "status": row.status, "reason": row.reason,
                "us_per_token": figure, "p10_p90": spread, "judged": row.judged,
                "tiles": {s: [t.bn, t.bk, t.warps] for s, t in tiles.items()},
            })  # fmt: skip
            print(f"{model} {dtype} {name:20s} {row.status} {figure:8.1f} µs "
                  f"[{spread[0]:.1f}–{spread[1]:.1f}] judged {row.judged}"
                  if samples else f"{model} {dtype} {name}: {row.status} {row.reason}",
                  flush=True)  # fmt: skip
        with open(os.path.join(out_dir, f"layer_tiles-{dtype}.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
