"""triton.gemv_splitk in the Triton interpreter: split modes, slice plans, workspace
(the contract every family meets is tests/test_conformance.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from matprobe.kernels.triton.splitk import (
    FAMILIES,
    GEMV_SPLITK,
    SplitKGemv,
    chunk_tiles,
    k_mode,
    plan_split,
)
from matprobe.measure.inputs import MatmulInputs, make_inputs
from matprobe.measure.outputs import empty_output
from matprobe.measure.variants import Variant
from matprobe.spec import MatmulSpec
from triton_checks import (
    CPU,
    EPILOGUES,
    GPU,
    assert_point_refused,
    check_on_cpu,
    check_reruns,
    check_strided,
    spec_for,
)

torch = pytest.importorskip("torch", reason="triton.gemv_splitk tests need torch")
pytest.importorskip("triton", reason="triton.gemv_splitk tests need triton (its interpreter)")
pytestmark = pytest.mark.interpreter

MODES = ("atomic", "twopass", "atomic_last")


def variant(mode: str, split: int = 0, bn: int = 32, bk: int = 256, w: int = 4) -> Variant:
    grid = {"mode": (mode,), "split": (split,), "bn": (bn,), "bk": (bk,), "w": (w,)}
    (only,) = GEMV_SPLITK.variants(grid)
    return only


def assert_clean(run: SplitKGemv) -> None:
    """Atomic modes leave their workspace (and counters) zero for the next call."""
    if run.mode != "twopass":
        assert not torch.any(run.workspace != 0), f"{run.mode}: workspace not reset"
    if run.counters is not None:
        assert not torch.any(run.counters != 0), f"{run.mode}: counters not reset"


def check(v: Variant, spec: MatmulSpec, inputs: MatmulInputs | None = None) -> SplitKGemv:
    """One call, judged by the harness's own bar; the workspace left clean."""
    run = check_on_cpu(v, spec, inputs)
    assert isinstance(run, SplitKGemv)
    assert_clean(run)
    return run


# ---- correctness -------------------------------------------------------------

#: (k, bk, split) → the kernel's (tiles per slice, slices, tiles per load, K mode),
#: for f32 with bn = 32 (a load holds at most 32 KB: two tiles of 32×128).
SPLITS = {
    (1100, 128, 1): (9, 1, 1, 2),  # one slice wider than K: masked loads
    (1100, 128, 2): (5, 2, 1, 1),  # the short last slice slides back
    (1100, 128, 3): (3, 3, 1, 1),
    (1100, 128, 7): (2, 5, 2, 1),  # 7 asked, 5 whole-tile slices launched
    (1100, 128, 1000): (1, 9, 1, 1),  # more than the tiles: one tile each
    (1100, 64, 3): (6, 3, 2, 1),  # three loads of two tiles per slice
    (1100, 64, 1): (18, 1, 2, 2),  # nine masked loads
    (1024, 128, 4): (2, 4, 2, 0),  # every slice full: no masks at all
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("k", "bk", "split"), list(SPLITS))
def test_explicit_splits(mode: str, k: int, bk: int, split: int) -> None:
    # The epilogue rotates over modes and splits: each mode meets all four.
    epilogue = list(EPILOGUES)[(MODES.index(mode) + list(SPLITS).index((k, bk, split))) % 4]
    spec = spec_for(37, k, 2, "f32", epilogue)
    run = check(variant(mode, split=split, bn=32, bk=bk), spec)
    constants = run._partial_constants
    got = (run.plan.tiles, run.plan.slices, constants["CHUNK"], constants["K_MODE"])
    assert got == SPLITS[k, bk, split]
    assert constants["NUM_CHUNKS"] * constants["CHUNK"] == run.plan.tiles


@pytest.mark.parametrize(("k", "bk", "split"), [(1024, 128, 4), (1100, 128, 2), (1100, 128, 1)])
def test_reads_no_column_past_k(k: int, bk: int, split: int) -> None:
    """W and x sit in buffers that are NaN past column k: a kernel that reads
    there, even to multiply by zero, returns NaN (every K mode: 0, 1, 2)."""
    n, batch = 37, 2
    spec = spec_for(n, k, batch, "f16", "bias")
    base = make_inputs(spec, seed=11)
    wide_w = torch.full((batch, n, k + 64), float("nan"), dtype=base.b.dtype)
    wide_w[:, :, :k] = base.b
    wide_x = torch.full((batch, 1, k + 64), float("nan"), dtype=base.a.dtype)
    wide_x[:, :, :k] = base.a
    inputs = replace(base, a=wide_x[:, :, :k], b=wide_w[:, :, :k])
    check(variant("atomic_last", split=split, bn=32, bk=bk), spec, inputs)


@pytest.mark.parametrize(
    ("mode", "bn", "split"), [("atomic", 16, 5), ("twopass", 32, 10), ("atomic_last", 16, 5),
                              ("atomic_last", 32, 10)],
)  # fmt: skip
def test_down_projection_like(mode: str, bn: int, split: int) -> None:
    # The Qwen2.5 down projection's K with the H100 plan of bn16 / bn32 at
    # bk256 (slices of 1024 / 512 columns, one [bn, slice] load each, the last
    # slice sliding back), on 96 rows so the interpreter copes.
    spec = spec_for(96, 4864, 1, "f16", "plain")
    run = check(variant(mode, split=split, bn=bn, bk=256), spec)
    on_h100 = plan_split(896, 4864, 1, bn, 256, 0, 132)
    assert (
        (run.plan.tiles, run.plan.slices) == (on_h100.tiles, on_h100.slices) == (20 // split, split)
    )
    assert run._partial_constants["NUM_CHUNKS"] == 1 and run._partial_constants["K_MODE"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_consecutive_calls_on_one_build(mode: str) -> None:
    """The workspace is reset by each call: a second call (new inputs, same built
    kernel, as in CUDA-graph replays) is as right as the first."""
    spec = spec_for(37, 1100, 2, "bf16", "alpha_beta_bias")
    # 5 tiles: slices of 3 and 2
    check_reruns(variant(mode, split=2, bn=64, bk=256), spec, assert_clean)


def test_twopass_is_reproducible() -> None:
    spec = spec_for(200, 1500, 1, "f32", "plain")
    run = variant("twopass", split=4, bn=64, bk=128).build(spec, CPU)
    inputs = make_inputs(spec, seed=5)
    first, second = empty_output(spec, "cpu"), empty_output(spec, "cpu")
    run(inputs, first)
    run(inputs, second)
    assert torch.equal(first, second)


@pytest.mark.parametrize("mode", MODES)
def test_strided_operands(mode: str) -> None:
    spec = spec_for(37, 1100, 2, "f16", "alpha_beta_bias")
    assert_clean(check_strided(variant(mode, split=3, bn=16, bk=256), spec))


# ---- the split plan ------------------------------------------------------------


@pytest.mark.parametrize("bn", [16, 32])
@pytest.mark.parametrize("bk", [256, 512])
def test_auto_split_for_the_down_projection(bn: int, bk: int) -> None:
    plan = plan_split(896, 4864, 1, bn, bk, 0, 132)
    assert 2 * 132 <= plan.programs(1) <= 4 * 132, plan
    assert plan.row_blocks == -(-896 // bn) and plan.k_tiles == -(-4864 // bk)
    # Whole tiles per slice, a power of two (one load); the slices cover K, none empty.
    assert plan.tiles & (plan.tiles - 1) == 0
    assert chunk_tiles(plan.tiles, bn, bk, 2) == plan.tiles
    assert (plan.slices - 1) * plan.tiles * bk < 4864 <= plan.slices * plan.tiles * bk
    assert plan.tiles * bk * bn * 2 == 32 * 1024  # 32 KB of fp16 W per program


def test_chunks_and_k_modes() -> None:
    assert chunk_tiles(1, 16, 256, 2) == 1
    assert chunk_tiles(4, 16, 256, 2) == 4  # 32 KB: one load
    assert chunk_tiles(4, 16, 256, 4) == 2  # f32: two loads of 32 KB
    assert chunk_tiles(6, 16, 256, 2) == 2  # a power of two that divides the tiles
    assert chunk_tiles(3, 16, 256, 2) == 1
    assert chunk_tiles(1, 128, 512, 4) == 1  # one tile, whatever its size
    assert k_mode(4096, 1024) == 0
    assert k_mode(4864, 1024) == 1
    assert k_mode(1100, 1152) == 2


def test_auto_split_follows_sms_and_batch() -> None:
    assert plan_split(896, 4864, 1, 16, 256, 0, 0) == plan_split(896, 4864, 1, 16, 256, 0, 132)
    few = plan_split(896, 4864, 1, 16, 256, 0, 16)
    assert few.slices < plan_split(896, 4864, 1, 16, 256, 0, 132).slices
    # Many rows (batch 8 of 896) fill the GPU without splitting much.
    assert plan_split(896, 4864, 8, 16, 256, 0, 132).slices <= 2
    # The plan never exceeds the unrolled-tiles cap, even when it would like to.
    assert plan_split(151936, 8192, 1, 16, 16, 0, 132).tiles == 64


# ---- the wrapper's checks ----------------------------------------------------


def test_buffers_are_sized_by_the_plan() -> None:
    spec = spec_for(37, 1100, 2, "f32", "plain")
    twopass = variant("twopass", split=3, bk=128).build(spec, CPU)
    assert isinstance(twopass, SplitKGemv)
    assert tuple(twopass.workspace.shape) == (3, 2, 37) and twopass.counters is None
    last = variant("atomic_last", bn=16).build(spec, CPU)
    assert isinstance(last, SplitKGemv)
    assert tuple(last.workspace.shape) == (2, 37) and tuple(last.counters.shape) == (2, 3)
    assert last.workspace.dtype == torch.float32 and last.counters.dtype == torch.int32


# ---- capability reasons and identity -------------------------------------------


def test_unsupported_reasons() -> None:
    v = variant("atomic_last")
    ok = spec_for(123, 1100, 1, "f16", "plain")
    assert v.unsupported_reason(ok, CPU) is None
    assert v.unsupported_reason(replace(ok, m=2), CPU) == "needs m=1 (GEMV)"
    assert v.unsupported_reason(replace(ok, tB=False), CPU) == "needs tB=1: W stored [n, k]"
    assert v.unsupported_reason(replace(ok, k=1023), CPU) == "split-K is for large K (k >= 1024)"
    assert "zero dimension (n=0)" in (v.unsupported_reason(replace(ok, n=0), CPU) or "")
    down = replace(ok, n=896, k=4864)
    assert v.unsupported_reason(down, GPU) is None
    assert v.unsupported_reason(replace(down, batch=14), GPU) is None
    reason = v.unsupported_reason(replace(down, batch=70000), GPU)
    assert reason is not None and "batch=70000 exceeds the grid's limit" in reason


@pytest.mark.parametrize(
    ("grid", "fragment"),
    [
        ({"mode": "reduce"}, "mode='reduce': one of twopass, atomic, atomic_last"),
        ({"split": -1}, "split=-1: number of K slices must be an integer >= 0"),
        ({"split": 2.5}, "split=2.5"),
        ({"split": True}, "split=True"),
        ({"bk": 8}, "bk=8: BLOCK_K must be a power of two >= 16"),
        ({"bk": 96}, "bk=96"),
        ({"bn": 24}, "bn=24: BLOCK_N must be a power of two"),
        ({"w": 3}, "w=3: num_warps"),
        ({"bn": 4096, "bk": 512}, "exceeds Triton's block limit"),
        ({"split": 1, "bk": 16}, "a slice of 304 tiles exceeds the 64 unrolled tiles"),
    ],
)
def test_bad_grid_values_are_refused(grid: dict[str, Any], fragment: str) -> None:
    point: dict[str, Any] = {"mode": "atomic", "split": 0, "bn": 16, "bk": 256, "w": 4, **grid}
    assert_point_refused(GEMV_SPLITK, point, spec_for(896, 4864, 1, "f16", "plain"), fragment)


def test_family_shape() -> None:
    assert FAMILIES == (GEMV_SPLITK,)
    assert GEMV_SPLITK.name == "triton.gemv_splitk"
    assert GEMV_SPLITK.ops == {"matmul", "matmul_bias_add", "matmul_alpha_beta"}
    assert GEMV_SPLITK.interpreted_on_cpu and not GEMV_SPLITK.baseline
    ids = [v.id for v in GEMV_SPLITK.variants()]
    assert len(ids) == len(set(ids)) == 4
    assert ids[0] == "triton.gemv_splitk/modeatomic_last_split0_bn16_bk256_w8"
    assert "triton.gemv_splitk/modeatomic_last_split0_bn32_bk256_w8" in ids
    down = spec_for(896, 4864, 1, "f16", "plain")
    assert all(v.unsupported_reason(down, GPU) is None for v in GEMV_SPLITK.variants())
