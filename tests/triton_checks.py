"""The one correctness bar every Triton family's interpreter tests share: the
harness's own (``validate.compare`` within ``validate.tolerance``), on an
output poisoned with NaN so that an element no program writes fails."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from matprobe.harness.device import DeviceInfo
from matprobe.harness.inputs import (
    MatmulInputs,
    empty_output,
    make_inputs,
    reference,
    reference_scale,
)
from matprobe.harness.validate import compare, spec_tolerance
from matprobe.harness.variants import Variant
from matprobe.spec import MatmulSpec

CPU = DeviceInfo(kind="cpu", name="test")


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


def assert_rejects_bad_operands(run: Any, spec: MatmulSpec) -> None:
    """A row GEMV's ``run`` (W stored [batch, n, k]) built for an f16 bias-add spec
    with batch 1 names each wrong operand instead of launching on it."""
    import pytest
    import torch

    assert spec.dtype == "f16" and spec.has_bias and spec.batch == 1
    n, k = spec.n_total or 0, spec.k or 0
    inputs = make_inputs(spec, seed=0)
    good_out = empty_output(spec, "cpu")
    with pytest.raises(ValueError, match=r"out is torch.float32, expected torch.float16"):
        run(inputs, torch.empty(1, 1, n))
    with pytest.raises(ValueError, match=rf"out has shape \(1, 1, {n + 1}\)"):
        run(inputs, torch.empty(1, 1, n + 1, dtype=torch.float16))
    with pytest.raises(ValueError, match="bias is missing"):
        run(replace(inputs, bias=None), good_out)
    with pytest.raises(ValueError, match="carry C0"):
        run(replace(inputs, c0=torch.ones(1, 1, n, dtype=torch.float16)), good_out)
    with pytest.raises(ValueError, match=r"tb=True"):
        run(replace(inputs, tb=False), good_out)
    with pytest.raises(ValueError, match=rf"W has shape \(1, {n}, {k - 1}\)"):
        run(replace(inputs, b=inputs.b[:, :, : k - 1]), good_out)
