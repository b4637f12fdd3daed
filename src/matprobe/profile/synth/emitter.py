"""Emission of events: :class:`_Emitter` writes metallic JSONL lines and, when
asked, records the truth beside them (the broken lines: :mod:`.broken`)."""

from __future__ import annotations

import json
import random
import time
from typing import Any

from matprobe.profile.synth.model import (
    _CB_GPU,
    _KERNEL,
    _Q8_BYTES_PER_WEIGHT,
    _START_EPOCH_S,
    _WAIT,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    KV_HEADS,
    VOCAB,
    SynthConfig,
    Truth,
)
from matprobe.profile.synth.shapes import (
    _DOWN,
    _EMBED_KERNEL,
    _GATE_UP,
    _GEN_OUT,
    _LEGACY,
    _LM_HEAD,
    _O_PROJ,
    _PROMPT_OUT,
    _QKV,
    _RMSNORM,
    _block_names,
    _Matmul,
)


def _envelope(timestamp: str, event_type: str, data_json: str) -> str:
    return (
        f'{{"timestamp": "{timestamp}", "span_id": null, "parent_span_id": null, '
        f'"span_name": null, "event": {{"type": "{event_type}", "data": {data_json}}}}}'
    )


class _Emitter:
    """Builds lines (into ``self.out``) and, when asked, the truth beside them."""

    def __init__(self, config: SynthConfig, truth: Truth | None) -> None:
        self.cfg = config
        self.truth = truth
        self.rng = random.Random(config.seed)
        self.bad_rng = random.Random(f"broken:{config.seed}")
        self.out: list[str] = []
        self.invalid: list[int] = []  # positions in ``out`` of lines that are not events
        self.line_no = 0
        self.emitted = 0  # events from the main stream (broken lines excluded)
        self.clock_us = 0
        self._ts_second = -1
        self._ts_prefix = ""
        self.blocks = [_block_names(b) for b in range(config.layers)]
        self.sdpa_hits = 0
        self.sdpa_misses = 0
        self.prep_hits = 0
        self.prep_misses = 0
        self.legacy_index = 0

    # --- low level -------------------------------------------------------

    def timestamp(self) -> str:
        second, micro = divmod(self.clock_us, 1_000_000)
        if second != self._ts_second:
            self._ts_second = second
            self._ts_prefix = time.strftime(
                "%Y-%m-%dT%H:%M:%S", time.gmtime(_START_EPOCH_S + second)
            )
        return f"{self._ts_prefix}.{micro:06d}Z"

    def duration(self, mean: float, spread: float = 0.3) -> int:
        """A µs duration around ``mean``: uniform ±spread/2, 1 % spikes of 2–6×."""
        r = self.rng.random()
        value = mean * (1.0 - spread / 2 + spread * r)
        if r < 0.01:
            value *= 2.0 + 400.0 * r
        return max(0, int(value))

    def line(self, text: str) -> None:
        self.out.append(text)
        self.line_no += 1

    def event(self, event_type: str, data: dict[str, Any], duration_us: int | None) -> None:
        """A valid event line; advances the clock by its duration and a small gap."""
        self.event_json(event_type, json.dumps(data), duration_us)

    def event_json(self, event_type: str, data_json: str, duration_us: int | None) -> None:
        """:meth:`event` with the data already serialized (the hot path)."""
        self.line(_envelope(self.timestamp(), event_type, data_json))
        self.emitted += 1
        self.clock_us += (duration_us or 0) + 3 + (self.emitted * 7919) % 23
        if self.truth is not None:
            self.truth._count(event_type, duration_us)

    # --- event kinds ------------------------------------------------------

    def gpu(
        self,
        op_name: str,
        mean: float,
        *,
        kind: int = _KERNEL,
        kernel_type: str = "",
        matmul: _Matmul | None = None,
        backend: str = "metal",
        sync: bool = False,
        spread: float = 0.3,
    ) -> int:
        d = self.duration(mean, spread)
        # Names and backends come from this module's templates: plain ASCII with
        # no quote or backslash, so they need no JSON escaping (tests check).
        tail = matmul.data_json if matmul is not None else ""
        self.event_json(
            "GpuOpCompleted",
            f'{{"op_name": "{op_name}", "backend": "{backend}", "duration_us": {d}{tail}}}',
            d,
        )
        t = self.truth
        if t is not None:
            if kind == _CB_GPU:
                t._add("cb_gpu", op_name, d)
            elif kind == _WAIT:
                t._add("gpu_waits", op_name, d)
            else:
                t._add("gpu_kernels", op_name, d)
                t._add("gpu_kernel_types", kernel_type, d)
                if matmul is not None:
                    t._add("matmul_backends", matmul.backend, d)
                    t._add("matmul_op_backends", f"{matmul.op} @ {matmul.backend}", d)
                    per_backend = t.shape_backends.setdefault(matmul.shape_key, {})
                    per_backend.setdefault(matmul.backend, []).append(float(d))
            if sync:
                t._add("sync", "sync", d)
        return d

    def internal(self, parent: str, kernel: str, duration_us: int, *, sync: bool = False) -> None:
        data = {
            "parent_op_name": parent,
            "internal_kernel_name": kernel,
            "duration_us": duration_us,
        }
        self.event("InternalKernelCompleted", data, duration_us)
        t = self.truth
        if t is not None:
            t._add("internal_by_parent", parent, duration_us)
            t._add("internal_by_parent_op", f"{parent} :: {kernel}", duration_us)
            t._add("kernel_aggregate", kernel, duration_us)
            if sync:
                t._add("sync", "sync", duration_us)

    def backend_selected(self, op_name: str, backend: str, reason: str) -> None:
        data = {"op_name": op_name, "backend": backend, "reason": reason}
        self.event("KernelBackendSelected", data, None)
        t = self.truth
        if t is not None:
            t.backend_by_backend[backend] += 1
            t.backend_by_reason[reason] += 1
            t.backend_by_op_backend[(op_name, backend)] += 1

    # --- the run ---------------------------------------------------------

    def header(self) -> None:
        cfg = self.cfg
        q8 = _Q8_BYTES_PER_WEIGHT
        per_layer = int(
            (HIDDEN * 1152 + HIDDEN * HIDDEN + HIDDEN * 2 * INTERMEDIATE + INTERMEDIATE * HIDDEN)
            * q8
        ) + 4 * (2 * HIDDEN + 1152)
        embedding = int(VOCAB * HIDDEN * q8)
        weights = {
            "token_embedding": embedding,
            "blocks": per_layer * cfg.layers,
            "output_norm": 4 * HIDDEN,
            "lm_head": embedding,
        }
        self.event(
            "GgufFileMmap",
            {"path": "models/qwen2.5-0.5b-instruct-q8_0.gguf", "size_bytes": 531_068_672},
            None,
        )
        self.event(
            "ModelWeights", {"total_bytes": sum(weights.values()), "breakdown": weights}, None
        )
        max_context = cfg.prompt_tokens + cfg.tokens + 1
        kv = 2 * cfg.layers * KV_HEADS * HEAD_DIM * 2 * max(max_context, 2048)
        tensors = {"kv_cache": kv, "activations": 2 * 4 * HIDDEN * 16, "logits": 4 * VOCAB}
        self.event(
            "TensorMemory", {"total_bytes": sum(tensors.values()), "breakdown": tensors}, None
        )
        forward = {
            "embedding": HIDDEN * 2,
            "attention": HEADS * HEAD_DIM * 2,
            "mlp": 2 * INTERMEDIATE * 2,
            "logits": VOCAB * 4,
        }
        self.event(
            "ForwardStep", {"total_bytes": sum(forward.values()), "breakdown": forward}, None
        )
        self.host_memory()
        for op_name, backend, reason in (
            ("matmul_qkv", "gemv_qkv_fused", "q8_weights"),
            ("matmul_gate_up", "gemv_q8_fused2", "q8_weights"),
            ("matmul_o_proj", "gemv", "q8_weights"),
            ("matmul_down", "gemv", "q8_weights"),
            ("lm_head", "mlx", "large_n"),
            ("matmul_alpha_beta", "mlx", "default_auto"),
        ):
            self.backend_selected(op_name, backend, reason)

    def host_memory(self) -> None:
        used = 180_000_000 + self.rng.randrange(0, 4_000_000)
        self.event(
            "HostMemory",
            {
                "total_bytes": used + 412_000_000,
                "pool_used_bytes": used,
                "pool_capacity_bytes": 268_435_456,
                "pool_chunks": 4,
                "rss_bytes": used + 612_000_000,
            },
            None,
        )

    def prompt_token(self) -> None:
        self.internal("generation_loop", "embedding", self.duration(148.0))
        self.gpu(
            "Prompt Processing/embedding_op/" + _EMBED_KERNEL,
            150.0,
            kernel_type=_EMBED_KERNEL,
        )
        self.gpu(_PROMPT_OUT, 2380.0, kernel_type="mlx (Q)", matmul=_LM_HEAD, backend="mlx")
        self.gpu("Prompt Processing/generation_step_output/cb_wait", 2380.0, kind=_WAIT)
        self.gpu("Prompt Processing/generation_step_output/cb_gpu", 2250.0, kind=_CB_GPU)

    def token_start(self, t: int) -> None:
        self.internal("generation_loop", "embedding", self.duration(148.0))
        self.gpu("Generation Loop/embedding_op/" + _EMBED_KERNEL, 150.0, kernel_type=_EMBED_KERNEL)
        self.gpu("tensor_staging_prepare", 480.0, spread=1.6, kernel_type="tensor_staging_prepare")
        hits = 3 * self.cfg.layers + (t % 3)
        misses = 1 if t % 4 == 0 else 0
        self.prep_hits += hits
        self.prep_misses += misses
        total = self.prep_hits + self.prep_misses
        self.event(
            "TensorPreparationStats",
            {
                "cache_hits": self.prep_hits,
                "cache_misses": self.prep_misses,
                "hit_rate": round(100.0 * self.prep_hits / total, 2),
                "total_prepare_us": 40 * total + self.rng.randrange(0, 200),
                "avg_prepare_us": 40.0,
            },
            None,
        )

    def layer(self, t: int, b: int, context: int, scores: _Matmul, values: _Matmul) -> int:
        """One decoder block; returns its GPU time (µs) for the block total."""
        n = self.blocks[b]
        g = self.gpu
        rms = _RMSNORM
        rope = "metallic::kernels::rope::RoPEOp"
        total = g(n.attn_norm, 359.0, kernel_type=rms)
        total += g(n.qkv, 170.0, kernel_type="gemv_qkv_fused (Q)", matmul=_QKV, backend="gemv")
        total += g(n.rope_q, 137.0, kernel_type=rope)
        total += g(n.rope_k, 137.0, kernel_type=rope)
        total += g(n.permute, 140.0, kernel_type="metallic::kernels::permute::PermuteOp")
        total += g(
            n.kv_write, 141.0, kernel_type="metallic::kernels::kv_cache_write::KvCacheWriteOp"
        )
        for _ in range(3):
            total += g(
                n.rearrange, 142.0, kernel_type="metallic::kernels::kv_rearrange::KvRearrangeOp"
            )
        self.backend_selected("sdpa", "legacy", "default_auto")
        hit = t > 0
        if hit:
            self.sdpa_hits += 1
        else:
            self.sdpa_misses += 1
        self.event(
            "ResourceCacheAccess",
            {
                "cache_key": f"sdpa:block_{b}:heads={HEADS}:head_dim={HEAD_DIM}:causal=1",
                "hit": hit,
                "bytes": HEADS * HEAD_DIM * 4 * 64,
            },
            None,
        )
        attention_mean = 140.0 + 0.05 * context
        total += g(n.scores, attention_mean, kernel_type="mlx (D)", matmul=scores, backend="mlx")
        total += g(n.values, attention_mean, kernel_type="mlx (D)", matmul=values, backend="mlx")
        self.event(
            "GpuKernelDispatched",
            {
                "kernel_name": "sdpa_softmax",
                "op_name": n.sdpa,
                "thread_groups": [HEADS, (context + 31) // 32, 1],
            },
            None,
        )
        total += g(n.sdpa, 147.0, kernel_type="sdpa")
        total += g(n.o_proj, 206.0, kernel_type="gemv_addmm (Q)", matmul=_O_PROJ, backend="gemv")
        g(n.cb_wait, 296.0, kind=_WAIT)
        g(n.cb_gpu, 170.0, kind=_CB_GPU)
        total += g(n.mlp_norm, 359.0, kernel_type=rms)
        total += g(
            n.gate_up, 293.0, kernel_type="gemv_q8_fused2 (Q)", matmul=_GATE_UP, backend="gemv"
        )
        total += g(
            n.swiglu, 143.0, kernel_type="metallic::kernels::swiglu::SwiGLUFusedActivationOp"
        )
        total += g(n.down, 443.0, kernel_type="gemv_addmm (Q)", matmul=_DOWN, backend="gemv")
        g(n.mlp_cb_wait, 293.0, kind=_WAIT)
        g(n.mlp_cb_gpu, 165.0, kind=_CB_GPU)
        if self.cfg.legacy:
            path, backend, kernel, op, mm_backend, key, mean = _LEGACY[
                self.legacy_index % len(_LEGACY)
            ]
            self.legacy_index += 1
            name = f"Generation Loop/block_{b}/{path.format(b=b, L=context)}/{kernel}"
            mm = _Matmul(None, op, mm_backend, key.format(L=context), nest=0)
            total += g(name, mean, kernel_type=kernel, matmul=mm, backend=backend)
        cpu = g(n.forward_cpu, 164.0, kernel_type="forward_cpu", backend="cpu")
        self.internal("generation_loop", n.forward_cpu_kernel, cpu)
        block_total = total + cpu + self.duration(250.0)
        self.internal("generation_loop", n.block_total, block_total)
        return block_total

    def token_end(self, t: int, forward_us: int) -> None:
        g = self.gpu
        cfg = self.cfg
        last = t == cfg.tokens - 1
        forward_us += g("Generation Loop/final_norm_op/" + _RMSNORM, 359.0, kernel_type=_RMSNORM)
        forward_us += g(_GEN_OUT, 2360.0, kernel_type="mlx (Q)", matmul=_LM_HEAD, backend="mlx")
        g("Generation Loop/generation_step_output/cb_wait", 2358.0, kind=_WAIT)
        g("Generation Loop/generation_step_output/cb_gpu", 2221.0, kind=_CB_GPU)
        g("Generation Loop/cb_wait", 430.0, kind=_WAIT, spread=1.8)
        g("Generation Loop/cb_gpu", 330.0, kind=_CB_GPU, spread=1.8)
        sample = g("sample_topk_fused", 1249.0, kernel_type="sample_topk_fused")
        self.event(
            "GpuKernelDispatched",
            {
                "kernel_name": "sample_topk_fused",
                "op_name": "sample_topk_fused",
                "thread_groups": [1, 1, 1],
            },
            None,
        )
        g("tensor_staging_flush", 291.0, spread=1.6, kernel_type="tensor_staging_flush")
        g("Generation Loop/staging_fence_wait", 40.0, kind=_WAIT, spread=1.0)
        g("Unscoped/cb_wait", 352.0, kind=_WAIT, spread=2.0)
        g("Unscoped/cb_gpu", 1192.0, kind=_CB_GPU, spread=2.0)
        if t == 0 or self.rng.random() < 0.25:
            g(
                "Generation Loop/generation_step_output/sync_barrier",
                35.0,
                kernel_type="sync_barrier",
                sync=True,
            )
        self.internal("generation_loop", "cb_wait", self.duration(300.0, 1.5))
        self.internal("generation_loop", "sync_barrier", self.duration(20.0, 1.0), sync=True)
        forward = forward_us + self.duration(1200.0)
        self.internal("generation_loop", "forward_step_total", forward)
        sampling = self.duration(3.0, 1.2)
        self.internal("sampling", "sample_topk", sampling)
        self.internal("sampling", "next_token_ready_latency", self.duration(6.0, 1.2))
        self.internal("decoding", "token_decode", self.duration(2.0, 1.0))
        self.internal("generation_loop", "iteration_total", forward + sample + sampling + 900)
        if t % 2 == 0:
            self.host_memory()
        if t % 4 == 0 or last:
            total = self.sdpa_hits + self.sdpa_misses
            self.event(
                "ResourceCacheSummary",
                {
                    "cache": "sdpa",
                    "hits": self.sdpa_hits,
                    "misses": self.sdpa_misses,
                    "hit_rate": round(100.0 * self.sdpa_hits / max(total, 1), 2),
                    "size": cfg.layers,
                },
                None,
            )
        if t % 5 == 4 or last:
            self.event(
                "CacheEviction",
                {
                    "cache": "tensor_staging",
                    "strategy": "lru",
                    "count": 2 + t % 3,
                    "reason": "capacity",
                    "size_after": 62,
                },
                None,
            )
