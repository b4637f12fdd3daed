"""What the Triton families' own interpreter tests share: their specs, and the one
correctness bar — the harness's own (``validate.compare`` within
``validate.tolerance``), on an output poisoned with NaN so that an element no
program writes fails. The contract every family meets is tests/test_conformance.py;
these serve the tests of each family's own kernel paths (test_torch_compile.py takes
its specs from here too)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs, make_inputs
from matprobe.measure.outputs import empty_output
from matprobe.measure.references import reference, reference_scale
from matprobe.measure.validate import compare, spec_tolerance
from matprobe.measure.variants import Variant, VariantFamily
from matprobe.spec import MatmulSpec

CPU = DeviceInfo(kind="cpu", name="test")
GPU = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0), sm_count=132)

#: Epilogues: (op, alpha, beta, bias flag).
EPILOGUES: dict[str, tuple[str, float | None, float | None, bool | None]] = {
    "plain": ("matmul", None, None, None),
    "bias": ("matmul_bias_add", None, None, None),
    "alpha_beta": ("matmul_alpha_beta", 0.125, 0.5, None),
    "alpha_beta_bias": ("matmul_alpha_beta", 0.125, 0.5, True),
}


def spec_for(
    n: int, k: int, batch: int, dtype: str, epilogue: str,
    *, m: int = 1, ta: bool = False, tb: bool = True,
) -> MatmulSpec:  # fmt: skip
    op, alpha, beta, bias = EPILOGUES[epilogue]
    return MatmulSpec(
        op=op, batch=batch, m=m, n=n, k=k, tA=ta, tB=tb,
        alpha=alpha, beta=beta, bias=bias, dtype=dtype,
    )  # fmt: skip


def assert_matches_reference(out: Any, inputs: MatmulInputs, spec: MatmulSpec, what: str) -> None:
    """Norm-wise and per-element error within the harness's tolerance for this dtype and k."""
    k = spec.k or 1
    result = compare(out, reference(inputs), reference_scale(inputs), k)
    failure = result.failure(*spec_tolerance(spec, interpreted=True))
    assert failure is None, f"{what} {spec.key()}: {failure}"


def check_on_cpu(
    v: Variant,
    spec: MatmulSpec,
    inputs: MatmulInputs | None = None,
    out: Any = None,
    *,
    kernel: Any = None,
    seed: int = 1234,
    runs: int = 1,
) -> Any:
    """Build ``v`` for the CPU (the interpreter) unless ``kernel`` is given, run it
    ``runs`` times on the same inputs, judge every run; returns the kernel."""
    assert v.unsupported_reason(spec, CPU) is None
    inputs = make_inputs(spec, seed=seed) if inputs is None else inputs
    out = empty_output(spec, "cpu") if out is None else out
    kernel = v.build(spec, CPU) if kernel is None else kernel
    for _ in range(runs):  # a rerun sees whatever state (counters) the last one left
        out.fill_(float("nan"))
        kernel(inputs, out)
        assert_matches_reference(out, inputs, spec, v.id)
    return kernel


def spread(tensor: Any, fill: float = 0.0) -> tuple[Any, Any]:
    """``tensor``'s values in a view of a larger tensor (``fill`` elsewhere): one
    element in, every other element along each dimension longer than one, so no
    stride of the view is a contiguous one. Returns (view, the whole tensor)."""
    import torch

    steps = [2 if size > 1 else 1 for size in tensor.shape]
    whole = torch.full([size * step + 1 for size, step in zip(tensor.shape, steps, strict=True)],
                       fill, dtype=tensor.dtype)  # fmt: skip
    view = whole[tuple(slice(1, 1 + size * step, step)
                       for size, step in zip(tensor.shape, steps, strict=True))]  # fmt: skip
    view.copy_(tensor)
    return view, whole


def check_strided(v: Variant, spec: MatmulSpec, *, seed: int = 3, b: Any = None) -> Any:
    """Every operand and the output as spread-out views (:func:`spread`) of the seeded
    inputs — B as given in ``b`` when it is (a view of a KV cache, say): the kernel
    follows the strides it is given and writes nothing between the output's
    elements. Returns the kernel."""
    import torch

    base = make_inputs(spec, seed=seed)
    a, bias, c0 = (None if t is None else spread(t)[0] for t in (base.a, base.bias, base.c0))
    strided = replace(base, a=a, b=spread(base.b)[0] if b is None else b, bias=bias, c0=c0)
    out, whole = spread(empty_output(spec, "cpu"), fill=7.0)
    kernel = check_on_cpu(v, spec, strided, out)
    out.fill_(7.0)
    assert torch.all(whole == 7.0), "wrote outside the output view"
    return kernel


def check_reruns(v: Variant, spec: MatmulSpec, after: Any = None) -> Any:
    """One build called on the inputs of seeds 1, 2, 1 — as replays of a captured graph
    call it — each call judged, ``after(kernel)`` checked after each (a workspace or
    counters left as the next call needs them); the first and last outputs agree to
    the bit. Returns the kernel."""
    import torch

    kernel = v.build(spec, CPU)
    outs = [empty_output(spec, "cpu") for _ in range(3)]
    for seed, out in zip((1, 2, 1), outs, strict=True):
        check_on_cpu(v, spec, out=out, kernel=kernel, seed=seed)
        if after is not None:
            after(kernel)
    assert torch.equal(outs[0], outs[2]) and not torch.equal(outs[0], outs[1])
    return kernel


def assert_reason(reason: str | None, fragment: str | None) -> None:
    """Supported (None) when no ``fragment`` is expected, else a reason that holds it."""
    if fragment is None:
        assert reason is None, reason
    else:
        assert reason is not None and fragment in reason, reason


def assert_point_refused(
    family: VariantFamily, point: dict[str, Any], spec: MatmulSpec, fragment: str
) -> None:
    """The grid point ``point`` (a value per parameter) is refused for ``spec`` on a GPU,
    for a reason that holds ``fragment``."""
    (v,) = family.variants({name: (value,) for name, value in point.items()})
    assert_reason(v.unsupported_reason(spec, GPU), fragment)
