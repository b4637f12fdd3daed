"""Tests for matprobe.profile.models: decode-step shapes derived from model configs.

The Qwen2.5-0.5B shapes are checked against the real profile (seeds/001), and
every model's config numbers against its published parameter count, so a
wrong shape rule or a typo in a config both fail.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from matprobe.errors import MatprobeError
from matprobe.profile.models import (
    MODELS,
    ROLES,
    ModelConfig,
    ModelShape,
    decode_specs,
    get_model,
)
from matprobe.spec import MatmulSpec

SEED_001 = Path(__file__).resolve().parent / "data" / "001_94bb41197df77450.txt"

ALL_MODELS = sorted(MODELS)
ATTENTION_ROLES = {"attn_qk", "attn_pv"}

#: Published totals (model cards, "Number of Parameters"), in units of 1e9.
PUBLISHED_PARAMS_B = {
    "qwen2.5-0.5b": 0.49,
    "qwen2.5-1.5b": 1.54,
    "qwen2.5-3b": 3.09,
    "qwen2.5-7b": 7.61,
    "llama-3.2-1b": 1.23,
    "llama-3.2-3b": 3.21,
    "llama-3.1-8b": 8.03,
}
#: Qwen2.5 model cards also give the non-embedding count.
PUBLISHED_NON_EMBEDDING_B = {
    "qwen2.5-0.5b": 0.36,
    "qwen2.5-1.5b": 1.31,
    "qwen2.5-3b": 2.77,
    "qwen2.5-7b": 6.53,
}


def by_role(shapes: list[ModelShape]) -> dict[str, ModelShape]:
    roles = [s.role for s in shapes]
    assert len(roles) == len(set(roles)), f"duplicate roles: {roles}"
    return {s.role: s for s in shapes}


def weight_shapes(shapes: list[ModelShape]) -> list[ModelShape]:
    return [s for s in shapes if s.role not in ATTENTION_ROLES]


def total_flops(shapes: list[ModelShape]) -> int:
    return sum(s.count * s.spec.flops() for s in shapes)


def weight_elements(shapes: list[ModelShape]) -> int:
    """Weight elements read per token: Σ count·n·k of the weight matmuls."""
    total = 0
    for s in weight_shapes(shapes):
        assert s.spec.batch == 1 and s.spec.n is not None and s.spec.k is not None
        total += s.count * s.spec.n * s.spec.k
    return total


# ---- the profile -------------------------------------------------------------

_HEADER = re.compile(r"^\s+(op=[^\n]*\|\s*tB=[^\n]*):\s*$", re.MULTILINE)


def profile_specs() -> list[MatmulSpec]:
    specs = [MatmulSpec.parse(m.group(1)) for m in _HEADER.finditer(SEED_001.read_text())]
    assert specs, f"no shape headers parsed from {SEED_001}"
    return specs


# Profile role -> (n, k) as DESIGN.md §2 tabulates; looked up in the profile.
QWEN_PROFILE_ROLES = {
    "qkv": (1152, 896, 24),
    "o_proj": (896, 896, 24),
    "gate_up": (9728, 896, 24),
    "down": (896, 4864, 24),
    "lm_head": (151936, 896, 1),
}


@pytest.mark.parametrize("role", sorted(QWEN_PROFILE_ROLES))
def test_qwen_05b_weight_shapes_match_profile(role: str) -> None:
    n, k, count = QWEN_PROFILE_ROLES[role]
    matches = [s for s in profile_specs() if s.batch == 1 and s.n == n and s.k == k]
    assert len(matches) == 1, f"profile has {len(matches)} shapes with n={n} k={k}"
    expected = matches[0]

    shape = by_role(decode_specs(get_model("qwen2.5-0.5b")))[role]
    got = shape.spec
    assert shape.count == count
    for name in ("op", "batch", "m", "n", "k", "tA", "tB"):
        assert getattr(got, name) == getattr(expected, name), name
    assert got.has_bias == expected.has_bias
    # Apart from the dtype the profile does not print, it is the very same key.
    assert replace(got, dtype=None) == expected
    assert replace(got, dtype=None).key() == expected.key()


def test_qwen_05b_profile_has_the_fused_qkv_bias() -> None:
    """Guard the test above: the profile's QKV really is bias-add, [K, N]."""
    qkv = [s for s in profile_specs() if s.n == 1152]
    assert [(s.op, s.tB, s.has_bias) for s in qkv] == [("matmul_bias_add", False, True)]


def test_qwen_05b_attention_matches_profile() -> None:
    profile = [s for s in profile_specs() if s.op == "matmul_alpha_beta"]
    qk_profile = [s for s in profile if s.tB]
    pv_profile = [s for s in profile if not s.tB]
    assert qk_profile and pv_profile

    shapes = by_role(decode_specs(get_model("qwen2.5-0.5b"), context=51))
    qk, pv = shapes["attn_qk"].spec, shapes["attn_pv"].spec
    assert shapes["attn_qk"].count == shapes["attn_pv"].count == 24

    # Q·Kᵀ: the profile's context-51 line exactly (n = context, k = head_dim).
    assert any(
        (p.batch, p.m, p.n, p.k, p.tA, p.tB) == (qk.batch, qk.m, qk.n, qk.k, qk.tA, qk.tB)
        for p in qk_profile
    )
    assert (qk.batch, qk.n, qk.k, qk.tB) == (14, 51, 64, True)
    assert qk.alpha == 0.125
    assert qk.beta == 0.0
    assert qk.strided_batch is True
    # P·V: n = head_dim, k = context; every profile line has the same fixed dims.
    assert (pv.batch, pv.n, pv.k, pv.tB) == (14, 64, 51, False)
    assert pv.alpha == 1.0 and pv.beta == 0.0 and pv.strided_batch is True
    for p in pv_profile:
        assert (p.batch, p.m, p.n, p.tA, p.tB) == (pv.batch, pv.m, pv.n, pv.tA, pv.tB)


def test_qwen_05b_fused_order_and_counts() -> None:
    shapes = decode_specs(get_model("qwen2.5-0.5b"))
    assert [(s.role, s.count) for s in shapes] == [
        ("qkv", 24),
        ("attn_qk", 24),
        ("attn_pv", 24),
        ("o_proj", 24),
        ("gate_up", 24),
        ("down", 24),
        ("lm_head", 1),
    ]


def test_unfused_order_counts_and_shapes() -> None:
    c = get_model("qwen2.5-0.5b")
    shapes = decode_specs(c, fuse_qkv=False, fuse_gate_up=False)
    assert [(s.role, s.count) for s in shapes] == [
        ("q", 24),
        ("kv", 48),
        ("attn_qk", 24),
        ("attn_pv", 24),
        ("o_proj", 24),
        ("gate+up", 48),
        ("down", 24),
        ("lm_head", 1),
    ]
    roles = by_role(shapes)
    q, kv, gate = roles["q"].spec, roles["kv"].spec, roles["gate+up"].spec
    assert (q.op, q.n, q.k, q.tB) == ("matmul_bias_add", 896, 896, True)
    assert (kv.op, kv.n, kv.k, kv.tB) == ("matmul_bias_add", 128, 896, True)
    assert (gate.op, gate.n, gate.k, gate.tB) == ("matmul", 4864, 896, True)


@pytest.mark.parametrize("name", ALL_MODELS)
@pytest.mark.parametrize("fuse", [True, False])
def test_roles_are_known_and_dims_complete(name: str, fuse: bool) -> None:
    shapes = decode_specs(MODELS[name], fuse_qkv=fuse, fuse_gate_up=fuse)
    for s in shapes:
        assert s.role in ROLES
        assert s.spec.is_complete
        assert s.spec.m == 1
        assert s.spec.tA is False
    assert shapes[-1].role == "lm_head"


# ---- FLOPs and parameters --------------------------------------------------------


def linear_params(c: ModelConfig) -> int:
    """Weights of every linear layer, from the config alone (lm_head included)."""
    per_layer = (
        c.hidden * (c.heads + 2 * c.kv_heads) * c.head_dim  # q, k, v
        + c.heads * c.head_dim * c.hidden  # o_proj
        + 3 * c.hidden * c.intermediate  # gate, up, down
    )
    return c.layers * per_layer + c.vocab * c.hidden


def qkv_bias_params(c: ModelConfig) -> int:
    return c.layers * (c.heads + 2 * c.kv_heads) * c.head_dim if c.qkv_bias else 0


@pytest.mark.parametrize("name", ALL_MODELS)
@pytest.mark.parametrize("fuse_qkv", [True, False])
@pytest.mark.parametrize("fuse_gate_up", [True, False])
def test_weight_flops_are_twice_the_parameters(
    name: str, fuse_qkv: bool, fuse_gate_up: bool
) -> None:
    c = MODELS[name]
    shapes = decode_specs(c, fuse_qkv=fuse_qkv, fuse_gate_up=fuse_gate_up)
    # m = 1: one multiply-add per weight, one add per bias element.
    expected = 2 * linear_params(c) + qkv_bias_params(c)
    assert total_flops(weight_shapes(shapes)) == expected
    assert weight_elements(shapes) == linear_params(c)


@pytest.mark.parametrize("name", ALL_MODELS)
@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_fused_and_unfused_do_the_same_work(name: str, dtype: str) -> None:
    c = MODELS[name]
    fused = decode_specs(c, dtype=dtype)
    unfused = decode_specs(c, dtype=dtype, fuse_qkv=False, fuse_gate_up=False)
    assert total_flops(fused) == total_flops(unfused)
    assert weight_elements(fused) == weight_elements(unfused)

    # The weight bytes are the same too: subtract activations/outputs/bias.
    def weight_bytes(shapes: list[ModelShape]) -> int:
        total = 0
        for s in weight_shapes(shapes):
            sp = s.spec
            assert sp.n is not None and sp.k is not None
            other = (sp.k + sp.n + (sp.n if sp.has_bias else 0)) * 2  # f16 either way
            total += s.count * (sp.min_bytes() - other)
        return total

    assert weight_bytes(fused) == weight_bytes(unfused)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_attention_flops(name: str) -> None:
    c = MODELS[name]
    context = 300
    roles = by_role(decode_specs(c, context=context))
    qk, pv = roles["attn_qk"].spec, roles["attn_pv"].spec
    assert (qk.batch, qk.n, qk.k) == (c.heads, context, c.head_dim)
    assert (pv.batch, pv.n, pv.k) == (c.heads, c.head_dim, context)
    assert qk.alpha == pytest.approx(1.0 / math.sqrt(c.head_dim), rel=1e-15)
    # Q·Kᵀ: products plus the α scaling of each score; P·V: products only.
    assert qk.flops() == 2 * c.heads * context * c.head_dim + c.heads * context
    assert pv.flops() == 2 * c.heads * c.head_dim * context


@pytest.mark.parametrize("name", ALL_MODELS)
def test_total_parameters_match_published(name: str) -> None:
    """Catches a typo in a config: one layer is ≥ 15M parameters in every model."""
    c = MODELS[name]
    embedding = c.vocab * c.hidden
    norms = (2 * c.layers + 1) * c.hidden
    total = linear_params(c) + qkv_bias_params(c) + norms
    if not c.tie_embeddings:
        total += embedding  # separate input embedding; lm_head is in linear_params
    assert total == pytest.approx(PUBLISHED_PARAMS_B[name] * 1e9, abs=0.01e9)
    if name in PUBLISHED_NON_EMBEDDING_B:
        non_embedding = total - embedding * (1 if c.tie_embeddings else 2)
        assert non_embedding == pytest.approx(PUBLISHED_NON_EMBEDDING_B[name] * 1e9, abs=0.01e9)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_config_invariants(name: str) -> None:
    c = MODELS[name]
    assert c.name == name
    assert c.heads % c.kv_heads == 0
    assert c.qkv_bias == name.startswith("qwen")
    assert c.source.endswith("config.json")
    assert c.heads * c.head_dim == c.hidden  # true of both families


# ---- dtypes ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_float_dtypes_apply_everywhere(dtype: str) -> None:
    shapes = decode_specs(get_model("llama-3.2-1b"), dtype=dtype)
    assert {s.spec.dtype for s in shapes} == {dtype}


def test_q8_0_quantizes_weights_not_attention() -> None:
    shapes = decode_specs(get_model("qwen2.5-0.5b"), dtype="q8_0")
    for s in shapes:
        assert s.spec.dtype == ("f16" if s.role in ATTENTION_ROLES else "q8_0"), s.role
    lm_head = by_role(shapes)["lm_head"].spec
    assert lm_head.min_bytes() == 151936 * (896 // 32) * 34 + 896 * 2 + 151936 * 2


def test_f16_lm_head_min_bytes() -> None:
    c = get_model("qwen2.5-0.5b")
    f16 = by_role(decode_specs(c))["lm_head"].spec
    assert f16.min_bytes() == 151936 * 896 * 2 + 896 * 2 + 151936 * 2


def test_provenance_names_the_model_and_options() -> None:
    shapes = decode_specs(get_model("Qwen2.5-0.5B"), context=77, dtype="bf16")
    for s in shapes:
        assert s.spec.provenance is not None
        assert s.spec.provenance.source == "model:qwen2.5-0.5b context=77 dtype=bf16"
        assert s.spec.provenance.backends == ()


def test_context_changes_only_attention() -> None:
    c = get_model("qwen2.5-1.5b")
    a, b = decode_specs(c, context=10), decode_specs(c, context=20)
    for x, y in zip(a, b, strict=True):
        assert x.role == y.role
        assert (x.spec == y.spec) == (x.role not in ATTENTION_ROLES)


# ---- lookups and errors ------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["Qwen2.5-0.5B", "qwen2.5-0.5b", "QWEN2.5-0.5B"])
def test_get_model_ignores_case(spelling: str) -> None:
    assert get_model(spelling) is MODELS["qwen2.5-0.5b"]


def test_unknown_model_lists_known_ones() -> None:
    with pytest.raises(MatprobeError) as info:
        get_model("gpt-2")
    message = str(info.value)
    assert "gpt-2" in message
    for name in MODELS:
        assert name in message


@pytest.mark.parametrize("dtype", ["fp16", "q4_0", "F16", ""])
def test_bad_dtype(dtype: str) -> None:
    with pytest.raises(MatprobeError) as info:
        decode_specs(get_model("qwen2.5-0.5b"), dtype=dtype)
    for valid in ("f32", "f16", "bf16", "q8_0"):
        assert valid in str(info.value)


@pytest.mark.parametrize("context", [0, -1])
def test_bad_context(context: int) -> None:
    with pytest.raises(MatprobeError, match="context"):
        decode_specs(get_model("qwen2.5-0.5b"), context=context)


def test_context_one_is_allowed() -> None:
    roles = by_role(decode_specs(get_model("qwen2.5-0.5b"), context=1))
    assert roles["attn_qk"].spec.n == 1 and roles["attn_pv"].spec.k == 1


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("kv_heads", 3, "multiple"),
        ("hidden", 0, "hidden"),
        ("layers", -2, "layers"),
        ("vocab", True, "vocab"),
        ("head_dim", 64.0, "head_dim"),
    ],
)
def test_model_config_validation(field: str, value: object, match: str) -> None:
    with pytest.raises(MatprobeError, match=match):
        replace(MODELS["qwen2.5-0.5b"], **{field: value})


def test_model_shape_validation() -> None:
    spec = decode_specs(get_model("qwen2.5-0.5b"))[0].spec
    with pytest.raises(MatprobeError, match="role"):
        ModelShape(spec, 1, "attention")
    with pytest.raises(MatprobeError, match="count"):
        ModelShape(spec, 0, "qkv")
