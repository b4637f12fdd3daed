"""The harness on a real GPU: three clocks, graph replay checks, cheaters.

Run on a CUDA machine with ``pytest -m gpu tests/test_gpu.py`` (in a session of
its own: the Triton interpreter tests set TRITON_INTERPRET for their process).
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch", reason="needs torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU on this machine", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("TRITON_INTERPRET=1 in this process; run the GPU tests on their own",
                allow_module_level=True)

import fake_variants  # noqa: E402
from matprobe.harness.device import detect  # noqa: E402
from matprobe.harness.measure import PairContext, measure_pair_safely  # noqa: E402
from matprobe.harness.results import Status  # noqa: E402
from matprobe.harness.timing import TimingPolicy  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.variants.torch_ref import torch_matmul  # noqa: E402
from matprobe.variants.triton_gemv import GEMV_NT  # noqa: E402

pytestmark = pytest.mark.gpu
GPU = detect("cuda")
POLICY = TimingPolicy(kernel_clock=True, budget_s=0.05)
GEMV = MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1 | dtype=f16")


def measure(spec: MatmulSpec, family, **params):  # type: ignore[no-untyped-def]
    variant = family.variants()[0] if not params else next(
        v for v in family.variants() if v.param_dict == params)
    return measure_pair_safely(spec, variant, PairContext(GPU, POLICY))


def test_cublas_baseline_has_all_three_clocks() -> None:
    result = measure(GEMV, torch_matmul)
    assert result.status is Status.PASS, result.reason
    clocks = result.clocks
    assert clocks.device and clocks.hot and clocks.host and clocks.kernel
    assert clocks.device.calls_per_sample >= 20
    # Cold weights cost more than L2-resident ones; the host round trip includes a launch.
    assert clocks.hot.median_us <= clocks.device.median_us * 1.05
    assert clocks.host.median_us > clocks.device.median_us


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_triton_gemv_validates_on_the_gpu(dtype: str) -> None:
    result = measure(GEMV.with_dtype(dtype), GEMV_NT)
    assert result.status is Status.PASS, result.reason


@pytest.mark.parametrize("family", [*fake_variants.CHEATERS[:4], fake_variants.cheat_side_stream])
def test_cheaters_never_pass_on_the_gpu(family) -> None:  # type: ignore[no-untyped-def]
    spec = MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=4096 | k=256 | tA=0 | tB=1 | dtype=f16")
    result = measure(spec, family)
    assert result.status is not Status.PASS, family.name
    assert result.clocks.device is None or result.status is Status.FAIL
