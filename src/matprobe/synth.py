"""Synthetic metallic profiling JSONL: realistic, deterministic, with its own answer key.

:func:`generate` emits a plausible Qwen2.5-0.5B (Q8_0) decode run in metallic's
profiling JSONL (DESIGN.md §3.2) — a few header events, a short prompt phase,
then ``tokens × layers`` decoder blocks — and returns, next to the lines, the
:class:`Truth`: what an analyzer must find in them. The truth is recorded from
the generator's own decisions while it emits (which template, which label,
which shape key: written out literally, not derived from the emitted text), so
a test that compares an analyzer's figures with it compares two independent
computations.

:func:`iter_lines` streams the same lines without the truth (for large files)
and :func:`write_profile` writes exactly ``events`` valid events to a file in
constant memory (the speed benchmark and ``matprobe synth-profile``).

Only the standard library is used; one ``random.Random(seed)`` drives every
duration, so a seed always gives the same bytes. Broken lines (when enabled)
come from a second generator and do not move the clock, so removing them from
a broken file gives exactly the clean file of the same seed.
"""

from __future__ import annotations

import calendar
import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from matprobe.errors import MatprobeError

__all__ = [
    "BAD_CATEGORIES",
    "EVENT_TYPES",
    "SECTIONS",
    "SynthConfig",
    "SynthError",
    "Truth",
    "generate",
    "iter_lines",
    "write_profile",
]


class SynthError(MatprobeError, ValueError):
    """Options the generator cannot honour (negative counts and the like)."""


#: Every event type of DESIGN.md §3.2; each appears in a default-config run.
EVENT_TYPES: Final[tuple[str, ...]] = (
    "GpuOpCompleted",
    "InternalKernelCompleted",
    "GpuKernelDispatched",
    "KernelBackendSelected",
    "ResourceCacheAccess",
    "ResourceCacheSummary",
    "CacheEviction",
    "GgufFileMmap",
    "ModelWeights",
    "ForwardStep",
    "TensorMemory",
    "HostMemory",
    "TensorPreparationStats",
)

#: Section names of :attr:`Truth.groups` (all present, possibly empty).
SECTIONS: Final[tuple[str, ...]] = (
    "event_types",
    "sync",
    "internal_by_parent",
    "internal_by_parent_op",
    "kernel_aggregate",
    "gpu_kernels",
    "gpu_kernel_types",
    "gpu_waits",
    "cb_gpu",
    "matmul_backends",
    "matmul_op_backends",
)

#: Categories of :attr:`Truth.bad_lines` (all present, possibly empty).
BAD_CATEGORIES: Final[tuple[str, ...]] = (
    "not_json",
    "not_an_event",
    "unknown_type",
    "missing_field",
)

# Qwen2.5-0.5B (DESIGN.md §2).
HIDDEN: Final = 896
INTERMEDIATE: Final = 4864
HEADS: Final = 14
KV_HEADS: Final = 2
HEAD_DIM: Final = 64
VOCAB: Final = 151936

_Q8_BYTES_PER_WEIGHT: Final = 34 / 32
_START_EPOCH_S: Final = calendar.timegm((2025, 11, 3, 14, 0, 0, 0, 0, 0))

_KERNEL: Final = 0  # GpuOpCompleted counted as a GPU kernel
_WAIT: Final = 1  # ... as a host wait (cb_wait, or a name ending in "wait")
_CB_GPU: Final = 2  # ... as command-buffer GPU time ("/cb_gpu")


@dataclass
class SynthConfig:
    """What to generate. ``tokens`` decode tokens of ``layers`` blocks each."""

    tokens: int = 6
    layers: int = 3
    seed: int = 0
    broken: bool = True
    legacy: bool = True
    prompt_tokens: int = 2

    def validate(self) -> None:
        if self.tokens < 0 or self.prompt_tokens < 0:
            raise SynthError(
                f"tokens and prompt_tokens must be >= 0, got {self.tokens}, {self.prompt_tokens}"
            )
        if self.layers < 1:
            raise SynthError(f"layers must be >= 1, got {self.layers}")


def _empty_groups() -> dict[str, dict[str, list[float]]]:
    return {section: {} for section in SECTIONS}


def _empty_bad() -> dict[str, list[int]]:
    return {category: [] for category in BAD_CATEGORIES}


@dataclass
class Truth:
    """What an analyzer must find in the generated lines.

    ``groups[section][label]`` holds durations in µs, in emission order; every
    name of :data:`SECTIONS` is a key. ``bad_lines[category]`` holds 1-based
    line numbers; every name of :data:`BAD_CATEGORIES` is a key. Blank lines
    appear nowhere (they are neither events nor bad).
    """

    total_events: int = 0
    event_counts: Counter[str] = field(default_factory=Counter)
    groups: dict[str, dict[str, list[float]]] = field(default_factory=_empty_groups)
    backend_by_backend: Counter[str] = field(default_factory=Counter)
    backend_by_reason: Counter[str] = field(default_factory=Counter)
    backend_by_op_backend: Counter[tuple[str, str]] = field(default_factory=Counter)
    shape_backends: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    bad_lines: dict[str, list[int]] = field(default_factory=_empty_bad)
    blank_lines: list[int] = field(default_factory=list)

    def _add(self, section: str, label: str, duration_us: int) -> None:
        self.groups[section].setdefault(label, []).append(float(duration_us))

    def _count(self, event_type: str, duration_us: int | None) -> None:
        self.total_events += 1
        self.event_counts[event_type] += 1
        if duration_us is not None:
            self._add("event_types", event_type, duration_us)


@dataclass(frozen=True)
class _Matmul:
    """One matmul as the profile carries it, plus what the analyzer must make of it.

    ``nest`` is where the shape lives: 0 in the op_name path (legacy), 1 in
    ``data``, 2 in ``data.data``. ``shape_key`` and ``backend`` are written out
    by hand at each call site: they are the answer, not a derivation.
    """

    fields: dict[str, str] | None
    op: str
    backend: str
    shape_key: str
    nest: int = 1
    data_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The serialized tail of the event's data: ``, "data": {...}`` or nothing.
        if self.fields is None or self.nest == 0:
            tail = ""
        elif self.nest == 1:
            tail = ', "data": ' + json.dumps(self.fields)
        else:
            tail = ', "data": ' + json.dumps({"data": self.fields})
        object.__setattr__(self, "data_json", tail)


def _fields(spec: str) -> dict[str, str]:
    """``"op=matmul batch=1 …"`` → the shape dict as the profile carries it (string values)."""
    return dict(item.split("=", 1) for item in spec.split())


def _mm(spec: str, shape_key: str, nest: int = 1) -> _Matmul:
    fields = _fields(spec)
    return _Matmul(fields, fields["op"], fields["backend"], shape_key, nest)


# Static matmuls of a Q8_0 decode step (the shapes and keys of seeds/003).
_QKV = _mm(
    "op=matmul backend=gemv_qkv_fused batch=1 m=1 n=? k=896 tA=? tB=? nq=896 nk=128 nv=128",
    "op=matmul | batch=1 | m=1 | n=? | k=896 | tA=? | tB=? | nk=128 | nq=896 | nv=128",
)
_O_PROJ = _mm(
    "op=matmul backend=gemv batch=1 m=1 n=896 k=896 tA=0 tB=1",
    "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1",
)
_GATE_UP = _mm(
    "op=matmul backend=gemv_q8_fused2 batch=1 m=1 n=? k=896 tA=? tB=? n0=4864 n1=4864",
    "op=matmul | batch=1 | m=1 | n=? | k=896 | tA=? | tB=? | n0=4864 | n1=4864",
)
_DOWN = _mm(
    "op=matmul backend=gemv batch=1 m=1 n=896 k=4864 tA=0 tB=1",
    "op=matmul | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1",
)
_LM_HEAD = _mm(
    "op=matmul backend=mlx batch=1 m=1 n=151936 k=896 tA=0 tB=0 loader=q8nk_split",
    "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=0 | loader=q8nk_split",
)


def _attention_matmuls(context: int) -> tuple[_Matmul, _Matmul]:
    """Q·Kᵀ (shape in ``data``) and P·V (in ``data.data``) over ``context`` positions."""
    scores = _mm(
        f"op=matmul_alpha_beta backend=mlx batch=14 m=1 n={context} k=64 tA=0 tB=1"
        " alpha=0.1250 beta=0.0000 accumulate=0 strided_batch=true loader=dense",
        f"op=matmul_alpha_beta | batch=14 | m=1 | n={context} | k=64 | tA=0 | tB=1"
        " | accumulate=0 | alpha=0.1250 | beta=0.0000 | loader=dense | strided_batch=true",
    )
    values = _mm(
        f"op=matmul_alpha_beta backend=mlx batch=14 m=1 n=64 k={context} tA=0 tB=0"
        " alpha=1.0000 beta=0.0000 loader=dense",
        f"op=matmul_alpha_beta | batch=14 | m=1 | n=64 | k={context} | tA=0 | tB=0"
        " | alpha=1.0000 | beta=0.0000 | loader=dense",
        nest=2,
    )
    return scores, values


_MPS_KERNEL: Final = "metallic::kernels::matmul_mps::MatMulMpsOp"
_MLX_KERNEL: Final = "metallic::kernels::matmul_mlx::MatMulMlxOp"


# Legacy matmuls, shape encoded in the op_name path after ``matmul/`` or
# ``matmul_cache/`` up to the first ``::`` segment (``{b}`` block, ``{L}``
# context): (path, event backend, kernel, op, backend, shape key, mean µs).
# The ``#suffix`` of a segment is dropped, segments without ``=`` are skipped;
# the fifth form has no ``backend=`` segment, so the event's own ``backend``
# field names it; the last lacks batch/tA/tB (``?`` in its key).
_LEGACY: Final[tuple[tuple[str, str, str, str, str, str, float], ...]] = (
    (
        "mlp_block_{b}/matmul/op=matmul/backend=mps/batch=1/m=1/n=9728/k=896/tA=0/tB=1",
        "mps",
        _MPS_KERNEL,
        "matmul",
        "mps",
        "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1",
        325.0,
    ),
    (
        "mlp_block_{b}/matmul_cache/op=matmul_cache/backend=mps/batch=1/m=1/n=896/k=4864"
        "/tA=0/tB=1/strided_batch=false#{b}",
        "mps",
        _MPS_KERNEL,
        "matmul_cache",
        "mps",
        "op=matmul_cache | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1 | strided_batch=false",
        240.0,
    ),
    (
        "attn_block_{b}/matmul/op=matmul_bias_add/backend=mlx/batch=1/m=1/n=1152/k=896"
        "/tA=0/tB=0/bias=1",
        "mlx",
        _MLX_KERNEL,
        "matmul_bias_add",
        "mlx",
        "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | bias=1",
        235.0,
    ),
    (
        "sdpa_block_{b}/matmul_cache/op=matmul_alpha_beta_cache/backend=mlx/batch=14/m=1"
        "/n={L}/k=64/tA=0/tB=1/accumulate=1/alpha=0.1250/beta=0.0000/cache=1/strided_batch=true",
        "mlx",
        _MLX_KERNEL,
        "matmul_alpha_beta_cache",
        "mlx",
        "op=matmul_alpha_beta_cache | batch=14 | m=1 | n={L} | k=64 | tA=0 | tB=1"
        " | accumulate=1 | alpha=0.1250 | beta=0.0000 | cache=1 | strided_batch=true",
        160.0,
    ),
    (
        "attn_block_{b}/matmul/op=matmul/dispatch/batch=1/m=1/n=896/k=896/tA=0/tB=1",
        "mlx",
        _MLX_KERNEL,
        "matmul",
        "mlx",
        "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1",
        234.0,
    ),
    (
        "output/matmul/op=matmul/backend=mps/m=1/n=151936/k=896",
        "mps",
        _MPS_KERNEL,
        "matmul",
        "mps",
        "op=matmul | batch=? | m=1 | n=151936 | k=896 | tA=? | tB=?",
        2507.0,
    ),
)


@dataclass(frozen=True)
class _BlockNames:
    """The op_name strings of one decoder block (formatted once per run)."""

    attn_norm: str
    qkv: str
    rope_q: str
    rope_k: str
    permute: str
    kv_write: str
    rearrange: str
    scores: str
    values: str
    sdpa: str
    o_proj: str
    mlp_norm: str
    gate_up: str
    swiglu: str
    down: str
    forward_cpu: str
    cb_wait: str
    cb_gpu: str
    mlp_cb_wait: str
    mlp_cb_gpu: str
    block_total: str
    forward_cpu_kernel: str


def _block_names(b: int) -> _BlockNames:
    g = f"Generation Loop/block_{b}"

    def doubled(scope: str) -> str:
        return f"{g}/{scope}/{g}/{scope}"

    mlp = doubled(f"mlp_swiglu_block_{b}_op")
    gemv = "metallic::kernels::matmul_gemv"
    return _BlockNames(
        attn_norm=f"{doubled(f'attn_norm_block_{b}_op')}/metallic::kernels::rmsnorm::RMSNormOp",
        qkv=(
            f"{doubled(f'attn_qkv_block_{b}_op')}/{gemv}::qkv::MatmulGemvQkvFusedOp"
            "/matmul/gemv_qkv_fused (Q)"
        ),
        rope_q=f"{doubled(f'attn_rope_q_block_{b}_op')}/metallic::kernels::rope::RoPEOp",
        rope_k=f"{doubled(f'attn_rope_k_block_{b}_op')}/metallic::kernels::rope::RoPEOp",
        permute=f"{doubled(f'attn_permute_block_{b}_op')}/metallic::kernels::permute::PermuteOp",
        kv_write=(
            f"{doubled(f'kv_cache_write_block_{b}_op')}"
            "/metallic::kernels::kv_cache_write::KvCacheWriteOp"
        ),
        rearrange=(
            f"{doubled(f'attn_rearrange_block_{b}_op')}/metallic::kernels::kv_rearrange::KvRearrangeOp"
        ),
        scores=(
            f"{doubled(f'sdpa_block_{b}_op')}/attn_scores_block_{b}_op/{_MLX_KERNEL}/matmul/mlx (D)"
        ),
        values=(
            f"{doubled(f'sdpa_block_{b}_op')}/attn_values_block_{b}_op/{_MLX_KERNEL}/matmul/mlx (D)"
        ),
        sdpa=f"{g}/sdpa_block_{b}_op",
        o_proj=(
            f"{doubled(f'attn_out_block_{b}_op')}/attn_o_proj_block_{b}_op"
            f"/{gemv}::base::MatmulGemvAddmmOp/matmul/gemv_addmm (Q)"
        ),
        mlp_norm=f"{doubled(f'mlp_norm_block_{b}_op')}/metallic::kernels::rmsnorm::RMSNormOp",
        gate_up=(
            f"{mlp}/mlp_gate_up_block_{b}_op/{gemv}::fused::MatmulGemvQ8Fused2Op"
            "/matmul/gemv_q8_fused2 (Q)"
        ),
        swiglu=(
            f"{mlp}/mlp_activation_block_{b}_op/metallic::kernels::swiglu::SwiGLUFusedActivationOp"
        ),
        down=(
            f"{mlp}/mlp_down_proj_block_{b}_op/{gemv}::base::MatmulGemvAddmmOp"
            "/matmul/gemv_addmm (Q)"
        ),
        forward_cpu=f"{g}/forward_cpu_block_{b}",
        cb_wait=f"{g}/cb_wait",
        cb_gpu=f"{g}/cb_gpu",
        mlp_cb_wait=f"{g}/mlp_swiglu_block_{b}_op/cb_wait",
        mlp_cb_gpu=f"{g}/mlp_swiglu_block_{b}_op/cb_gpu",
        block_total=f"block_{b}_total",
        forward_cpu_kernel=f"forward_cpu_block_{b}",
    )


_GEN_OUT: Final = (
    "Generation Loop/generation_step_output/Generation Loop/generation_step_output/"
    f"{_MLX_KERNEL}/matmul/mlx (Q)"
)
_PROMPT_OUT: Final = (
    "Prompt Processing/generation_step_output/Prompt Processing/generation_step_output/"
    f"{_MLX_KERNEL}/matmul/mlx (Q)"
)
_EMBED_KERNEL: Final = "metallic::kernels::embedding_lookup::EmbeddingLookupOp"
_RMSNORM: Final = "metallic::kernels::rmsnorm::RMSNormOp"

# Kinds of broken line, in the order they are planned (one of each per run).
_BROKEN_KINDS: Final[tuple[str, ...]] = (
    "log_line",
    "truncated",
    "json_array",
    "json_null",
    "json_string",
    "no_event",
    "event_not_object",
    "no_type",
    "data_not_object",
    "unknown_type",
    "gpu_no_duration",
    "gpu_no_op_name",
    "internal_no_parent",
    "internal_no_kernel",
    "backend_no_reason",
    "blank",
    "blank",
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

    # --- broken input ----------------------------------------------------

    def broken(self, kind: str) -> None:
        """One planned bad (or blank) line; uses its own RNG and leaves the clock alone."""
        t = self.truth
        ts = self.timestamp()
        category: str | None
        rng = self.bad_rng
        if kind == "blank":
            self.line("")
            self.invalid.append(len(self.out) - 1)
            if t is not None:
                t.blank_lines.append(self.line_no)
            return
        if kind == "log_line":
            text, category = "[metallic] profiling: flushed 4096 events to disk", "not_json"
        elif kind == "truncated":
            full = _envelope(
                ts,
                "GpuOpCompleted",
                json.dumps({"op_name": "Generation Loop/block_1/cb_wait", "duration_us": 301}),
            )
            text, category = full[: len(full) * 2 // 3], "not_json"
        elif kind == "json_array":
            text, category = "[1, 2, 3]", "not_an_event"
        elif kind == "json_null":
            text, category = "null", "not_an_event"
        elif kind == "json_string":
            text, category = json.dumps("GpuOpCompleted"), "not_an_event"
        elif kind == "no_event":
            text = json.dumps(
                {"timestamp": ts, "span_id": None, "parent_span_id": None, "span_name": None}
            )
            category = "not_an_event"
        elif kind == "event_not_object":
            text = json.dumps({"timestamp": ts, "event": "GpuOpCompleted"})
            category = "not_an_event"
        elif kind == "no_type":
            text = json.dumps(
                {"timestamp": ts, "event": {"data": {"op_name": "rogue", "duration_us": 12}}}
            )
            category = "not_an_event"
        elif kind == "data_not_object":
            text = _envelope(ts, "GpuOpCompleted", json.dumps("Generation Loop/block_0/cb_wait"))
            category = "not_an_event"
        else:
            self._broken_event(kind, ts, rng)
            return
        self.line(text)
        self.invalid.append(len(self.out) - 1)
        if t is not None:
            t.bad_lines[category].append(self.line_no)

    def _broken_event(self, kind: str, ts: str, rng: random.Random) -> None:
        """A line that is still a valid event, but of an unknown type or missing a field."""
        t = self.truth
        d = rng.randrange(80, 600)
        data: dict[str, Any]
        if kind == "unknown_type":
            event_type, category = "FutureEventKind", "unknown_type"
            data = {"op_name": "Generation Loop/future_op", "duration_us": d, "version": 2}
        elif kind == "gpu_no_duration":
            event_type, category = "GpuOpCompleted", "missing_field"
            data = {"op_name": "Generation Loop/block_0/sdpa_block_0_op", "backend": "metal"}
        elif kind == "gpu_no_op_name":
            event_type, category = "GpuOpCompleted", "missing_field"
            data = {"backend": "metal", "duration_us": d}
        elif kind == "internal_no_parent":
            event_type, category = "InternalKernelCompleted", "missing_field"
            data = {"internal_kernel_name": "token_decode", "duration_us": d}
        elif kind == "internal_no_kernel":
            event_type, category = "InternalKernelCompleted", "missing_field"
            data = {"parent_op_name": "decoding", "duration_us": d}
        elif kind == "backend_no_reason":
            event_type, category = "KernelBackendSelected", "missing_field"
            data = {"op_name": "sdpa", "backend": "legacy"}
        else:  # pragma: no cover - the plan only holds known kinds
            raise AssertionError(kind)
        self.line(_envelope(ts, event_type, json.dumps(data)))
        if t is None:
            return
        t.bad_lines[category].append(self.line_no)
        has_duration = "duration_us" in data
        t._count(event_type, d if has_duration else None)
        if kind == "gpu_no_op_name":
            t._add("gpu_kernels", "<unknown>", d)
            t._add("gpu_kernel_types", "<unknown>", d)
        elif kind == "internal_no_parent":
            t._add("internal_by_parent", "<unknown>", d)
            t._add("internal_by_parent_op", "<unknown> :: token_decode", d)
            t._add("kernel_aggregate", "token_decode", d)
        elif kind == "internal_no_kernel":
            t._add("internal_by_parent", "decoding", d)
            t._add("internal_by_parent_op", "decoding :: <unknown>", d)
            t._add("kernel_aggregate", "<unknown>", d)
        elif kind == "backend_no_reason":
            t.backend_by_backend["legacy"] += 1
            t.backend_by_reason["<unknown>"] += 1
            t.backend_by_op_backend[("sdpa", "legacy")] += 1


def _broken_plan(config: SynthConfig) -> dict[int, list[str]]:
    """Which broken kinds follow which block slot (token × layer), from the broken RNG."""
    if not config.broken:
        return {}
    slots = max(1, config.tokens * config.layers)
    rng = random.Random(f"plan:{config.seed}")
    plan: dict[int, list[str]] = {}
    for kind in _BROKEN_KINDS:
        plan.setdefault(rng.randrange(slots), []).append(kind)
    return plan


def _batches(config: SynthConfig, truth: Truth | None) -> Iterator[tuple[list[str], list[int]]]:
    """Lines in batches (one per block), each with the positions of its non-event lines.

    The batch lists are reused: a consumer must be done with one before asking
    for the next.
    """
    config.validate()
    e = _Emitter(config, truth)
    out, invalid = e.out, e.invalid
    plan = _broken_plan(config)
    e.header()
    for _ in range(config.prompt_tokens):
        e.prompt_token()
    slot = 0
    for t in range(config.tokens):
        context = config.prompt_tokens + t + 1
        scores, values = _attention_matmuls(context)
        e.token_start(t)
        forward = 0
        for b in range(config.layers):
            forward += e.layer(t, b, context, scores, values)
            for kind in plan.get(slot, ()):
                e.broken(kind)
            slot += 1
            yield out, invalid
            out.clear()
            invalid.clear()
        e.token_end(t, forward)
    if config.tokens == 0:  # no block slots: the plan put every kind in slot 0
        for kind in plan.get(0, ()):
            e.broken(kind)
    if config.broken:
        e.broken("blank")  # a trailing blank line, as editors leave them
    yield out, invalid


def generate(config: SynthConfig) -> tuple[list[str], Truth]:
    """All lines (no trailing newlines) and what an analyzer must find in them."""
    truth = Truth()
    lines = [text for batch, _ in _batches(config, truth) for text in batch]
    return lines, truth


def iter_lines(config: SynthConfig) -> Iterator[str]:
    """The same lines as :func:`generate`, streamed, without the truth."""
    for batch, _ in _batches(config, None):
        yield from batch


#: Fewest valid events one decoder block always emits (legacy off): a lower bound
#: used to pick enough tokens for :func:`write_profile`.
_MIN_EVENTS_PER_LAYER: Final = 28


def write_profile(
    path: str | os.PathLike[str],
    *,
    events: int,
    seed: int = 0,
    broken: bool = False,
    layers: int = 24,
) -> int:
    """Write exactly ``events`` valid events (plus any broken lines) to ``path``.

    Runs a ``layers``-block decode (legacy matmuls on, 4 prompt tokens) long
    enough to reach ``events`` and stops there, mid-token if need be. Streams
    in constant memory. Returns the number of valid events written.
    """
    if events < 0:
        raise SynthError(f"events must be >= 0, got {events}")
    tokens = -(-events // (max(layers, 1) * _MIN_EVENTS_PER_LAYER)) + 1
    config = SynthConfig(
        tokens=tokens, layers=layers, seed=seed, broken=broken, legacy=True, prompt_tokens=4
    )
    config.validate()
    written = 0
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        if events == 0:
            return 0
        for batch, invalid in _batches(config, None):
            valid = len(batch) - len(invalid)
            if written + valid < events:
                written += valid
                handle.write("\n".join(batch))
                handle.write("\n")
                continue
            skip = set(invalid)
            for index, text in enumerate(batch):
                handle.write(text)
                handle.write("\n")
                if index not in skip:
                    written += 1
                    if written == events:
                        break
            break
    if written != events:  # pragma: no cover - the token bound guarantees enough
        raise AssertionError(f"generated only {written} of {events} events")
    return written
