"""triton.gemm on the CPU, in the Triton interpreter, against the float64 reference.

The interpreter is slow with ``tl.dot``, so correctness runs use 16×16×16 tiles
(explicit grid values) on small awkward shapes; one case per dtype runs a
default grid point.
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

torch = pytest.importorskip("torch", reason="triton.gemm tests need torch")
pytest.importorskip("triton", reason="triton.gemm tests need triton (run in its interpreter)")

from matprobe.errors import MatprobeError  # noqa: E402
from matprobe.harness.device import DeviceInfo  # noqa: E402
from matprobe.harness.inputs import (  # noqa: E402
    MatmulInputs,
    empty_output,
    make_inputs,
)
from matprobe.harness.variants import Variant, variant_family  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.variants import _triton_gemm_kernels, triton_gemm  # noqa: E402
from matprobe.variants.triton_gemm import FAMILIES, GEMM  # noqa: E402
from triton_checks import CPU, check_on_cpu  # noqa: E402

GPU = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0))

#: Epilogues: (op, alpha, beta, bias flag).
EPILOGUES: dict[str, tuple[str, float | None, float | None, bool | None]] = {
    "plain": ("matmul", None, None, None),
    "bias": ("matmul_bias_add", None, None, None),
    "alpha_beta": ("matmul_alpha_beta", 0.125, 0.5, None),
    "alpha_beta_bias": ("matmul_alpha_beta", 0.125, 0.5, True),
}
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]  # (tA, tB)

#: (m, n, k, batch): every m, n and k of the brief, ragged against 16×16×16
#: tiles on every edge, plus k = 64 (BLOCK_K divides k: the unmasked K loop).
SHAPES = [
    (33, 17, 70, 2), (16, 64, 1, 2), (33, 64, 20, 1), (16, 17, 20, 2),
    (33, 17, 1, 2), (16, 64, 70, 2), (33, 64, 64, 2), (16, 17, 64, 1),
]  # fmt: skip

SMALL = {"bm": (16,), "bn": (16,), "bk": (16,)}


def variant(grid: dict[str, tuple[int, ...]] | None = None) -> Variant:
    (only,) = GEMM.variants({**GEMM.grid, **SMALL, **(grid or {})})
    return only


def spec_for(
    m: int, n: int, k: int, batch: int, dtype: str, epilogue: str,
    *, ta: bool = False, tb: bool = True,
) -> MatmulSpec:  # fmt: skip
    op, alpha, beta, bias = EPILOGUES[epilogue]
    return MatmulSpec(
        op=op, batch=batch, m=m, n=n, k=k, tA=ta, tB=tb,
        alpha=alpha, beta=beta, bias=bias, dtype=dtype,
    )  # fmt: skip


def check(
    v: Variant, spec: MatmulSpec, inputs: MatmulInputs | None = None, out: Any = None
) -> None:
    check_on_cpu(v, spec, inputs, out)


# ---- correctness -------------------------------------------------------------

# Every dtype × layout × epilogue once (48 cases), the shapes cycling under them
# so that each dtype sees every shape and every shape several epilogues.
CASES = [
    (dtype, layout, epilogue, SHAPES[(i + j) % len(SHAPES)])
    for j, dtype in enumerate(("f32", "f16", "bf16"))
    for i, (layout, epilogue) in enumerate(itertools.product(LAYOUTS, EPILOGUES))
]


CASE_IDS = [
    f"{dtype}-tA{int(ta)}tB{int(tb)}-{epilogue}-m{m}n{n}k{k}b{batch}"
    for dtype, (ta, tb), epilogue, (m, n, k, batch) in CASES
]


@pytest.mark.parametrize(("dtype", "layout", "epilogue", "shape"), CASES, ids=CASE_IDS)
def test_matches_reference(
    dtype: str, layout: tuple[bool, bool], epilogue: str, shape: tuple[int, int, int, int]
) -> None:
    m, n, k, batch = shape
    ta, tb = layout
    check(variant(), spec_for(m, n, k, batch, dtype, epilogue, ta=ta, tb=tb))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_default_grid_point(dtype: str) -> None:
    # A real tile (bm64 bn128 bk64) over a ragged shape smaller than one tile.
    (v,) = GEMM.variants({"bm": (64,), "bn": (128,)})
    check(v, spec_for(33, 64, 70, 2, dtype, "alpha_beta_bias", ta=False, tb=True))


def test_non_square_tiles() -> None:
    # bm ≠ bn ≠ bk, several tile-rows and tile-columns, grouped ordering with
    # fewer tile-rows than GROUP_M in the last group.
    v = variant({"bm": (16,), "bn": (32,), "bk": (32,)})
    check(v, spec_for(150, 70, 40, 1, "f16", "alpha_beta_bias", ta=True, tb=False))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_strided_operands(dtype: str) -> None:
    """Non-contiguous A, B, C0, bias and out: the kernel follows the strides given."""
    spec = spec_for(33, 17, 20, 2, dtype, "alpha_beta_bias", ta=False, tb=True)
    base = make_inputs(spec, seed=3)
    wide_a = torch.zeros(2, 2 * 33, 25, dtype=base.a.dtype)
    wide_a[:, ::2, 3:23] = base.a
    wide_b = torch.zeros(2, 17, 3 * 20, dtype=base.b.dtype)
    wide_b[:, :, ::3] = base.b
    wide_c0 = torch.zeros(2, 33, 2 * 17, dtype=base.a.dtype)
    wide_c0[:, :, 1::2] = base.c0
    wide_bias = torch.zeros(2 * 17, dtype=base.a.dtype)
    wide_bias[1::2] = base.bias
    a, b, c0 = wide_a[:, ::2, 3:23], wide_b[:, :, ::3], wide_c0[:, :, 1::2]
    assert not (a.is_contiguous() or b.is_contiguous() or c0.is_contiguous())
    inputs = MatmulInputs(a, b, wide_bias[1::2], c0, base.alpha, base.beta, ta=False, tb=True)
    wide_out = torch.full((2, 33, 2 * 17), 7.0, dtype=base.a.dtype)
    out = wide_out[:, :, 1::2]
    check(variant(), spec, inputs, out)
    assert torch.all(wide_out[:, :, ::2] == 7.0), "wrote outside the output view"


def test_writes_nothing_past_the_output() -> None:
    spec = spec_for(17, 5, 7, 2, "f32", "alpha_beta_bias")
    backing = torch.full((2 * 17 * 5 + 64,), 7.0)
    out = backing[: 2 * 17 * 5].view(2, 17, 5)
    check(variant(), spec, out=out)
    assert torch.all(backing[2 * 17 * 5 :] == 7.0)


# ---- what the wrapper launches -----------------------------------------------------


class InterpretedFunction:
    """Stands in for the kernel (the class name passes the interpreter check) and
    records the launch grid and the compile-time constants."""

    def __init__(self) -> None:
        self.launches: list[tuple[tuple[int, ...], dict[str, Any]]] = []

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **constants: Any) -> None:
            self.launches.append((grid, constants))

        return launch


@pytest.mark.parametrize(
    ("dtype", "k", "ieee", "upcast", "even_k"),
    [("f32", 128, True, False, True), ("f16", 100, False, False, False),
     ("bf16", 64, False, True, True)],
)  # fmt: skip
def test_launch_constants(
    monkeypatch: pytest.MonkeyPatch, dtype: str, k: int, ieee: bool, upcast: bool, even_k: bool
) -> None:
    fake = InterpretedFunction()
    monkeypatch.setattr(_triton_gemm_kernels, "gemm_kernel", fake)
    (v,) = GEMM.variants({"bm": (64,), "bn": (128,), "w": (8,), "s": (4,)})
    spec = spec_for(200, 300, k, 3, dtype, "bias", ta=True, tb=False)
    v.build(spec, CPU)(make_inputs(spec, seed=0), empty_output(spec, "cpu"))
    ((grid, constants),) = fake.launches
    assert grid == (4 * 3, 3)  # ceil(200/64) · ceil(300/128) tiles, batch 3
    assert constants["IEEE"] is ieee  # f32: input_precision="ieee", never TF32
    assert constants["INTERPRETED_BF16"] is upcast
    assert constants["EVEN_K"] is even_k
    assert (constants["BLOCK_M"], constants["BLOCK_N"], constants["BLOCK_K"]) == (64, 128, 64)
    assert (constants["num_warps"], constants["num_stages"]) == (8, 4)
    assert constants["GROUP_M"] == triton_gemm.GROUP_M
    assert (constants["HAS_C0"], constants["HAS_BIAS"]) == (False, True)


def test_kernel_asks_for_ieee_f32() -> None:
    assert 'input_precision="ieee"' in triton_gemm.KERNELS_SOURCE
    assert "if IEEE:" in triton_gemm.KERNELS_SOURCE


# ---- the wrapper's checks ----------------------------------------------------


def test_run_rejects_mismatched_tensors() -> None:
    spec = spec_for(16, 5, 7, 1, "f16", "bias")
    run = variant().build(spec, CPU)
    inputs = make_inputs(spec, seed=0)
    with pytest.raises(ValueError, match=r"out is torch.float32, expected torch.float16"):
        run(inputs, torch.empty(1, 16, 5))
    with pytest.raises(ValueError, match=r"out has shape \(1, 16, 6\)"):
        run(inputs, torch.empty(1, 16, 6, dtype=torch.float16))
    with pytest.raises(ValueError, match="bias is missing"):
        run(replace(inputs, bias=None), empty_output(spec, "cpu"))
    with pytest.raises(ValueError, match="carry C0"):
        c0 = torch.ones(1, 16, 5, dtype=torch.float16)
        run(replace(inputs, c0=c0), empty_output(spec, "cpu"))
    with pytest.raises(ValueError, match=r"B \(as \[batch, k, n\]\) has shape"):
        run(replace(inputs, tb=False), empty_output(spec, "cpu"))


def test_build_refuses_unsupported_and_interpreter_on_gpu() -> None:
    with pytest.raises(MatprobeError, match="tiled GEMM is for m >= 16"):
        variant().build(spec_for(1, 5, 7, 1, "f32", "plain"), CPU)
    # The interpreter is on in this process: a "GPU" build must say so, not run slowly.
    with pytest.raises(MatprobeError, match="TRITON_INTERPRET=1 is set"):
        variant().build(spec_for(16, 5, 7, 1, "f32", "plain"), GPU)


# ---- capability reasons and identity -------------------------------------------


def test_unsupported_reasons() -> None:
    (v,) = GEMM.variants({"bm": (128,), "bn": (128,)})
    ok = spec_for(64, 300, 200, 1, "f16", "plain")
    assert v.unsupported_reason(ok, CPU) is None
    for m in (1, 15):
        assert v.unsupported_reason(replace(ok, m=m), CPU) == (
            "tiled GEMM is for m >= 16; use a GEMV family for decode"
        )
    for ta, tb in LAYOUTS:
        assert v.unsupported_reason(replace(ok, tA=ta, tB=tb), CPU) is None
    prefill_lm_head = replace(ok, m=128, n=151936, k=896)
    reason = v.unsupported_reason(prefill_lm_head, CPU)
    assert reason is not None and "too large for the Triton interpreter (CPU): batch·n·k" in reason
    assert v.unsupported_reason(prefill_lm_head, GPU) is None
    long_prefill = replace(ok, m=4096, n=512, k=512)  # n·k small, m·n·k not
    reason = v.unsupported_reason(long_prefill, CPU)
    assert reason is not None and "batch·m·n·k" in reason
    assert v.unsupported_reason(long_prefill, GPU) is None
    assert v.unsupported_reason(replace(ok, n=0), GPU) == "empty matmul (n or k is 0)"
    assert "q8_0" in (v.unsupported_reason(replace(ok, dtype="q8_0"), CPU) or "")


def test_shared_memory_limit_depends_on_dtype() -> None:
    (v,) = GEMM.variants({"bm": (128,), "bn": (128,), "bk": (64,), "s": (4,)})
    half = spec_for(64, 300, 200, 1, "f16", "plain")
    assert triton_gemm.shared_bytes(128, 128, 64, 4, "f16") == 131072
    assert v.unsupported_reason(half, GPU) is None  # 128 KB
    reason = v.unsupported_reason(replace(half, dtype="f32"), GPU)  # 256 KB
    assert reason == (
        "shared memory (bm·bk + bk·bn)·4 B·s = 262144 B exceeds the 227 KB a block may use"
    )
    # Every default grid point fits in every dtype.
    for point in GEMM.variants():
        for dtype in ("f32", "f16", "bf16"):
            assert point.unsupported_reason(replace(half, dtype=dtype), GPU) is None


@pytest.mark.parametrize(
    ("grid", "fragment"),
    [
        ({"bk": 8}, "bk=8: tile sides must be powers of two >= 16"),
        ({"bk": 48}, "bk=48"),
        ({"bm": 96}, "bm=96"),
        ({"bn": 0}, "bn=0"),
        ({"w": 3}, "w=3: num_warps"),
        ({"w": 64}, "w=64: num_warps"),
        ({"s": 0}, "s=0: num_stages"),
        ({"bm": 2048, "bn": 1024, "bk": 16}, "exceeds Triton's block limit"),
    ],
)
def test_bad_grid_values_are_refused(grid: dict[str, int], fragment: str) -> None:
    point = {"bm": 64, "bn": 64, "bk": 32, "w": 4, "s": 3, **grid}
    (v,) = GEMM.variants({name: (value,) for name, value in point.items()})
    reason = v.unsupported_reason(spec_for(64, 300, 200, 1, "f16", "plain"), GPU)
    assert reason is not None and fragment in reason


def test_family_shape() -> None:
    assert FAMILIES == (GEMM,)
    assert GEMM.name == "triton.gemm"
    assert GEMM.ops == {"matmul", "matmul_bias_add", "matmul_alpha_beta"}
    assert GEMM.devices == {"cuda", "cpu"}
    assert GEMM.dtypes == {"f32", "f16", "bf16"}
    assert GEMM.interpreted_on_cpu and not GEMM.baseline and not GEMM.peer
    assert [v.id for v in GEMM.variants()] == [
        "triton.gemm/bm64_bn64_bk64_w4_s3",
        "triton.gemm/bm64_bn128_bk64_w4_s3",
        "triton.gemm/bm128_bn64_bk64_w4_s3",
        "triton.gemm/bm128_bn128_bk64_w4_s3",
    ]


def test_fingerprint_follows_params_and_kernel_source() -> None:
    assert len({v.fingerprint for v in GEMM.variants()}) == 4
    (a,) = GEMM.variants({"bm": (64,), "bn": (64,)})
    (b,) = GEMM.variants({"bm": (64,), "bn": (64,), "w": (8,)})
    (c,) = GEMM.variants({"bm": (64,), "bn": (64,), "s": (4,)})
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    assert a.id != b.id != c.id
    kernel_file = Path(triton_gemm.__file__).with_name("_triton_gemm_kernels.py")
    assert kernel_file.read_text(encoding="utf-8") == triton_gemm.KERNELS_SOURCE
    assert "def gemm_kernel" in triton_gemm.KERNELS_SOURCE

    def rebuild(source: str) -> str:
        fam = variant_family(
            name=GEMM.name, ops=GEMM.ops, supports=GEMM.supports, grid=GEMM.grid,
            sources=(source,),
        )(GEMM.build)  # fmt: skip
        return fam.variants()[0].fingerprint

    source = triton_gemm.KERNELS_SOURCE
    assert rebuild(source) != rebuild(source.replace("acc * alpha", "alpha * acc"))
