"""One decode step of a Qwen2/Llama-style decoder: the op order and elementwise
work of a real model, the weight matmuls handed to a :data:`LinearFn`.

Per layer: RMSNorm → fused QKV projection (+ bias) → RoPE on q and k → append k
and v to the KV cache → grouped-query attention over the cache (scores, softmax
in fp32, weighted values) → o_proj → residual add → RMSNorm → fused gate/up →
SiLU(gate)·up → down → residual add. Then the final RMSNorm and the LM head.
This is Hugging Face's Qwen2 decode step with q/k/v and gate/up fused as the
profiled engine fuses them (DESIGN.md §2, §7).

The attention reads the cache grouped: each KV head's keys serve its
``heads/kv_heads`` query heads in one batched product (batch = KV heads, m =
the group), never copied per query head. The products are those of the
``attn_qk``/``attn_pv`` specs (batch = query heads, m = 1), computed the way a
decode kernel reads the cache.

The same code runs in the token's dtype (half-precision activations, norms and
softmax in fp32, as Hugging Face does) and in float64 for the reference: the
accumulation dtype is fp32 unless the weights are float64.

``forward`` allocates nothing it keeps and writes nothing but the KV cache's
newest position, so it can be captured in a CUDA graph, compiled by
``torch.compile`` (one graph, no breaks) and replayed any number of times.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Protocol

import torch

from matprobe.errors import MatprobeError
from matprobe.profile.models import ModelConfig, decode_specs
from matprobe.spec import MatmulSpec
from matprobe.token.linear import LinearFn, check_output
from matprobe.token.weights import Matrix, TokenWeights

#: RMSNorm epsilon (Qwen2.5's).
RMS_EPS = 1e-6

#: The parts of one layer, in order. A region of the profile is one part of one
#: layer (``block_3/qkv``) or one of :data:`FINAL_PARTS`.
LAYER_PARTS: tuple[str, ...] = (
    "attn_norm",
    "qkv",
    "rope",
    "kv_append",
    "attn_qk",
    "softmax",
    "attn_pv",
    "o_proj",
    "attn_residual",
    "mlp_norm",
    "gate_up",
    "silu_mul",
    "down",
    "mlp_residual",
)
FINAL_PARTS: tuple[str, ...] = ("final_norm", "lm_head")

#: Parts that are weight matmuls (through the LinearFn) and attention products
#: (torch ops in every mode); both are named by their decode_specs role.
WEIGHT_SITES: tuple[str, ...] = ("qkv", "o_proj", "gate_up", "down", "lm_head")
ATTENTION_SITES: tuple[str, ...] = ("attn_qk", "attn_pv")

#: ``region(label)`` marks the ops of one part (a profiler range); None: no marks.
Region = Callable[[str], AbstractContextManager[object]]


class FusedOps(Protocol):
    """The kernels of :meth:`DecodeStep.forward_fused` (``matprobe.token.fused``).
    ``layer`` None is the LM head's (no layer); each returns a new ``[1, n]``."""

    def norm_linear(
        self, site: str, layer: int | None, h: torch.Tensor, gain: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:  # fmt: skip
        """RMSNorm(h)·gain times the site's weight, plus the bias."""
        ...

    def norm_swiglu(self, layer: int, h: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        """silu(gate)·up of RMSNorm(h)·gain times the fused gate/up weight."""
        ...

    def linear_residual(
        self, site: str, layer: int, x: torch.Tensor, residual: torch.Tensor
    ) -> torch.Tensor:
        """x times the site's weight, plus the residual stream."""
        ...


class AttentionFn(Protocol):
    """A layer's attention in one kernel (``DecodeKernels.attention``): RoPE, the KV
    append and grouped attention from the QKV output ``[1, n_qkv]`` to ``[1,
    q_width]``, for :meth:`DecodeStep.forward_fused`."""

    def __call__(self, layer: int, qkv: torch.Tensor) -> torch.Tensor: ...


def site_specs(config: ModelConfig, *, context: int, dtype: str) -> dict[str, MatmulSpec]:
    """The spec of every matmul site of the step, by role: exactly
    :func:`~matprobe.profile.models.decode_specs`'s (fused QKV and gate/up)."""
    return {s.role: s.spec for s in decode_specs(config, context=context, dtype=dtype)}


def region_label(layer: int | None, part: str) -> str:
    """``block_3/qkv`` for a layer's part, ``lm_head`` for a final one."""
    return part if layer is None else f"block_{layer}/{part}"


def _layer_part(mark: Region, layer: int) -> Region:
    """``mark`` for the parts of one layer: ``part("qkv")`` marks ``block_{layer}/qkv``."""

    def part(name: str) -> AbstractContextManager[object]:
        return mark(region_label(layer, name))

    return part


def _layers(mark: Region, layers: int) -> Iterator[tuple[int, Region]]:
    """The step's walk: each layer's index and the ``part`` that marks its regions."""
    for layer in range(layers):
        yield layer, _layer_part(mark, layer)


def _no_region(label: str) -> AbstractContextManager[object]:
    return contextlib.nullcontext()


class DecodeStep:
    """The decode step over one :class:`TokenWeights`; ``forward(linear)`` returns
    the new token's logits ``[1, vocab]``."""

    def __init__(
        self,
        config: ModelConfig,
        weights: TokenWeights,
        specs: Mapping[str, MatmulSpec],
        *,
        context: int,
    ) -> None:
        missing = [role for role in (*WEIGHT_SITES, *ATTENTION_SITES) if role not in specs]
        if missing:
            raise MatprobeError(f"no spec for the step's sites {missing} (unfused model?)")
        self.config = config
        self.weights = weights
        self.specs = dict(specs)
        self.context = context
        self.dtype = weights.x0.dtype
        self.acc = torch.float64 if self.dtype == torch.float64 else torch.float32
        self.scale = float(specs["attn_qk"].alpha_value)

    def _rms_norm(self, x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        xf = x.to(self.acc)
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
        return y.to(self.dtype) * gain

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.weights.cos + rotated * self.weights.sin

    def _linear(
        self,
        linear: LinearFn,
        role: str,
        x: torch.Tensor,
        w: Matrix,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        spec = self.specs[role]
        return check_output(spec, linear(spec, x, w, bias), self.dtype)

    def _attend(
        self, i: int, qkv: torch.Tensor, part: Callable[[str], AbstractContextManager[object]]
    ) -> torch.Tensor:
        """Layer ``i``'s attention from its QKV output ``[1, n_qkv]``: RoPE, the KV
        cache append, grouped scores, softmax, weighted values → ``[1, q_width]``."""
        c, w = self.config, self.weights
        group = c.heads // c.kv_heads
        q_width, kv_width = c.heads * c.head_dim, c.kv_heads * c.head_dim
        pos = self.context - 1  # the new token's slot in the cache
        with part("rope"):
            q = self._rope(qkv[0, :q_width].view(c.heads, c.head_dim))
            k = self._rope(qkv[0, q_width : q_width + kv_width].view(c.kv_heads, c.head_dim))
            v = qkv[0, q_width + kv_width :].view(c.kv_heads, c.head_dim)
        with part("kv_append"):
            w.k_cache[i][:, pos].copy_(k)
            w.v_cache[i][:, pos].copy_(v)
        with part("attn_qk"):
            grouped = q.view(c.kv_heads, group, c.head_dim)
            scores = torch.matmul(grouped, w.k_cache[i].transpose(1, 2)) * self.scale
        with part("softmax"):
            probs = torch.softmax(scores.to(self.acc), dim=-1).to(self.dtype)
        with part("attn_pv"):
            return torch.matmul(probs, w.v_cache[i]).reshape(1, q_width)

    def forward(self, linear: LinearFn, region: Region | None = None) -> torch.Tensor:
        c, w = self.config, self.weights
        mark = region or _no_region
        h = w.x0
        for i, part in _layers(mark, c.layers):
            with part("attn_norm"):
                x = self._rms_norm(h, w.attn_norm[i])
            with part("qkv"):
                qkv = self._linear(linear, "qkv", x, w.qkv[i], w.qkv_bias[i])
            attn = self._attend(i, qkv, part)
            with part("o_proj"):
                o = self._linear(linear, "o_proj", attn, w.o_proj[i])
            with part("attn_residual"):
                h = h + o
            with part("mlp_norm"):
                x = self._rms_norm(h, w.mlp_norm[i])
            with part("gate_up"):
                gate_up = self._linear(linear, "gate_up", x, w.gate_up[i])
            with part("silu_mul"):
                act = torch.nn.functional.silu(gate_up[:, : c.intermediate])
                act = act * gate_up[:, c.intermediate :]
            with part("down"):
                down = self._linear(linear, "down", act, w.down[i])
            with part("mlp_residual"):
                h = h + down
        with mark(region_label(None, "final_norm")):
            x = self._rms_norm(h, w.final_norm)
        with mark(region_label(None, "lm_head")):
            return self._linear(linear, "lm_head", x, w.lm_head)

    def forward_fused(
        self, fused: FusedOps, region: Region | None = None, attention: AttentionFn | None = None
    ) -> torch.Tensor:
        """The same step with each matmul's neighbours folded into its kernel, as a
        fused engine runs it: the RMSNorms into the QKV, gate/up and LM head
        matmuls (prologue), SiLU·mul into gate/up, the residual adds into o_proj
        and down (epilogue); with ``attention``, RoPE, the KV append and the
        attention as that one call (else as the step's torch ops). Regions: the
        five weight sites and the attention's parts (``attention`` when one call);
        the folded parts have none (they are inside the matmuls')."""
        c, w = self.config, self.weights
        mark = region or _no_region
        h = w.x0
        for i, part in _layers(mark, c.layers):
            with part("qkv"):
                qkv = fused.norm_linear("qkv", i, h, w.attn_norm[i], w.qkv_bias[i])
            if attention is None:
                attn = self._attend(i, qkv, part)
            else:
                with part("attention"):
                    attn = attention(i, qkv)
            with part("o_proj"):
                h = fused.linear_residual("o_proj", i, attn, h)
            with part("gate_up"):
                act = fused.norm_swiglu(i, h, w.mlp_norm[i])
            with part("down"):
                h = fused.linear_residual("down", i, act, h)
        with mark(region_label(None, "lm_head")):
            return fused.norm_linear("lm_head", None, h, w.final_norm, None)
