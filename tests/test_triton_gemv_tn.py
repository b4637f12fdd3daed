"""triton.gemv_tn on the CPU, in the Triton interpreter, against the float64 reference."""

from __future__ import annotations

import os

# Must precede the first import of triton (and of the kernels module): a
# @triton.jit function decides at definition time whether it is interpreted.
os.environ["TRITON_INTERPRET"] = "1"

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="triton.gemv_tn tests need torch")
pytest.importorskip("triton", reason="triton.gemv_tn tests need triton (run in its interpreter)")

from matprobe.errors import MatprobeError  # noqa: E402
from matprobe.harness.device import DeviceInfo  # noqa: E402
from matprobe.harness.inputs import (  # noqa: E402
    MatmulInputs,
    empty_output,
    make_inputs,
)
from matprobe.harness.variants import Variant, variant_family  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.variants import triton_gemv_tn  # noqa: E402
from matprobe.variants.triton_gemv_tn import (  # noqa: E402
    FAMILIES,
    GEMV_TN,
    GemvTNKernel,
    plan_split,
)
from triton_checks import CPU, assert_matches_reference, check_on_cpu  # noqa: E402

GPU = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0), sm_count=132)

#: Epilogues: (op, alpha, beta, bias flag).
EPILOGUES: dict[str, tuple[str, float | None, float | None, bool | None]] = {
    "plain": ("matmul", None, None, None),
    "bias": ("matmul_bias_add", None, None, None),
    "alpha_beta": ("matmul_alpha_beta", 0.125, 0.5, None),
    "alpha_beta_bias": ("matmul_alpha_beta", 0.125, 0.5, True),
}
#: Grid points covering the three kernel modes: no split (K loop, epilogue in
#: place), auto split with the last program finalizing, an explicit split of
#: several tiles per program, and the two-launch finish.
GRIDS: dict[str, dict[str, tuple[Any, ...]]] = {
    "nosplit": {"bn": (32,), "bk": (32,), "split": (1,)},
    "auto": {"bn": (64,), "bk": (32,), "split": (0,)},
    "split3": {"bn": (128,), "bk": (32,), "split": (3,)},
    "kernel": {"bn": (16,), "bk": (32,), "split": (2,), "fin": ("kernel",)},
}

NS, KS, BATCHES = (1, 5, 77, 160), (1, 7, 64, 200), (1, 3)


def variant(tag: str) -> Variant:
    (only,) = GEMV_TN.variants(GRIDS[tag])
    return only


def spec_for(
    n: int, k: int, batch: int, dtype: str, epilogue: str, *, m: int = 1, ta: bool = False
) -> MatmulSpec:
    op, alpha, beta, bias = EPILOGUES[epilogue]
    return MatmulSpec(
        op=op, batch=batch, m=m, n=n, k=k, tA=ta, tB=False,
        alpha=alpha, beta=beta, bias=bias, dtype=dtype,
    )  # fmt: skip


def assert_correct(out: Any, inputs: MatmulInputs, spec: MatmulSpec, what: str) -> None:
    """The harness's own bar (validate.py): no NaN left, norm-wise and per-element."""
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} outputs never written"
    assert_matches_reference(out, inputs, spec, what)


def assert_clean(kernel: Any) -> None:
    """Workspace and counters are zero again after a call (graph replay relies on it)."""
    assert isinstance(kernel, GemvTNKernel)
    if kernel.workspace is not None:
        assert int(torch.count_nonzero(kernel.workspace)) == 0, "workspace left dirty"
    if kernel.counters is not None:
        assert int(torch.count_nonzero(kernel.counters)) == 0, "counters left dirty"


def check(v: Variant, spec: MatmulSpec, inputs: MatmulInputs | None = None, out: Any = None) -> Any:
    kernel = check_on_cpu(v, spec, inputs, out)
    assert_clean(kernel)
    return kernel


# ---- correctness -------------------------------------------------------------

# f32: every n × k × epilogue; the grid point and batch rotate so each mode meets
# ragged n and k, each epilogue and both batch sizes (the full product is 4× slower).
F32_CASES = [
    (n, k, BATCHES[i % 2], epilogue, list(GRIDS)[(i // 2 + j) % 4])
    for i, (n, k) in enumerate(itertools.product(NS, KS))
    for j, epilogue in enumerate(EPILOGUES)
]

# f16/bf16: every n and every k at least once per dtype, ragged on both edges,
# each epilogue and grid point, both batch sizes — not the whole product.
HALF_SHAPES = [(1, 200, 3), (5, 7, 1), (77, 64, 3), (160, 1, 1), (160, 200, 3), (77, 200, 1)]
HALF_CASES = [
    (n, k, batch, dtype, epilogue, grid)
    for dtype in ("f16", "bf16")
    for i, (n, k, batch) in enumerate(HALF_SHAPES)
    for epilogue, grid in [
        (list(EPILOGUES)[i % 4], list(GRIDS)[i % 4]),
        (list(EPILOGUES)[(i + 2) % 4], list(GRIDS)[(i + 1 + (dtype == "bf16")) % 4]),
    ]
]


@pytest.mark.parametrize(("n", "k", "batch", "epilogue", "grid"), F32_CASES)
def test_f32_matches_reference(n: int, k: int, batch: int, epilogue: str, grid: str) -> None:
    check(variant(grid), spec_for(n, k, batch, "f32", epilogue))


@pytest.mark.parametrize(("n", "k", "batch", "dtype", "epilogue", "grid"), HALF_CASES)
def test_half_matches_reference(
    n: int, k: int, batch: int, dtype: str, epilogue: str, grid: str
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
    spec = spec_for(77, 200, 2, "f32", "alpha_beta_bias")
    kernel = variant(grid).build(spec, CPU)
    first = make_inputs(spec, seed=1)
    outs = []
    for inputs in (first, make_inputs(spec, seed=2), first):
        out = empty_output(spec, "cpu").fill_(float("nan"))
        kernel(inputs, out)
        assert_correct(out, inputs, spec, grid)
        assert_clean(kernel)
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[2], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("epilogue", ["plain", "alpha_beta_bias"])
def test_ta_is_accepted_for_m1(epilogue: str) -> None:
    spec = spec_for(77, 300, 3, "f32", epilogue, ta=True)
    inputs = make_inputs(spec, seed=7)
    assert inputs.a.shape == (3, 300, 1)  # stored [batch, k, m]
    check(variant("auto"), spec, inputs)


@pytest.mark.parametrize(("dtype", "grid"), [("f32", "auto"), ("bf16", "nosplit")])
def test_strided_operands(dtype: str, grid: str) -> None:
    """Non-contiguous x, W, C0, bias and out: the kernel follows the strides given."""
    spec = spec_for(77, 300, 3, dtype, "alpha_beta_bias")
    base = make_inputs(spec, seed=3)
    wide_w = torch.zeros(3, 2 * 300, 160, dtype=base.b.dtype)
    wide_w[:, ::2, 5:159:2] = base.b
    w = wide_w[:, ::2, 5:159:2]  # row stride 320, column stride 2, offset 5
    wide_x = torch.zeros(3, 1, 600, dtype=base.a.dtype)
    wide_x[:, :, ::2] = base.a
    wide_c0 = torch.zeros(3, 2, 3 * 77, dtype=base.a.dtype)
    wide_c0[:, 1:, ::3] = base.c0
    wide_bias = torch.zeros(2 * 77, dtype=base.a.dtype)
    wide_bias[1::2] = base.bias
    x, c0 = wide_x[:, :, ::2], wide_c0[:, 1:, ::3]
    assert not (x.is_contiguous() or w.is_contiguous() or c0.is_contiguous())
    inputs = MatmulInputs(x, w, wide_bias[1::2], c0, base.alpha, base.beta, ta=False, tb=False)
    wide_out = torch.full((3, 1, 2 * 77), 7.0, dtype=base.a.dtype)
    out = wide_out[:, :, 1::2]
    check(variant(grid), spec, inputs, out)
    assert torch.all(wide_out[:, :, ::2] == 7.0), "wrote outside the output view"


@pytest.mark.parametrize("grid", ["split3", "kernel"])
def test_writes_nothing_past_n(grid: str) -> None:
    spec = spec_for(5, 70, 3, "f32", "alpha_beta_bias")
    backing = torch.full((3 * 5 + 64,), 7.0)
    out = backing[: 3 * 5].view(3, 1, 5)
    check(variant(grid), spec, out=out)
    assert torch.all(backing[3 * 5 :] == 7.0)


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


# ---- the wrapper's checks ----------------------------------------------------


def test_run_rejects_mismatched_tensors() -> None:
    spec = spec_for(5, 7, 1, "f16", "bias")
    run = variant("auto").build(spec, CPU)
    inputs = make_inputs(spec, seed=0)
    with pytest.raises(ValueError, match=r"out is torch.float32, expected torch.float16"):
        run(inputs, torch.empty(1, 1, 5))
    with pytest.raises(ValueError, match=r"out has shape \(1, 1, 6\)"):
        run(inputs, torch.empty(1, 1, 6, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"W has shape \(1, 5, 7\), expected \(1, 7, 5\)"):
        run(replace(inputs, b=inputs.b.transpose(1, 2)), empty_output(spec, "cpu"))
    with pytest.raises(ValueError, match="bias is missing"):
        run(replace(inputs, bias=None), empty_output(spec, "cpu"))
    with pytest.raises(ValueError, match="carry C0"):
        run(replace(inputs, c0=torch.ones(1, 1, 5, dtype=torch.float16)), empty_output(spec, "cpu"))
    with pytest.raises(ValueError, match=r"tb=False"):
        run(replace(inputs, tb=True), empty_output(spec, "cpu"))


def test_build_refuses_unsupported_and_interpreter_on_gpu() -> None:
    with pytest.raises(MatprobeError, match="needs m=1"):
        variant("auto").build(spec_for(5, 7, 1, "f32", "plain", m=2), CPU)
    with pytest.raises(MatprobeError, match="needs tB=0"):
        variant("auto").build(replace(spec_for(5, 7, 1, "f32", "plain"), tB=True), CPU)
    # The interpreter is on in this process: a "GPU" build must say so, not run slowly.
    with pytest.raises(MatprobeError, match="TRITON_INTERPRET=1 is set"):
        variant("auto").build(spec_for(5, 7, 1, "f32", "plain"), GPU)


# ---- capability reasons and identity -------------------------------------------


def test_unsupported_reasons() -> None:
    v = variant("auto")
    ok = spec_for(77, 300, 1, "f16", "plain")
    assert v.unsupported_reason(ok, CPU) is None
    assert v.unsupported_reason(replace(ok, m=2), CPU) == "needs m=1 (GEMV)"
    assert v.unsupported_reason(replace(ok, tB=True), CPU) == "needs tB=0: W stored [k, n]"
    assert v.unsupported_reason(replace(ok, n=0), CPU) == "empty matmul (n or k is 0)"
    assert v.unsupported_reason(replace(ok, k=0), CPU) == "empty matmul (n or k is 0)"
    big = replace(ok, n=151936, k=896)
    reason = v.unsupported_reason(big, CPU)
    assert reason is not None and "too large for the Triton interpreter (CPU)" in reason
    assert v.unsupported_reason(big, GPU) is None
    heads = replace(ok, batch=70000, n=1, k=1)
    assert "exceeds the grid's z limit" in (v.unsupported_reason(heads, GPU) or "")
    assert "q8_0" in (v.unsupported_reason(replace(ok, dtype="q8_0"), CPU) or "")


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
    (v,) = GEMV_TN.variants({name: (value,) for name, value in point.items()})
    reason = v.unsupported_reason(spec_for(77, 300, 1, "f32", "plain"), GPU)
    assert reason is not None and fragment in reason


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


def test_fingerprint_follows_params_and_kernel_source() -> None:
    prints = {v.fingerprint for v in GEMV_TN.variants()}
    assert len(prints) == len(GEMV_TN.variants())
    (a,) = GEMV_TN.variants(GRIDS["auto"])
    (b,) = GEMV_TN.variants({**GRIDS["auto"], "fin": ("kernel",)})
    (c,) = GEMV_TN.variants({**GRIDS["auto"], "split": (4,)})
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    kernel_file = Path(triton_gemv_tn.__file__).with_name("_triton_gemv_tn_kernels.py")
    assert kernel_file.read_text(encoding="utf-8") == triton_gemv_tn.KERNELS_SOURCE
    assert "def gemv_tn_kernel" in triton_gemv_tn.KERNELS_SOURCE

    def rebuild(source: str) -> str:
        fam = variant_family(
            name=GEMV_TN.name, ops=GEMV_TN.ops, supports=GEMV_TN.supports, grid=GEMV_TN.grid,
            sources=(source,),
        )(GEMV_TN.build)  # fmt: skip
        return fam.variants()[0].fingerprint

    source = triton_gemv_tn.KERNELS_SOURCE
    assert rebuild(source) != rebuild(source.replace("HAS_BIAS", "HAS_BIAS_"))
