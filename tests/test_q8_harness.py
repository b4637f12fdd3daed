"""Q8_0 specs through the harness: the operands are int8 quants plus fp16 block
scales (the split layout), the reference is made from ``d·q`` exactly, and the
tolerance allows what an honest dequantizing kernel does (one fp16 rounding of
each weight) and nothing a cheaper one does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from matprobe.harness.device import DeviceInfo  # noqa: E402
from matprobe.harness.inputs import MatmulInputs, make_inputs, reference  # noqa: E402
from matprobe.harness.measure import PairContext, measure_pair_safely  # noqa: E402
from matprobe.harness.results import Status  # noqa: E402
from matprobe.harness.timing import TimingPolicy  # noqa: E402
from matprobe.harness.variants import KernelFn, Variant, variant_family  # noqa: E402
from matprobe.quant import dequantize_q8_0, quantize_q8_0  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.variants.torch_ref import torch_matmul  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="test-cpu")
FAST = TimingPolicy(min_samples=3, max_samples=5, budget_s=0.02, host_samples=3)
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


@variant_family(name="cheat.int8_activations", ops={"matmul", "matmul_bias_add"}, dtypes=("q8_0",))
def INT8_ACTIVATIONS(  # noqa: N802 - a family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """llama.cpp's trick without saying so: x quantized to int8 per 32-block too."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        xq, xd = quantize_q8_0(inputs.a.float())
        x = dequantize_q8_0(xq, xd)
        w = dequantize_q8_0(inputs.b, inputs.scales)
        y = x @ w.transpose(-1, -2)
        if inputs.bias is not None:
            y = y + inputs.bias.float()
        out.copy_(y)

    return run


@variant_family(name="cheat.no_scales", ops={"matmul", "matmul_bias_add"}, dtypes=("q8_0",))
def NO_SCALES(  # noqa: N802 - a family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Reads the quants with one scale a row (the mean): a third of the bytes of scales saved."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        d = inputs.scales.float().mean(dim=-1, keepdim=True)
        y = inputs.a.float() @ (inputs.b.float() * d).transpose(-1, -2)
        if inputs.bias is not None:
            y = y + inputs.bias.float()
        out.copy_(y)

    return run


@variant_family(name="cheat.q8_half_sum", ops={"matmul", "matmul_bias_add"}, dtypes=("q8_0",))
def HALF_RUNNING_SUM(  # noqa: N802 - a family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Each 128-wide K tile in fp32, the running sum across tiles kept in fp16: the
    extra u the Q8_0 bound allows for rounding weights must not let this through."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        w = dequantize_q8_0(inputs.b, inputs.scales).transpose(-1, -2)
        a = inputs.a.float()
        total = torch.zeros(out.shape, dtype=torch.float16)
        for k0 in range(0, a.shape[-1], 128):
            part = a[..., k0 : k0 + 128] @ w[..., k0 : k0 + 128, :]
            total = (total.float() + part).half()
        if inputs.bias is not None:
            total = (total.float() + inputs.bias.float()).half()
        out.copy_(total)

    return run


def test_an_fp16_running_sum_fails_despite_the_weight_rounding_allowance() -> None:
    result = measure(spec(SHAPES[0]), HALF_RUNNING_SUM)  # k = 4864: 38 tiles
    assert result.status is Status.FAIL, result.reason


@pytest.mark.parametrize("cheat", [INT8_ACTIVATIONS, NO_SCALES], ids=lambda f: f.name)
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
    from matprobe.profiles import load_specs

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
