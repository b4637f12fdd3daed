"""Decode-step matmul shapes derived from a model's config.

A profile only shows the shapes one run happened to hit, on one model, at the
context lengths it reached. To reason about other models (or the same model at
another context length) we derive the shapes of one decode step — one new
token, so m = 1 — straight from the published ``config.json`` numbers, in the
same form a profile prints them (DESIGN.md §2), with how many times each runs
per token.

The call count cannot live in :class:`~matprobe.spec.Provenance`: its
``count`` is the sum of production backend timings, and a modelled shape has
none. So each spec is paired with its count and role in a :class:`ModelShape`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from matprobe.errors import MatprobeError
from matprobe.spec import DTYPES, MatmulSpec, Provenance

#: What each :class:`ModelShape` computes. ``kv`` is the unfused K and V
#: projections (equal shapes, so one spec run twice per layer); ``gate|up`` is
#: likewise the unfused gate and up projections.
ROLES: tuple[str, ...] = (
    "qkv",
    "q",
    "kv",
    "attn_qk",
    "attn_pv",
    "o_proj",
    "gate_up",
    "gate+up",
    "down",
    "lm_head",
    # the decode layer's fused sites (``decode_specs(..., layer=True)``)
    "norm+qkv",
    "o_proj+res",
    "norm+swiglu",
    "down+res",
    "norm+lm_head",
)

#: The KV cache is not quantized: with Q8_0 weights, attention stays in this.
ATTENTION_DTYPE_Q8_0 = "f16"


@dataclass(frozen=True)
class ModelConfig:
    """The few ``config.json`` numbers that fix a decoder's matmul shapes.

    ``head_dim`` is stored rather than derived because not every family has
    ``hidden == heads * head_dim``. ``tie_embeddings`` does not change the
    shapes (the lm_head matmul runs either way) but does change the parameter
    count, so it is kept for cross-checks against published sizes.
    """

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    layers: int
    qkv_bias: bool
    tie_embeddings: bool
    source: str = ""
    #: the RMSNorms' ε (config.json's ``rms_norm_eps``)
    rms_eps: float = 1e-6

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise MatprobeError(f"model name must be a non-empty string, got {self.name!r}")
        if isinstance(self.rms_eps, bool) or not isinstance(self.rms_eps, float | int):
            raise MatprobeError(f"model {self.name}: rms_eps must be a number")
        if not (math.isfinite(self.rms_eps) and self.rms_eps > 0):
            raise MatprobeError(f"model {self.name}: rms_eps must be > 0, got {self.rms_eps!r}")
        for f in fields(self):
            if f.name in ("name", "qkv_bias", "tie_embeddings", "source", "rms_eps"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MatprobeError(
                    f"model {self.name}: {f.name} must be a positive integer, got {value!r}"
                )
        for name in ("qkv_bias", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise MatprobeError(f"model {self.name}: {name} must be a bool")
        if self.heads % self.kv_heads:
            raise MatprobeError(
                f"model {self.name}: heads ({self.heads}) must be a multiple of "
                f"kv_heads ({self.kv_heads}) for grouped-query attention"
            )


def _published(
    owner: str,
    model: str,
    hidden: int,
    intermediate: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
    layers: int,
    *,
    qkv_bias: bool,
    rms_eps: float,
    tie_embeddings: bool,
) -> ModelConfig:
    """The config of ``owner``'s ``model`` (``Qwen``, ``Qwen2.5-0.5B``), named ``model``
    in lowercase."""
    return ModelConfig(
        model.lower(), hidden, intermediate, heads, kv_heads, head_dim, vocab, layers,
        qkv_bias=qkv_bias, tie_embeddings=tie_embeddings, source=f"{owner}/{model} config.json",
        rms_eps=rms_eps,
    )  # fmt: skip


#: What a family's configs share: Qwen2.5 has a bias on Q, K and V, Llama 3.x none;
#: ``rms_norm_eps`` is 1e-6 for Qwen2.5, 1e-5 for Llama 3.x.
_qwen2_5 = functools.partial(_published, "Qwen", qkv_bias=True, rms_eps=1e-6)
_llama3 = functools.partial(_published, "meta-llama", qkv_bias=False, rms_eps=1e-5)

#: Published configs, keyed by lowercase name. Small models tie lm_head to the
#: embedding.
MODELS: dict[str, ModelConfig] = {
    config.name: config
    for config in (
        _qwen2_5("Qwen2.5-0.5B", 896, 4864, 14, 2, 64, 151936, 24, tie_embeddings=True),
        _qwen2_5("Qwen2.5-1.5B", 1536, 8960, 12, 2, 128, 151936, 28, tie_embeddings=True),
        _qwen2_5("Qwen2.5-3B", 2048, 11008, 16, 2, 128, 151936, 36, tie_embeddings=True),
        _qwen2_5("Qwen2.5-7B", 3584, 18944, 28, 4, 128, 152064, 28, tie_embeddings=False),
        _llama3("Llama-3.2-1B", 2048, 8192, 32, 8, 64, 128256, 16, tie_embeddings=True),
        _llama3("Llama-3.2-3B", 3072, 8192, 24, 8, 128, 128256, 28, tie_embeddings=True),
        _llama3("Llama-3.1-8B", 4096, 14336, 32, 8, 128, 128256, 32, tie_embeddings=False),
    )
}


def get_model(name: str) -> ModelConfig:
    """Look a model up by name, ignoring case (users type ``Qwen2.5-0.5B``)."""
    config = MODELS.get(name.strip().lower())
    if config is None:
        raise MatprobeError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return config


@dataclass(frozen=True)
class ModelShape:
    """One matmul of a decode step: its spec, calls per token, and role."""

    spec: MatmulSpec
    count: int
    role: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise MatprobeError(f"unknown role {self.role!r}; known: {', '.join(ROLES)}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise MatprobeError(f"count must be a positive integer, got {self.count!r}")


def _attention_specs(
    c: ModelConfig, context: int, dtype: str, provenance: Provenance
) -> tuple[MatmulSpec, MatmulSpec]:
    """Attention's two matmuls over ``context`` cached positions: Q·Kᵀ (scores,
    scaled by 1/√head_dim) and P·V. Every query head against every cached key
    (GQA repeats the KV heads), so the batch is the query heads, as in the
    profile."""

    def attention(n: int, k: int, *, tb: bool, alpha: float) -> MatmulSpec:
        return MatmulSpec(
            op="matmul_alpha_beta",
            batch=c.heads,
            m=1,
            n=n,
            k=k,
            tA=False,
            tB=tb,
            alpha=alpha,
            beta=0.0,
            strided_batch=True,
            dtype=dtype,
            provenance=provenance,
        )

    qk = attention(context, c.head_dim, tb=True, alpha=1.0 / math.sqrt(c.head_dim))
    pv = attention(c.head_dim, context, tb=False, alpha=1.0)
    return qk, pv


def decode_specs(
    config: ModelConfig,
    *,
    context: int = 128,
    dtype: str = "f16",
    fuse_qkv: bool = True,
    fuse_gate_up: bool = True,
    layer: bool = False,
) -> list[ModelShape]:
    """The matmuls of one decode step (one new token), in the order they run.

    Per layer: the Q/K/V projection, attention Q·Kᵀ and P·V over ``context``
    cached positions, the output projection, the gate/up projection and the
    down projection; then lm_head once. Counts are calls per token.

    Layouts follow the profile (DESIGN.md §2): weights are [N, K] (tB=1)
    except the fused QKV weight, which the profiled backend stores [K, N]
    (in f16/bf16/f32; Q8_0 weights are all [N, K]).
    Unfused K and V (and gate and up) have equal shapes, so each pair is one
    spec run twice per layer rather than two equal specs.

    With ``dtype="q8_0"`` only the weight matmuls are quantized: attention
    reads the KV cache, which stays f16.

    ``layer``: the decode layer's fused sites instead (:func:`_layer_sites`).
    """
    if dtype not in DTYPES:
        raise MatprobeError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise MatprobeError(f"context must be an integer >= 1, got {context!r}")

    c = config
    source = f"model:{c.name} context={context} dtype={dtype}"
    if not fuse_qkv:
        source += " fuse_qkv=0"
    if not fuse_gate_up:
        source += " fuse_gate_up=0"
    if layer:
        if not (fuse_qkv and fuse_gate_up):
            raise MatprobeError("the layer's sites fuse Q/K/V and gate/up: leave both fused")
        source += " layer=1"
    provenance = Provenance(backends=(), source=source)
    attn_dtype = ATTENTION_DTYPE_Q8_0 if dtype == "q8_0" else dtype
    # The bias is implied by the op; leaving the ``bias`` field unset keeps the
    # key identical to the profile's (``op=matmul_bias_add | ... | tB=0``).
    qkv_op = "matmul_bias_add" if c.qkv_bias else "matmul"

    def weight(op: str, n: int, k: int, *, tb: bool = True) -> MatmulSpec:
        return MatmulSpec(
            op=op, batch=1, m=1, n=n, k=k, tA=False, tB=tb, dtype=dtype, provenance=provenance
        )

    qk, pv = _attention_specs(c, context, attn_dtype, provenance)
    if layer:
        shapes = _layer_sites(c, weight, qkv_op, qk, pv)
    else:
        shapes = _plain_qkv(c, weight, qkv_op, fuse_qkv=fuse_qkv, quantized=dtype == "q8_0")
        shapes += _plain_rest(c, weight, qk, pv, fuse_gate_up=fuse_gate_up)
    # Each spec carries its calls per token, so reports can weigh savings.
    return [
        replace(s, spec=s.spec.with_provenance(Provenance(source=source, calls=s.count)))
        for s in shapes
    ]


def _plain_qkv(
    c: ModelConfig,
    weight: Callable[..., MatmulSpec],
    qkv_op: str,
    *,
    fuse_qkv: bool,
    quantized: bool,
) -> list[ModelShape]:
    """The Q/K/V projection as the profile shows it: one fused matmul, or Q and K|V."""
    if fuse_qkv:
        n_qkv = (c.heads + 2 * c.kv_heads) * c.head_dim
        # Q8_0 blocks run along K, so a quantized weight is always stored [N, K]
        # (the quantized profile's fused QKV reads it so).
        return [ModelShape(weight(qkv_op, n_qkv, c.hidden, tb=quantized), c.layers, "qkv")]
    kv = weight(qkv_op, c.kv_heads * c.head_dim, c.hidden)
    return [
        ModelShape(weight(qkv_op, c.heads * c.head_dim, c.hidden), c.layers, "q"),
        ModelShape(kv, 2 * c.layers, "kv"),
    ]


def _plain_rest(
    c: ModelConfig,
    weight: Callable[..., MatmulSpec],
    qk: MatmulSpec,
    pv: MatmulSpec,
    *,
    fuse_gate_up: bool,
) -> list[ModelShape]:
    """A layer after its Q/K/V projection, one matmul per op the profile shows."""
    shapes = [ModelShape(qk, c.layers, "attn_qk"), ModelShape(pv, c.layers, "attn_pv")]
    shapes.append(ModelShape(weight("matmul", c.hidden, c.heads * c.head_dim), c.layers, "o_proj"))
    if fuse_gate_up:
        gate_up = weight("matmul", 2 * c.intermediate, c.hidden)
        shapes.append(ModelShape(gate_up, c.layers, "gate_up"))
    else:
        gate = weight("matmul", c.intermediate, c.hidden)
        shapes.append(ModelShape(gate, 2 * c.layers, "gate+up"))
    shapes.append(ModelShape(weight("matmul", c.hidden, c.intermediate), c.layers, "down"))
    shapes.append(ModelShape(weight("matmul", c.vocab, c.hidden), 1, "lm_head"))
    return shapes


def _layer_sites(
    c: ModelConfig,
    weight: Callable[..., MatmulSpec],
    qkv_op: str,
    qk: MatmulSpec,
    pv: MatmulSpec,
) -> list[ModelShape]:
    """The decode layer as a fused engine runs it, every weight stored ``[n, k]``:
    the RMSNorm folded into the QKV projection (with its bias), into gate/up with
    SwiGLU (``matmul_swiglu``) and into the LM head (the final norm); the residual
    add folded into o_proj and down (C₀ the residual stream, α = β = 1). RoPE, the
    KV append and attention stay apart: they are not matmuls (attention's two are
    listed as the profile shows them)."""
    eps = c.rms_eps
    n_qkv = (c.heads + 2 * c.kv_heads) * c.head_dim

    def residual(n: int, k: int) -> MatmulSpec:
        return replace(weight("matmul_alpha_beta", n, k), alpha=1.0, beta=1.0)

    swiglu = replace(
        weight("matmul_swiglu", 2 * c.intermediate, c.hidden),
        n0=c.intermediate,
        n1=c.intermediate,
        rmsnorm=eps,
    )
    return [
        ModelShape(replace(weight(qkv_op, n_qkv, c.hidden), rmsnorm=eps), c.layers, "norm+qkv"),
        ModelShape(qk, c.layers, "attn_qk"),
        ModelShape(pv, c.layers, "attn_pv"),
        ModelShape(residual(c.hidden, c.heads * c.head_dim), c.layers, "o_proj+res"),
        ModelShape(swiglu, c.layers, "norm+swiglu"),
        ModelShape(residual(c.hidden, c.intermediate), c.layers, "down+res"),
        ModelShape(replace(weight("matmul", c.vocab, c.hidden), rmsnorm=eps), 1, "norm+lm_head"),
    ]
