"""The decode step's state: every layer's weights, the KV cache, RoPE tables and
the new token's embedding — random, seeded, on one device in one dtype.

Each layer has weights of its own (in decode every weight is read once a token,
so a token reads them cold from memory, as a real model does). Values are
uniform and scaled so that activations stay O(1) through any number of layers:

* a weight matrix is uniform in [-1, 1)·√(3/k): a product's output has the RMS
  of its input, whatever k is;
* every matmul input comes out of an RMSNorm (RMS ≈ its gain, 0.8–1.2) or the
  attention (an average of values of RMS 1), so q, k, v, gate and up are O(1);
* the residual stream then grows like √layers (each layer adds an o_proj and a
  down output of RMS ≲ 1): ≈ 3.6 after Qwen2.5-0.5B's 24 layers. Every layer
  still moves the logits by several per cent — which is what lets validation
  see a kernel that zeroes one layer's down projection.

Layouts are those :func:`~matprobe.profile.models.decode_specs` gives: the fused QKV
weight stored [k, n] (tB = 0), every other weight [n, k] (tB = 1).

Importing this module imports torch: the token package needs it throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace

import torch

from matprobe.errors import MatprobeError
from matprobe.measure.inputs import torch_dtype as harness_torch_dtype
from matprobe.profile.models import ModelConfig
from matprobe.quant import dequantize_q8_0, quantize_q8_0
from matprobe.spec import Q8_0_ACTIVATION_DTYPE

#: The dtypes a token runs in (weights and activations alike; with q8_0 the weight
#: matrices are Q8_0 and everything else — activations, norms, biases, the KV
#: cache — fp16, as in the quantized profile's engine).
TOKEN_DTYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0")

#: RoPE base. Qwen2.5 uses 1e6 (Llama 3: 5e5); the angles change no cost, only
#: values, so one base serves every config.
ROPE_THETA = 1_000_000.0

#: Positions a timed token replay's RoPE angle is drawn from (Qwen2.5's
#: ``max_position_embeddings``).
MAX_POSITION = 32768

#: Bias range of the QKV projection (Qwen2's q/k/v biases are of this order
#: relative to outputs of RMS 1).
BIAS_SCALE = 0.1


def small_config(
    *,
    layers: int = 2,
    hidden: int = 64,
    intermediate: int = 128,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    vocab: int = 320,
    qkv_bias: bool = True,
    name: str = "small",
) -> ModelConfig:
    """A Qwen2-shaped config small enough for a CPU test (every size can be
    changed: odd sizes make awkward shapes). ``head_dim`` must be even (RoPE
    rotates pairs). The vocabulary (320) differs from the gate/up width (256), so
    the LM head and gate/up are two specs, as in a real model, not one."""
    sizes = (hidden, intermediate, heads, kv_heads, head_dim, vocab, layers)
    return ModelConfig(
        name, *sizes, qkv_bias, tie_embeddings=False, source="matprobe.token.small_config"
    )


@dataclass(frozen=True)
class Q8Matrix:
    """A weight matrix in Q8_0's split layout: int8 ``quants`` ``[n, k]`` and fp16
    block ``scales`` ``[n, k/32]`` (``w = d·q``, :mod:`matprobe.quant`)."""

    quants: torch.Tensor
    scales: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        n, k = self.quants.shape
        return n, k

    def dense(self, dtype: torch.dtype) -> torch.Tensor:
        """``d·q`` in ``dtype``: exact in float64 (the reference), one rounding in
        fp16 (what dequantize-then-cuBLAS multiplies by)."""
        return dequantize_q8_0(self.quants, self.scales, dtype)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.quants, self.scales))


#: A weight matrix as the step holds it: dense, or Q8_0.
Matrix = torch.Tensor | Q8Matrix


@dataclass
class TokenWeights:
    """Everything one decode step reads, per layer where the model has one per layer.

    ``k_cache``/``v_cache`` are ``[kv_heads, context, head_dim]``: positions
    ``0 … context-2`` hold earlier tokens, and the step writes the new token's
    key and value at ``context-1`` before attending over all ``context``
    positions (so the attention shapes are those ``decode_specs`` gives at that
    context). ``cos``/``sin`` are the new position's RoPE tables, ``[head_dim]``.
    """

    qkv: list[Matrix]  # [hidden, (heads + 2·kv_heads)·head_dim] (tB = 0); Q8_0: [n, k]
    qkv_bias: list[torch.Tensor | None]  # [(heads + 2·kv_heads)·head_dim]
    o_proj: list[Matrix]  # [hidden, heads·head_dim]
    gate_up: list[Matrix]  # [2·intermediate, hidden]: gate rows, then up rows
    down: list[Matrix]  # [hidden, intermediate]
    attn_norm: list[torch.Tensor]  # [hidden]
    mlp_norm: list[torch.Tensor]  # [hidden]
    final_norm: torch.Tensor  # [hidden]
    lm_head: Matrix  # [vocab, hidden]
    k_cache: list[torch.Tensor]  # [kv_heads, context, head_dim]
    v_cache: list[torch.Tensor]
    cos: torch.Tensor  # [head_dim]
    sin: torch.Tensor
    x0: torch.Tensor  # [1, hidden]: the new token's embedding

    def tensors(self) -> Iterator[torch.Tensor]:
        for f in fields(self):
            value = getattr(self, f.name)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, Q8Matrix):
                    yield item.quants
                    yield item.scales
                elif item is not None:
                    yield item

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> TokenWeights:
        """A copy with ``fn`` applied to every tensor (e.g. upcast to float64); a
        Q8_0 matrix becomes ``fn`` of its exact dense values (float64 ``d·q``)."""

        def apply(item: object) -> object:
            if item is None:
                return None
            if isinstance(item, Q8Matrix):
                return fn(item.dense(torch.float64))
            return fn(item)  # type: ignore[arg-type]

        changes: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            changes[f.name] = [apply(t) for t in value] if isinstance(value, list) else apply(value)
        return replace(self, **changes)  # type: ignore[arg-type]

    def weight_bytes(self) -> int:
        """Bytes of what a token reads once, whatever the context: weights (Q8_0:
        quants and scales), biases, norm gains (not the KV cache, not the new
        token's embedding)."""
        skip = {id(t) for t in (*self.k_cache, *self.v_cache, self.cos, self.sin, self.x0)}
        return sum(t.numel() * t.element_size() for t in self.tensors() if id(t) not in skip)

    def kv_bytes(self) -> int:
        """Bytes of the KV cache the attention reads (every position, new one included)."""
        return sum(t.numel() * t.element_size() for t in (*self.k_cache, *self.v_cache))


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of a token's activations in ``dtype`` (fp16 for q8_0), or why
    a token does not run in it."""
    if dtype not in TOKEN_DTYPES:
        raise MatprobeError(f"a token runs in {', '.join(TOKEN_DTYPES)}, not {dtype!r}")
    return harness_torch_dtype(Q8_0_ACTIVATION_DTYPE if dtype == "q8_0" else dtype)


def rope_tables(head_dim: int, position: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 cos and sin of one position, ``[head_dim]``, in the rotate-half
    layout (the two halves of a head are rotated as pairs (i, i + head_dim/2))."""
    if head_dim % 2:
        raise MatprobeError(f"head_dim must be even for RoPE, got {head_dim}")
    inv_freq = ROPE_THETA ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = position * inv_freq
    angles = torch.cat([angles, angles])
    return torch.cos(angles), torch.sin(angles)


def place(weights: TokenWeights, head_dim: int, position: int, dtype: torch.dtype) -> None:
    """The new token's RoPE tables for ``position``, rounded to the token's activation
    ``dtype`` (as :func:`make_weights` rounds them; a float64 reference step holds
    them upcast) and written in place: a recorded graph reads them at replay. The
    KV slot the step writes stays ``context - 1``: the attention reads every
    position, so which slot holds the new token changes no arithmetic — the angle
    does."""
    cos, sin = position_tables(weights, head_dim, position, dtype)
    weights.cos.copy_(cos)
    weights.sin.copy_(sin)


def position_tables(
    weights: TokenWeights, head_dim: int, position: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The RoPE tables :func:`place` writes for ``position``, as new tensors on the
    weights' device (a back-to-back window stages them before its replays)."""
    cos, sin = rope_tables(head_dim, position)
    target = weights.cos
    return (
        cos.to(dtype).to(device=target.device, dtype=target.dtype),
        sin.to(dtype).to(device=target.device, dtype=target.dtype),
    )


def embeddings(
    config: ModelConfig, count: int, *, dtype: str, device: str | torch.device, seed: int
) -> list[torch.Tensor]:
    """``count`` token embeddings ``[1, hidden]`` (uniform in [-1, 1), rounded to
    ``dtype``): the inputs of further validation trials."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return [
        (torch.rand(1, config.hidden, generator=gen, device=device) * 2 - 1).to(torch_dtype(dtype))
        for _ in range(count)
    ]


def make_weights(
    config: ModelConfig,
    *,
    context: int,
    dtype: str,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> TokenWeights:
    """Random weights for one decode step at ``context`` (≥ 1 attended positions),
    seeded, drawn on ``device`` and rounded once to ``dtype``."""
    if context < 1:
        raise MatprobeError(f"context must be at least 1, got {context}")
    c = config
    target = torch_dtype(dtype)
    gen = torch.Generator(device=device).manual_seed(seed)

    def uniform(*shape: int, scale: float, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
        values = torch.rand(shape, generator=gen, device=device, dtype=torch.float32)
        return ((low + (high - low) * values) * scale).to(target)

    quantized = dtype == "q8_0"

    def matrix(n: int, k: int, *, transposed: bool = False) -> Matrix:
        """[n, k] ([k, n] when ``transposed`` and dense), output RMS = input RMS. The
        same draws in every dtype: a Q8_0 model is its fp16 twin's weights quantized."""
        values = torch.rand((n, k), generator=gen, device=device, dtype=torch.float32)
        drawn = (values * 2 - 1) * math.sqrt(3.0 / k)
        if quantized:
            return Q8Matrix(*quantize_q8_0(drawn))
        dense = drawn.to(target)
        return dense.T.contiguous() if transposed else dense

    def gain() -> torch.Tensor:
        return uniform(c.hidden, scale=1.0, low=0.8, high=1.2)

    n_qkv = (c.heads + 2 * c.kv_heads) * c.head_dim
    layers = range(c.layers)
    cos, sin = rope_tables(c.head_dim, context - 1)
    return TokenWeights(
        # the fused QKV weight as decode_specs stores it: [k, n] (Q8_0: [n, k])
        qkv=[matrix(n_qkv, c.hidden, transposed=True) for _ in layers],
        qkv_bias=[uniform(n_qkv, scale=BIAS_SCALE) if c.qkv_bias else None for _ in layers],
        o_proj=[matrix(c.hidden, c.heads * c.head_dim) for _ in layers],
        gate_up=[matrix(2 * c.intermediate, c.hidden) for _ in layers],
        down=[matrix(c.hidden, c.intermediate) for _ in layers],
        attn_norm=[gain() for _ in layers],
        mlp_norm=[gain() for _ in layers],
        final_norm=gain(),
        lm_head=matrix(c.vocab, c.hidden),
        # earlier tokens' keys and values, RMS 1 (scores q·k/√d of order 1)
        k_cache=[uniform(c.kv_heads, context, c.head_dim, scale=math.sqrt(3.0)) for _ in layers],
        v_cache=[uniform(c.kv_heads, context, c.head_dim, scale=math.sqrt(3.0)) for _ in layers],
        cos=cos.to(device=device, dtype=target),
        sin=sin.to(device=device, dtype=target),
        x0=uniform(1, c.hidden, scale=1.0),
    )
