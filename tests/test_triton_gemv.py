"""triton.gemv_nt on the CPU, in the Triton interpreter, against the float64 reference."""

from __future__ import annotations

import os

# Must precede the first import of triton (and of the kernels module): a
# @triton.jit function decides at definition time whether it is interpreted.
os.environ["TRITON_INTERPRET"] = "1"

import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="triton.gemv_nt tests need torch")
pytest.importorskip("triton", reason="triton.gemv_nt tests need triton (run in its interpreter)")

from matprobe.errors import MatprobeError  # noqa: E402
from matprobe.harness.device import DeviceInfo  # noqa: E402
from matprobe.harness.inputs import MatmulInputs, empty_output, make_inputs, reference  # noqa: E402
from matprobe.harness.variants import Variant, variant_family  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.variants import triton_gemv  # noqa: E402
from matprobe.variants.triton_gemv import FAMILIES, GEMV_NT  # noqa: E402
from triton_checks import assert_rejects_bad_operands  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="test")
GPU = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0))
TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}  # ‖out − ref‖ / ‖ref‖

#: Epilogues: (op, alpha, beta, bias flag).
EPILOGUES: dict[str, tuple[str, float | None, float | None, bool | None]] = {
    "plain": ("matmul", None, None, None),
    "bias": ("matmul_bias_add", None, None, None),
    "alpha_beta": ("matmul_alpha_beta", 0.125, 0.5, None),
    "alpha_beta_bias": ("matmul_alpha_beta", 0.125, 0.5, True),
}
GRIDS = {
    "bn64_bk128": {"bn": (64,), "bk": (128,), "w": (4,), "pdl": (0,)},
    "bn128_bk256": {"bn": (128,), "bk": (256,), "w": (4,), "pdl": (0,)},
}

NS, KS, BATCHES = (1, 5, 123, 200), (1, 7, 64, 300), (1, 3)


def variant(tag: str) -> Variant:
    (only,) = GEMV_NT.variants(GRIDS[tag])
    return only


def spec_for(
    n: int, k: int, batch: int, dtype: str, epilogue: str, *, m: int = 1, ta: bool = False
) -> MatmulSpec:
    op, alpha, beta, bias = EPILOGUES[epilogue]
    return MatmulSpec(
        op=op, batch=batch, m=m, n=n, k=k, tA=ta, tB=True,
        alpha=alpha, beta=beta, bias=bias, dtype=dtype,
    )  # fmt: skip


def norm_rel(out: Any, inputs: MatmulInputs) -> float:
    """‖out − ref‖ / ‖ref‖, the denominator floored at the outputs' typical size.

    With one output (n = 1) the bias or β·C₀ can cancel the product: there
    ‖ref‖ ≈ 0.002 while the terms summed are O(1) and fp32 itself (torch
    included) is off by 3e-5 relative. The floor is the norm of the same
    computation on absolute values over √K — about ‖ref‖ for generic inputs
    (inputs.py scales outputs to O(1)), so it only acts where ref cancels.
    """
    ref = reference(inputs)
    terms = reference(
        MatmulInputs(
            inputs.a.abs(), inputs.b.abs(),
            None if inputs.bias is None else inputs.bias.abs(),
            None if inputs.c0 is None else inputs.c0.abs(),
            abs(inputs.alpha), abs(inputs.beta), ta=inputs.ta, tb=inputs.tb,
        )
    )  # fmt: skip
    k: int = inputs.a_mk().shape[-1]
    scale = max(float(ref.norm()), float(terms.norm()) / math.sqrt(k))
    return float((out.double() - ref).norm()) / scale


def check(
    v: Variant, spec: MatmulSpec, inputs: MatmulInputs | None = None, out: Any = None
) -> None:
    assert v.unsupported_reason(spec, CPU) is None
    inputs = make_inputs(spec, seed=1234) if inputs is None else inputs
    out = empty_output(spec, "cpu") if out is None else out
    out.fill_(float("nan"))  # unwritten elements stay NaN and fail
    v.build(spec, CPU)(inputs, out)
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} outputs never written"
    err = norm_rel(out, inputs)
    assert err < TOL[spec.dtype or "f32"], f"{v.id} {spec}: ‖out−ref‖/‖ref‖ = {err:.3e}"


# ---- correctness -------------------------------------------------------------

# f32: the full sweep of awkward shapes × epilogues × both grid points.
F32_CASES = list(itertools.product(NS, KS, BATCHES, EPILOGUES, GRIDS))

# f16/bf16: every n and every k at least once per dtype, ragged on both edges,
# each epilogue and grid point, both batch sizes — not the whole product.
HALF_SHAPES = [(1, 300, 3), (5, 7, 1), (123, 64, 3), (200, 1, 1), (200, 300, 3), (123, 300, 1)]
HALF_CASES = [
    (n, k, batch, dtype, epilogue, grid)
    for dtype in ("f16", "bf16")
    for i, (n, k, batch) in enumerate(HALF_SHAPES)
    for epilogue, grid in [
        (list(EPILOGUES)[i % 4], list(GRIDS)[i % 2]),
        (list(EPILOGUES)[(i + 2) % 4], list(GRIDS)[(i + 1) % 2]),
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


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_decode_shapes(dtype: str) -> None:
    # o_proj-like (K a multiple of BLOCK_K only for bk128) and attention Q·Kᵀ-like
    # (batch = heads, α = 0.125, β = 0: C0 not read).
    check(variant("bn128_bk256"), spec_for(896, 896, 1, dtype, "plain"))
    attn = MatmulSpec(
        op="matmul_alpha_beta", batch=14, m=1, n=37, k=64, tB=True,
        alpha=0.125, beta=0.0, accumulate=True, dtype=dtype,
    )  # fmt: skip
    check(variant("bn64_bk128"), attn)


@pytest.mark.parametrize("epilogue", ["plain", "alpha_beta_bias"])
def test_ta_is_accepted_for_m1(epilogue: str) -> None:
    spec = spec_for(123, 300, 3, "f32", epilogue, ta=True)
    inputs = make_inputs(spec, seed=7)
    assert inputs.a.shape == (3, 300, 1)  # stored [batch, k, m]
    check(variant("bn64_bk128"), spec, inputs)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_strided_operands(dtype: str) -> None:
    """Non-contiguous x, W, C0, bias and out: the kernel follows the strides given."""
    spec = spec_for(123, 300, 3, dtype, "alpha_beta_bias")
    base = make_inputs(spec, seed=3)
    wide_w = torch.zeros(3, 2 * 123, 320, dtype=base.b.dtype)
    wide_w[:, ::2, 5:305] = base.b
    w = wide_w[:, ::2, 5:305]  # row stride 640, column offset 5
    wide_x = torch.zeros(3, 1, 600, dtype=base.a.dtype)
    wide_x[:, :, ::2] = base.a
    wide_c0 = torch.zeros(3, 2, 3 * 123, dtype=base.a.dtype)
    wide_c0[:, 1:, ::3] = base.c0
    wide_bias = torch.zeros(2 * 123, dtype=base.a.dtype)
    wide_bias[1::2] = base.bias
    x, c0 = wide_x[:, :, ::2], wide_c0[:, 1:, ::3]
    assert not (x.is_contiguous() or w.is_contiguous() or c0.is_contiguous())
    inputs = MatmulInputs(x, w, wide_bias[1::2], c0, base.alpha, base.beta, ta=False, tb=True)
    wide_out = torch.full((3, 1, 2 * 123), 7.0, dtype=base.a.dtype)
    out = wide_out[:, :, 1::2]
    check(variant("bn64_bk128"), spec, inputs, out)
    assert torch.all(wide_out[:, :, ::2] == 7.0), "wrote outside the output view"


def test_writes_nothing_past_n() -> None:
    spec = spec_for(5, 7, 3, "f32", "alpha_beta_bias")
    backing = torch.full((3 * 5 + 64,), 7.0)
    out = backing[: 3 * 5].view(3, 1, 5)
    check(variant("bn128_bk256"), spec, out=out)
    assert torch.all(backing[3 * 5 :] == 7.0)


# ---- the wrapper's checks ----------------------------------------------------


def test_run_rejects_mismatched_tensors() -> None:
    spec = spec_for(5, 7, 1, "f16", "bias")
    assert_rejects_bad_operands(variant("bn64_bk128").build(spec, CPU), spec)


def test_build_refuses_unsupported_and_interpreter_on_gpu() -> None:
    with pytest.raises(MatprobeError, match="needs m=1"):
        variant("bn64_bk128").build(spec_for(5, 7, 1, "f32", "plain", m=2), CPU)
    # The interpreter is on in this process: a "GPU" build must say so, not run slowly.
    with pytest.raises(MatprobeError, match="TRITON_INTERPRET=1 is set"):
        variant("bn64_bk128").build(spec_for(5, 7, 1, "f32", "plain"), GPU)


# ---- capability reasons and identity -------------------------------------------


def test_unsupported_reasons() -> None:
    v = variant("bn64_bk128")
    ok = spec_for(123, 300, 1, "f16", "plain")
    assert v.unsupported_reason(ok, CPU) is None
    assert v.unsupported_reason(replace(ok, m=2), CPU) == "needs m=1 (GEMV)"
    assert v.unsupported_reason(replace(ok, tB=False), CPU) == "needs tB=1: W stored [n, k]"
    lm_head = replace(ok, n=151936, k=896)
    reason = v.unsupported_reason(lm_head, CPU)
    assert reason is not None and "too large for the Triton interpreter (CPU)" in reason
    assert v.unsupported_reason(lm_head, GPU) is None
    assert "q8_0" in (v.unsupported_reason(replace(ok, dtype="q8_0"), CPU) or "")


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
    (v,) = GEMV_NT.variants({name: (value,) for name, value in point.items()})
    reason = v.unsupported_reason(spec_for(123, 300, 1, "f32", "plain"), GPU)
    assert reason is not None and fragment in reason


def test_family_shape() -> None:
    assert FAMILIES == (GEMV_NT,)
    assert GEMV_NT.name == "triton.gemv_nt"
    assert GEMV_NT.ops == {"matmul", "matmul_bias_add", "matmul_alpha_beta"}
    assert GEMV_NT.interpreted_on_cpu and not GEMV_NT.baseline and not GEMV_NT.peer
    assert [v.id for v in GEMV_NT.variants()] == [
        f"triton.gemv_nt/bn{bn}_bk{bk}_w{w}_pdl{pdl}" for bn in (1, 2, 8)
        for bk in (1024, 8192) for w in (4, 8) for pdl in (0, 1)
    ]


def test_fingerprint_follows_params_and_kernel_source() -> None:
    prints = {v.fingerprint for v in GEMV_NT.variants()}
    assert len(prints) == len(GEMV_NT.variants())
    (a,) = GEMV_NT.variants({"bn": (64,), "bk": (128,), "w": (4,), "pdl": (0,)})
    (b,) = GEMV_NT.variants({"bn": (64,), "bk": (128,), "w": (8,), "pdl": (0,)})
    assert a.fingerprint != b.fingerprint
    kernel_file = Path(triton_gemv.__file__).with_name("_triton_gemv_kernels.py")
    assert kernel_file.read_text(encoding="utf-8") == triton_gemv.KERNELS_SOURCE
    assert "def gemv_nt_kernel" in triton_gemv.KERNELS_SOURCE

    def rebuild(source: str) -> str:
        fam = variant_family(
            name=GEMV_NT.name, ops=GEMV_NT.ops, supports=GEMV_NT.supports, grid=GEMV_NT.grid,
            sources=(source,),
        )(GEMV_NT.build)  # fmt: skip
        return fam.variants()[0].fingerprint

    source = triton_gemv.KERNELS_SOURCE
    assert rebuild(source) != rebuild(source.replace("acc * alpha", "alpha * acc"))


@pytest.mark.parametrize(("n", "k", "bn", "bk"), [(8, 256, 4, 128), (7, 256, 4, 128),
                                                  (8, 300, 4, 128), (9, 40, 2, 16)])
def test_unrolled_even_and_ragged_paths(n: int, k: int, bn: int, bk: int) -> None:
    """The fixed-K unrolled loop: unmasked when n and k divide the tiles, masked otherwise."""
    (v,) = GEMV_NT.variants({"bn": (bn,), "bk": (bk,), "w": (4,), "pdl": (0,)})
    check(v, spec_for(n, k, 2, "f32", "bias"))


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
    reason = pdl_variant(bk).unsupported_reason(spec, device)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason


def test_pdl_changes_the_kernel_source_it_fingerprints() -> None:
    # The pdl branch is part of the kernel file, so editing it re-runs the family.
    assert "gdc_wait()" in triton_gemv.KERNELS_SOURCE
    assert pdl_variant(1024).fingerprint != GEMV_NT.variants(
        {"bn": (2,), "bk": (1024,), "w": (4,), "pdl": (0,)})[0].fingerprint
