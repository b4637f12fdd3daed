"""Calls per decode token from a profile's structure: attention sites (one spec per
context length) against weight matmuls (count ÷ tokens)."""

from __future__ import annotations

import pytest

from matprobe.cli.run import _infer_tokens
from matprobe.profile.per_token import context_dim, find_sites, per_token_weights
from matprobe.profile.profiles import load_specs
from matprobe.spec import MatmulSpec, Provenance


def spec(key: str, count: int) -> MatmulSpec:
    return MatmulSpec.parse(key).with_provenance(Provenance(calls=count))


def qk(length: int, count: int = 24, **extra: str) -> MatmulSpec:
    rest = "".join(f" | {k}={v}" for k, v in extra.items())
    return spec(
        f"op=matmul_alpha_beta | batch=14 | m=1 | n={length} | k=64 | tA=0 | tB=1 | "
        f"alpha=0.1250 | dtype=f16{rest}",
        count,
    )


def pv(length: int, count: int = 24) -> MatmulSpec:
    return spec(
        f"op=matmul_alpha_beta | batch=14 | m=1 | n=64 | k={length} | tA=0 | tB=0 | dtype=f16",
        count,
    )


def weight(n: int, k: int, count: int) -> MatmulSpec:
    return spec(f"op=matmul | batch=1 | m=1 | n={n} | k={k} | tA=0 | tB=1 | dtype=f16", count)


def test_context_dimension_is_n_for_qk_and_k_for_pv_and_none_for_weights() -> None:
    assert context_dim(qk(70)) == "n"
    assert context_dim(pv(70)) == "k"
    assert context_dim(weight(896, 896, 10)) is None  # batch 1: a weight matmul


def test_a_site_weighs_its_count_over_the_context_lengths_it_saw() -> None:
    specs = [qk(50), qk(51), qk(52, count=48), pv(50), pv(51), weight(896, 896, 240)]
    result = per_token_weights(specs, tokens=10)
    # Q·Kᵀ: 96 calls over 3 lengths = 32 a token; P·V: 48 over 2 = 24.
    assert result.weight(qk(50)) == pytest.approx(24 / 3)
    assert result.weight(qk(52)) == pytest.approx(48 / 3)
    assert result.weight(pv(51)) == pytest.approx(24 / 2)
    assert result.weight(weight(896, 896, 240)) == pytest.approx(24.0)  # 240 ÷ 10 tokens
    sites = {s.context_dim: s for s in result.sites}
    assert sites["n"].calls_per_token == pytest.approx(32.0) and sites["n"].lengths == (50, 51, 52)
    assert sites["k"].calls_per_token == pytest.approx(24.0)
    assert "n=L" in sites["n"].label and "k=64" in sites["n"].label


def test_specs_differing_in_more_than_the_length_are_separate_sites() -> None:
    specs = [qk(50), qk(51), qk(50, accumulate="1"), qk(51, accumulate="1"), qk(52, dtype_x="bf")]
    sites = find_sites(specs)
    assert len(sites) == 2  # the lone extra-keyed spec is no site: one length only
    result = per_token_weights(specs, tokens=10)
    assert result.weight(qk(50)) == pytest.approx(12.0)
    assert result.weight(qk(52, dtype_x="bf")) == pytest.approx(2.4)  # count ÷ tokens


def test_without_tokens_only_sites_have_weights() -> None:
    result = per_token_weights([qk(50), qk(51), weight(896, 896, 240)], tokens=None)
    assert result.weight(qk(50)) == pytest.approx(12.0)
    assert result.weight(weight(896, 896, 240)) is None
    assert "no token count" in result.describe()


def test_the_builtin_profile_runs_48_attention_calls_a_token() -> None:
    specs = load_specs().specs
    tokens = _infer_tokens(specs)
    assert tokens == 95
    result = per_token_weights(specs, tokens)
    weights = [s for s in specs if s.batch == 1]
    # The profile's five weight matmuls: four layer matmuls at 2280 ÷ 95 = 24 calls a
    # token, and the lm_head at 95 ÷ 95 = 1.
    assert sorted(result.weight(s) or 0 for s in weights) == pytest.approx([1.0] + [24.0] * 4)
    assert len(result.sites) == 2
    assert all(site.calls_per_token == pytest.approx(24.0) for site in result.sites)
    attention = [s for s in specs if s.batch == 14]
    assert sum(result.weight(s) or 0 for s in attention) == pytest.approx(48.0)
    assert sum(s.provenance.count for s in attention if s.provenance) / tokens == pytest.approx(
        816 / 95
    )  # what count ÷ tokens made of it
    text = result.describe()
    assert "count ÷ 95 tokens" in text and "24 per site" in text
    assert "48 attention calls per token" in text
