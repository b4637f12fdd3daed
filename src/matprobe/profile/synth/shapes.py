"""The matmul shapes, kernel names and op-name scopes one synthetic decoder block
emits, and the legacy templates (data, no emission)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final


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
