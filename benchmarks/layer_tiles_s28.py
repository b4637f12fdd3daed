"""Candidate H200 fp16 tiles for `layer+pdl` (twenty-eighth session, issue 23):
benchmarks/layer_tiles.py with these policies, one process, default first and
last. CALL=2 runs the pairs that won alone together.

    OUT=$OUT DTYPES=f16 ROUNDS=10 PYTHONPATH=src:benchmarks \
        python3 benchmarks/layer_tiles_s28.py
"""

from __future__ import annotations

import os

import layer_tiles

from matprobe.kernels.triton.decode import DecodeTile

CALL1 = {
    "default": {},
    "qkv-4/1024/4": {"qkv": DecodeTile(4, 1024, 4)},  # the whole row read before gdc_wait
    "qkv-8/1024/4": {"qkv": DecodeTile(8, 1024, 4)},
    "gate_up-2/512/2": {"gate_up": DecodeTile(2, 512, 2)},  # the LM head's per-program shape
    "gate_up-2/1024/4": {"gate_up": DecodeTile(2, 1024, 4)},
    "gate_up-4/512/4": {"gate_up": DecodeTile(4, 512, 4)},
    "down-1/4096/8": {"down": DecodeTile(1, 4096, 8)},  # 84 % of the row before gdc_wait
    "default-again": {},
}
BOTH8 = {"gate_up": DecodeTile(2, 1024, 4), "qkv": DecodeTile(8, 1024, 4)}
BOTH4 = {"gate_up": DecodeTile(2, 1024, 4), "qkv": DecodeTile(4, 1024, 4)}
CALL2 = {
    "default": {},
    "gate_up-2/1024/4+qkv-8/1024/4": BOTH8,
    "gate_up-2/1024/4+qkv-4/1024/4": BOTH4,
    "gate_up-2/1024/4": {"gate_up": DecodeTile(2, 1024, 4)},
    "default-again": {},
    "gate_up-2/1024/4+qkv-8/1024/4-again": BOTH8,
    "gate_up-2/1024/4+qkv-4/1024/4-again": BOTH4,
}


def policies(dtype: str) -> dict[str, dict[str, DecodeTile]]:
    return CALL2 if os.environ.get("CALL") == "2" else CALL1


if __name__ == "__main__":
    layer_tiles.policies = policies
    raise SystemExit(layer_tiles.main())
