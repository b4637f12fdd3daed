"""Q8_0 quantization equals the ``gguf`` package's bit for bit (ggml's reference), on
the values where a hand-written quantizer goes wrong: all-zero blocks, ±max,
exact .5 ties, scales that are subnormal or underflow in fp16, huge weights."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="matprobe.quant works on torch tensors")
gguf = pytest.importorskip("gguf", reason="the reference quantizer (a dev dependency)")

from matprobe.quant import (  # noqa: E402
    QuantError,
    dequantize_q8_0,
    from_gguf_blocks,
    quantize_q8_0,
    to_gguf_blocks,
)


def _gguf_bytes(weights: np.ndarray) -> np.ndarray:
    return np.asarray(gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0))


def _awkward(rows: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, k)).astype(np.float32)
    w[0, :32] = 0.0  # an all-zero block: d = 0, every q = 0
    w[1, :32] = 127.0  # ±max: q = ±127 exactly
    w[1, 32:64] = -127.0 * np.linspace(0.0, 1.0, 32, dtype=np.float32)
    w[2, :32] = np.arange(-16, 16, dtype=np.float32) + 0.5  # many values land on .5
    w[2, 31] = 127.0  # … with d = 1 exactly: ties at x.5 round away from zero
    w[3, :32] *= np.float32(1e-9)  # d is subnormal in fp16
    w[3, 32:64] *= np.float32(1e-12)  # d underflows to 0 in fp16, q is not 0
    w[4, :32] *= np.float32(3e4)  # large weights, d near fp16's top
    w[5, 7] = np.float32(np.nextafter(np.float32(0.0), np.float32(1.0)))  # a denormal weight
    return w


@pytest.mark.parametrize(("rows", "k", "seed"), [(6, 64, 0), (7, 96, 1), (9, 4864 // 4, 2)])
def test_quantized_bytes_equal_gguf(rows: int, k: int, seed: int) -> None:
    weights = _awkward(rows, k, seed)
    quants, scales = quantize_q8_0(torch.from_numpy(weights))
    ours = to_gguf_blocks(quants, scales).numpy()
    theirs = _gguf_bytes(weights)
    assert ours.shape == theirs.shape == (rows, k // 32 * 34)
    assert np.array_equal(ours, theirs)


def test_fp16_and_bf16_weights_quantize_like_their_fp32_values() -> None:
    weights = torch.from_numpy(_awkward(6, 64, 3))
    for dtype in (torch.float16, torch.bfloat16):
        rounded = weights.to(dtype)
        ours = to_gguf_blocks(*quantize_q8_0(rounded)).numpy()
        assert np.array_equal(ours, _gguf_bytes(rounded.float().numpy()))


def test_dequantized_values_equal_gguf() -> None:
    weights = _awkward(6, 64, 4)
    quants, scales = quantize_q8_0(torch.from_numpy(weights))
    theirs = gguf.quants.dequantize(_gguf_bytes(weights), gguf.GGMLQuantizationType.Q8_0)
    assert np.array_equal(dequantize_q8_0(quants, scales).numpy(), theirs)


def test_the_split_and_gguf_layouts_convert_exactly() -> None:
    quants, scales = quantize_q8_0(torch.from_numpy(_awkward(6, 96, 5)))
    back_q, back_d = from_gguf_blocks(to_gguf_blocks(quants, scales))
    assert torch.equal(back_q, quants)
    assert torch.equal(back_d.view(torch.int16), scales.view(torch.int16))  # bits, NaN-safe


def test_quants_stay_within_127_and_error_within_half_a_step() -> None:
    weights = torch.randn(32, 256, dtype=torch.float32)
    quants, scales = quantize_q8_0(weights)
    assert int(quants.abs().max()) == 127  # every block's amax maps to ±127
    error = (dequantize_q8_0(quants, scales, torch.float64) - weights.double()).abs()
    step = scales.double().repeat_interleave(32, dim=-1)
    # half a quantization step, plus the fp16 rounding of d carried by |q| ≤ 127
    assert bool((error <= step * (0.5 + 127 * 2.0**-11) + 1e-12).all())


@pytest.mark.parametrize("k", [1, 31, 33, 100])
def test_k_not_a_multiple_of_32_is_refused(k: int) -> None:
    with pytest.raises(QuantError, match=f"multiple of 32.*K={k}"):
        quantize_q8_0(torch.zeros(2, k))


def test_gguf_bytes_of_the_wrong_width_are_refused() -> None:
    with pytest.raises(QuantError, match="not a whole number of 34-byte"):
        from_gguf_blocks(torch.zeros(2, 35, dtype=torch.uint8))
