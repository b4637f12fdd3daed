"""Q8_0 specs through the harness: the operands are int8 quants plus fp16 block
scales (the split layout), the reference is made from ``d·q`` exactly, and what
an honest dequantizing kernel does (one fp16 rounding of each weight) is judged
exactly — against a second reference from the rounded weights, the nearer one
per output (issue 21) — while nothing a cheaper kernel does passes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from conftest import CPU, FAST  # noqa: E402
from matprobe.kernels.peers.torch_ref import torch_matmul  # noqa: E402
from matprobe.measure.checks import check_chain  # noqa: E402
from matprobe.measure.device import DeviceInfo  # noqa: E402
from matprobe.measure.inputs import MatmulInputs, make_inputs  # noqa: E402
from matprobe.measure.outputs import empty_output  # noqa: E402
from matprobe.measure.pair import PairContext, measure_pair_safely, validate_pair  # noqa: E402
from matprobe.measure.references import Operands64, reference  # noqa: E402
from matprobe.measure.results import Status  # noqa: E402
from matprobe.measure.sampling import recorder_for  # noqa: E402
from matprobe.measure.seeds import restart  # noqa: E402
from matprobe.measure.validate import UNIT_ROUNDOFF, compare, spec_tolerance  # noqa: E402
from matprobe.measure.variants import (  # noqa: E402
    KernelFn,
    Variant,
    VariantFamily,
    variant_family,
)
from matprobe.quant import dequantize_q8_0, quantize_q8_0  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402

#: the quantized profile's shapes at reduced n (the CPU's fp16 matmul is slow), and awkward ones
SHAPES = [
    "op=matmul | batch=1 | m=1 | n=96 | k=4864 | tA=0 | tB=1",
    "op=matmul | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=1",
    "op=matmul_bias_add | batch=1 | m=1 | n=53 | k=96 | tA=0 | tB=0",
    "op=matmul | batch=1 | m=1 | n=? | k=896 | tA=0 | tB=1 | n0=64 | n1=64",
]


def spec(key: str) -> MatmulSpec:
    return MatmulSpec.parse(key).with_dtype("q8_0")


def measure(s: MatmulSpec, family: Any) -> Any:
    return measure_pair_safely(s, Variant(family), PairContext(CPU, FAST))


def test_the_operands_are_the_split_layout_of_gguf_quantized_weights() -> None:
    s = spec(SHAPES[2])
    inputs = make_inputs(s, seed=1)
    assert inputs.b.dtype == torch.int8 and inputs.b.shape == (1, 53, 96)
    assert inputs.scales.dtype == torch.float16 and inputs.scales.shape == (1, 53, 3)
    assert inputs.a.dtype == inputs.bias.dtype == torch.float16 and inputs.tb
    # the values are the quantization of some weights, not arbitrary int8
    again = quantize_q8_0(dequantize_q8_0(inputs.b, inputs.scales))
    assert torch.equal(again[0], inputs.b)
    assert int(inputs.b.abs().amax(dim=-1).min()) == 127  # each block's max is ±127


def test_the_reference_is_made_from_the_dequantized_weights() -> None:
    s = spec(SHAPES[2])
    inputs = make_inputs(s, seed=2)
    w = dequantize_q8_0(inputs.b, inputs.scales, torch.float64)[0]
    expected = inputs.a[0].double() @ w.T + inputs.bias.double()
    assert torch.equal(reference(inputs)[0], expected)


@pytest.mark.parametrize("key", SHAPES)
def test_dequantize_then_matmul_passes(key: str) -> None:
    """The baseline rounds each weight to fp16 before the matmul, as a PyTorch user's
    dequantize-then-cuBLAS does: within the stated bound."""
    result = measure(spec(key), torch_matmul)
    assert result.status is Status.PASS, result.reason


#: How a cheat computes x·Wᵀ from a Q8_0 spec's inputs.
Product = Callable[[MatmulInputs], Any]


def q8_cheat(name: str) -> Callable[[Product], VariantFamily]:
    """A Q8_0 family (matmul, matmul_bias_add) made of the function it decorates: that
    computes x·Wᵀ its own cheaper way (in any float dtype); the kernel adds the bias in
    fp32 and rounds once, into the output. The function's docstring is the family's."""

    def wrap(product: Product) -> VariantFamily:
        def build(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
            def run(inputs: MatmulInputs, out: Any) -> None:
                y = product(inputs).float()
                if inputs.bias is not None:
                    y = y + inputs.bias.float()
                out.copy_(y)

            return run

        build.__doc__ = product.__doc__
        return variant_family(name=name, ops={"matmul", "matmul_bias_add"}, dtypes=("q8_0",))(build)

    return wrap


@q8_cheat("cheat.int8_activations")
def INT8_ACTIVATIONS(inputs: MatmulInputs) -> Any:  # noqa: N802 - a family is a module constant
    """llama.cpp's trick without saying so: x quantized to int8 per 32-block too."""
    xq, xd = quantize_q8_0(inputs.a.float())
    x = dequantize_q8_0(xq, xd)
    w = dequantize_q8_0(inputs.b, inputs.scales)
    return x @ w.transpose(-1, -2)


@q8_cheat("cheat.no_scales")
def NO_SCALES(inputs: MatmulInputs) -> Any:  # noqa: N802 - a family is a module constant
    """Reads the quants with one scale a row (the mean): a third of the bytes of scales saved."""
    d = inputs.scales.float().mean(dim=-1, keepdim=True)
    return inputs.a.float() @ (inputs.b.float() * d).transpose(-1, -2)


@q8_cheat("cheat.q8_half_sum")
def HALF_RUNNING_SUM(inputs: MatmulInputs) -> Any:  # noqa: N802 - a family is a module constant
    """Each 128-wide K tile in fp32, the running sum across tiles kept in fp16: judging
    the weights' rounding against a second reference must not let this through."""
    w = dequantize_q8_0(inputs.b, inputs.scales).transpose(-1, -2)
    a = inputs.a.float()
    total = torch.zeros((*a.shape[:-1], w.shape[-1]), dtype=torch.float16)
    for k0 in range(0, a.shape[-1], 128):
        part = a[..., k0 : k0 + 128] @ w[..., k0 : k0 + 128, :]
        total = (total.float() + part).half()
    return total


@q8_cheat("cheat.bf16_scales")
def BF16_SCALES(inputs: MatmulInputs) -> Any:  # noqa: N802 - a family is a module constant
    """The scales' precision dropped: read as bf16 (8 significant bits, not fp16's 11),
    the rest honest (fp32 sums, one rounding)."""
    d = inputs.scales.to(torch.bfloat16).float()
    return inputs.a.float() @ dequantize_q8_0(inputs.b, d).transpose(-1, -2)


def test_an_fp16_running_sum_fails_against_either_answer() -> None:
    result = measure(spec(SHAPES[0]), HALF_RUNNING_SUM)  # k = 4864: 38 tiles
    assert result.status is Status.FAIL, result.reason


@pytest.mark.parametrize("cheat", [INT8_ACTIVATIONS, NO_SCALES, BF16_SCALES], ids=lambda f: f.name)
@pytest.mark.parametrize("key", SHAPES[1:3])
def test_cheaper_arithmetic_fails(cheat: Any, key: str) -> None:
    result = measure(spec(key), cheat)
    assert result.status is Status.FAIL, result.reason


def test_k_not_in_whole_blocks_is_refused_up_front() -> None:
    s = spec("op=matmul | batch=1 | m=1 | n=8 | k=40 | tA=0 | tB=1")
    reason = Variant(torch_matmul).unsupported_reason(s, CPU)
    assert reason == "Q8_0 stores K in blocks of 32: k=40 is not a multiple"


def test_the_quantized_profile_runs_q8_0_weights_and_fp16_attention() -> None:
    """``run 003_… --dtype q8_0``: weights quantized, the KV cache's matmuls in fp16,
    the fused specs' unknown layout filled in as a fused kernel reads it."""
    from conftest import seed
    from matprobe.profile.profiles import load_specs

    loaded = load_specs(seed("003"), default_dtype="q8_0")
    by_dtype: dict[str, list[MatmulSpec]] = {}
    for s in loaded.specs:
        by_dtype.setdefault(s.dtype or "?", []).append(s)
    assert {s.kind for s in by_dtype["f16"]} == {"matmul_alpha_beta"}
    assert all(s.batch == 1 and s.m == 1 for s in by_dtype["q8_0"])
    fused = [s for s in by_dtype["q8_0"] if s.fused_parts]
    assert sorted(s.n_total for s in fused) == [1152, 9728]
    assert all((s.tA, s.tB) == (False, True) for s in fused)
    assert any("fused spec(s) leave the layout unknown" in w for w in loaded.warnings)
    assert all(Variant(torch_matmul).unsupported_reason(s, CPU) is None for s in fused)


# ---- issue 21: the weights' fp16 rounding judged exactly, not by a wider bound ----------

U = UNIT_ROUNDOFF["f16"]
#: The LM head (n = 151936, k = 896) narrowed to what many seeds afford: what rounding
#: a weight does to an output (≈ 0.5u of its floor, 1σ) is the same at any k, and
#: 16384 outputs × 3 trials reach past 3u often enough — the former bound (fp16's
#: 2u + one u for the weights) failed the baseline for run seeds 1, 10 and 11 here,
#: and the LM head's for 4 seeds of 4 (3.1–3.2u; ``run 003_… --dtype q8_0``: 3.07u).
WIDE = "op=matmul | batch=1 | m=1 | n=16384 | k=128 | tA=0 | tB=1"


def baseline(s: MatmulSpec) -> KernelFn:
    return Variant(torch_matmul).build(s, CPU)


@pytest.mark.parametrize("run_seed", range(12))
def test_dequantize_then_matmul_passes_on_many_outputs_whatever_the_seed(run_seed: int) -> None:
    restart(run_seed)
    s = spec(WIDE)
    checked = validate_pair(s, baseline(s), CPU, 3)
    assert checked.passed, checked.failure
    # What is left is its BLAS's error, one rounding of the output (≤ 1u of the 2u).
    assert checked.metrics.max_rel < 0.55 * checked.metrics.tol_rel, checked.metrics
    assert checked.metrics.norm_rel < 0.5 * checked.metrics.tol_norm, checked.metrics


@pytest.mark.parametrize("run_seed", [1, 10])
def test_the_timed_replays_judge_against_the_nearer_answer_too(run_seed: int) -> None:
    """Every call of the timed replays and the refilled replay is judged as validation
    is (``Bench.judge``, ``CallAnswers.answers``)."""
    restart(run_seed)
    result = measure(spec(WIDE), torch_matmul)
    assert result.status is Status.PASS, result.reason


def test_the_dependent_chain_judges_against_the_nearer_answer_too() -> None:
    """480 calls of 16384 outputs (``check_chain``, which a card that launches early runs
    for every variant): the baseline's weight rounding reaches past 3u among them."""
    s = spec(WIDE)
    assert check_chain(s, baseline(s), recorder_for("cpu"), "cpu") is None


def test_the_rounded_answer_is_made_from_the_baselines_own_fp16_weights() -> None:
    s = spec(SHAPES[2])
    inputs = make_inputs(s, seed=3)
    operands = Operands64.of(inputs, "cpu")
    fp16 = dequantize_q8_0(inputs.b, inputs.scales, torch.float16).transpose(-1, -2)
    assert torch.equal(operands.w_rounded, fp16.double())  # bit for bit
    assert not torch.equal(operands.w_rounded, operands.w)
    a = inputs.a.double()
    expected = a[0] @ fp16[0].double() + inputs.bias.double()
    assert torch.equal(operands.rounded_answer(a)[0], expected)
    dense = Operands64.of(make_inputs(s.with_dtype("f16"), seed=3), "cpu")
    assert dense.rounded_answer(a) is None  # only quantized weights have a second answer


def test_the_weight_rounding_is_no_fixed_number_of_u() -> None:
    """Why it is in the reference, not the bound: on its own (the fp16-weight answer
    against the exact one, no other error) it moves outputs past the whole plain
    fp16 bound — twice the one u the bound once allowed for it — and no constant
    both covers its tails and fails an fp16 running sum (3–10u). Against the nearer
    answer the baseline's error is what its BLAS does: one rounding of the output."""
    s = spec(WIDE)
    inputs = make_inputs(s, seed=0)
    out = empty_output(s, "cpu")
    baseline(s)(inputs, out)
    operands, a, k = Operands64.of(inputs, "cpu"), inputs.a.double(), s.k or 1
    ref, scale, rounded = operands.answer(a), operands.scale(a), operands.rounded_answer(a)
    tol_rel = spec_tolerance(s)[1]
    assert tol_rel < 2.02 * U  # fp16's bound: no allowance for the weights
    weights_alone = compare(rounded, ref, scale, k)
    assert weights_alone.max_rel > tol_rel, weights_alone
    assert weights_alone.norm_rel < 0.6 * U  # norm-wise it is ≈ 0.42u RMS: no surprise
    assert compare(out, ref, scale, k).max_rel > tol_rel
    nearer = compare(out, ref, scale, k, rounded=rounded)
    assert nearer.max_rel < 1.01 * U and nearer.norm_rel < 0.5 * U, nearer
