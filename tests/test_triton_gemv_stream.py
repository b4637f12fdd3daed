"""triton.gemv_stream in the Triton interpreter: whole-row tiles, the program grid,
its reasons (the contract every family meets is tests/test_conformance.py)."""

from __future__ import annotations

import pytest

from matprobe.kernels.triton.gemv_stream import (
    FAMILIES,
    GEMV_STREAM,
    block_k,
    programs,
)
from matprobe.measure.device import DeviceInfo
from matprobe.measure.variants import Variant
from matprobe.spec import MatmulSpec
from triton_checks import CPU, assert_point_refused, assert_reason, check_on_cpu, spec_for

pytest.importorskip("torch", reason="triton.gemv_stream tests need torch")
pytest.importorskip("triton", reason="triton.gemv_stream tests need triton (its interpreter)")
pytestmark = pytest.mark.interpreter

HOPPER = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0), sm_count=132)
AMPERE = DeviceInfo(kind="cuda", name="fake A100", capability=(8, 0), sm_count=108)


def point(bn: int, p: int, w: int, pdl: int = 0, pf: int = 0) -> Variant:
    grid = {"bn": (bn,), "p": (p,), "w": (w,), "pdl": (pdl,), "pf": (pf,)}
    (only,) = GEMV_STREAM.variants(grid)
    return only


# ---- correctness -------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "k", "dtype", "epilogue", "bn", "p"),
    [(200, 64, "f32", "plain", 8, 2), (64, 256, "f16", "bias", 4, 1),
     (37, 1024, "bf16", "alpha_beta_bias", 2, 4)],
)  # fmt: skip
def test_whole_row_tiles_without_k_masks(
    n: int, k: int, dtype: str, epilogue: str, bn: int, p: int
) -> None:
    """k a power of two: the row is exactly one tile (EVEN_K), read without masks;
    several row blocks per program."""
    assert block_k(k) == k
    check_on_cpu(point(bn, p, 4), spec_for(n, k, 1, dtype, epilogue))


def test_every_row_block_is_written_once_per_program_stride() -> None:
    """More programs than row blocks: the grid is clamped, every row still written."""
    spec = spec_for(6, 40, 1, "f32", "plain")
    assert programs(3, 0, 8) == 3
    check_on_cpu(point(2, 8, 1), spec)


def test_default_grid_on_a_small_gemv() -> None:
    spec = spec_for(77, 200, 1, "bf16", "alpha_beta_bias")
    for v in GEMV_STREAM.variants({"pdl": (0,), "pf": (0,)}):
        check_on_cpu(v, spec)


# ---- capability reasons and identity -------------------------------------------


@pytest.mark.parametrize(
    ("spec", "v", "device", "fragment"),
    [
        (spec_for(9728, 896, 1, "f16", "plain"), point(8, 4, 4, 1), HOPPER, None),
        (spec_for(9728, 896, 1, "f16", "plain"), point(8, 4, 8, 1, 1), HOPPER, None),
        (spec_for(9728, 896, 1, "f16", "plain"), point(8, 4, 8, 0, 1), AMPERE, None),
        (spec_for(96, 96, 1, "f16", "plain"), point(8, 4, 8, 0, 1), CPU, "a CUDA GPU only"),
        (spec_for(896, 4864, 1, "f16", "plain"), point(4, 2, 16, 1), HOPPER, None),
        # 4 × 8192 over 4 warps: 256 elements a thread, two tiles live.
        (spec_for(896, 4864, 1, "f16", "plain"), point(4, 2, 4), HOPPER, "would spill"),
        (spec_for(896, 896, 1, "f16", "plain"), point(4, 2, 4, 1), AMPERE, "capability ≥ 9.0"),
        (spec_for(896, 896, 1, "f16", "plain"), point(4, 2, 4, 1), CPU, "capability ≥ 9.0"),
        (spec_for(64, 96, 14, "f16", "plain"), point(4, 2, 4), HOPPER, "needs batch=1"),
        (spec_for(64, 96, 1, "f16", "plain", m=2), point(4, 2, 4), HOPPER, "needs m=1"),
        (spec_for(64, 96, 1, "f16", "plain", tb=False), point(4, 2, 4), HOPPER, "needs tB=1"),
        (spec_for(64, 20000, 1, "f16", "plain"), point(4, 2, 4), HOPPER, "needs k <= 16384"),
    ],
)
def test_unsupported_reasons(
    spec: MatmulSpec, v: Variant, device: DeviceInfo, fragment: str | None
) -> None:
    assert_reason(v.unsupported_reason(spec, device), fragment)


@pytest.mark.parametrize(
    ("grid", "fragment"),
    [
        ({"bn": 3}, "bn=3"),
        ({"p": 0}, "p=0"),
        ({"p": 33}, "p=33"),
        ({"w": 6}, "w=6"),
        ({"pdl": 2}, "pdl=2"),
        ({"pf": 2}, "pf=2"),
    ],
)
def test_bad_grid_values_are_refused(grid: dict[str, int], fragment: str) -> None:
    values = {"bn": 4, "p": 2, "w": 4, "pdl": 0, "pf": 0, **grid}
    assert_point_refused(GEMV_STREAM, values, spec_for(100, 100, 1, "f16", "plain"), fragment)


def test_grid_and_tile_helpers() -> None:
    assert [block_k(k) for k in (1, 7, 16, 17, 896, 4864)] == [16, 16, 16, 32, 1024, 8192]
    assert programs(4864, 132, 4) == 528 and programs(112, 132, 4) == 112
    assert programs(10, 0, 3) == 3


def test_family_shape() -> None:
    assert FAMILIES == (GEMV_STREAM,)
    assert GEMV_STREAM.name == "triton.gemv_stream"
    assert GEMV_STREAM.interpreted_on_cpu and not GEMV_STREAM.baseline
    assert len(GEMV_STREAM.variants()) == 8
    assert all(v.param_dict["pf"] == 0 for v in GEMV_STREAM.variants())
