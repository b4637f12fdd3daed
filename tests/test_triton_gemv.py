"""triton.gemv_nt in the Triton interpreter: its tile paths, PDL rules and reasons
(the contract every family meets is tests/test_conformance.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from matprobe.kernels.triton.gemv import FAMILIES, GEMV_NT
from matprobe.measure.device import DeviceInfo
from matprobe.measure.variants import Variant
from matprobe.spec import MatmulSpec
from triton_checks import (
    CPU,
    assert_point_refused,
    assert_reason,
    check_on_cpu,
    check_strided,
    spec_for,
)

pytest.importorskip("torch", reason="triton.gemv_nt tests need torch")
pytest.importorskip("triton", reason="triton.gemv_nt tests need triton (run in its interpreter)")
pytestmark = pytest.mark.interpreter

GRIDS = {
    "bn64_bk128": {"bn": (64,), "bk": (128,), "w": (4,), "pdl": (0,)},
    "bn128_bk256": {"bn": (128,), "bk": (256,), "w": (4,), "pdl": (0,)},
}


def variant(tag: str) -> Variant:
    (only,) = GEMV_NT.variants(GRIDS[tag])
    return only


# ---- correctness -------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_decode_shapes(dtype: str) -> None:
    # o_proj-like (K a multiple of BLOCK_K only for bk128) and attention Q·Kᵀ-like
    # (batch = heads, α = 0.125, β = 0: C0 not read).
    check_on_cpu(variant("bn128_bk256"), spec_for(896, 896, 1, dtype, "plain"))
    attn = MatmulSpec(
        op="matmul_alpha_beta", batch=14, m=1, n=37, k=64, tB=True,
        alpha=0.125, beta=0.0, accumulate=True, dtype=dtype,
    )  # fmt: skip
    check_on_cpu(variant("bn64_bk128"), attn)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_strided_operands(dtype: str) -> None:
    check_strided(variant("bn64_bk128"), spec_for(123, 300, 3, dtype, "alpha_beta_bias"))


@pytest.mark.parametrize(
    ("n", "k", "bn", "bk", "dtype", "epilogue"),
    [(8, 256, 4, 128, "f32", "bias"), (7, 256, 4, 128, "f16", "alpha_beta_bias"),
     (8, 300, 4, 128, "bf16", "plain"), (9, 40, 2, 16, "f32", "alpha_beta")],
)  # fmt: skip
def test_unrolled_even_and_ragged_paths(
    n: int, k: int, bn: int, bk: int, dtype: str, epilogue: str
) -> None:
    """The fixed-K unrolled loop: unmasked when n and k divide the tiles, masked otherwise."""
    (v,) = GEMV_NT.variants({"bn": (bn,), "bk": (bk,), "w": (4,), "pdl": (0,)})
    check_on_cpu(v, spec_for(n, k, 2, dtype, epilogue))


# ---- capability reasons and identity -------------------------------------------


def test_unsupported_reasons() -> None:
    v = variant("bn64_bk128")
    ok = spec_for(123, 300, 1, "f16", "plain")
    assert v.unsupported_reason(ok, CPU) is None
    assert v.unsupported_reason(replace(ok, m=2), CPU) == "needs m=1 (GEMV)"
    assert v.unsupported_reason(replace(ok, tB=False), CPU) == "needs tB=1: W stored [n, k]"


@pytest.mark.parametrize(
    ("grid", "fragment"),
    [
        ({"bk": 8}, "bk=8: BLOCK_K must be a power of two >= 16"),
        ({"bk": 96}, "bk=96"),
        ({"bn": 48}, "bn=48: BLOCK_N must be a power of two"),
        ({"w": 3}, "w=3: num_warps"),
        ({"bn": 4096, "bk": 512}, "exceeds Triton's block limit"),
        ({"pdl": 2}, "pdl=2: 0 or 1"),
        ({"bn": 64, "bk": 1024, "w": 4}, "512 elements per thread, > 256"),
        ({"bn": 1, "bk": 2048}, "bk=2048 for k=300: a tile wider than 1024 must hold data"),
    ],
)
def test_bad_grid_values_are_refused(grid: dict[str, int], fragment: str) -> None:
    point = {"bn": 64, "bk": 128, "w": 4, "pdl": 0, **grid}
    assert_point_refused(GEMV_NT, point, spec_for(123, 300, 1, "f32", "plain"), fragment)


def test_family_shape() -> None:
    assert FAMILIES == (GEMV_NT,)
    assert GEMV_NT.name == "triton.gemv_nt"
    assert GEMV_NT.ops == {"matmul", "matmul_bias_add", "matmul_alpha_beta"}
    assert GEMV_NT.interpreted_on_cpu and not GEMV_NT.baseline and not GEMV_NT.peer
    assert [v.id for v in GEMV_NT.variants()] == [
        f"triton.gemv_nt/bn{bn}_bk{bk}_w{w}_pdl{pdl}"
        for bn in (1, 2, 8)
        for bk in (1024, 8192)
        for w in (4, 8)
        for pdl in (0, 1)
    ]


# ---- programmatic dependent launch (pdl=1): where it may run -------------------------

HOPPER = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0))
AMPERE = DeviceInfo(kind="cuda", name="fake A100", capability=(8, 0))


def pdl_variant(bk: int) -> Variant:
    (v,) = GEMV_NT.variants({"bn": (2,), "bk": (bk,), "w": (4,), "pdl": (1,)})
    return v


@pytest.mark.parametrize(
    ("spec", "device", "bk", "fragment"),
    [
        (spec_for(9728, 896, 1, "f16", "plain"), HOPPER, 1024, None),
        (spec_for(896, 4864, 1, "bf16", "plain"), HOPPER, 8192, None),
        (spec_for(1152, 896, 1, "f16", "bias"), HOPPER, 1024, None),
        (spec_for(896, 896, 1, "f16", "plain"), HOPPER, 512, "needs k ≤ bk < 2k"),
        (spec_for(896, 896, 1, "f16", "plain"), HOPPER, 2048, "must hold data"),
        (spec_for(896, 1500, 1, "f16", "plain"), HOPPER, 1024, "needs k ≤ bk < 2k"),
        (spec_for(896, 896, 1, "f16", "plain"), AMPERE, 1024, "compute capability ≥ 9.0"),
        (spec_for(896, 896, 1, "f16", "plain"), CPU, 1024, "compute capability ≥ 9.0"),
        # A batched product's B may be a KV cache the previous kernel just wrote.
        (spec_for(64, 96, 3, "f16", "plain"), HOPPER, 128, "weights only"),
        (spec_for(64, 96, 1, "f16", "alpha_beta"), HOPPER, 128, "weights only"),
    ],
)
def test_pdl_runs_only_on_hopper_weights_in_one_tile(
    spec: MatmulSpec, device: DeviceInfo, bk: int, fragment: str | None
) -> None:
    assert_reason(pdl_variant(bk).unsupported_reason(spec, device), fragment)
