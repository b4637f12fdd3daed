"""MatmulSpec: key round trips, JSON, validation, FLOPs and minimum bytes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matprobe.errors import SpecError
from matprobe.spec import (
    DTYPES,
    BackendTiming,
    MatmulSpec,
    Provenance,
    merge_specs,
)
from matprobe.stats import Stats

ints = st.one_of(st.none(), st.integers(min_value=0, max_value=10**7))
bools = st.one_of(st.none(), st.booleans())
floats = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64))
names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
values = st.from_regex(r"[A-Za-z0-9_.\-]{1,10}", fullmatch=True)
KNOWN_FIELDS = set(MatmulSpec.__dataclass_fields__)


@st.composite
def specs(draw: st.DrawFn) -> MatmulSpec:
    extras = draw(
        st.dictionaries(
            names.filter(lambda k: k not in KNOWN_FIELDS and k != "backend"), values, max_size=3
        )
    )
    return MatmulSpec(
        op=draw(
            st.sampled_from(
                [
                    "matmul",
                    "matmul_bias_add",
                    "matmul_alpha_beta",
                    "matmul_cache",
                    "matmul_alpha_beta_cache",
                    "gemv_custom",
                ]
            )
        ),
        batch=draw(st.one_of(st.none(), st.integers(min_value=1, max_value=4096))),
        m=draw(ints),
        n=draw(ints),
        k=draw(ints),
        tA=draw(bools),
        tB=draw(bools),
        bias=draw(bools),
        alpha=draw(floats),
        beta=draw(floats),
        accumulate=draw(bools),
        strided_batch=draw(bools),
        cache=draw(bools),
        dtype=draw(st.one_of(st.none(), st.sampled_from(DTYPES))),
        loader=draw(st.one_of(st.none(), values)),
        n0=draw(ints),
        n1=draw(ints),
        nq=draw(ints),
        nk=draw(ints),
        nv=draw(ints),
        extras=tuple(extras.items()),
    )


@given(specs())
def test_key_round_trips(spec: MatmulSpec) -> None:
    key = spec.key()
    again = MatmulSpec.parse(key)
    assert again == spec
    assert again.key() == key
    assert MatmulSpec.parse(key + ":") == spec  # as a profile header


@given(specs())
def test_json_round_trips(spec: MatmulSpec) -> None:
    prov = Provenance(
        backends=(BackendTiming("mps", Stats(3, 1.5, 0.5, 0.4, 0.6, 0.59, 0.6)),), source="x:1"
    )
    spec = spec.with_provenance(prov)
    again = MatmulSpec.from_json(spec.to_json())
    assert again == spec
    assert again.provenance == prov


@pytest.mark.parametrize(
    "key",
    [
        "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1",
        "op=matmul_alpha_beta_cache | batch=14 | m=1 | n=86 | k=64 | tA=0 | tB=1 | accumulate=1 "
        "| alpha=0.1250 | beta=0.0000 | cache=1 | strided_batch=true",
        "op=matmul | batch=1 | m=1 | n=? | k=896 | tA=? | tB=? | nk=128 | nq=896 | nv=128",
        "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=0 | loader=q8nk_split",
        "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | bias=1",
    ],
)
def test_profile_keys_print_back_verbatim(key: str) -> None:
    assert MatmulSpec.parse(key).key() == key


def test_alpha_keeps_its_value_and_equal_forms_merge() -> None:
    a = MatmulSpec.parse(
        "op=matmul_alpha_beta | batch=14 | m=1 | n=5 | k=64 | tA=0 | tB=1 | alpha=0.1250"
    )
    b = MatmulSpec.parse(
        "op=matmul_alpha_beta | batch=14 | m=1 | n=5 | k=64 | tA=0 | tB=1 | alpha=0.125"
    )
    assert a.alpha == 0.125 and a == b and hash(a) == hash(b)
    pa = Provenance((BackendTiming("mlx", Stats(2, 1.0, 0.5, 0.4, 0.6, 0.6, 0.6)),))
    pb = Provenance((BackendTiming("mps", Stats(3, 3.0, 1.0, 0.9, 1.1, 1.1, 1.1)),))
    merged = merge_specs([a.with_provenance(pa), b.with_provenance(pb)])
    assert len(merged) == 1
    assert merged[0].provenance is not None
    assert merged[0].provenance.count == 5
    assert merged[0].provenance.main_backend == "mps"


def test_unknown_keys_survive() -> None:
    spec = MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=8 | k=8 | tA=0 | tB=1 | zeta=3 | foo=x")
    assert dict(spec.extras) == {"zeta": "3", "foo": "x"}
    assert spec.key().endswith("| foo=x | zeta=3")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "op=matmul | m=1 | m=2",
        "op=matmul | m=one",
        "op=matmul | tA=2",
        "op=matmul | alpha=nan",
        "op=matmul | dtype=f8",
        "batch=1 | m=1",
        "op=matmul | n",
        "op=sdpa backend=legacy",
        "op=matmul | m=-1",
        "op=matmul | batch=0",
    ],
)
def test_bad_keys_are_spec_errors(bad: str) -> None:
    with pytest.raises(SpecError):
        MatmulSpec.parse(bad)


def test_backend_is_not_part_of_a_shape() -> None:
    spec = MatmulSpec.from_mapping({"op": "matmul", "backend": "mps", "m": "1", "n": "2"})
    assert "backend" not in spec.key()


# ---- FLOPs and bytes, against hand-computed figures -------------------------

GATE_UP = "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1"
QKV = "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0"
LM_HEAD = "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=1"
ATTN_QK = (
    "op=matmul_alpha_beta | batch=14 | m=1 | n=130 | k=64 | tA=0 | tB=1 | alpha=0.1250 "
    "| beta=0.0000 | strided_batch=true"
)
FUSED2 = "op=matmul | batch=1 | m=1 | n=? | k=896 | tA=? | tB=? | n0=4864 | n1=4864"


@pytest.mark.parametrize(
    ("key", "dtype", "flops", "nbytes"),
    [
        # 2·n·k ; W n·k·2 + x k·2 + y n·2
        (GATE_UP, "f16", 2 * 9728 * 896, 9728 * 896 * 2 + 896 * 2 + 9728 * 2),
        (GATE_UP, "bf16", 17_432_576, 17_453_824),
        (GATE_UP, "f32", 17_432_576, 9728 * 896 * 4 + 896 * 4 + 9728 * 4),
        # bias: one add per output, n more values read
        (QKV, "f16", 2 * 1152 * 896 + 1152, 1152 * 896 * 2 + 896 * 2 + 1152 * 2 + 1152 * 2),
        # Q8_0: 28 blocks of 34 bytes per row of 896
        (LM_HEAD, "q8_0", 2 * 151936 * 896, 151936 * 28 * 34 + 896 * 2 + 151936 * 2),
        # α ≠ 1 costs one multiply per output; β = 0 reads no C₀
        (
            ATTN_QK,
            "f16",
            2 * 14 * 130 * 64 + 14 * 130,
            14 * 64 * 2 + 14 * 64 * 130 * 2 + 14 * 130 * 2,
        ),
        # fused gate/up: n is the sum of the parts
        (FUSED2, "q8_0", 2 * 9728 * 896, 9728 * 28 * 34 + 896 * 2 + 9728 * 2),
    ],
)
def test_flops_and_min_bytes(key: str, dtype: str, flops: int, nbytes: int) -> None:
    spec = MatmulSpec.parse(key)
    assert spec.flops() == flops
    assert spec.min_bytes(dtype) == nbytes
    assert spec.with_dtype(dtype).min_bytes() == nbytes


def test_beta_reads_c0_and_costs_two_flops_per_output() -> None:
    spec = MatmulSpec(
        op="matmul_alpha_beta",
        batch=2,
        m=3,
        n=5,
        k=7,
        alpha=1.0,
        beta=0.5,
        accumulate=True,
        dtype="f16",
    )
    outputs = 2 * 3 * 5
    assert spec.flops() == 2 * outputs * 7 + 2 * outputs
    assert spec.min_bytes() == 2 * (2 * 3 * 7 + 2 * 7 * 5 + outputs + outputs)


def test_q8_0_partial_block_is_a_whole_block() -> None:
    spec = MatmulSpec(op="matmul", m=1, n=10, k=40, tB=True, dtype="q8_0")
    assert spec.min_bytes() == 10 * 2 * 34 + 40 * 2 + 10 * 2


def test_unknown_dims_or_dtype_are_errors() -> None:
    with pytest.raises(SpecError, match="unknown dimensions"):
        MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=? | k=896 | tA=0 | tB=1").flops()
    with pytest.raises(SpecError, match="no dtype"):
        MatmulSpec.parse(GATE_UP).min_bytes()


def test_arithmetic_intensity_of_a_gemv_is_about_one() -> None:
    spec = MatmulSpec.parse(GATE_UP).with_dtype("f16")
    assert math.isclose(spec.arithmetic_intensity(), 17_432_576 / 17_453_824)
