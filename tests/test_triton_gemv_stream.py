"""triton.gemv_stream on the CPU, in the Triton interpreter, against the float64
reference — with the harness's own validator (matprobe.harness.validate)."""

from __future__ import annotations

import os

# Must precede the first import of triton (and of the kernels module): a
# @triton.jit function decides at definition time whether it is interpreted.
os.environ["TRITON_INTERPRET"] = "1"

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="triton.gemv_stream tests need torch")
pytest.importorskip("triton", reason="triton.gemv_stream tests need triton (its interpreter)")

from matprobe.errors import MatprobeError  # noqa: E402
from matprobe.harness.device import DeviceInfo  # noqa: E402
from matprobe.harness.variants import Variant  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.variants.triton_gemv_stream import (  # noqa: E402
    FAMILIES,
    GEMV_STREAM,
    block_k,
    programs,
)
from triton_checks import CPU, assert_rejects_bad_operands, check_on_cpu  # noqa: E402

HOPPER = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0), sm_count=132)
AMPERE = DeviceInfo(kind="cuda", name="fake A100", capability=(8, 0), sm_count=108)

#: Epilogues: (op, alpha, beta, bias flag).
EPILOGUES: dict[str, tuple[str, float | None, float | None, bool | None]] = {
    "plain": ("matmul", None, None, None),
    "bias": ("matmul_bias_add", None, None, None),
    "alpha_beta_bias": ("matmul_alpha_beta", 0.125, 0.5, True),
}


def point(bn: int, p: int, w: int, pdl: int = 0, pf: int = 0) -> Variant:
    grid = {"bn": (bn,), "p": (p,), "w": (w,), "pdl": (pdl,), "pf": (pf,)}
    (only,) = GEMV_STREAM.variants(grid)
    return only


def spec_for(n: int, k: int, dtype: str, epilogue: str, **extra: Any) -> MatmulSpec:
    op, alpha, beta, bias = EPILOGUES[epilogue]
    fields: dict[str, Any] = {"batch": 1, "m": 1, "tB": True, **extra}
    return MatmulSpec(op=op, n=n, k=k, alpha=alpha, beta=beta, bias=bias, dtype=dtype,
                      **fields)  # fmt: skip


def check(v: Variant, spec: MatmulSpec) -> None:
    check_on_cpu(v, spec)


# ---- correctness -------------------------------------------------------------

# n: one row, fewer rows than one block, ragged last block, many blocks per
# program (the CPU grid is p programs, so each loops over n / (bn·p) blocks);
# k: 1, below and above a power of two, an exact power of two (the unmasked path).
CASES = [
    (n, k, dtype, epilogue, bn, p)
    for dtype, n, k, epilogue, bn, p in [
        ("f32", 1, 1, "plain", 2, 1),
        ("f32", 5, 7, "bias", 4, 2),
        ("f32", 123, 300, "alpha_beta_bias", 4, 3),
        ("f32", 200, 64, "plain", 8, 2),
        ("f32", 37, 1024, "bias", 2, 4),
        ("f16", 123, 300, "plain", 8, 3),
        ("f16", 200, 96, "alpha_beta_bias", 2, 5),
        ("f16", 64, 256, "bias", 4, 1),
        ("bf16", 123, 300, "bias", 4, 2),
        ("bf16", 9, 896, "alpha_beta_bias", 8, 1),
        ("bf16", 200, 33, "plain", 2, 7),
    ]
]


@pytest.mark.parametrize(("n", "k", "dtype", "epilogue", "bn", "p"), CASES)
def test_matches_reference(n: int, k: int, dtype: str, epilogue: str, bn: int, p: int) -> None:
    check(point(bn, p, 4), spec_for(n, k, dtype, epilogue))


def test_every_row_block_is_written_once_per_program_stride() -> None:
    """More programs than row blocks: the grid is clamped, every row still written."""
    spec = spec_for(6, 40, "f32", "plain")
    assert programs(3, 0, 8) == 3
    check(point(2, 8, 1), spec)


def test_ta_is_accepted_for_m1() -> None:
    check(point(4, 2, 1), spec_for(50, 70, "f16", "bias", tA=True))


def test_default_grid_on_a_small_gemv() -> None:
    spec = spec_for(77, 200, "bf16", "alpha_beta_bias")
    for v in GEMV_STREAM.variants({"pdl": (0,), "pf": (0,)}):
        check(v, spec)


def test_run_rejects_mismatched_tensors() -> None:
    spec = spec_for(20, 30, "f16", "bias")
    assert_rejects_bad_operands(point(2, 2, 1).build(spec, CPU), spec)


# ---- capability reasons and identity -------------------------------------------


@pytest.mark.parametrize(
    ("spec", "v", "device", "fragment"),
    [
        (spec_for(9728, 896, "f16", "plain"), point(8, 4, 4, 1), HOPPER, None),
        (spec_for(9728, 896, "f16", "plain"), point(8, 4, 8, 1, 1), HOPPER, None),
        (spec_for(9728, 896, "f16", "plain"), point(8, 4, 8, 0, 1), AMPERE, None),
        (spec_for(96, 96, "f16", "plain"), point(8, 4, 8, 0, 1), CPU, "a CUDA GPU only"),
        (spec_for(896, 4864, "f16", "plain"), point(4, 2, 16, 1), HOPPER, None),
        # 4 × 8192 over 4 warps: 256 elements a thread, two tiles live.
        (spec_for(896, 4864, "f16", "plain"), point(4, 2, 4), HOPPER, "would spill"),
        (spec_for(896, 896, "f16", "plain"), point(4, 2, 4, 1), AMPERE, "capability ≥ 9.0"),
        (spec_for(896, 896, "f16", "plain"), point(4, 2, 4, 1), CPU, "capability ≥ 9.0"),
        (spec_for(64, 96, "f16", "plain", batch=14), point(4, 2, 4), HOPPER, "needs batch=1"),
        (spec_for(64, 96, "f16", "plain", m=2), point(4, 2, 4), HOPPER, "needs m=1"),
        (spec_for(64, 96, "f16", "plain", tB=False), point(4, 2, 4), HOPPER, "needs tB=1"),
        (spec_for(64, 20000, "f16", "plain"), point(4, 2, 4), HOPPER, "needs k <= 16384"),
        (spec_for(151936, 896, "f16", "plain"), point(4, 2, 4), CPU, "Triton interpreter"),
        (spec_for(64, 96, "q8_0", "plain"), point(4, 2, 4), HOPPER, "q8_0"),
    ],
)
def test_unsupported_reasons(
    spec: MatmulSpec, v: Variant, device: DeviceInfo, fragment: str | None
) -> None:
    reason = v.unsupported_reason(spec, device)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason, reason


@pytest.mark.parametrize(
    ("grid", "fragment"),
    [({"bn": 3}, "bn=3"), ({"p": 0}, "p=0"), ({"p": 33}, "p=33"), ({"w": 6}, "w=6"),
     ({"pdl": 2}, "pdl=2"), ({"pf": 2}, "pf=2")],
)
def test_bad_grid_values_are_refused(grid: dict[str, int], fragment: str) -> None:
    values = {"bn": 4, "p": 2, "w": 4, "pdl": 0, "pf": 0, **grid}
    (v,) = GEMV_STREAM.variants({name: (value,) for name, value in values.items()})
    reason = v.unsupported_reason(spec_for(100, 100, "f16", "plain"), HOPPER)
    assert reason is not None and fragment in reason


def test_build_refuses_unsupported_and_interpreter_on_gpu() -> None:
    with pytest.raises(MatprobeError, match="needs m=1"):
        point(2, 2, 1).build(spec_for(5, 7, "f32", "plain", m=2), CPU)
    with pytest.raises(MatprobeError, match="TRITON_INTERPRET=1 is set"):
        point(2, 2, 1).build(spec_for(5, 7, "f32", "plain"), HOPPER)


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
