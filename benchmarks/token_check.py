"""Do per-shape figures hold in a decode token? One Qwen2.5-0.5B decode step as ONE
CUDA graph, its weight matmuls dispatched to cuBLAS or to a run's winners.

    PYTHONPATH=src python3 benchmarks/token_check.py REPORT.json [--context 128] [--rounds 30]

The token: 24 layers with their own weights (cold, ~1 GB in fp16), the real op
order with eager elementwise work between the matmuls (RMSNorm, QKV + bias, a
RoPE-like rotation, KV-cache append, 14-head/2-KV-head attention over
``--context`` cached tokens with softmax, o_proj, residual, RMSNorm, gate/up,
SiLU·mul, down, residual), final norm and the LM head. Modes, replayed in
interleaved rounds in one process:

* ``cublas``  — every weight matmul through torch (the report's baseline);
* ``best``    — each shape's winner from the report (own families; pdl=1 allowed);
* ``pdl0``    — each shape's fastest winner launched without PDL;
* ``none``    — the weight matmuls left out (their outputs keep stale values).

The matmul share of a mode is t(mode) − t(none). The prediction is Σ calls per
token × the report's per-shape device time (24 per layer shape, 1 LM head).
Logits of every mode are compared with the cuBLAS mode's.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

import torch

from matprobe.kernels.catalogue import shipped_registry
from matprobe.measure.device import detect
from matprobe.measure.inputs import MatmulInputs
from matprobe.spec import MatmulSpec

HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, VOCAB, LAYERS = 896, 4864, 14, 2, 64, 151936, 24
SHAPES = {
    "qkv": "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | dtype=f16",
    "o_proj": "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16",
    "gate_up": "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1 | dtype=f16",
    "down": "op=matmul | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1 | dtype=f16",
    "lm_head": "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=1 | dtype=f16",
}
CALLS = {"qkv": LAYERS, "o_proj": LAYERS, "gate_up": LAYERS, "down": LAYERS, "lm_head": 1}


def winners(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per shape: the baseline, the best and the best pdl0 variant with device µs."""
    by_key = {entry["spec"]["key"]: entry for entry in report["specs"]}
    out = {}
    for name, key in SHAPES.items():
        entry = by_key[MatmulSpec.parse(key).key()]
        timed = [
            (r["clocks"]["device"]["median_us"], r["variant_id"], r)
            for r in entry["results"]
            if r["status"] == "pass" and r["clocks"].get("device")
        ]
        own = [t for t in timed if not t[2].get("peer") and not t[2].get("baseline")]
        base = [t for t in timed if entry["baseline"] in (t[1], t[2]["family"])]
        best = min(own)
        pdl0 = min(t for t in own if not (t[2].get("params") or {}).get("pdl"))
        out[name] = {"baseline": base[0][:2], "best": best[:2], "pdl0": pdl0[:2]}
    return out


class Token:
    """The decode step; ``matmul(name, layer)`` returns the call for one weight matmul."""

    def __init__(self, context: int) -> None:
        dev, f16 = "cuda", torch.float16
        gen = torch.Generator(device=dev).manual_seed(0)

        def w(*shape: int, scale: float) -> torch.Tensor:
            return ((torch.rand(shape, generator=gen, device=dev) * 2 - 1) * scale).to(f16)

        self.weights = {
            # stored as the spec's layout: qkv tB=0 is [k, n]; the others [n, k]
            "qkv": [w(1, HIDDEN, 1152, scale=HIDDEN**-0.5) for _ in range(LAYERS)],
            "o_proj": [w(1, HIDDEN, HIDDEN, scale=HIDDEN**-0.5) for _ in range(LAYERS)],
            "gate_up": [w(1, 2 * INTER, HIDDEN, scale=HIDDEN**-0.5) for _ in range(LAYERS)],
            "down": [w(1, HIDDEN, INTER, scale=INTER**-0.5) for _ in range(LAYERS)],
            "lm_head": [w(1, VOCAB, HIDDEN, scale=HIDDEN**-0.5)],
        }
        self.bias = [w(1152, scale=0.1) for _ in range(LAYERS)]
        self.norms = [w(HIDDEN, scale=1.0).abs() + 0.5 for _ in range(2 * LAYERS + 1)]
        self.k_cache = [w(KV_HEADS, context + 1, HEAD_DIM, scale=1.0) for _ in range(LAYERS)]
        self.v_cache = [w(KV_HEADS, context + 1, HEAD_DIM, scale=1.0) for _ in range(LAYERS)]
        self.cos = w(HEAD_DIM // 2, scale=1.0)
        self.sin = w(HEAD_DIM // 2, scale=1.0)
        self.context = context
        self.x0 = w(1, 1, HIDDEN, scale=1.0)
        self.h = torch.empty(1, 1, HIDDEN, device=dev, dtype=f16)
        self.outs = {
            "qkv": torch.empty(1, 1, 1152, device=dev, dtype=f16),
            "o_proj": torch.empty(1, 1, HIDDEN, device=dev, dtype=f16),
            "gate_up": torch.empty(1, 1, 2 * INTER, device=dev, dtype=f16),
            "down": torch.empty(1, 1, HIDDEN, device=dev, dtype=f16),
            "lm_head": torch.empty(1, 1, VOCAB, device=dev, dtype=f16),
        }
        # each matmul's input buffer: written by the elementwise op before it
        self.ins = {
            name: torch.empty(1, 1, MatmulSpec.parse(key).k or 0, device=dev, dtype=f16)
            for name, key in SHAPES.items()
        }

    def inputs(self, name: str, layer: int) -> MatmulInputs:
        bias = self.bias[layer] if name == "qkv" else None
        return MatmulInputs(
            self.ins[name],
            self.weights[name][layer],
            bias,
            None,
            1.0,
            0.0,
            ta=False,
            tb=name != "qkv",
        )

    def rms(self, x: torch.Tensor, g: torch.Tensor, out: torch.Tensor) -> None:
        var = x.float().pow(2).mean(-1, keepdim=True)
        out.copy_((x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype) * g)

    def step(self, mm: Callable[[str, int], Callable[[MatmulInputs, Any], None] | None]) -> None:
        """One decode step; ``mm(name, layer)`` is the matmul call or None (left out)."""

        def matmul(name: str, layer: int) -> torch.Tensor:
            fn = mm(name, layer)
            if fn is not None:
                fn(self.inputs(name, layer), self.outs[name])
            return self.outs[name]

        pos = self.context
        self.h.copy_(self.x0)
        for layer in range(LAYERS):
            self.rms(self.h, self.norms[2 * layer], self.ins["qkv"])
            qkv = matmul("qkv", layer)
            q = qkv[..., :HIDDEN].view(HEADS, 1, HEAD_DIM)
            k = qkv[..., HIDDEN : HIDDEN + 128].view(KV_HEADS, 1, HEAD_DIM)
            v = qkv[..., HIDDEN + 128 :].view(KV_HEADS, 1, HEAD_DIM)
            half = HEAD_DIM // 2
            q_rot = torch.cat(
                [
                    q[..., :half] * self.cos - q[..., half:] * self.sin,
                    q[..., half:] * self.cos + q[..., :half] * self.sin,
                ],
                -1,
            )
            k_rot = torch.cat(
                [
                    k[..., :half] * self.cos - k[..., half:] * self.sin,
                    k[..., half:] * self.cos + k[..., :half] * self.sin,
                ],
                -1,
            )
            self.k_cache[layer][:, pos : pos + 1].copy_(k_rot)
            self.v_cache[layer][:, pos : pos + 1].copy_(v)
            keys = self.k_cache[layer].repeat_interleave(HEADS // KV_HEADS, 0)
            values = self.v_cache[layer].repeat_interleave(HEADS // KV_HEADS, 0)
            scores = torch.bmm(q_rot, keys.transpose(1, 2)) * HEAD_DIM**-0.5
            probs = torch.softmax(scores.float(), -1).to(scores.dtype)
            attn = torch.bmm(probs, values)  # [14, 1, 64]
            self.ins["o_proj"].copy_(attn.reshape(1, 1, HIDDEN))
            o = matmul("o_proj", layer)
            self.h.add_(o)
            self.rms(self.h, self.norms[2 * layer + 1], self.ins["gate_up"])
            gu = matmul("gate_up", layer)
            torch.mul(
                torch.nn.functional.silu(gu[..., :INTER]), gu[..., INTER:], out=self.ins["down"]
            )
            d = matmul("down", layer)
            self.h.add_(d)
        self.rms(self.h, self.norms[-1], self.ins["lm_head"])
        matmul("lm_head", 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with open(args.report, encoding="utf-8") as handle:
        report = json.load(handle)
    picks = winners(report)
    device = detect("cuda")
    registry = shipped_registry()
    token = Token(args.context)
    built: dict[str, Any] = {}

    def kernel(variant_id: str, name: str) -> Any:
        if (variant_id, name) not in built:
            spec = MatmulSpec.parse(SHAPES[name])
            built[variant_id, name] = registry.variant(variant_id).build(spec, device)
        return built[variant_id, name]

    modes = {
        "cublas": lambda name, layer: kernel(picks[name]["baseline"][1], name),
        "best": lambda name, layer: kernel(picks[name]["best"][1], name),
        "pdl0": lambda name, layer: kernel(picks[name]["pdl0"][1], name),
        "none": lambda name, layer: None,
    }
    graphs, logits = {}, {}
    for mode, mm in modes.items():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                token.step(mm)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            token.step(mm)
        graph.replay()
        torch.cuda.synchronize()
        logits[mode] = token.outs["lm_head"].float().clone()
        graphs[mode] = graph
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for r in range(args.rounds):
        order = list(modes)[r % 4 :] + list(modes)[: r % 4]
        for mode in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[mode].replay()
            end.record()
            end.synchronize()
            times[mode].append(start.elapsed_time(end) * 1000.0)

    def med(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    def spread(values: list[float]) -> str:
        s = sorted(values)
        return f"p10–p90 {s[len(s) // 10]:.0f}–{s[(9 * len(s)) // 10]:.0f}"

    rest = med(times["none"])
    print(
        f"device {device.name}; torch {torch.__version__}; context {args.context}; "
        f"{args.rounds} interleaved rounds"
    )
    print(
        f"{'mode':8s} {'µs/token':>9s} {'spread':>18s} {'matmul µs':>10s} {'vs cublas':>10s} "
        f"{'predicted':>10s}  logits max |Δ| vs cublas"
    )
    base_share = med(times["cublas"]) - rest
    predicted = {
        mode: sum(CALLS[n] * picks[n][key][0] for n in SHAPES)
        for mode, key in (("cublas", "baseline"), ("best", "best"), ("pdl0", "pdl0"))
    }
    result = {}
    for mode in modes:
        share = med(times[mode]) - rest
        diff = float((logits[mode] - logits["cublas"]).abs().max())
        finite = bool(torch.isfinite(logits[mode]).all())
        pred = predicted.get(mode)
        pred_ratio = pred / predicted["cublas"] if pred else None
        print(
            f"{mode:8s} {med(times[mode]):9.1f} {spread(times[mode]):>18s} {share:10.1f} "
            f"{share / base_share:9.3f}× "
            + (f"{pred_ratio:9.3f}×" if pred_ratio else f"{'-':>10s}")
            + f"  {diff:.3g}{'' if finite else ' NON-FINITE'}"
        )
        result[mode] = {
            "us": med(times[mode]),
            "share_us": share,
            "samples": times[mode],
            "predicted_share_us": pred,
            "logits_max_abs_diff": diff,
        }
    print("winners:", {n: (p["best"][1], p["pdl0"][1]) for n, p in picks.items()})
    print(
        "predicted Σ µs (calls × per-shape device µs):",
        {m: round(v, 1) for m, v in predicted.items()},
    )
    if not all(math.isfinite(r["logits_max_abs_diff"]) for r in result.values() if r):
        raise SystemExit("a mode produced non-finite logits")


if __name__ == "__main__":
    main()
