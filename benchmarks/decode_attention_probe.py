"""``triton.decode_attention`` against the step's torch attention, on a GPU.

For Qwen2.5-0.5B (14/2 heads) and Llama-3.2-1B (32/8), head_dim 64, at contexts
128, 1024 and 4096, fp16 and bf16: the kernel's worst error against float64
beside the eager torch ops' (RoPE, KV append, grouped q·Kᵀ, fp32 softmax, p·V, as
``DecodeStep._attend`` runs them), then the time of a layer stack's attention
(24 or 16 layers, each with caches of its own, as a token reads them) captured
as one CUDA graph per variant: torch eager ops (the token's compile modes time
Inductor's version) and the kernel at its default chunk and two others.
Replays back to back, 7 rounds of 20, interleaved; median [min–max] µs a layer.

    PYTHONPATH=src OUT=dir python3 benchmarks/decode_attention_probe.py
"""

from __future__ import annotations

import json
import math
import os
import statistics

import torch

from matprobe.kernels.triton._decode_attention import BLOCK_L, decode_attention, default_chunk
from matprobe.measure.peaks import _graph_of  # the device clock's capture
from matprobe.token.weights import rope_tables

MODELS = {"qwen2.5-0.5b": (14, 2, 24), "llama-3.2-1b": (32, 8, 16)}
D = 64


def torch_attention(qkv, kc, vc, cos, sin, heads, pos, scale):  # type: ignore[no-untyped-def]
    kvh = kc.shape[0]
    qw, kw = heads * D, kvh * D

    def rope(x):  # type: ignore[no-untyped-def]
        rot = torch.cat([-x[..., D // 2 :], x[..., : D // 2]], dim=-1)
        return x * cos + rot * sin

    q = rope(qkv[0, :qw].view(heads, D))
    k = rope(qkv[0, qw : qw + kw].view(kvh, D))
    v = qkv[0, qw + kw :].view(kvh, D)
    kc[:, pos].copy_(k)
    vc[:, pos].copy_(v)
    scores = torch.matmul(q.view(kvh, heads // kvh, D), kc.transpose(1, 2)) * scale
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, vc).reshape(1, qw)


def exact(qkv, kc, vc, cos, sin, heads, pos, scale):  # type: ignore[no-untyped-def]
    return torch_attention(qkv.double(), kc.double().clone(), vc.double().clone(), cos.double(),
                           sin.double(), heads, pos, scale)  # fmt: skip


def attention_stack(qkvs, kcs, vcs, cos, sin, heads, pos, scale, chunk=0, warps=4):  # type: ignore[no-untyped-def]
    """One layer stack's attention: torch's ops (chunk 0) or the kernel's."""
    if not chunk:
        return lambda: [
            torch_attention(q, k, v, cos, sin, heads, pos, scale)
            for q, k, v in zip(qkvs, kcs, vcs, strict=True)
        ]
    return lambda: [
        decode_attention(
            q, k, v, cos, sin, heads=heads, pos=pos, scale=scale, chunk=chunk, warps=warps
        )
        for q, k, v in zip(qkvs, kcs, vcs, strict=True)
    ]


def interleaved_us(graphs: dict[str, object], layers: int, replays: int) -> dict[str, list[float]]:
    """µs a layer of each captured stack: 7 rounds, the variants rotated each round,
    each timed over ``replays`` back-to-back replays after one untimed."""
    times: dict[str, list[float]] = {n: [] for n in graphs}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    names = list(graphs)
    for r in range(7):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            graphs[n].replay()  # type: ignore[attr-defined]
            start.record()
            for _ in range(replays):
                graphs[n].replay()  # type: ignore[attr-defined]
            end.record()
            end.synchronize()
            times[n].append(start.elapsed_time(end) * 1000 / replays / layers)
    return times


def caches(heads: int, kvh: int, layers: int, context: int, dtype: torch.dtype) -> tuple:  # type: ignore[type-arg]
    """A stack of ``layers`` layers' qkv and caches of their own (seeded by the
    context), the RoPE tables of the last position, that position and the scale."""
    gen = torch.Generator(device="cuda").manual_seed(context)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=gen).to(dtype)

    qkvs = [draw(1, (heads + 2 * kvh) * D) for _ in range(layers)]
    kcs = [draw(kvh, context, D) for _ in range(layers)]
    vcs = [draw(kvh, context, D) for _ in range(layers)]
    cos, sin = (t.to("cuda", dtype) for t in rope_tables(D, context - 1))
    return qkvs, kcs, vcs, cos, sin, context - 1, 1 / math.sqrt(D)


def measure(model: str, context: int, name: str, dtype: torch.dtype) -> dict[str, object]:
    heads, kvh, layers = MODELS[model]
    qkvs, kcs, vcs, cos, sin, pos, scale = caches(heads, kvh, layers, context, dtype)
    want = exact(qkvs[0], kcs[0], vcs[0], cos, sin, heads, pos, scale)
    peak = float(want.abs().max())
    eager = torch_attention(qkvs[0], kcs[0].clone(), vcs[0].clone(), cos, sin, heads, pos, scale)
    got = decode_attention(qkvs[0], kcs[0].clone(), vcs[0].clone(), cos, sin, heads=heads,
                           pos=pos, scale=scale)  # fmt: skip
    err = {
        "torch": float((eager.double() - want).abs().max()) / peak,
        "kernel": float((got.double() - want).abs().max()) / peak,
    }
    chunk0 = default_chunk(context, kvh)
    chunks = sorted({chunk0, max(BLOCK_L, chunk0 // 2), chunk0 * 2})
    stack = (qkvs, kcs, vcs, cos, sin, heads, pos, scale)
    variants = {"torch": attention_stack(*stack)}
    for c in chunks:
        variants[f"kernel chunk {c}"] = attention_stack(*stack, chunk=c)
    variants[f"kernel chunk {chunk0} w8"] = attention_stack(*stack, chunk=chunk0, warps=8)
    graphs = {n: _graph_of(f) for n, f in variants.items()}
    times = interleaved_us(graphs, layers, replays=20)
    cells = "  ".join(
        f"{n} {statistics.median(t):.2f} [{min(t):.2f}–{max(t):.2f}]" for n, t in times.items()
    )
    print(f"{model} ctx {context} {name}: err torch {err['torch']:.1e} kernel "
          f"{err['kernel']:.1e} | µs/layer {cells}", flush=True)  # fmt: skip
    return {
        "model": model, "context": context, "dtype": name, "chunk": chunk0,
        "max_rel_err": err,
        "us_per_layer": {
            n: {"median": statistics.median(t), "min": min(t), "max": max(t)}
            for n, t in times.items()
        },
    }  # fmt: skip


def main() -> None:
    rows = [
        measure(model, context, name, dtype)
        for model in MODELS
        for context in (128, 1024, 4096)
        for name, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16))
    ]
    with open(os.path.join(os.environ.get("OUT", "."), "decode_attention.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
