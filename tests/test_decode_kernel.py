"""The decode step's fused GEMV (``triton.gemv_decode``'s kernel) on what no spec
states: the RMSNorm prologue, alone and with SwiGLU, a bias and a residual, in
f16, bf16 and Q8_0 — against float64 RMSNorm + matmul, with a bound tight enough
that a kernel that skips the norm's scale or its gain, or reads the gain of the
wrong element, fails. (The spec-shaped paths — plain, bias, α/β, SwiGLU — are
checked by the conformance suite like every family's.)"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="the kernel needs torch")
pytest.importorskip("triton", reason="the kernel is Triton")

from conftest import interpreting  # noqa: E402
from matprobe.kernels.triton.decode import DecodeTile, decode_gemv  # noqa: E402
from matprobe.quant import dequantize_q8_0, quantize_q8_0  # noqa: E402

#: Compiled on a GPU, interpreted on the CPU: the two take different code paths
#: (compiled Triton types both branches of a constexpr if that returns early).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(
    DEVICE == "cpu" and not interpreting(), reason="no GPU and TRITON_INTERPRET is not 1"
)

EPS = 1e-6
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "q8_0": torch.float16}
UNIT = {"f16": 2.0**-11, "bf16": 2.0**-8, "q8_0": 2.0**-11}


def reference(
    x: torch.Tensor,
    w: torch.Tensor,
    gain: torch.Tensor | None,
    *,
    bias: torch.Tensor | None = None,
    c0: torch.Tensor | None = None,
    swiglu: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (y, scale): y as the kernel defines it, scale = Σ|W||x̂| (+|C0|+|bias|)
    per output, what a rounding error is measured against."""
    xd, wd = x.cpu().double().reshape(-1), w.cpu().double()
    if gain is not None:
        xd = xd / torch.sqrt(xd.pow(2).mean() + EPS) * gain.cpu().double()
    products, magnitude = wd @ xd, wd.abs() @ xd.abs()
    if swiglu:
        half = w.shape[0] // 2
        g, u = products[:half], products[half:]
        y = torch.nn.functional.silu(g) * u
        scale = (magnitude[:half] * (u.abs() + 1)) + magnitude[half:] * g.abs()
    else:
        y, scale = products, magnitude
    for term in (c0, bias):
        if term is not None:
            y = y + term.cpu().double().reshape(-1)
            scale = scale + term.cpu().double().abs().reshape(-1)
    return y, scale


def operands(
    n_rows: int, k: int, dtype: str, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(x of RMS ≈ 3, W or quants, scales or None, dense W as the kernel sees it, gain)."""
    gen = torch.Generator().manual_seed(seed)
    act = DTYPES[dtype]
    x = ((torch.rand(1, k, generator=gen) * 2 - 1) * 3 * math.sqrt(3)).to(act)
    gain = (0.5 + torch.rand(k, generator=gen)).to(act)  # 0.5–1.5, never 1 throughout
    w = ((torch.rand(n_rows, k, generator=gen) * 2 - 1) * math.sqrt(3 / k)).to(torch.float32)
    if dtype == "q8_0":
        quants, scales = quantize_q8_0(w)
        exact = dequantize_q8_0(quants, scales, torch.float64)
        return x.to(DEVICE), quants.to(DEVICE), scales.to(DEVICE), exact, gain.to(DEVICE)
    dense = w.to(act)
    return x.to(DEVICE), dense.to(DEVICE), None, dense, gain.to(DEVICE)


def assert_close(y: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, dtype: str, k: int):
    # fp32 sums over k, one rounding of the output: a few units of the output's
    # precision of the magnitude, far below what a missing norm scale (≈ 3×) or
    # gain (0.5–1.5 per element) does.
    bound = (k * 2.0**-23 + 2 * UNIT[dtype]) * scale + 1e-30
    err = (y.cpu().double().reshape(-1) - ref).abs()
    worst = float((err / bound).max())
    assert worst <= 1.0, f"error {worst:.2f}× the bound"


CASES = [  # (rows, k, tile): ragged against the tile, a K loop of several tiles
    (37, 96, DecodeTile(4, 32, 4)),
    (64, 160, DecodeTile(2, 64, 4)),
    (5, 64, DecodeTile(8, 64, 4)),
]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(("rows", "k", "tile"), CASES)
def test_norm_prologue_matches_float64(dtype: str, rows: int, k: int, tile: DecodeTile) -> None:
    x, w, scales, dense, gain = operands(rows, k, dtype, seed=rows + k)
    bias = torch.linspace(-0.5, 0.5, rows).to(x.dtype).to(DEVICE)
    c0 = torch.linspace(2, -2, rows).to(x.dtype).reshape(1, rows).to(DEVICE)
    y = decode_gemv(x, w, tile=tile, scales=scales, gain=gain, eps=EPS, bias=bias, c0=c0)
    ref, scale = reference(x, dense, gain, bias=bias, c0=c0)
    assert y.shape == (1, rows) and y.dtype == x.dtype
    assert_close(y, ref, scale, dtype, k)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_norm_prologue_with_swiglu(dtype: str) -> None:
    rows, k = 2 * 19, 96
    x, w, scales, dense, gain = operands(rows, k, dtype, seed=7)
    y = decode_gemv(x, w, tile=DecodeTile(4, 64, 4), scales=scales, gain=gain, eps=EPS,
                    swiglu=True)  # fmt: skip
    ref, scale = reference(x, dense, gain, swiglu=True)
    assert y.shape == (1, 19)
    assert_close(y, ref, scale, dtype, k)


@pytest.mark.parametrize(
    "wrong",
    ["no norm scale", "no gain", "gain reversed"],
)
def test_the_bound_catches_a_wrong_prologue(wrong: str) -> None:
    """What the kernel would compute with its prologue broken does not pass."""
    rows, k = 37, 96
    x, w, _, dense, gain = operands(rows, k, "f16", seed=3)
    if wrong == "no norm scale":
        cheat = dense.double() @ (x.cpu().double().reshape(-1) * gain.cpu().double())
    elif wrong == "no gain":
        cheat = decode_gemv(x, w, tile=DecodeTile(4, 32, 4), gain=torch.ones_like(gain))
    else:
        cheat = decode_gemv(x, w, tile=DecodeTile(4, 32, 4), gain=gain.flip(0))
    ref, scale = reference(x, dense, gain)
    with pytest.raises(AssertionError):
        assert_close(cheat.to(torch.float16), ref, scale, "f16", k)


def test_refusals_name_the_problem() -> None:
    x, w, _, _, gain = operands(8, 64, "f16", seed=1)
    with pytest.raises(ValueError, match="power of two"):
        decode_gemv(x, w, tile=DecodeTile(3, 64, 4))
    with pytest.raises(ValueError, match="x has"):
        decode_gemv(x[:, :32], w, tile=DecodeTile(2, 64, 4))
    with pytest.raises(ValueError, match="SwiGLU"):
        decode_gemv(x, w, tile=DecodeTile(2, 64, 4), swiglu=True, bias=gain[:4])
    with pytest.raises(ValueError, match="contiguous"):
        decode_gemv(x, w.T.contiguous().T, tile=DecodeTile(2, 64, 4))
