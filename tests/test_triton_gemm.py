"""triton.gemm in the Triton interpreter: several tiles and K iterations, the launch
it makes (the contract every family meets is tests/test_conformance.py).

The interpreter is slow with ``tl.dot``, so the runs here use small tiles
(explicit grid values) on small awkward shapes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from matprobe.kernels.triton import _gemm_kernels, gemm
from matprobe.kernels.triton.gemm import FAMILIES, GEMM
from matprobe.measure.inputs import make_inputs
from matprobe.measure.outputs import empty_output
from matprobe.measure.variants import Variant
from matprobe.spec import MatmulSpec
from triton_checks import CPU, GPU, assert_point_refused, check_on_cpu, check_strided
from triton_checks import spec_for as any_spec

pytest.importorskip("torch", reason="triton.gemm tests need torch")
pytest.importorskip("triton", reason="triton.gemm tests need triton (run in its interpreter)")
pytestmark = pytest.mark.interpreter

LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]  # (tA, tB)
SMALL = {"bm": (16,), "bn": (16,), "bk": (16,)}


def variant(grid: dict[str, tuple[int, ...]] | None = None) -> Variant:
    (only,) = GEMM.variants({**GEMM.grid, **SMALL, **(grid or {})})
    return only


def spec_for(
    m: int, n: int, k: int, batch: int, dtype: str, epilogue: str,
    *, ta: bool = False, tb: bool = True,
) -> MatmulSpec:  # fmt: skip
    return any_spec(n, k, batch, dtype, epilogue, m=m, ta=ta, tb=tb)


# ---- correctness -------------------------------------------------------------

#: (dtype, (tA, tB), epilogue, (m, n, k, batch)) on 16×16×16 tiles: several tiles
#: on every edge, ragged (k = 70, 20) or not (k = 64: the unmasked K loop) in
#: every dtype, each layout and epilogue.
SMALL_TILE_CASES = [
    ("f32", (False, False), "plain", (33, 17, 70, 2)),
    ("f16", (False, True), "bias", (16, 64, 64, 2)),
    ("bf16", (True, False), "alpha_beta", (33, 64, 20, 1)),
    ("f32", (True, True), "alpha_beta_bias", (16, 17, 64, 1)),
    ("f16", (False, False), "alpha_beta_bias", (33, 64, 70, 2)),
    ("bf16", (False, True), "bias", (33, 17, 64, 2)),
]


@pytest.mark.parametrize(("dtype", "layout", "epilogue", "shape"), SMALL_TILE_CASES)
def test_small_tiles(
    dtype: str, layout: tuple[bool, bool], epilogue: str, shape: tuple[int, int, int, int]
) -> None:
    m, n, k, batch = shape
    spec = spec_for(m, n, k, batch, dtype, epilogue, ta=layout[0], tb=layout[1])
    check_on_cpu(variant(), spec)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_default_grid_point(dtype: str) -> None:
    # A real tile (bm64 bn128 bk64) over a ragged shape smaller than one tile.
    (v,) = GEMM.variants({"bm": (64,), "bn": (128,)})
    check_on_cpu(v, spec_for(33, 64, 70, 2, dtype, "alpha_beta_bias", ta=False, tb=True))


def test_non_square_tiles() -> None:
    # bm ≠ bn ≠ bk, several tile-rows and tile-columns, grouped ordering with
    # fewer tile-rows than GROUP_M in the last group.
    v = variant({"bm": (16,), "bn": (32,), "bk": (32,)})
    check_on_cpu(v, spec_for(150, 70, 40, 1, "f16", "alpha_beta_bias", ta=True, tb=False))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_strided_operands(dtype: str) -> None:
    check_strided(variant(), spec_for(33, 17, 20, 2, dtype, "alpha_beta_bias"))


# ---- what the wrapper launches -----------------------------------------------------


class InterpretedFunction:
    """Stands in for the kernel (the class name passes the interpreter check) and
    records the launch grid and the compile-time constants."""

    def __init__(self) -> None:
        self.launches: list[tuple[tuple[int, ...], dict[str, Any]]] = []

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **constants: Any) -> None:
            self.launches.append((grid, constants))

        return launch


@pytest.mark.parametrize(
    ("dtype", "k", "ieee", "upcast", "even_k"),
    [("f32", 128, True, False, True), ("f16", 100, False, False, False),
     ("bf16", 64, False, True, True)],
)  # fmt: skip
def test_launch_constants(
    monkeypatch: pytest.MonkeyPatch, dtype: str, k: int, ieee: bool, upcast: bool, even_k: bool
) -> None:
    fake = InterpretedFunction()
    monkeypatch.setattr(_gemm_kernels, "gemm_kernel", fake)
    (v,) = GEMM.variants({"bm": (64,), "bn": (128,), "w": (8,), "s": (4,)})
    spec = spec_for(200, 300, k, 3, dtype, "bias", ta=True, tb=False)
    v.build(spec, CPU)(make_inputs(spec, seed=0), empty_output(spec, "cpu"))
    ((grid, constants),) = fake.launches
    assert grid == (4 * 3, 3)  # ceil(200/64) · ceil(300/128) tiles, batch 3
    assert constants["IEEE"] is ieee  # f32: input_precision="ieee", never TF32
    assert constants["INTERPRETED_BF16"] is upcast
    assert constants["EVEN_K"] is even_k
    assert (constants["BLOCK_M"], constants["BLOCK_N"], constants["BLOCK_K"]) == (64, 128, 64)
    assert (constants["num_warps"], constants["num_stages"]) == (8, 4)
    assert constants["GROUP_M"] == gemm.GROUP_M
    assert (constants["HAS_C0"], constants["HAS_BIAS"]) == (False, True)


def test_kernel_asks_for_ieee_f32() -> None:
    assert 'input_precision="ieee"' in gemm.KERNELS_SOURCE
    assert "if IEEE:" in gemm.KERNELS_SOURCE


# ---- capability reasons and identity -------------------------------------------


def test_unsupported_reasons() -> None:
    (v,) = GEMM.variants({"bm": (128,), "bn": (128,)})
    ok = spec_for(64, 300, 200, 1, "f16", "plain")
    assert v.unsupported_reason(ok, CPU) is None
    for m in (1, 15):
        assert v.unsupported_reason(replace(ok, m=m), CPU) == (
            "tiled GEMM is for m >= 16; use a GEMV family for decode"
        )
    for ta, tb in LAYOUTS:
        assert v.unsupported_reason(replace(ok, tA=ta, tB=tb), CPU) is None
    prefill_lm_head = replace(ok, m=128, n=151936, k=896)
    reason = v.unsupported_reason(prefill_lm_head, CPU)
    assert reason is not None and "too large for the Triton interpreter (CPU): batch·n·k" in reason
    assert v.unsupported_reason(prefill_lm_head, GPU) is None
    long_prefill = replace(ok, m=4096, n=512, k=512)  # n·k small, m·n·k not
    reason = v.unsupported_reason(long_prefill, CPU)
    assert reason is not None and "batch·m·n·k" in reason
    assert v.unsupported_reason(long_prefill, GPU) is None
    assert "zero dimension (n=0)" in (v.unsupported_reason(replace(ok, n=0), GPU) or "")


def test_shared_memory_limit_depends_on_dtype() -> None:
    (v,) = GEMM.variants({"bm": (128,), "bn": (128,), "bk": (64,), "s": (4,)})
    half = spec_for(64, 300, 200, 1, "f16", "plain")
    assert gemm.shared_bytes(128, 128, 64, 4, "f16") == 131072
    assert v.unsupported_reason(half, GPU) is None  # 128 KB
    reason = v.unsupported_reason(replace(half, dtype="f32"), GPU)  # 256 KB
    assert reason == (
        "shared memory (bm·bk + bk·bn)·4 B·s = 262144 B exceeds the 227 KB a block may use"
    )
    # Every default grid point fits in every dtype.
    for point in GEMM.variants():
        for dtype in ("f32", "f16", "bf16"):
            assert point.unsupported_reason(replace(half, dtype=dtype), GPU) is None


@pytest.mark.parametrize(
    ("grid", "fragment"),
    [
        ({"bk": 8}, "bk=8: tile sides must be powers of two >= 16"),
        ({"bk": 48}, "bk=48"),
        ({"bm": 96}, "bm=96"),
        ({"bn": 0}, "bn=0"),
        ({"w": 3}, "w=3: num_warps"),
        ({"w": 64}, "w=64: num_warps"),
        ({"s": 0}, "s=0: num_stages"),
        ({"bm": 2048, "bn": 1024, "bk": 16}, "exceeds Triton's block limit"),
    ],
)
def test_bad_grid_values_are_refused(grid: dict[str, int], fragment: str) -> None:
    point = {"bm": 64, "bn": 64, "bk": 32, "w": 4, "s": 3, **grid}
    assert_point_refused(GEMM, point, spec_for(64, 300, 200, 1, "f16", "plain"), fragment)


def test_family_shape() -> None:
    assert FAMILIES == (GEMM,)
    assert GEMM.name == "triton.gemm"
    assert GEMM.ops == {"matmul", "matmul_bias_add", "matmul_alpha_beta"}
    assert GEMM.devices == {"cuda", "cpu"}
    assert GEMM.dtypes == {"f32", "f16", "bf16"}
    assert GEMM.interpreted_on_cpu and not GEMM.baseline and not GEMM.peer
    assert [v.id for v in GEMM.variants()] == [
        "triton.gemm/bm64_bn64_bk64_w4_s3",
        "triton.gemm/bm64_bn128_bk64_w4_s3",
        "triton.gemm/bm128_bn64_bk64_w4_s3",
        "triton.gemm/bm128_bn128_bk64_w4_s3",
    ]
