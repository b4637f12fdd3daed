"""triton.attn_bmv on the CPU, in the Triton interpreter, against the float64 reference.

The interpreter costs ~15 ms per program, so the sweep runs with batch 1 and
batch 14 (all query heads of Qwen2.5-0.5B) only where the layout's behaviour
across heads is the point.
"""

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

torch = pytest.importorskip("torch", reason="triton.attn_bmv tests need torch")
pytest.importorskip("triton", reason="triton.attn_bmv tests need triton (run in its interpreter)")

from matprobe.errors import MatprobeError  # noqa: E402
from matprobe.harness.device import DeviceInfo  # noqa: E402
from matprobe.harness.inputs import (  # noqa: E402
    MatmulInputs,
    empty_output,
    make_inputs,
    reference,
    reference_scale,
)
from matprobe.harness.validate import compare, spec_tolerance  # noqa: E402
from matprobe.harness.variants import Variant, variant_family  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.variants import triton_attention  # noqa: E402
from matprobe.variants.triton_attention import ATTN_BMV, FAMILIES, block  # noqa: E402
from triton_checks import CPU, check_on_cpu  # noqa: E402

GPU = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0))

#: Epilogues: (alpha, beta, bias flag). "scale" is the scores form, "ab" reads C0.
EPILOGUES: dict[str, tuple[float, float, bool | None]] = {
    "scale": (0.125, 0.0, None),
    "ab": (1.0, 0.5, None),
    "ab_bias": (0.125, 0.5, True),
}
#: tiny: the most blocks and L chunks (values split 9 ways at L=130);
#: mid/wide: the default grid's ends (wide covers L=130 in one values tile).
GRIDS = {
    "tiny": {"bn": (16,), "bk": (16,), "w": (2,), "pdl": (0,)},
    "mid": {"bn": (32,), "bk": (64,), "w": (4,), "pdl": (0,)},
    "wide": {"bn": (64,), "bk": (256,), "w": (4,), "pdl": (0,)},
}
LS, HEAD_DIMS = (1, 5, 16, 37, 130), (64, 24)


def variant(tag: str) -> Variant:
    (only,) = ATTN_BMV.variants(GRIDS[tag])
    return only


def attn_spec(
    layout: str, length: int, head_dim: int, batch: int, dtype: str, epilogue: str,
    *, ta: bool = False, op: str = "matmul_alpha_beta",
) -> MatmulSpec:  # fmt: skip
    """Scores (``tB=1``: n = L, k = head_dim) or values (``tB=0``: n = head_dim, k = L)."""
    alpha, beta, bias = EPILOGUES[epilogue]
    scores = layout == "scores"
    return MatmulSpec(
        op=op, batch=batch, m=1,
        n=length if scores else head_dim, k=head_dim if scores else length,
        tA=ta, tB=scores, alpha=alpha, beta=beta, bias=bias,
        accumulate=True, strided_batch=True, dtype=dtype,
    )  # fmt: skip


def check(
    v: Variant, spec: MatmulSpec, inputs: MatmulInputs | None = None, out: Any = None,
    *, runs: int = 1,
) -> None:  # fmt: skip
    check_on_cpu(v, spec, inputs, out, runs=runs)


# ---- correctness -------------------------------------------------------------

# f32: every layout × L × head_dim × epilogue, batch 1, the grid points in turn.
F32_CASES = [
    (layout, length, head_dim, epilogue, list(GRIDS)[i % 3])
    for i, (layout, length, head_dim, epilogue) in enumerate(
        itertools.product(("scores", "values"), LS, HEAD_DIMS, ("scale", "ab"))
    )
]

# f16/bf16: every L and head_dim at least once per layout and dtype.
HALF_CASES = [
    (layout, length, head_dim, dtype, epilogue, grid)
    for dtype in ("f16", "bf16")
    for layout in ("scores", "values")
    for length, head_dim, epilogue, grid in [
        (1, 64, "scale", "tiny"),
        (5, 24, "ab", "mid"),
        (16, 64, "ab", "wide"),
        (37, 24, "scale", "tiny"),
        (130, 64, "ab", "tiny" if dtype == "f16" else "mid"),
    ]
]


@pytest.mark.parametrize(("layout", "length", "head_dim", "epilogue", "grid"), F32_CASES)
def test_f32_matches_reference(
    layout: str, length: int, head_dim: int, epilogue: str, grid: str
) -> None:
    check(variant(grid), attn_spec(layout, length, head_dim, 1, "f32", epilogue))


@pytest.mark.parametrize(("layout", "length", "head_dim", "dtype", "epilogue", "grid"), HALF_CASES)
def test_half_matches_reference(
    layout: str, length: int, head_dim: int, dtype: str, epilogue: str, grid: str
) -> None:
    check(variant(grid), attn_spec(layout, length, head_dim, 1, dtype, epilogue))


@pytest.mark.parametrize(
    ("layout", "length", "dtype", "epilogue", "grid"),
    [
        ("scores", 16, "f16", "scale", "mid"),
        ("scores", 130, "bf16", "ab", "wide"),
        ("scores", 37, "f32", "ab", "tiny"),
        ("values", 16, "bf16", "scale", "mid"),
        ("values", 130, "f16", "ab", "mid"),  # 3 chunks of 64 rows per head
        ("values", 130, "f32", "scale", "wide"),  # one 256-row tile per head
        ("values", 37, "bf16", "ab", "tiny"),
    ],
)
def test_all_heads(layout: str, length: int, dtype: str, epilogue: str, grid: str) -> None:
    """batch 14 (Qwen2.5-0.5B's query heads), head_dim 64: every head in one launch."""
    check(variant(grid), attn_spec(layout, length, 64, 14, dtype, epilogue))


@pytest.mark.parametrize("layout", ["scores", "values"])
def test_default_grid_on_profile_form(layout: str) -> None:
    """The profile's own key (op=..._cache, accumulate=1, beta=0) through the default grid."""
    spec = attn_spec(layout, 37, 64, 3, "f16", "scale", op="matmul_alpha_beta_cache")
    assert spec.kind == "matmul_alpha_beta" and not spec.reads_c0
    inputs = make_inputs(spec, seed=5)
    for v in ATTN_BMV.variants():
        if v.param_dict["pdl"]:  # a KV cache is never prefetched across the launch
            assert (v.unsupported_reason(spec, GPU) or "").startswith("pdl=1")
            continue
        check(v, spec, inputs)


@pytest.mark.parametrize(("layout", "grid"), [("scores", "tiny"), ("values", "tiny")])
def test_bias_and_ta(layout: str, grid: str) -> None:
    spec = attn_spec(layout, 37, 24, 2, "f32", "ab_bias", ta=True)
    inputs = make_inputs(spec, seed=7)
    assert inputs.a.shape == (2, spec.k, 1)  # stored [batch, k, m]
    check(variant(grid), spec, inputs)


@pytest.mark.parametrize("grid", ["tiny", "mid"])
def test_split_counters_reset_between_runs(grid: str) -> None:
    """Values split over L: the last program resets its counter, so runs repeat."""
    spec = attn_spec("values", 130, 64, 2, "f32", "ab")
    check(variant(grid), spec, runs=3)


@pytest.mark.parametrize(
    ("layout", "bn", "bk"),
    [
        ("values", 64, 64),  # L split 16 ways, one reduction per head
        ("values", 16, 1024),  # the whole context in one [1024, 16] tile, no split
        ("scores", 64, 64),
    ],
)
def test_long_context(layout: str, bn: int, bk: int) -> None:
    spec = attn_spec(layout, 1024, 64, 1, "bf16", "ab")
    (v,) = ATTN_BMV.variants({"bn": (bn,), "bk": (bk,), "w": (4,), "pdl": (0,)})
    check(v, spec)


@pytest.mark.parametrize(
    ("layout", "grid"), [("scores", "tiny"), ("values", "tiny"), ("values", "wide")]
)
def test_kv_cache_views(layout: str, grid: str) -> None:
    """K/V as the first L rows of a longer cache (batch stride Lmax·64, a strided
    head_dim), q, C0 and out non-contiguous: the kernels follow the strides."""
    length, head_dim, batch, lmax = 37, 24, 3, 50
    spec = attn_spec(layout, length, head_dim, batch, "bf16", "ab_bias")
    base = make_inputs(spec, seed=3)
    cache = torch.zeros(batch, lmax, 2 * head_dim, dtype=base.b.dtype)
    cache[:, :length, ::2] = base.b  # [batch, L, head_dim] in both layouts
    b = cache[:, :length, ::2]
    wide_a = torch.zeros(batch, 1, 3 * (spec.k or 0), dtype=base.a.dtype)
    wide_a[:, :, 1::3] = base.a
    n = spec.n or 0
    wide_c0 = torch.zeros(batch, 2, 2 * n, dtype=base.a.dtype)
    wide_c0[:, 1:, ::2] = base.c0
    wide_bias = torch.zeros(2 * n, dtype=base.a.dtype)
    wide_bias[1::2] = base.bias
    a, c0 = wide_a[:, :, 1::3], wide_c0[:, 1:, ::2]
    assert not (a.is_contiguous() or b.is_contiguous() or c0.is_contiguous())
    inputs = MatmulInputs(a, b, wide_bias[1::2], c0, base.alpha, base.beta, ta=False,
                          tb=layout == "scores")  # fmt: skip
    wide_out = torch.full((batch, 1, 2 * n), 7.0, dtype=base.a.dtype)
    check(variant(grid), spec, inputs, wide_out[:, :, 1::2])
    assert torch.all(wide_out[:, :, ::2] == 7.0), "wrote outside the output view"


@pytest.mark.parametrize("layout", ["scores", "values"])
def test_writes_nothing_past_n(layout: str) -> None:
    spec = attn_spec(layout, 5, 24, 3, "f32", "ab_bias")
    n = spec.n or 0
    backing = torch.full((3 * n + 64,), 7.0)
    check(variant("wide"), spec, out=backing[: 3 * n].view(3, 1, n))
    assert torch.all(backing[3 * n :] == 7.0)


# ---- the wrapper's checks ----------------------------------------------------


@pytest.mark.parametrize("layout", ["scores", "values"])
def test_run_rejects_mismatched_tensors(layout: str) -> None:
    spec = attn_spec(layout, 5, 24, 2, "f16", "ab")
    run = variant("mid").build(spec, CPU)
    inputs = make_inputs(spec, seed=0)
    n = spec.n or 0
    out = empty_output(spec, "cpu")
    with pytest.raises(ValueError, match=r"out is torch.float32, expected torch.float16"):
        run(inputs, torch.empty(2, 1, n))
    with pytest.raises(ValueError, match=rf"out has shape \(2, 1, {n + 1}\)"):
        run(inputs, torch.empty(2, 1, n + 1, dtype=torch.float16))
    with pytest.raises(ValueError, match="C0 is missing"):
        run(replace(inputs, c0=None), out)
    with pytest.raises(ValueError, match="B has shape"):
        run(replace(inputs, b=inputs.b[:1]), out)
    scores = layout == "scores"
    with pytest.raises(ValueError, match=f"got tb={not scores}"):
        run(replace(inputs, tb=not scores), out)
    plain = replace(spec, beta=0.0)
    with pytest.raises(ValueError, match="carry C0"):
        variant("mid").build(plain, CPU)(inputs, out)


def test_build_refuses_unsupported_and_interpreter_on_gpu() -> None:
    with pytest.raises(MatprobeError, match="needs m=1"):
        variant("mid").build(replace(attn_spec("scores", 5, 64, 1, "f32", "scale"), m=2), CPU)
    # The interpreter is on in this process: a "GPU" build must say so, not run slowly.
    for layout in ("scores", "values"):
        with pytest.raises(MatprobeError, match="TRITON_INTERPRET=1 is set"):
            variant("mid").build(attn_spec(layout, 5, 64, 1, "f32", "scale"), GPU)


# ---- capability reasons and identity -------------------------------------------


def test_unsupported_reasons() -> None:
    v = variant("mid")
    ok = attn_spec("scores", 130, 64, 14, "f16", "scale")
    assert v.unsupported_reason(ok, CPU) is None
    assert v.unsupported_reason(replace(ok, tB=False, n=64, k=130), CPU) is None
    assert v.unsupported_reason(replace(ok, m=2), CPU) == (
        "needs m=1 (one query row per head: a batched GEMV)"
    )
    for long in (replace(ok, k=4097), replace(ok, n=5000)):
        reason = v.unsupported_reason(long, GPU)
        assert reason is not None and reason.startswith("needs k <= 4096 and n <= 4096")
    assert v.unsupported_reason(replace(ok, n=4096, k=4096), GPU) is None
    assert v.unsupported_reason(replace(ok, n=0), CPU) == "empty matmul (n or k is 0)"
    big = replace(ok, batch=1024, n=4096)
    reason = v.unsupported_reason(big, CPU)
    assert reason is not None and "too large for the Triton interpreter (CPU)" in reason
    assert v.unsupported_reason(big, GPU) is None
    assert "not implemented" in (v.unsupported_reason(replace(ok, op="gemm_custom"), CPU) or "")
    assert "q8_0" in (v.unsupported_reason(replace(ok, dtype="q8_0"), CPU) or "")
    assert "tA/tB" in (v.unsupported_reason(replace(ok, tB=None), CPU) or "")


@pytest.mark.parametrize(
    ("grid", "fragment"),
    [
        ({"bk": 8}, "bk=8: BLOCK_K must be a power of two >= 16"),
        ({"bk": 96}, "bk=96"),
        ({"bn": 48}, "bn=48: BLOCK_N must be a power of two >= 16"),
        ({"bn": 8}, "bn=8"),
        ({"w": 3}, "w=3: num_warps"),
        ({"w": 64}, "w=64: num_warps"),
        ({"bn": 4096, "bk": 512}, "exceeds Triton's block limit"),
        ({"pdl": 3}, "pdl=3: 0 or 1"),
    ],
)
def test_bad_grid_values_are_refused(grid: dict[str, int], fragment: str) -> None:
    point = {"bn": 64, "bk": 128, "w": 4, "pdl": 0, **grid}
    (v,) = ATTN_BMV.variants({name: (value,) for name, value in point.items()})
    reason = v.unsupported_reason(attn_spec("values", 130, 64, 14, "f32", "scale"), GPU)
    assert reason is not None and fragment in reason


def test_register_budget_uses_the_clamped_tile() -> None:
    """bk=1024 is one V tile for the whole context: fine for 64 columns of L=130
    (clamped to 256 rows), refused for 64 columns of L=1024 at 4 warps."""
    (wide,) = ATTN_BMV.variants({"bn": (64,), "bk": (1024,), "w": (4,), "pdl": (0,)})
    (narrow,) = ATTN_BMV.variants({"bn": (16,), "bk": (1024,), "w": (4,), "pdl": (0,)})
    (more_warps,) = ATTN_BMV.variants({"bn": (64,), "bk": (1024,), "w": (16,), "pdl": (0,)})
    short, long = (attn_spec("values", length, 64, 14, "f16", "scale") for length in (130, 1024))
    assert wide.unsupported_reason(short, GPU) is None
    reason = wide.unsupported_reason(long, GPU)
    assert reason == (
        "tile of 64×1024 (bn×bk clamped to n=64, k=1024) is 512 elements per thread over "
        "w=4 warps, > 128: registers would spill (raise w, or lower bn or bk)"
    )
    assert narrow.unsupported_reason(long, GPU) is None
    assert more_warps.unsupported_reason(long, GPU) is None
    # Scores: head_dim 64 clamps bk, so every default variant takes every L.
    for v in ATTN_BMV.variants({"pdl": (0,)}):
        assert v.unsupported_reason(attn_spec("scores", 1024, 64, 14, "f16", "scale"), GPU) is None


def test_blocks_clamp_to_the_row() -> None:
    assert block(64, 16) == 16 and block(64, 130) == 64 and block(256, 130) == 256
    assert block(64, 1) == 16 and block(32, 24) == 32 and block(16, 1024) == 16


def test_family_shape() -> None:
    assert FAMILIES == (ATTN_BMV,)
    assert ATTN_BMV.name == "triton.attn_bmv"
    assert ATTN_BMV.ops == {"matmul_alpha_beta", "matmul", "matmul_bias_add"}
    assert ATTN_BMV.interpreted_on_cpu and not ATTN_BMV.baseline and not ATTN_BMV.peer
    ids = [v.id for v in ATTN_BMV.variants()]
    assert ids == [
        f"triton.attn_bmv/bn{bn}_bk{bk}_w4_pdl{pdl}"
        for bn in (16, 32) for bk in (64, 1024) for pdl in (0, 1)
    ]


HOPPER = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0))
AMPERE = DeviceInfo(kind="cuda", name="fake A100", capability=(8, 0))
QKV = MatmulSpec.parse(
    "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | dtype=f16")


@pytest.mark.parametrize(
    ("spec", "device", "fragment"),
    [
        (QKV, HOPPER, None),
        (QKV, AMPERE, "compute capability ≥ 9.0"),
        (QKV, CPU, "compute capability ≥ 9.0"),
        # The V cache (batch of heads, alpha/beta op) may have just been written.
        (attn_spec("values", 130, 64, 14, "f16", "scale"), HOPPER, "weights only"),
        (attn_spec("scores", 130, 64, 14, "f16", "scale"), HOPPER, "tB=0 kernel only"),
    ],
)
def test_pdl_only_for_weights_on_hopper(
    spec: MatmulSpec, device: DeviceInfo, fragment: str | None
) -> None:
    (v,) = ATTN_BMV.variants({"bn": (16,), "bk": (1024,), "pdl": (1,)})
    reason = v.unsupported_reason(spec, device)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason


def test_fingerprint_follows_params_and_kernel_source() -> None:
    prints = {v.fingerprint for v in ATTN_BMV.variants()}
    assert len(prints) == len(ATTN_BMV.variants())
    (a,) = ATTN_BMV.variants({"bn": (64,), "bk": (128,), "pdl": (0,)})
    (b,) = ATTN_BMV.variants({"bn": (64,), "bk": (128,), "w": (2,), "pdl": (0,)})
    assert a.fingerprint != b.fingerprint
    kernel_file = Path(triton_attention.__file__).with_name("_triton_attention_kernels.py")
    assert kernel_file.read_text(encoding="utf-8") == triton_attention.KERNELS_SOURCE
    source = triton_attention.KERNELS_SOURCE
    assert "def attn_scores_kernel" in source and "def attn_values_kernel" in source

    def rebuild(text: str) -> str:
        fam = variant_family(
            name=ATTN_BMV.name, ops=ATTN_BMV.ops, supports=ATTN_BMV.supports,
            grid=ATTN_BMV.grid, sources=(text,),
        )(ATTN_BMV.build)  # fmt: skip
        return fam.variants()[0].fingerprint

    assert rebuild(source) != rebuild(source.replace("acc * alpha", "alpha * acc"))


@pytest.mark.parametrize("tb", [False, True])
def test_plain_and_bias_gemvs_run_through_the_same_kernels(tb: bool) -> None:
    """The fused-QKV shape, scaled down: W stored [k, n] (tB=0) plus a bias."""
    spec = MatmulSpec(op="matmul_bias_add", batch=1, m=1, n=72, k=56, tA=False, tB=tb,
                      dtype="f16")
    (v,) = ATTN_BMV.variants({"bn": (16,), "bk": (1024,), "pdl": (0,)})
    assert v.unsupported_reason(spec, CPU) is None
    inputs = make_inputs(spec, 3)
    out = empty_output(spec, "cpu")
    out.fill_(float("nan"))
    v.build(spec, CPU)(inputs, out)
    result = compare(out, reference(inputs), reference_scale(inputs), spec.k)
    assert result.failure(*spec_tolerance(spec, interpreted=True)) is None
