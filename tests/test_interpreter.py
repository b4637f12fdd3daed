"""Triton's interpreter patched once a launch (``kernels/triton/_interpreter.py``):
half the interpreter's time in matprobe's kernels went to patching
``triton.language`` again at every call of a shared block. Skipping that must
change nothing a kernel computes, and must leave the language as triton does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conftest import interpreting
from matprobe.spec import MatmulSpec

torch = pytest.importorskip("torch", reason="the kernels run on torch's CPU tensors")
pytest.importorskip("triton", reason="the patch is to triton's interpreter")
pytestmark = [
    pytest.mark.interpreter,
    pytest.mark.skipif(not interpreting(), reason="patches the interpreter only"),
]

from triton.runtime import interpreter  # noqa: E402

from matprobe.kernels.triton import _interpreter, gemv_q8, gemv_swiglu  # noqa: E402
from triton_checks import CPU  # noqa: E402

#: Two families whose kernels call shared blocks, tl.sum and tl.zeros; awkward n.
CASES = [
    (gemv_q8.GEMV_Q8, MatmulSpec(op="matmul_bias_add", batch=1, m=1, n=37, k=96, tA=False,
                                 tB=True, dtype="q8_0")),
    (gemv_swiglu.GEMV_SWIGLU, MatmulSpec(op="matmul_swiglu", batch=1, m=1, n=2 * 19, k=64,
                                         tA=False, tB=True, dtype="bf16", n0=19, n1=19)),
]  # fmt: skip


def _run(patch_lang: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every case's output with ``patch_lang`` as the interpreter's, and how often
    triton's own patching ran."""
    from matprobe.measure.inputs import make_inputs
    from matprobe.measure.outputs import empty_output

    monkeypatch.setattr(interpreter, "_patch_lang", patch_lang)
    outs = []
    for family, spec in CASES:
        variant = next(v for v in family.variants() if v.unsupported_reason(spec, CPU) is None)
        out = empty_output(spec, "cpu")
        variant.build(spec, CPU)(make_inputs(spec, seed=7), out)
        outs.append(out)
    return outs


def test_a_kernel_computes_the_same_with_the_language_patched_once_a_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from matprobe.kernels.triton import _blocks  # noqa: F401 - what every kernel module imports

    assert _interpreter.ORIGINAL, "importing the shared blocks installs the patch"
    original = _interpreter.ORIGINAL[0]
    calls: list[Any] = []

    def counted(fn: Any) -> Any:
        calls.append(fn)
        return original(fn)

    import triton.language as tl

    members = dict(vars(tl))
    every = _run(counted, monkeypatch)
    every_calls = len(calls)
    calls.clear()
    once = _run(_interpreter.once(counted, (tl, tl.core)), monkeypatch)
    assert dict(vars(tl)) == members, "a launch leaves triton.language as it found it"
    for a, b in zip(every, once, strict=True):
        assert torch.equal(a, b)
    # A launch patches once, and once more for tl.core (tl.sum's module).
    assert 0 < len(calls) <= 2 * len(CASES) < every_calls
