"""triton.gemv_tn in the Triton interpreter: split-K modes, finishers, the split plan
(the contract every family meets is tests/test_conformance.py)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest

from matprobe.kernels.triton.gemv_tn import FAMILIES, GEMV_TN, GemvTNKernel, plan_split
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import Variant
from matprobe.spec import MatmulSpec
from triton_checks import CPU, GPU, assert_point_refused, check_on_cpu, check_reruns, check_strided
from triton_checks import spec_for as any_spec

torch = pytest.importorskip("torch", reason="triton.gemv_tn tests need torch")
pytest.importorskip("triton", reason="triton.gemv_tn tests need triton (run in its interpreter)")
pytestmark = pytest.mark.interpreter

#: Grid points covering the three kernel modes: no split (K loop, epilogue in
#: place), auto split with the last program finalizing, an explicit split of
#: several tiles per program, and the two-launch finish.
GRIDS: dict[str, dict[str, tuple[Any, ...]]] = {
    "nosplit": {"bn": (32,), "bk": (32,), "split": (1,)},
    "auto": {"bn": (64,), "bk": (32,), "split": (0,)},
    "split3": {"bn": (128,), "bk": (32,), "split": (3,)},
    "kernel": {"bn": (16,), "bk": (32,), "split": (2,), "fin": ("kernel",)},
}

spec_for = partial(any_spec, tb=False)  # W stored [k, n]


def variant(tag: str) -> Variant:
    (only,) = GEMV_TN.variants(GRIDS[tag])
    return only


def assert_clean(kernel: Any) -> None:
    """Workspace and counters are zero again after a call (graph replay relies on it)."""
    assert isinstance(kernel, GemvTNKernel)
    if kernel.workspace is not None:
        assert int(torch.count_nonzero(kernel.workspace)) == 0, "workspace left dirty"
    if kernel.counters is not None:
        assert int(torch.count_nonzero(kernel.counters)) == 0, "counters left dirty"


def check(v: Variant, spec: MatmulSpec, inputs: MatmulInputs | None = None) -> Any:
    kernel = check_on_cpu(v, spec, inputs)
    assert_clean(kernel)
    return kernel


# ---- correctness -------------------------------------------------------------


@pytest.mark.parametrize(
    ("grid", "n", "k", "batch", "dtype", "epilogue"),
    [("nosplit", 160, 200, 3, "bf16", "alpha_beta"), ("auto", 5, 64, 1, "f16", "bias"),
     ("split3", 77, 200, 3, "bf16", "plain"), ("kernel", 160, 200, 1, "f16", "bias")],
)  # fmt: skip
def test_each_mode_on_ragged_shapes(
    grid: str, n: int, k: int, batch: int, dtype: str, epilogue: str
) -> None:
    check(variant(grid), spec_for(n, k, batch, dtype, epilogue))


def test_qkv_shape_f16_with_bias() -> None:
    """The Qwen2.5 fused QKV: n=1152, k=896, W [896, 1152], bias, auto split-K."""
    spec = MatmulSpec(op="matmul_bias_add", m=1, n=1152, k=896, tB=False, dtype="f16")
    (v,) = GEMV_TN.variants({"bn": (128,), "bk": (64,), "split": (0,)})
    kernel = check(v, spec)
    assert (kernel.splits, kernel.k_chunk, kernel.mode) == (14, 64, 1)  # 9 × 14 programs


@pytest.mark.parametrize(
    ("dtype", "split", "fin"),
    [("f32", 0, "last"), ("f16", 1, "last"), ("bf16", 0, "kernel"), ("f16", 2, "last")],
)
def test_attention_pv_heads_in_one_launch(dtype: str, split: int, fin: str) -> None:
    """P·V: batch = 14 heads, n = head_dim 64, k = context 37, α/β with C0."""
    spec = MatmulSpec(
        op="matmul_alpha_beta", batch=14, m=1, n=64, k=37, tB=False,
        alpha=0.125, beta=0.5, accumulate=True, dtype=dtype,
    )  # fmt: skip
    (v,) = GEMV_TN.variants({"bn": (64,), "bk": (16,), "split": (split,), "fin": (fin,)})
    kernel = check(v, spec)
    assert kernel.splits == (3 if split == 0 else split)


@pytest.mark.parametrize("grid", ["auto", "split3", "kernel", "nosplit"])
def test_consecutive_calls_on_one_kernel(grid: str) -> None:
    """The workspace and counters reset themselves: call after call stays right."""
    check_reruns(variant(grid), spec_for(77, 200, 2, "f32", "alpha_beta_bias"), assert_clean)


@pytest.mark.parametrize(("dtype", "grid"), [("f32", "auto"), ("bf16", "nosplit")])
def test_strided_operands(dtype: str, grid: str) -> None:
    assert_clean(check_strided(variant(grid), spec_for(77, 300, 3, dtype, "alpha_beta_bias")))


# ---- the split plan ------------------------------------------------------------


def test_plan_split() -> None:
    # QKV, bn=64: 18 column blocks; auto fills 4 programs per SM with whole bk tiles.
    assert plan_split(0, 18, 1, 896, 64, 132) == (14, 64)  # one tile per program
    assert plan_split(0, 18, 1, 896, 32, 132) == (28, 32)
    assert plan_split(0, 36, 1, 896, 64, 132) == (14, 64)
    # P·V: 14 heads × one column block, k = L.
    assert plan_split(0, 1, 14, 1024, 32, 132) == (32, 32)
    assert plan_split(0, 1, 14, 16, 32, 132) == (1, 32)
    # Enough column blocks already (lm_head-like): no split.
    assert plan_split(0, 600, 1, 896, 64, 132) == (1, 896)
    # No SM count (CPU): an H100's is assumed.
    assert plan_split(0, 18, 1, 896, 64, 0) == plan_split(0, 18, 1, 896, 64, 132)
    # split=1: one split over all of K (rounded up to whole tiles).
    assert plan_split(1, 18, 1, 300, 32, 132) == (1, 320)
    # Explicit S: whole tiles per split, no empty split, never more than the tiles.
    assert plan_split(5, 1, 1, 300, 32, 132) == (5, 64)  # 10 tiles: 2 each
    assert plan_split(4, 1, 1, 300, 32, 132) == (4, 96)  # 3, 3, 3, 1
    assert plan_split(7, 1, 1, 300, 32, 132) == (5, 64)  # 7 asked, 5 non-empty
    assert plan_split(3, 1, 1, 7, 32, 132) == (1, 32)  # one tile: no split


def test_split_that_resolves_to_one_needs_no_workspace() -> None:
    kernel = check(variant("split3"), spec_for(77, 7, 1, "f32", "bias"))
    assert (kernel.splits, kernel.mode, kernel.workspace, kernel.counters) == (1, 0, None, None)


# ---- capability reasons and identity -------------------------------------------


def test_unsupported_reasons() -> None:
    v = variant("auto")
    ok = spec_for(77, 300, 1, "f16", "plain")
    assert v.unsupported_reason(ok, CPU) is None
    assert v.unsupported_reason(replace(ok, m=2), CPU) == "needs m=1 (GEMV)"
    assert v.unsupported_reason(replace(ok, tB=True), CPU) == "needs tB=0: W stored [k, n]"
    assert "zero dimension (n=0)" in (v.unsupported_reason(replace(ok, n=0), CPU) or "")
    assert "zero dimension (k=0)" in (v.unsupported_reason(replace(ok, k=0), CPU) or "")
    heads = replace(ok, batch=70000, n=1, k=1)
    assert "exceeds the grid's z limit" in (v.unsupported_reason(heads, GPU) or "")


@pytest.mark.parametrize(
    ("grid", "fragment"),
    [
        ({"bk": 4}, "bk=4: BLOCK_K must be a power of two >= 8"),
        ({"bk": 96}, "bk=96"),
        ({"bn": 48}, "bn=48: BLOCK_N must be a power of two >= 8"),
        ({"bn": 4}, "bn=4"),
        ({"w": 3}, "w=3: num_warps"),
        ({"split": -1}, "split=-1: must be 1 (no split), S > 1 (S splits) or 0 (auto)"),
        ({"split": True}, "split=True"),
        ({"split": 2.5}, "split=2.5"),
        ({"fin": "atomic"}, "fin='atomic': must be one of last, kernel"),
        ({"bn": 4096, "bk": 512, "w": 32}, "exceeds Triton's block limit"),
        ({"bn": 128, "bk": 256}, "more than 128 fp32 accumulators per thread with w=4"),
    ],
)
def test_bad_grid_values_are_refused(grid: dict[str, Any], fragment: str) -> None:
    point = {"bn": 64, "bk": 32, "split": 0, "w": 4, "fin": "last", **grid}
    assert_point_refused(GEMV_TN, point, spec_for(77, 300, 1, "f32", "plain"), fragment)


def test_family_shape() -> None:
    assert FAMILIES == (GEMV_TN,)
    assert GEMV_TN.name == "triton.gemv_tn"
    assert GEMV_TN.ops == {"matmul", "matmul_bias_add", "matmul_alpha_beta"}
    assert GEMV_TN.interpreted_on_cpu and not GEMV_TN.baseline and not GEMV_TN.peer
    ids = [v.id for v in GEMV_TN.variants()]
    assert len(ids) == 4
    assert ids[:2] == [
        "triton.gemv_tn/bn32_bk64_split1_w4_finlast",
        "triton.gemv_tn/bn32_bk64_split0_w4_finlast",
    ]
    assert ids[-1] == "triton.gemv_tn/bn128_bk64_split0_w4_finlast"
    # Every default variant can run both target shapes on an H100.
    qkv = MatmulSpec(op="matmul_bias_add", m=1, n=1152, k=896, tB=False, dtype="f16")
    pv = MatmulSpec(op="matmul_alpha_beta", batch=14, m=1, n=64, k=1024, tB=False, dtype="f16")
    assert all(v.unsupported_reason(s, GPU) is None for v in GEMV_TN.variants() for s in (qkv, pv))
