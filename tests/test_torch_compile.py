"""torch.compile (Inductor) as a peer family. Inductor cannot run here (CUDA only),
so these tests check the family's flags and reasons, and — with ``torch.compile``
replaced by the identity — that the function handed to Inductor computes the op
(every epilogue and layout) to the harness's tolerance on the CPU."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from conftest import python_c
from matprobe.kernels.peers import torch_compile
from matprobe.kernels.peers.torch_compile import CPU_REASON, FAMILIES, TORCH_COMPILE
from matprobe.measure.device import DeviceInfo
from matprobe.measure.variants import variant_family
from triton_checks import EPILOGUES, spec_for

CPU = DeviceInfo(kind="cpu", name="test")
GPU = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0))

LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]  # (tA, tB)


# ---- no torch needed -----------------------------------------------------------


def test_family_flags() -> None:
    assert FAMILIES == (TORCH_COMPILE,)
    fam = TORCH_COMPILE
    assert fam.name == "torch.compile"
    assert fam.peer and not fam.baseline and not fam.interpreted_on_cpu
    assert fam.devices == {"cuda"}
    assert fam.ops == {"matmul", "matmul_bias_add", "matmul_alpha_beta", "matmul_swiglu"}
    assert fam.prologues == {"rmsnorm"}
    assert fam.dtypes == {"f32", "f16", "bf16"}
    assert fam.requires == ("torch",)
    assert [v.id for v in fam.variants()] == ["torch.compile/default"]
    assert "Inductor" in fam.description


def test_supports_reasons() -> None:
    ok = spec_for(896, 896, 1, "f16", "plain")
    assert TORCH_COMPILE.supports(ok, {}, GPU) is None
    assert TORCH_COMPILE.supports(ok, {}, CPU) == CPU_REASON
    assert "C++ compiler" in CPU_REASON
    (v,) = TORCH_COMPILE.variants()
    assert "zero dimension (n=0)" in (v.unsupported_reason(replace(ok, n=0), GPU) or "")
    assert v.unsupported_reason(ok, CPU) == "runs on cuda, not cpu"
    assert "q8_0" in (v.unsupported_reason(replace(ok, dtype="q8_0"), GPU) or "")
    for ta, tb in LAYOUTS:  # any layout, m = 1 (decode) and prefill alike
        for m in (1, 95):
            spec = replace(ok, m=m, tA=ta, tB=tb)
            assert TORCH_COMPILE.supports(spec, {}, GPU) is None


def test_fingerprint_follows_the_compiled_function() -> None:
    def rebuild(*sources: Any) -> str:
        fam = variant_family(name="torch.compile", ops=TORCH_COMPILE.ops, sources=sources)(
            TORCH_COMPILE.build
        )
        return fam.variants()[0].fingerprint

    assert rebuild(torch_compile.make_fn) != rebuild("def make_fn(): pass")


def test_module_imports_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from matprobe.measure.device import DeviceInfo\n"
        "from matprobe.spec import MatmulSpec\n"
        "from matprobe.kernels.peers.torch_compile import FAMILIES\n"
        "loaded = {k for k, v in sys.modules.items() if v is not None}\n"
        "assert 'torch' not in loaded and 'triton' not in loaded, loaded\n"
        "v = FAMILIES[0].variants()[0]\n"
        "s = MatmulSpec(op='matmul', m=1, n=5, k=7, tB=True, dtype='f16')\n"
        "print(v.unsupported_reason(s, DeviceInfo(kind='cuda', name='x')))\n"
        "print(v.unsupported_reason(s, DeviceInfo(kind='cpu', name='x')))\n"
    )
    assert python_c(code, timeout=60).split("\n")[:2] == [
        "needs torch, which is not installed",
        "runs on cuda, not cpu",
    ]


# ---- the function Inductor compiles, run eagerly on the CPU ------------------------


@pytest.fixture
def identity_compile(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """``torch.compile`` replaced by the identity; records what it was given."""
    torch = pytest.importorskip("torch")
    calls: list[tuple[Any, dict[str, Any]]] = []

    def fake_compile(fn: Any, **kwargs: Any) -> Any:
        calls.append((fn, kwargs))
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    return calls


CASES = [
    (dtype, layout, epilogue)
    for dtype in ("f32", "f16", "bf16")
    for layout, epilogue in itertools.product(LAYOUTS, EPILOGUES)
]
CASE_IDS = [f"{d}-tA{int(ta)}tB{int(tb)}-{e}" for d, (ta, tb), e in CASES]


@pytest.mark.parametrize(("dtype", "layout", "epilogue"), CASES, ids=CASE_IDS)
def test_compiled_function_matches_reference(
    identity_compile: list[tuple[Any, dict[str, Any]]],
    dtype: str,
    layout: tuple[bool, bool],
    epilogue: str,
) -> None:
    torch = pytest.importorskip("torch")
    from matprobe.measure.inputs import make_inputs
    from matprobe.measure.outputs import empty_output
    from matprobe.measure.references import reference, reference_scale
    from matprobe.measure.validate import compare, spec_tolerance

    ta, tb = layout
    for m, n, k, batch in ((1, 37, 64, 3), (33, 17, 70, 1)):
        spec = spec_for(n, k, batch, dtype, epilogue, m=m, ta=ta, tb=tb)
        assert TORCH_COMPILE.variants()[0].unsupported_reason(spec, GPU) is None
        run = TORCH_COMPILE.build(spec, {}, GPU)  # builds nothing on the device
        inputs = make_inputs(spec, seed=11)
        out = empty_output(spec, "cpu")
        out.fill_(float("nan"))
        run(inputs, out)
        result = compare(out, reference(inputs), reference_scale(inputs), k)
        failure = result.failure(*spec_tolerance(spec))
        assert failure is None, f"{spec}: {failure}"
        assert out.dtype == getattr(torch, {"f32": "float32", "f16": "float16",
                                            "bf16": "bfloat16"}[dtype])  # fmt: skip
    assert [kw for _, kw in identity_compile] == [
        {"mode": "max-autotune-no-cudagraphs", "dynamic": False}
    ] * 2


def test_each_build_compiles_its_own_code_object(
    identity_compile: list[tuple[Any, dict[str, Any]]],
) -> None:
    # Dynamo caches per code object: one per build keeps every build under the
    # recompile limit instead of sharing (and exhausting) one cache.
    spec = spec_for(37, 64, 3, "f32", "plain")
    TORCH_COMPILE.build(spec, {}, GPU)
    TORCH_COMPILE.build(replace(spec, n=38), {}, GPU)
    (first, _), (second, _) = identity_compile
    assert first.__code__ is not second.__code__
    assert first.__code__.co_name != second.__code__.co_name
    assert first.__code__.co_code == second.__code__.co_code


def test_run_rejects_inputs_that_do_not_match_the_spec(
    identity_compile: list[tuple[Any, dict[str, Any]]],
) -> None:
    pytest.importorskip("torch")
    from matprobe.measure.inputs import make_inputs
    from matprobe.measure.outputs import empty_output

    spec = spec_for(5, 7, 1, "f32", "bias", m=4, ta=False, tb=True)
    run = TORCH_COMPILE.build(spec, {}, GPU)
    inputs = make_inputs(spec, seed=0)
    out = empty_output(spec, "cpu")
    with pytest.raises(ValueError, match="compiled for tA=0 tB=1"):
        run(replace(inputs, tb=False), out)
    with pytest.raises(ValueError, match="bias missing"):
        run(replace(inputs, bias=None), out)
    with pytest.raises(ValueError, match="C0 given but beta=0"):
        run(replace(inputs, c0=out.clone()), out)
