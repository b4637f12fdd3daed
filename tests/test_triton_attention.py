"""triton.attn_bmv in the Triton interpreter: both layouts, all heads, L split over
programs, KV-cache views (the contract every family meets is tests/test_conformance.py).

The interpreter costs ~15 ms per program, so batch 14 (all query heads of
Qwen2.5-0.5B) runs only where the layout's behaviour across heads is the point.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from matprobe.kernels.triton.attention import ATTN_BMV, FAMILIES, block
from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import make_inputs
from matprobe.measure.variants import Variant
from matprobe.spec import MatmulSpec
from triton_checks import (
    CPU,
    GPU,
    assert_point_refused,
    assert_reason,
    check_on_cpu,
    check_reruns,
    check_strided,
)

torch = pytest.importorskip("torch", reason="triton.attn_bmv tests need torch")
pytest.importorskip("triton", reason="triton.attn_bmv tests need triton (run in its interpreter)")
pytestmark = pytest.mark.interpreter

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


# ---- correctness -------------------------------------------------------------


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
    check_on_cpu(variant(grid), attn_spec(layout, length, 64, 14, dtype, epilogue))


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
        check_on_cpu(v, spec, inputs)


@pytest.mark.parametrize("grid", ["tiny", "mid"])
def test_split_counters_reset_between_runs(grid: str) -> None:
    """Values split over L: the last program resets its counter, so runs repeat."""
    check_reruns(variant(grid), attn_spec("values", 130, 64, 2, "f32", "ab"))


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
    check_on_cpu(v, spec)


@pytest.mark.parametrize(
    ("layout", "grid"), [("scores", "tiny"), ("values", "tiny"), ("values", "wide")]
)
def test_kv_cache_views(layout: str, grid: str) -> None:
    """K/V as the first L rows of a longer cache (batch stride Lmax·2·head_dim, a
    strided head_dim); q, C0, bias and out spread out too."""
    length, head_dim, batch, lmax = 37, 24, 3, 50
    spec = attn_spec(layout, length, head_dim, batch, "bf16", "ab_bias")
    cache = torch.zeros(batch, lmax, 2 * head_dim, dtype=torch.bfloat16)
    kv = cache[:, :length, ::2]  # [batch, L, head_dim] in both layouts
    kv.copy_(make_inputs(spec, seed=3).b)
    check_strided(variant(grid), spec, b=kv)


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
    assert "zero dimension (n=0)" in (v.unsupported_reason(replace(ok, n=0), CPU) or "")


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
    spec = attn_spec("values", 130, 64, 14, "f32", "scale")
    assert_point_refused(ATTN_BMV, point, spec, fragment)


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
        for bn in (16, 32)
        for bk in (64, 1024)
        for pdl in (0, 1)
    ]


HOPPER = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0))
AMPERE = DeviceInfo(kind="cuda", name="fake A100", capability=(8, 0))
QKV = MatmulSpec.parse(
    "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | dtype=f16"
)


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
    assert_reason(v.unsupported_reason(spec, device), fragment)
