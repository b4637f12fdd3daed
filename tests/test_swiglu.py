"""``op=matmul_swiglu``: the gate/up matmul with SwiGLU folded in, as a first-class op.

W is gate and up stacked ``[n0 + n1, k]`` (tB = 1, n0 == n1) and the output is
``y = silu(x·W_gateᵀ) ⊙ (x·W_upᵀ)``, ``[batch, m, n0]``. These tests pin the
semantics (which half is the gate), the harness pieces (shapes, float64
reference and its term scale, FLOPs and bytes), the tolerance — the eager
PyTorch form passes with a margin, a half-precision running sum across many K
tiles and a dropped K tail fail — and the Triton family on ragged shapes in
every dtype it takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from conftest import CPU, NOT_INTERPRETING, interpreting  # noqa: E402
from matprobe.errors import SpecError  # noqa: E402
from matprobe.kernels.peers.torch_ref import torch_matmul  # noqa: E402
from matprobe.kernels.triton.gemv_swiglu import GEMV_SWIGLU  # noqa: E402
from matprobe.measure.device import DeviceInfo  # noqa: E402
from matprobe.measure.inputs import MatmulInputs, make_inputs, shapes  # noqa: E402
from matprobe.measure.pair import validate_pair  # noqa: E402
from matprobe.measure.references import reference, reference_scale  # noqa: E402
from matprobe.measure.validate import (  # noqa: E402
    UNIT_ROUNDOFF,
    few_outputs_norm,
    spec_tolerance,
    tolerance,
)
from matprobe.measure.variants import Variant  # noqa: E402
from matprobe.quant import dequantize_q8_0  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402

F = torch.nn.functional

#: Qwen2.5-0.5B's gate/up (the profile's ``n=? | n0=4864 | n1=4864``) as SwiGLU.
GATE_UP = "op=matmul_swiglu | batch=1 | m=1 | n=? | k=896 | tA=0 | tB=1 | n0=4864 | n1=4864"


def swiglu(n0: int, k: int, dtype: str, batch: int = 1, m: int = 1) -> MatmulSpec:
    return MatmulSpec(op="matmul_swiglu", batch=batch, m=m, k=k, n0=n0, n1=n0, tB=True,
                      dtype=dtype)  # fmt: skip


def k_for(dtype: str, k: int) -> int:
    """Q8_0 stores K in whole blocks of 32: the nearest multiple at or above k."""
    return -(-k // 32) * 32 if dtype == "q8_0" else k


# ---- the spec ------------------------------------------------------------------------


def test_the_key_round_trips_and_the_output_is_n0_wide() -> None:
    s = MatmulSpec.parse(GATE_UP).with_dtype("f16")
    assert MatmulSpec.parse(s.key()) == s and s.is_swiglu and s.swiglu_problem() is None
    assert s.n_total == 9728 and s.n_out == 4864
    dims = shapes(s)
    assert dims["b"] == (1, 9728, 896) and dims["out"] == (1, 1, 4864)
    # products of both halves, 2 FLOPs a SwiGLU output; W and x read, n0 outputs written
    assert s.flops() == 2 * 9728 * 896 + 2 * 4864
    assert s.min_bytes() == 2 * (9728 * 896 + 896 + 4864)
    assert s.with_dtype("q8_0").min_bytes() == 9728 * 28 * 34 + 2 * (896 + 4864)
    assert s.with_dtype("q8_0").min_bytes() < MatmulSpec.parse(GATE_UP.replace(
        "matmul_swiglu", "matmul")).with_dtype("q8_0").min_bytes()  # fmt: skip


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"n1": 48}, "n0 == n1"),
        ({"n0": None, "n": 106}, "needs the gate and up widths"),
        ({"n": 100}, "is not n0 + n1"),
        ({"tB": False}, "needs tB=1"),
        ({"bias": True}, "bias must not be set"),
        ({"alpha": 0.5}, "alpha must not be set"),
        ({"beta": 0.0}, "beta must not be set"),
    ],
)
def test_specs_outside_the_op_are_refused_with_a_reason(
    change: dict[str, Any], needle: str
) -> None:
    from dataclasses import replace

    s = replace(swiglu(53, 40, "f16"), **change)
    for family in (torch_matmul, GEMV_SWIGLU):
        for variant in family.variants()[:2]:
            reason = variant.unsupported_reason(s, CPU)
            assert reason is not None and needle in reason, (variant.id, reason)
    with pytest.raises(SpecError, match=re.escape(needle)):
        shapes(s)


def test_other_families_do_not_take_the_op() -> None:
    from matprobe.kernels.catalogue import shipped_families

    takers = {f.name for f in shipped_families() if "matmul_swiglu" in f.ops}
    assert takers == {"torch.matmul", "torch.compile", "triton.gemv_swiglu", "triton.gemv_decode"}


# ---- reference and scale ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0"])
def test_the_reference_is_silu_of_the_first_half_times_the_second(dtype: str) -> None:
    s = swiglu(7, k_for(dtype, 40), dtype, batch=2, m=3)
    inputs = make_inputs(s, seed=3)
    assert inputs.swiglu and inputs.bias is None and inputs.c0 is None
    if inputs.quantized:
        w = dequantize_q8_0(inputs.b, inputs.scales, torch.float64)
    else:
        w = inputs.b.double()
    x = inputs.a.double()
    gate, up = x @ w[:, :7].transpose(1, 2), x @ w[:, 7:].transpose(1, 2)
    expected = gate / (1 + torch.exp(-gate)) * up
    got = reference(inputs)
    assert got.shape == (2, 3, 7) and got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-13, atol=0)


def test_the_scale_bounds_the_propagated_error_of_each_sum() -> None:
    """Sums off by at most ε·Σ|terms| each (what accumulation or a rounding of g
    and u does) move y by at most ε·scale, to first order — the floor the error
    is judged against where g or u cancel."""
    s = swiglu(64, 96, "f32", batch=2)
    inputs = make_inputs(s, seed=5)
    scale = reference_scale(inputs)
    x, w = inputs.a.double(), inputs.b.double().transpose(1, 2)
    gate, up = (x @ w).chunk(2, dim=-1)
    sums_g, sums_u = (x.abs() @ w.abs()).chunk(2, dim=-1)
    eps = 1e-7
    for sg in (-1, 1):
        for su in (-1, 1):
            moved = F.silu(gate + sg * eps * sums_g) * (up + su * eps * sums_u)
            change = (moved - F.silu(gate) * up).abs()
            assert bool((change <= eps * scale * (1 + 1e-4)).all())
    # and it is no looser than that: some element reaches half of it
    assert float((change / (eps * scale)).max()) > 0.5


# ---- the tolerance ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f16", "bf16", "q8_0"])
def test_the_bound_counts_the_eager_forms_three_extra_roundings(dtype: str) -> None:
    s = swiglu(4864, 896, dtype)
    out = "f16" if dtype == "q8_0" else dtype
    u = UNIT_ROUNDOFF[out]
    plain = tolerance(out, 896)  # Q8_0: fp16's (its weights' rounding is in the reference)
    norm, element = tolerance(out, 896, swiglu=True)
    assert norm == pytest.approx(plain[0] + u) and element == pytest.approx(plain[1] + 3 * u)
    # Over the spec's 4864 outputs the norm-wise bound is that, 1/√4864 of the way to
    # the per-element bound (measure.validate.few_outputs_norm).
    assert spec_tolerance(s) == (few_outputs_norm(norm, element, 4864), element)


def validate(s: MatmulSpec, fn: Any, trials: int = 3) -> Any:
    return validate_pair(s, fn, CPU, trials)


def eager(s: MatmulSpec) -> Any:
    return torch_matmul.variants()[0].build(s, CPU)


SHAPES = [(4864, 896), (1000, 4864), (53, 40), (1, 40), (7, 1)]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0"])
@pytest.mark.parametrize(("n0", "k"), SHAPES, ids=[f"n0={n}_k={k}" for n, k in SHAPES])
def test_the_eager_pytorch_form_passes_with_a_margin(n0: int, k: int, dtype: str) -> None:
    """``F.silu(x @ Wg.T) * (x @ Wu.T)`` with four roundings: within both bounds by
    ≥ 1.3× (measured: ≤ 0.5 of the per-element bound, ≤ 0.5 of the norm-wise one)."""
    s = swiglu(n0, k_for(dtype, k), dtype)
    checked = validate(s, eager(s))
    assert checked.passed, checked.failure
    assert checked.metrics.norm_rel < 0.75 * checked.metrics.tol_norm, checked.metrics
    assert checked.metrics.max_rel < 0.75 * checked.metrics.tol_rel, checked.metrics


def half_running_sums(tile: int, drop: int = 0) -> Callable[[MatmulInputs, Any], None]:
    """fp32 within each K tile, g and u kept as running sums in the output dtype
    across tiles; ``drop`` leaves out the last K columns. silu·mul in fp32."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        a, b = inputs.a_mk().float(), inputs.weight_kn(torch.float32)
        k = a.shape[-1] - drop
        acc = torch.zeros(*out.shape[:-1], b.shape[-1], dtype=out.dtype)
        for k0 in range(0, k, tile):
            k1 = min(k0 + tile, k)
            acc = (acc.float() + a[..., k0:k1] @ b[..., k0:k1, :]).to(out.dtype)
        gate, up = acc.float().chunk(2, dim=-1)
        out.copy_(F.silu(gate) * up)

    return run


def honest(inputs: MatmulInputs, out: Any) -> None:
    """What a fused kernel does: fp32 sums, silu·mul in fp32, one rounding."""
    gate, up = (inputs.a_mk().float() @ inputs.weight_kn(torch.float32)).chunk(2, dim=-1)
    out.copy_(F.silu(gate) * up)


def swapped_halves(inputs: MatmulInputs, out: Any) -> None:
    """silu of the second half times the first: the layout read the wrong way round."""
    gate, up = (inputs.a_mk().float() @ inputs.weight_kn(torch.float32)).chunk(2, dim=-1)
    out.copy_(F.silu(up) * gate)


#: (n0, k, tile, dtype): ≥ 14 K tiles (see validate's module doc), Q8_0 too: its
#: weights' fp16 rounding is in the reference, not in the bound (issue 21; until
#: then Q8_0's 6u let 14 tiles through at 5.3u, and the bound claimed 28).
RUNNING_SUMS = [
    pytest.param(n0, k, tile, dtype, id=f"n0={n0}_k={k}_tile={tile}-{dtype}")
    for n0, k, tile in ((4864, 896, 32), (4864, 896, 64), (1000, 4864, 128))
    for dtype in ("f16", "bf16", "q8_0")
]


@pytest.mark.parametrize(("n0", "k", "tile", "dtype"), RUNNING_SUMS)
def test_half_precision_running_sums_across_k_tiles_fail(
    n0: int, k: int, tile: int, dtype: str
) -> None:
    s = swiglu(n0, k, dtype)
    checked = validate(s, half_running_sums(tile))
    assert not checked.passed, checked.metrics
    assert validate(s, honest).passed


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0"])
@pytest.mark.parametrize(("n0", "k"), SHAPES[:4], ids=[f"n0={n}_k={k}" for n, k in SHAPES[:4]])
def test_dropping_the_k_tail_fails(n0: int, k: int, dtype: str) -> None:
    s = swiglu(n0, k_for(dtype, k), dtype)
    drop = 32 if dtype == "q8_0" else 3  # the last Q8_0 block, or 3 columns
    checked = validate(s, half_running_sums(1 << 30, drop=drop))
    assert not checked.passed, checked.metrics
    assert validate(s, honest).passed


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0"])
def test_reading_the_halves_the_wrong_way_round_fails(dtype: str) -> None:
    s = swiglu(53, k_for(dtype, 40), dtype, batch=3)
    checked = validate(s, swapped_halves)
    assert not checked.passed and "error" in (checked.failure or ""), checked.failure


# ---- the Triton family -----------------------------------------------------------------

#: ragged against every tile (n0 = 5 against bn 2/4, k past 512-wide tiles), and
#: even ones that take the unmasked path
TRITON_SHAPES = [(5, 1100, "bn2_bk512_w4"), (4, 1024, "bn2_bk512_w4"), (3, 200, "bn4_bk1024_w8")]


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", ["f16", "bf16", "q8_0"])
@pytest.mark.parametrize(("n0", "k", "tag"), TRITON_SHAPES, ids=lambda v: str(v))
def test_triton_gemv_swiglu_validates_at_every_shape_and_tile(
    n0: int, k: int, tag: str, dtype: str
) -> None:
    if not interpreting():
        pytest.skip(NOT_INTERPRETING)
    s = swiglu(n0, k_for(dtype, k), dtype, batch=2)
    variant = next(v for v in GEMV_SWIGLU.variants() if v.tag == tag)
    assert variant.unsupported_reason(s, CPU) is None
    checked = validate_pair(s, variant.build(s, CPU), CPU, 2, interpreted=True)
    assert checked.passed, checked.failure
    # an honest kernel: one rounding, well inside the bound the eager form needs
    assert checked.metrics.max_rel < 0.5 * checked.metrics.tol_rel, checked.metrics


def test_triton_gemv_swiglu_refuses_what_it_cannot_run() -> None:
    variant: Variant = GEMV_SWIGLU.variants()[0]
    reasons = {
        "m": variant.unsupported_reason(swiglu(8, 64, "f16", m=17), CPU),
        "f32": variant.unsupported_reason(swiglu(8, 64, "f32"), CPU),
        "big": variant.unsupported_reason(swiglu(4864, 896, "f16"), CPU),
        "k tiles": variant.unsupported_reason(swiglu(8, 33 * 512, "f16"), CPU),
    }
    assert reasons["m"] == "needs m=1 (GEMV)"
    assert reasons["f32"] is not None and "dtype f32 not supported" in reasons["f32"]
    assert reasons["big"] is not None and "too large for the Triton interpreter" in reasons["big"]
    assert reasons["k tiles"] is not None and "raise bk" in reasons["k tiles"]
    gpu = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0), sm_count=132)
    assert variant.unsupported_reason(MatmulSpec.parse(GATE_UP).with_dtype("q8_0"), gpu) is None
