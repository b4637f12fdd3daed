"""Where does splitting a decode attention's context cost its ~3.4 µs? (on a GPU)

At context 1024 on an H200, eight one-tile programs per KV head and a merge took
6.4 µs a layer against 2.9 for one one-tile program at context 128
(``attention_sweep.py``): the same work per program, so the difference is the
split. This times ``triton.decode_attention``'s kernel with the split's steps
taken away one at a time — a diagnostic, not a kernel (its outputs are wrong
from stage 1 on):

- stage 0: the kernel as it is (partials stored, arrival atomic, the last
  program merges);
- stage 1: partials and the atomic, no merge (the last program stores its own);
- stage 2: partials, no atomic (every program stores its own);
- stage 3: nothing but every program storing its own result.

The kernel's source is the library's, edited as text into a module of its own,
so every other line is what the token runs. Same stack and clock as
``attention_sweep.py`` (3 × the layers, caches read cold, one CUDA graph a
variant, 7 interleaved rounds of 10 replays, µs a layer).

    PYTHONPATH=src OUT=dir python3 benchmarks/attention_split_cost.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(__file__))
from decode_attention_probe import caches, interleaved_us

from matprobe.kernels.triton import _decode_attention as da
from matprobe.measure.peaks import _graph_of

MODELS = {"qwen2.5-0.5b": (14, 2, 24), "llama-3.2-1b": (32, 8, 16)}
D = 64
REPEAT = 3

STAGES = tuple(int(x) for x in os.environ.get("STAGES", "0,1,2,3,4,5").split(","))

SPLIT_OPEN = "    if SPLIT:\n"
SPLIT_CLOSE = "    else:\n        tl.store(out_ptrs"


#: Stages 4 and 5: the merge over the group's real rows only (GR, the group padded
#: to a power of two, not BLOCK_G = 16: half the loads and products for Qwen's 7);
#: stage 4 in two passes (the maxima and sums first, then the weighted values with
#: the final weights: no rescaling), stage 5 in one, as the library's.
REAL_ROWS_MERGE = """\
                gr = tl.arange(0, GR)
                base_r = ws_ptr + kvh * split * (BLOCK_G * row) + gr * row
                js = tl.arange(0, MERGE)
                mx = tl.full([GR], float("-inf"), tl.float32)
                tot = tl.zeros([GR], dtype=tl.float32)
                acc_r = tl.zeros([GR, BLOCK_D], dtype=tl.float32)
                for j0 in range(0, split, MERGE):
                    h = (j0 + js) < split
                    part = base_r[None, :] + (j0 + js)[:, None] * (BLOCK_G * row)
                    m_j = tl.load(part + BLOCK_D, mask=h[:, None], other=float("-inf"),
                                  cache_modifier=".cg")
                    t_j = tl.load(part + BLOCK_D + 1, mask=h[:, None], other=0.0,
                                  cache_modifier=".cg")
                    mx_next = tl.maximum(mx, tl.max(m_j, axis=0))
                    old = tl.exp(mx - mx_next)
                    w = tl.exp(m_j - mx_next[None, :])
                    tot = tot * old + tl.sum(t_j * w, axis=0)
                    if STAGE == 5:
                        a_j = tl.load(part[:, :, None] + d[None, None, :], mask=h[:, None, None],
                                      other=0.0, cache_modifier=".cg")
                        acc_r = acc_r * old[:, None] + tl.sum(a_j * w[:, :, None], axis=0)
                    mx = mx_next
                if STAGE == 4:
                    for j0 in range(0, split, MERGE):
                        h = (j0 + js) < split
                        part = base_r[None, :] + (j0 + js)[:, None] * (BLOCK_G * row)
                        m_j = tl.load(part + BLOCK_D, mask=h[:, None], other=float("-inf"),
                                      cache_modifier=".cg")
                        a_j = tl.load(part[:, :, None] + d[None, None, :], mask=h[:, None, None],
                                      other=0.0, cache_modifier=".cg")
                        w = tl.exp(m_j - mx[None, :])
                        acc_r += tl.sum(a_j * w[:, :, None], axis=0)
                rows = kvh * GROUP + gr
                tl.store(out_ptr + rows[:, None] * D + d[None, :], (acc_r / tot[:, None]).to(dtype),
                         mask=(gr < GROUP)[:, None] & mask_d[None, :])
                tl.store(cnt_ptr + kvh, 0)
"""


def staged_kernel_module() -> object:
    """The library's kernel module with a ``STAGE`` constexpr that removes the
    split's steps (see the module's docstring)."""
    source = Path(da.__file__).with_name("_decode_attention_kernels.py").read_text()
    start, end = source.index(SPLIT_OPEN), source.index(SPLIT_CLOSE)
    body = source[start + len(SPLIT_OPEN) : end]
    partials, _, merge = body.partition("        if arrive_last(cnt_ptr + kvh, split):\n")
    merge_body = merge
    indented_merge = "".join("    " + line if line.strip() else line for line in
                             merge_body.splitlines(keepends=True))  # fmt: skip
    own = "tl.store(out_ptrs, (acc / total[:, None]).to(dtype), mask=mask_q)"
    staged = (
        SPLIT_OPEN
        + "        if STAGE != 3:\n"
        + "".join(
            "    " + line if line.strip() else line for line in partials.splitlines(keepends=True)
        )
        + "        if STAGE == 0:\n"
        + "            if arrive_last(cnt_ptr + kvh, split):\n"
        + indented_merge
        + "        elif STAGE == 1:\n"
        + "            if arrive_last(cnt_ptr + kvh, split):\n"
        + f"                {own}\n"
        + "                tl.store(cnt_ptr + kvh, 0)\n"
        + "        elif STAGE == 2 or STAGE == 3:\n"
        + f"            {own}\n"
        + "        else:\n"
        + "            if arrive_last(cnt_ptr + kvh, split):\n"
        + REAL_ROWS_MERGE
    )
    source = source[:start] + staged + source[end:]
    extra = "    STAGE: tl.constexpr = 0,\n"
    if "GR: tl.constexpr" not in source:  # the library before its merge read real rows only
        extra += "    GR: tl.constexpr = 16,\n"
    # after the PDL parameter's line (its comment included)
    at = source.index("\n", source.index("    PDL: tl.constexpr = False,")) + 1
    source = source[:at] + extra + source[at:]
    path = Path(tempfile.mkdtemp()) / "staged_attention_kernels.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("staged_attention_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def launch(kernel, qkv, kc, vc, cos, sin, heads, pos, scale, chunk, stage):  # type: ignore[no-untyped-def]
    """What ``decode_attention`` launches, with the stage."""
    kvh, context, d = kc.shape
    chunks = -(-context // chunk)
    group = heads // kvh
    block_g, block_d = max(16, 1 << (group - 1).bit_length()), max(16, d)
    y = qkv.new_empty((1, heads * d))
    ws, counters = da._scratch_for(qkv.device, kvh, chunks, block_g, block_d)
    kernel[(kvh, chunks)](
        qkv, kc, vc, cos, sin, y, ws, counters, context, pos, chunks, chunk,
        kc.stride(0), kc.stride(1), float(scale),
        D=d, GROUP=group, Q_WIDTH=heads * d, KV_WIDTH=kvh * d, BLOCK_D=block_d,
        BLOCK_G=block_g, BLOCK_L=da.BLOCK_L, TILES=chunk // da.BLOCK_L, SPLIT=chunks > 1,
        MERGE=da.MERGE_WIDE if chunks > da.MERGE else da.MERGE,
        EXACT=os.environ.get("TRITON_INTERPRET") == "1", STAGE=stage,
        GR=1 << (group - 1).bit_length(),
        num_warps=4,
    )  # fmt: skip
    return y


def measure(kernel: object, model: str, context: int) -> dict[str, object]:
    heads, kvh, layers = MODELS[model]
    layers *= REPEAT
    qkvs, kcs, vcs, cos, sin, pos, scale = caches(heads, kvh, layers, context, torch.float16)
    chunk = da.default_chunk(context, kvh)
    want = da.decode_attention(qkvs[0], kcs[0].clone(), vcs[0].clone(), cos, sin, heads=heads,
                               pos=pos, scale=scale)  # fmt: skip
    got = launch(kernel.decode_attention_kernel, qkvs[0], kcs[0].clone(), vcs[0].clone(),  # type: ignore[attr-defined]
                 cos, sin, heads, pos, scale, chunk, 0)  # fmt: skip
    same = bool(torch.equal(got, want))
    graphs = {}
    for stage in STAGES:

        def stack(stage: int = stage) -> list[torch.Tensor]:
            fn = kernel.decode_attention_kernel  # type: ignore[attr-defined]
            return [
                launch(fn, q, k, v, cos, sin, heads, pos, scale, chunk, stage)
                for q, k, v in zip(qkvs, kcs, vcs, strict=True)
            ]

        graphs[f"stage {stage}"] = _graph_of(stack)
    times = interleaved_us(graphs, layers, replays=10)
    cells = "  ".join(
        f"{n} {statistics.median(t):.2f} [{min(t):.2f}–{max(t):.2f}]" for n, t in times.items()
    )
    print(f"{model} ctx {context} chunk {chunk} (stage 0 == library: {same}): {cells}", flush=True)
    return {
        "model": model, "context": context, "chunk": chunk, "stage0_equals_library": same,
        "us_per_layer": {n: {"median": statistics.median(t), "min": min(t), "max": max(t)}
                         for n, t in times.items()},
    }  # fmt: skip


def main() -> None:
    kernel = staged_kernel_module()
    cases = [("qwen2.5-0.5b", 1024), ("qwen2.5-0.5b", 4096), ("llama-3.2-1b", 4096)]
    out = [measure(kernel, m, c) for m, c in cases]
    with open(os.path.join(os.environ.get("OUT", "."), "split_cost.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "results": out}, f, indent=1)


if __name__ == "__main__":
    main()
