"""Do the Triton kernels still compile to the same code? One process compiles every
``@triton.jit`` kernel the families launch to PTX for an H100 (``sm_90``; no GPU
needed) in a representative set of configurations, and writes, for each, the
sha256 of its PTX with the debug information stripped; run it on two trees and
compare (a refactor of the kernels' source that Triton inlines away leaves every
hash as it was):

    PYTHONPATH=OLD/src python3 benchmarks/ptx_identity.py --out A.json
    PYTHONPATH=NEW/src python3 benchmarks/ptx_identity.py --out B.json
    python3 benchmarks/ptx_identity.py --compare A.json B.json

The configurations are the constexpr combinations the families' grids and
launch sites produce — every flag (C0, bias, PDL, split-K mode, Q8, RMSNorm,
SwiGLU, …) and each dtype a family takes, a few block sizes, even and ragged
shapes — with the arguments each launch site passes (pointers of the operands'
dtypes, the sizes and strides of contiguous operands), specialised as Triton
does at a launch (an integer 1 becomes a constexpr, multiples of 16 are marked
divisible). What is stripped carries only source positions: ``.loc`` and
``.file`` lines, the labels that delimit them, ``//`` comments and the DWARF
sections (file names, line tables).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

#: The compile target: an H100's (compute capability 9.0, 32-lane warps).
TARGET = ("cuda", 90, 32)

PACKAGE = "matprobe.kernels.triton"

#: Triton pointer type → torch dtype of a stand-in tensor (``MockTensor``).
TORCH_DTYPES = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "i8": "int8",
    "i32": "int32",
}

#: The activations' pointer type of each dtype a family takes.
FLOAT_DTYPES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32"}


@dataclass(frozen=True)
class Ptr:
    """A tensor argument: only its dtype (a 16-byte-aligned start) matters."""

    dtype: str


@dataclass(frozen=True)
class Case:
    """One compile: ``module.kernel`` with these arguments and launch keywords."""

    key: str
    module: str
    kernel: str
    args: tuple[Any, ...]
    constants: tuple[tuple[str, Any], ...]


def _case(module: str, kernel: str, config: dict[str, Any], args: list[Any],
          constants: dict[str, Any]) -> Case:  # fmt: skip
    label = " ".join(f"{k}={v}" for k, v in config.items())
    return Case(f"{kernel}/{label}", f"{PACKAGE}.{module}", kernel, tuple(args),
                tuple(constants.items()))  # fmt: skip


def _epilogue(n: int, dtype: str, alpha: float = 1.0) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The two epilogue tuples of a row GEMV ``[batch, 1, n]`` (``_blocks.epilogue_store``):
    the pointers to C0, the bias and out, then C0's and out's batch and column
    strides, the bias's (C0 and the bias being ``out`` itself where the spec has
    none: the same strides), alpha and beta."""
    return (Ptr(dtype), Ptr(dtype), Ptr(dtype)), (n, 1, 1, n, 1, alpha, 0.5)


def _flags(c0: bool, bias: bool) -> dict[str, Any]:
    return {"HAS_C0": c0, "HAS_BIAS": bias}


EPILOGUES = [(False, False), (False, True), (True, False), (True, True)]


# ---- triton.gemv_nt ---------------------------------------------------------------------


def gemv_nt_cases() -> Iterator[Case]:
    def one(dt: str, c0: bool, bias: bool, n: int, k: int, bn: int, bk: int, w: int,
            pdl: bool = False) -> Case:  # fmt: skip
        p = FLOAT_DTYPES[dt]
        ptrs, epilogue = _epilogue(n, p)
        tiles = -(-k // bk)
        constants = {**_flags(c0, bias), "BLOCK_N": bn, "BLOCK_K": bk, "K_TILES": tiles,
                     "EVEN_K": k % bk == 0, "EVEN_N": n % bn == 0, "UNROLL": tiles <= 16,
                     "num_warps": w}  # fmt: skip
        if pdl:
            constants.update(PDL=True, launch_pdl=True)
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "n": n, "k": k, "bn": bn,
                  "bk": bk, "w": w, "pdl": int(pdl)}  # fmt: skip
        args = [Ptr(p), Ptr(p), ptrs, n, k, k, 1, n * k, k, 1, epilogue]
        return _case("_gemv_kernels", "gemv_nt_kernel", config, args, constants)

    for dt in FLOAT_DTYPES:
        for c0, bias in EPILOGUES:
            yield one(dt, c0, bias, 896, 4864, 2, 1024, 4)  # unrolled, ragged K
            yield one(dt, c0, bias, 896, 4864, 1, 8192, 8, pdl=True)  # PDL, one masked tile
        for c0, bias in (EPILOGUES[0], EPILOGUES[3]):
            yield one(dt, c0, bias, 896, 2048, 8, 1024, 8)  # unrolled, even K
            yield one(dt, c0, bias, 1000, 1000, 8, 1024, 4)  # ragged rows and K
            yield one(dt, c0, bias, 896, 18944, 1, 1024, 8)  # the K loop (19 tiles)
            yield one(dt, c0, bias, 1000, 1024, 8, 1024, 8, pdl=True)  # PDL, even K
            yield one(dt, c0, bias, 896, 1024, 8, 1024, 8, pdl=True)  # PDL, even K and rows


# ---- triton.gemv_tn ---------------------------------------------------------------------


def gemv_tn_cases() -> Iterator[Case]:
    def one(dt: str, c0: bool, bias: bool, mode: int, n: int, k: int, bn: int,
            k_chunk: int) -> Case:  # fmt: skip
        p = FLOAT_DTYPES[dt]
        ptrs, epilogue = _epilogue(n, p)
        # Unused workspace and counters get a placeholder: out, then the workspace.
        ws, cnt = {
            0: (ptrs[2], ptrs[2]),
            1: (Ptr("fp32"), Ptr("i32")),
            2: (Ptr("fp32"), Ptr("fp32")),
        }[mode]
        constants = {**_flags(c0, bias), "MODE": mode, "BLOCK_N": bn, "BLOCK_K": 64,
                     "num_warps": 4}  # fmt: skip
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "mode": mode, "n": n, "k": k,
                  "bn": bn, "chunk": k_chunk}  # fmt: skip
        args = [Ptr(p), Ptr(p), ptrs, ws, cnt, n, k, k_chunk, k, 1, k * n, n, 1,
                epilogue]  # fmt: skip
        return _case("_gemv_tn_kernels", "gemv_tn_kernel", config, args, constants)

    def finalize(dt: str, c0: bool, bias: bool, n: int) -> Case:
        p = FLOAT_DTYPES[dt]
        ptrs, epilogue = _epilogue(n, p)
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "n": n}
        args = [Ptr("fp32"), ptrs, n, epilogue]
        constants = {**_flags(c0, bias), "BLOCK_N": 256, "num_warps": 4}
        return _case("_gemv_tn_kernels", "gemv_tn_finalize_kernel", config, args, constants)

    for dt in FLOAT_DTYPES:
        for c0, bias in EPILOGUES:
            yield one(dt, c0, bias, 0, 1152, 896, 128, 896)  # no split: the QKV projection
            yield one(dt, c0, bias, 1, 1152, 896, 32, 64)  # the last program finishes
            yield finalize(dt, c0, bias, 1152)
        for c0, bias in (EPILOGUES[0], EPILOGUES[3]):
            yield one(dt, c0, bias, 2, 1152, 896, 32, 64)  # a second launch finishes
            yield one(dt, c0, bias, 1, 64, 1000, 32, 128)  # P·V, ragged L
            yield finalize(dt, c0, bias, 1000)


# ---- triton.gemv_splitk -----------------------------------------------------------------


def splitk_cases() -> Iterator[Case]:
    def one(dt: str, c0: bool, bias: bool, mode: int, n: int, k: int, bn: int, tiles: int,
            chunk: int, k_mode: int) -> Case:  # fmt: skip
        p = FLOAT_DTYPES[dt]
        ptrs, epilogue = _epilogue(n, p)
        k_tiles = -(-k // 256)
        slices = -(-k_tiles // tiles)
        row_blocks = -(-n // bn)
        # twopass: partials [slices, 1, n]; atomic: workspace [1, n] (counters: it too);
        # atomic_last: counters [1, row blocks].
        stride_ps = n if mode == 0 else 0
        cnt = Ptr("i32") if mode == 2 else Ptr("fp32")
        cnt_stride = row_blocks if mode == 2 else n
        constants = {"MODE": mode, **_flags(c0, bias), "BLOCK_N": bn, "BLOCK_K": 256,
                     "TILES": tiles, "CHUNK": chunk, "NUM_CHUNKS": tiles // chunk,
                     "K_MODE": k_mode, "EVEN_N": n % bn == 0, "num_warps": 8}  # fmt: skip
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "mode": mode, "n": n, "k": k,
                  "bn": bn, "tiles": tiles, "chunk": chunk}  # fmt: skip
        args = [Ptr(p), Ptr(p), Ptr("fp32"), cnt, ptrs, n, k, slices, k, 1, n * k,
                k, 1, stride_ps, n, cnt_stride, epilogue]  # fmt: skip
        return _case("_splitk_kernels", "splitk_partial_kernel", config, args, constants)

    def finalize(dt: str, c0: bool, bias: bool, n: int, slices: int) -> Case:
        p = FLOAT_DTYPES[dt]
        ptrs, epilogue = _epilogue(n, p)
        reset = slices == 1  # atomic: the workspace, one slice; twopass: the partials
        block_s = min(1 << (slices - 1).bit_length(), 16)
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "n": n, "slices": slices}
        args = [Ptr("fp32"), ptrs, n, slices, 0 if reset else n, n, epilogue]  # fmt: skip
        constants = {"RESET": reset, **_flags(c0, bias), "BLOCK_R": 256, "BLOCK_S": block_s,
                     "num_warps": 4}  # fmt: skip
        return _case("_splitk_kernels", "splitk_finalize_kernel", config, args, constants)

    for dt in FLOAT_DTYPES:
        for c0, bias in EPILOGUES:
            yield one(dt, c0, bias, 2, 896, 4864, 16, 4, 4, 1)  # atomic_last, slid last slice
            yield one(dt, c0, bias, 1, 896, 4864, 32, 2, 2, 1)  # atomic
            yield finalize(dt, c0, bias, 896, 1)
        for c0, bias in (EPILOGUES[0], EPILOGUES[3]):
            yield one(dt, c0, bias, 0, 896, 4864, 16, 4, 4, 1)  # twopass
            yield one(dt, c0, bias, 2, 1000, 4096, 16, 4, 4, 0)  # full slices, ragged rows
            yield one(dt, c0, bias, 2, 896, 1100, 32, 5, 1, 2)  # one slice wider than K
            yield finalize(dt, c0, bias, 896, 5)


# ---- triton.attn_bmv --------------------------------------------------------------------


def attention_cases() -> Iterator[Case]:
    def scores(dt: str, c0: bool, bias: bool, n: int, head: int, bn: int, bk: int) -> Case:
        p = FLOAT_DTYPES[dt]
        ptrs, epilogue = _epilogue(n, p, alpha=0.125)
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "n": n, "K": head, "bn": bn,
                  "bk": bk}  # fmt: skip
        args = [Ptr(p), Ptr(p), ptrs, n, head, 1, n * head, head, 1, epilogue]
        constants = {**_flags(c0, bias), "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4,
                     "K": head}  # fmt: skip
        return _case("_attention_kernels", "attn_scores_kernel", config, args, constants)

    def values(dt: str, c0: bool, bias: bool, head: int, k: int, bn: int, bk: int,
               pdl: bool = False) -> Case:  # fmt: skip
        p = FLOAT_DTYPES[dt]
        ptrs, epilogue = _epilogue(head, p)
        split = -(-k // bk)
        split_p2 = 1 << max(split - 1, 0).bit_length()
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "N": head, "k": k, "bn": bn,
                  "bk": bk, "pdl": int(pdl)}  # fmt: skip
        args = [Ptr(p), Ptr(p), ptrs, Ptr("fp32"), Ptr("i32"), k, split, k, 1,
                k * head, head, 1, epilogue]  # fmt: skip
        constants = {**_flags(c0, bias), "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4,
                     "N": head, "SPLIT_P2": split_p2, "MASK_N": head % bn != 0}  # fmt: skip
        if pdl:
            constants.update(PDL=True, launch_pdl=True)
        return _case("_attention_kernels", "attn_values_kernel", config, args, constants)

    for dt in FLOAT_DTYPES:
        for c0, bias in EPILOGUES:
            yield scores(dt, c0, bias, 1024, 64, 16, 64)  # head_dim one whole tile
            yield values(dt, c0, bias, 64, 1024, 16, 64)  # L split in 16 chunks
            yield values(dt, c0, bias, 1152, 896, 16, 1024)  # QKV: one tile, no split
        for c0, bias in (EPILOGUES[0], EPILOGUES[3]):
            yield scores(dt, c0, bias, 1000, 80, 32, 128)  # head_dim in a wider tile
            yield scores(dt, c0, bias, 1000, 80, 32, 64)  # head_dim walked in chunks
            yield values(dt, c0, bias, 1000, 896, 16, 1024, pdl=True)  # ragged columns
            yield values(dt, c0, bias, 1152, 896, 32, 64, pdl=True)  # split, PDL


# ---- triton.gemv_decode -----------------------------------------------------------------


def decode_cases() -> Iterator[Case]:
    def one(dt: str, q8: bool, norm: bool, swiglu: bool, c0: bool, bias: bool, n: int,
            k: int, bn: int, bk: int, w: int, pdl: bool = False) -> Case:  # fmt: skip
        p = FLOAT_DTYPES[dt]
        # Absent operands are the output itself (never read).
        scales = Ptr("fp16") if q8 else Ptr(p)
        gain = Ptr(p)
        config = {"dt": dt, "q8": int(q8), "norm": int(norm), "swiglu": int(swiglu),
                  "c0": int(c0), "bias": int(bias), "n": n, "k": k, "bn": bn, "bk": bk,
                  "w": w, "pdl": int(pdl)}  # fmt: skip
        args = [Ptr(p), Ptr("i8") if q8 else Ptr(p), scales, gain, Ptr(p), Ptr(p), Ptr(p),
                n, k, n if swiglu else 0, k, k // 32 if q8 else 0, 1.0, 1.0, 1e-6]  # fmt: skip
        constants = {"Q8": q8, "NORM": norm, "SWIGLU": swiglu, **_flags(c0, bias),
                     "BLOCK_N": bn, "BLOCK_K": bk, "K_TILES": -(-k // bk),
                     "EVEN_K": k % bk == 0, "EVEN": k % bk == 0 and n % bn == 0,
                     "NB": bk // 32 if q8 else 1, "num_warps": w}  # fmt: skip
        if pdl:
            constants.update(PDL=True, launch_pdl=True)
        return _case("_decode_kernels", "decode_gemv_kernel", config, args, constants)

    for dt, q8 in (("f16", False), ("bf16", False), ("f16", True)):
        for norm in (False, True):
            for c0, bias in EPILOGUES:
                yield one(dt, q8, norm, False, c0, bias, 896, 896, 4, 512, 4)  # ragged K
            yield one(dt, q8, norm, True, False, False, 4864, 896, 4, 512, 4)  # gate_up
            yield one(dt, q8, norm, False, True, False, 896, 4864, 2, 1024, 8)  # down
            yield one(dt, q8, norm, False, False, False, 1152, 1024, 1, 1024, 8)  # even
            yield one(dt, q8, norm, True, False, False, 1000, 1024, 4, 512, 8)  # ragged rows
            # the `layer+pdl` token: the first tile (gate and up) read before the wait
            yield one(dt, q8, norm, True, False, False, 4864, 896, 4, 512, 4, pdl=True)
            yield one(dt, q8, norm, False, True, False, 896, 4864, 2, 1024, 8, pdl=True)


# ---- triton.decode_attention (the `layer` token's attention) ---------------------------


def decode_attention_cases() -> Iterator[Case]:
    def one(dt: str, heads: int, kv_heads: int, context: int, chunk: int, merge: int,
            pdl: bool = False) -> Case:  # fmt: skip
        p = FLOAT_DTYPES[dt]
        group, d, block_l = heads // kv_heads, 64, 128
        split = -(-context // chunk)
        config = {"dt": dt, "heads": heads, "kv": kv_heads, "ctx": context, "chunk": chunk,
                  "merge": merge, "pdl": int(pdl)}  # fmt: skip
        # qkv, the caches, cos, sin, out, the fp32 workspace, the int32 counters
        args = [Ptr(p), Ptr(p), Ptr(p), Ptr(p), Ptr(p), Ptr(p), Ptr("fp32"), Ptr("i32"),
                context, context - 1, split, chunk, context * d, d, 0.125]  # fmt: skip
        constants = {"D": d, "GROUP": group, "Q_WIDTH": heads * d, "KV_WIDTH": kv_heads * d,
                     "BLOCK_D": d, "BLOCK_G": 16, "GR": 1 << (group - 1).bit_length(),
                     "BLOCK_L": block_l, "TILES": chunk // block_l, "SPLIT": split > 1,
                     "MERGE": merge, "EXACT": False, "num_warps": 4}  # fmt: skip
        if pdl:
            constants.update(PDL=True, launch_pdl=True)
        return _case("_decode_attention_kernels", "decode_attention_kernel", config, args,
                     constants)  # fmt: skip

    for dt in ("f16", "bf16"):
        yield one(dt, 14, 2, 128, 128, 8)  # one chunk: no merge
        yield one(dt, 14, 2, 1024, 128, 8, pdl=True)  # eight chunks, one step
        yield one(dt, 14, 2, 4096, 256, 16, pdl=True)  # sixteen, two tiles each
        yield one(dt, 32, 8, 4096, 256, 16)  # Llama's group of 4


# ---- triton.gemv_q8, triton.gemv_q8_int8dot ---------------------------------------------


def q8_cases() -> Iterator[Case]:
    def one(family: str, blk: bool | None, c0: bool, bias: bool, n: int, k: int, bn: int,
            bk: int, w: int) -> Case:  # fmt: skip
        ptrs, epilogue = _epilogue(n, "fp16")
        constants = {**_flags(c0, bias), "BLOCK_N": bn, "BLOCK_K": bk, "NB": bk // 32,
                     "K_TILES": -(-k // bk), "EVEN_K": k % bk == 0,
                     "EVEN_N": n % bn == 0}  # fmt: skip
        config = {"c0": int(c0), "bias": int(bias), "n": n, "k": k, "bn": bn, "bk": bk, "w": w}
        if blk is not None:
            constants["BLOCKWISE"] = blk
            config["blk"] = int(blk)
        else:  # triton.gemv_q8_int8dot: the same kernel, x quantized
            constants["INT8DOT"] = True
        constants["num_warps"] = w
        args = [Ptr("fp16"), Ptr("i8"), Ptr("fp16"), ptrs, n, k, k, 1, n * k, k,
                n * k // 32, k // 32, epilogue]  # fmt: skip
        case = _case("_gemv_q8_kernels", "gemv_q8_kernel", config, args, constants)
        return replace(case, key=case.key.replace("gemv_q8_kernel", f"{family}_kernel", 1))

    for family, modes in (("gemv_q8", (False, True)), ("gemv_q8_int8dot", (None,))):
        for blk in modes:
            for c0, bias in EPILOGUES:
                yield one(family, blk, c0, bias, 896, 896, 2, 512, 4)  # ragged K
            yield one(family, blk, False, False, 151936, 896, 4, 1024, 8)  # the LM head
            yield one(family, blk, True, True, 896, 4864, 1, 512, 8)  # down
            yield one(family, blk, False, False, 1000, 1024, 4, 512, 4)  # ragged rows
            yield one(family, blk, False, True, 1152, 2048, 2, 1024, 4)  # even


# ---- triton.gemv_stream -----------------------------------------------------------------


def stream_cases() -> Iterator[Case]:
    def one(dt: str, c0: bool, bias: bool, n: int, k: int, bn: int, pdl: bool,
            pf: bool = False) -> Case:  # fmt: skip
        p = FLOAT_DTYPES[dt]
        bk = max(16, 1 << max(k - 1, 0).bit_length())
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "n": n, "k": k, "bn": bn,
                  "pdl": int(pdl), "pf": int(pf)}  # fmt: skip
        args = [Ptr(p), Ptr(p), (Ptr(p), Ptr(p), Ptr(p)), n, k, -(-n // bn), 1, k, 1,
                (1, 1, 1, 1.0, 0.5)]  # fmt: skip
        constants: dict[str, Any] = {**_flags(c0, bias), "BLOCK_N": bn, "BLOCK_K": bk,
                                     "EVEN_K": k == bk, "num_warps": 8}  # fmt: skip
        if pdl:
            constants.update(PDL=True, launch_pdl=True)
        if pf:
            line = 128 // {"fp16": 2, "bf16": 2, "fp32": 4}[p]
            constants.update(PREFETCH=True, LINE_ELEMS=line, LINES=max(1, bk // line))
        return _case("_gemv_stream_kernels", "gemv_stream_kernel", config, args, constants)

    for dt in FLOAT_DTYPES:
        for c0, bias in EPILOGUES:
            yield one(dt, c0, bias, 896, 896, 2, False)  # ragged K
            yield one(dt, c0, bias, 9728, 896, 8, True)  # gate_up, PDL
        yield one(dt, False, False, 896, 4864, 2, True)
        yield one(dt, True, True, 1000, 1024, 8, False)  # even K, ragged rows
        yield one(dt, False, False, 9728, 896, 8, True, pf=True)  # L2 prefetch


# ---- triton.gemv_swiglu -----------------------------------------------------------------


def swiglu_cases() -> Iterator[Case]:
    def one(dt: str, q8: bool, n0: int, k: int, bn: int, bk: int, w: int) -> Case:
        p = FLOAT_DTYPES[dt]
        config = {"dt": dt, "q8": int(q8), "n0": n0, "k": k, "bn": bn, "bk": bk, "w": w}
        constants = {"BLOCK_N": bn, "BLOCK_K": bk, "K_TILES": -(-k // bk),
                     "EVEN_K": k % bk == 0, "EVEN_N": n0 % bn == 0, "num_warps": w}  # fmt: skip
        out = [n0, 1]
        if q8:
            constants["NB"] = bk // 32
            args = [Ptr("fp16"), Ptr("i8"), Ptr("fp16"), Ptr("fp16"), n0, k, k, 1, 2 * n0 * k,
                    k, 2 * n0 * k // 32, k // 32, *out]  # fmt: skip
            return _case("_gemv_swiglu_kernels", "gemv_swiglu_q8_kernel", config, args, constants)
        args = [Ptr(p), Ptr(p), Ptr(p), n0, k, k, 1, 2 * n0 * k, k, 1, *out]
        return _case("_gemv_swiglu_kernels", "gemv_swiglu_kernel", config, args, constants)

    for dt, q8 in (("f16", False), ("bf16", False), ("f16", True)):
        yield one(dt, q8, 4864, 896, 2, 512, 4)  # gate_up, ragged K
        yield one(dt, q8, 4864, 896, 4, 1024, 8)
        yield one(dt, q8, 4864, 1024, 1, 512, 4)  # even
        yield one(dt, q8, 1000, 1024, 4, 1024, 8)  # ragged rows


# ---- triton.gemm ------------------------------------------------------------------------


def gemm_cases() -> Iterator[Case]:
    def one(dt: str, c0: bool, bias: bool, m: int, n: int, k: int, ta: bool, tb: bool,
            bm: int, bn: int) -> Case:  # fmt: skip
        p = FLOAT_DTYPES[dt]
        a_strides = [m * k, 1, m] if ta else [m * k, k, 1]
        b_strides = [n * k, 1, k] if tb else [k * n, n, 1]
        config = {"dt": dt, "c0": int(c0), "bias": int(bias), "m": m, "n": n, "k": k,
                  "tA": int(ta), "tB": int(tb), "bm": bm, "bn": bn}  # fmt: skip
        args = [Ptr(p), Ptr(p), Ptr(p), Ptr(p), Ptr(p), m, n, k, *a_strides, *b_strides,
                m * n, n, 1, 1, m * n, n, 1, 1.0, 0.5]  # fmt: skip
        constants = {**_flags(c0, bias), "IEEE": dt == "f32", "INTERPRETED_BF16": False,
                     "EVEN_K": k % 64 == 0, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64,
                     "GROUP_M": 8, "num_warps": 4, "num_stages": 3}  # fmt: skip
        return _case("_gemm_kernels", "gemm_kernel", config, args, constants)

    for dt in FLOAT_DTYPES:
        yield one(dt, False, False, 128, 896, 896, False, True, 64, 64)  # prefill
        yield one(dt, True, True, 128, 1152, 896, False, False, 128, 64)
        yield one(dt, False, True, 100, 1000, 1000, True, True, 64, 128)  # ragged


def all_cases() -> list[Case]:
    families = (gemv_nt_cases, gemv_tn_cases, splitk_cases, attention_cases, decode_cases,
                decode_attention_cases, q8_cases, stream_cases, swiglu_cases,
                gemm_cases)  # fmt: skip
    cases = [case for family in families for case in family()]
    keys = [case.key for case in cases]
    assert len(set(keys)) == len(keys), "two cases share a key"
    return cases


# ---- compiling -------------------------------------------------------------------------

_DEBUG_LABEL = re.compile(r"\$L__(tmp|func_begin|func_end)\d+:")


def strip_debug(ptx: str) -> str:
    """The PTX without what only carries source positions: the DWARF sections
    (file names, line tables), ``.loc``/``.file`` lines, the labels the line
    table points at, ``//`` comments and blank lines."""
    code = ptx.split("\t.section\t.debug", 1)[0]
    kept = []
    for line in code.splitlines():
        text = line.split("//", 1)[0].rstrip()
        bare = text.strip()
        if not bare or bare.startswith((".loc", ".file")) or _DEBUG_LABEL.fullmatch(bare):
            continue
        kept.append(text)
    return "\n".join(kept) + "\n"


_BINDERS: dict[str, Any] = {}


def compile_ptx(case: Case) -> str:
    """The PTX of one case, the kernel specialised on its arguments as a launch
    would (Triton's own binder), compiled for :data:`TARGET`."""
    import torch
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import MockTensor, create_function_from_signature

    kernel = getattr(importlib.import_module(case.module), case.kernel)
    target = GPUTarget(*TARGET)
    backend = make_backend(target)
    name = f"{case.module}.{case.kernel}"
    if name not in _BINDERS:
        _BINDERS[name] = create_function_from_signature(kernel.signature, kernel.params, backend)
    binder = _BINDERS[name]
    # What JITFunction.run adds to a launch's keywords before binding.
    kwargs: dict[str, Any] = dict(case.constants)
    kwargs["debug"] = kwargs.get("debug", kernel.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts

    def stand_in(arg: Any) -> Any:
        """A tensor for each :class:`Ptr`, also inside a tuple argument."""
        if isinstance(arg, tuple):
            return tuple(stand_in(a) for a in arg)
        return MockTensor(getattr(torch, TORCH_DTYPES[arg.dtype])) if isinstance(arg, Ptr) else arg

    args = [stand_in(a) for a in case.args]
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, kwargs, bound, specialization, options
    )
    source = triton.compiler.ASTSource(kernel, signature, constexprs, attrs)
    compiled = triton.compile(source, target=target, options=options.__dict__)
    return str(compiled.asm["ptx"])


def _compile_one(case: Case, ptx_dir: str | None) -> tuple[str, str]:
    # The kernel's own name (its entry and parameter names) is not its code: a kernel
    # renamed, or merged into another under a constexpr, keeps its hash.
    ptx = re.sub(
        rf"\b{re.escape(case.kernel)}(?=_param_|\b)", "KERNEL", strip_debug(compile_ptx(case))
    )
    if ptx_dir:
        name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", case.key)
        Path(ptx_dir, f"{name}.ptx").write_text(ptx, encoding="utf-8")
    return case.key, hashlib.sha256(ptx.encode()).hexdigest()


def _worker_init(cache_dir: str) -> None:
    os.environ.pop("TRITON_INTERPRET", None)  # compiled, never the interpreter
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    # FP fusion as a launch gets it where nothing is set (triton 3.9: on), pinned so
    # that two runs compare whatever their environments say (and without the warning).
    os.environ.pop("TRITON_FORCE_DISABLE_FP_FUSION", None)
    os.environ["TRITON_DEFAULT_FP_FUSION"] = "1"


def fingerprint_all(cases: list[Case], jobs: int, cache_dir: str,
                    ptx_dir: str | None) -> dict[str, str]:  # fmt: skip
    hashes: dict[str, str] = {}
    with ProcessPoolExecutor(jobs, initializer=_worker_init, initargs=(cache_dir,)) as pool:
        futures = [pool.submit(_compile_one, case, ptx_dir) for case in cases]
        for done, future in enumerate(futures, 1):
            key, digest = future.result()
            hashes[key] = digest
            if done % 25 == 0 or done == len(futures):
                print(f"  {done}/{len(futures)} compiled", file=sys.stderr, flush=True)
    return hashes


def compare(old_path: Path, new_path: Path) -> int:
    old = json.loads(old_path.read_text(encoding="utf-8"))
    new = json.loads(new_path.read_text(encoding="utf-8"))
    same = [key for key in old if new.get(key) == old[key]]
    for key in sorted(set(old) | set(new)):
        if key not in new or key not in old:
            print(f"only in {old_path if key in old else new_path}: {key}")
        elif old[key] != new[key]:
            print(f"PTX differs: {key}")
    print(f"{len(same)} of {len(set(old) | set(new))} entries identical")
    return 0 if len(same) == len(old) == len(new) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="write {kernel/config: sha256} here")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--jobs", type=int, default=2, help="compiling processes (default 2)")
    parser.add_argument("--only", default="", help="cases whose key contains this text")
    parser.add_argument("--ptx-dir", help="also write each stripped PTX here (for a diff)")
    parser.add_argument("--cache-dir", help="Triton's cache (default: a fresh, empty one)")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("--out or --compare")
    cases = [case for case in all_cases() if args.only in case.key]
    package = importlib.import_module(PACKAGE)
    print(f"{len(cases)} compiles of the kernels in {Path(package.__file__ or '').parent}",
          file=sys.stderr)  # fmt: skip
    if args.ptx_dir:
        Path(args.ptx_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ptx-identity-") as fresh:
        hashes = fingerprint_all(cases, args.jobs, args.cache_dir or fresh, args.ptx_dir)
    args.out.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(hashes)} PTX hashes written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
