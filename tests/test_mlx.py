"""The user's own backends: the MLX peer family on MLX's CPU backend, and the MPS
device kind (refused here: no Apple GPU; its recorder is tested in test_mps.py).

What MLX's CPU backend does in f16/bf16 (mlx 0.32.4): fp32 accumulation and one
rounding on every path, α and β·C₀ applied in fp32 by ``addmm`` — so the family
meets the one-rounding tolerances, and :func:`test_half_precision_rounds_once`
holds it to about u per element.
"""

from __future__ import annotations

import importlib.util
import io
import math
from typing import Any

import pytest

from conftest import CPU, python_c
from matprobe.errors import MatprobeError
from matprobe.kernels.peers import mlx_ref, torch_ref
from matprobe.measure import device as device_mod
from matprobe.measure.device import DeviceInfo
from matprobe.measure.validate import FP32_ROUNDOFF, UNIT_ROUNDOFF
from matprobe.measure.variants import Variant
from matprobe.spec import MatmulSpec


def _mlx_loads() -> bool:
    if importlib.util.find_spec("mlx") is None:
        return False
    try:
        import mlx.core  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


needs_mlx = pytest.mark.skipif(
    not _mlx_loads(), reason="mlx is not installed or does not load (pip install 'matprobe[mlx]')"
)
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="the harness needs torch (CPU build is enough)",
)

MLX = Variant(mlx_ref.mlx_matmul)
TORCH = Variant(torch_ref.torch_matmul)

#: Awkward shapes, each through one of MLX's CPU paths for half precision: the
#: small-matrix SIMD GEMM (m·n·k < 65536), the fused GEMV (m = 1, n·k ≥ 65536,
#: both B layouts), the f32 BLAS GEMM on converted copies (larger, or batch > 1).
SHAPES = [
    "op=matmul | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=1",
    "op=matmul | batch=1 | m=5 | n=53 | k=40 | tA=1 | tB=0",
    "op=matmul | batch=1 | m=3 | n=1 | k=40 | tA=1 | tB=1",
    "op=matmul | batch=1 | m=1 | n=300 | k=256 | tA=0 | tB=1",
    "op=matmul | batch=1 | m=1 | n=300 | k=256 | tA=0 | tB=0",
    "op=matmul | batch=1 | m=24 | n=53 | k=64 | tA=1 | tB=1",
    "op=matmul_bias_add | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=0",
    "op=matmul_bias_add | batch=1 | m=4 | n=1 | k=40 | tA=1 | tB=1",
    "op=matmul_bias_add | batch=1 | m=1 | n=300 | k=256 | tA=0 | tB=1",
    "op=matmul_alpha_beta | batch=3 | m=2 | n=53 | k=40 | tA=0 | tB=1 | alpha=0.125 | beta=0.5",
    "op=matmul_alpha_beta | batch=3 | m=2 | n=53 | k=40 | tA=1 | tB=0 | alpha=0.3 | beta=0.5 "
    "| bias=1",
    "op=matmul_alpha_beta | batch=1 | m=1 | n=300 | k=256 | tA=0 | tB=0 | alpha=0.3",
    "op=matmul_alpha_beta | batch=2 | m=1 | n=53 | k=40 | tA=0 | tB=1 | alpha=0.3",
]
DTYPES = ["f32", "f16", "bf16"]


def spec(key: str, dtype: str) -> MatmulSpec:
    return MatmulSpec.parse(key).with_dtype(dtype)


def measure(s: MatmulSpec, baseline: Variant | None = None) -> Any:
    from matprobe.measure.pair import PairContext, measure_pair_safely
    from matprobe.measure.timing import TimingPolicy

    fast = TimingPolicy(min_samples=3, max_samples=6, budget_s=0.02, host_samples=3)
    return measure_pair_safely(s, MLX, PairContext(CPU, fast), baseline)


# ---- the family through the harness ------------------------------------------------------


@needs_mlx
@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("key", SHAPES)
def test_mlx_family_passes_on_the_cpu(key: str, dtype: str) -> None:
    from matprobe.measure.results import Status

    s = spec(key, dtype)
    assert MLX.unsupported_reason(s, CPU) is None
    result = measure(s)
    assert result.status is Status.PASS, result.reason
    assert result.metrics.nonfinite == 0
    assert result.metrics.norm_rel <= result.metrics.tol_norm
    assert result.metrics.max_rel <= result.metrics.tol_rel
    assert result.clocks.device is not None and result.clocks.device.n >= 3


@needs_mlx
@needs_torch
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("key", [k for k in SHAPES if "bias=1" not in k])
def test_half_precision_rounds_once(key: str, dtype: str) -> None:
    """fp32 accumulation and a single rounding (α, β·C₀ and the bias included, all
    inside addmm): about u per element, not the 2u the tolerance allows. A running
    sum kept in half precision, or α applied after the product was rounded
    (``mx.matmul(a, b) * alpha``: up to 2.3 u in bf16), would not hold this."""
    from matprobe.measure.pair import validate_pair

    s = spec(key, dtype)
    checked = validate_pair(s, MLX.build(s, CPU), CPU, 3)
    assert checked.passed, checked.failure
    u = UNIT_ROUNDOFF[dtype]
    slack = 8 * math.sqrt(s.k or 1) * FP32_ROUNDOFF + 0.02 * u
    assert checked.metrics.max_rel <= u + slack


@needs_mlx
@needs_torch
def test_mlx_is_interleaved_with_the_torch_baseline_and_never_crowned() -> None:
    from matprobe.measure.results import Status

    result = measure(spec(SHAPES[0], "f16"), TORCH)
    assert result.status is Status.PASS, result.reason
    assert result.clocks.vs_baseline is not None
    assert result.clocks.vs_baseline.baseline_id == TORCH.id
    assert mlx_ref.mlx_matmul.peer and not mlx_ref.mlx_matmul.baseline


@needs_mlx
@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
def test_conversions_keep_every_bit(dtype: str) -> None:
    """torch → MLX → torch is the identity, bf16 included (it travels as its bits)."""
    import torch

    from matprobe.measure.inputs import torch_dtype

    values = torch.tensor([1.0, -0.0, 1e-3, 3.140625, -65504.0, 2.0**-20, 0.1], dtype=torch.float64)
    original = values.to(torch_dtype(dtype)).reshape(1, 7)
    strided = original.repeat(3, 1).t()  # a transposed, non-contiguous view
    for tensor in (original, strided):
        back = mlx_ref.to_torch(mlx_ref.to_mlx(tensor))
        assert back.dtype == tensor.dtype and back.shape == tensor.shape
        assert torch.equal(
            back.view(torch.int16 if dtype != "f32" else torch.int32),
            tensor.contiguous().view(torch.int16 if dtype != "f32" else torch.int32),
        )


# ---- capability ----------------------------------------------------------------------------


def test_family_declaration() -> None:
    family = mlx_ref.mlx_matmul
    assert family.name == "mlx.matmul"
    assert family.ops == {"matmul", "matmul_bias_add", "matmul_alpha_beta"}
    assert family.dtypes == {"f32", "f16", "bf16"}
    assert family.devices == {"cpu"}
    assert "mlx" in family.requires
    assert (family,) == mlx_ref.FAMILIES


def test_mlx_runs_on_the_cpu_only() -> None:
    mps = DeviceInfo(kind="mps", name="Apple M9 (MPS)")
    reason = MLX.unsupported_reason(spec(SHAPES[0], "f16"), mps)
    assert reason == "runs on cpu, not mps"


def _reason_without(*modules: str) -> str:
    """The family's reason for an f16 spec on the CPU, in a process where ``modules``
    cannot be imported."""
    hidden = "".join(f"sys.modules[{name!r}] = None\n" for name in modules)
    code = (
        "import sys\n"
        f"{hidden}"
        "from matprobe.measure.device import DeviceInfo\n"
        "from matprobe.measure.variants import Variant\n"
        "from matprobe.spec import MatmulSpec\n"
        "from matprobe.kernels.peers import mlx_ref\n"
        "s = MatmulSpec.parse('op=matmul | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=1')\n"
        "v = Variant(mlx_ref.FAMILIES[0])\n"
        "print(v.unsupported_reason(s.with_dtype('f16'), DeviceInfo(kind='cpu', name='x')))\n"
    )
    return python_c(code).strip()


def test_module_imports_without_mlx() -> None:
    """Like the Triton families without triton: a missing mlx is a capability reason."""
    assert _reason_without("mlx", "mlx.core") == "needs mlx, which is not installed"


@pytest.mark.skipif(importlib.util.find_spec("mlx") is None, reason="mlx is not installed")
def test_mlx_without_a_backend_is_a_capability_reason() -> None:
    """On Linux the mlx package alone does not load (its backend is mlx-cpu): the
    family says so and how to fix it, instead of failing when it is built."""
    reason = _reason_without("mlx.core")
    assert reason.startswith("mlx is installed but mlx.core does not load"), reason
    assert "pip install 'matprobe[mlx]'" in reason


# ---- MPS -------------------------------------------------------------------------------


@pytest.mark.skipif(device_mod.mps_available(), reason="this machine has an MPS device")
def test_detect_mps_is_a_clear_error_here() -> None:
    with pytest.raises(MatprobeError) as caught:
        device_mod.detect("mps")
    message = str(caught.value)
    assert message == "no MPS device: needs Apple silicon with PyTorch's MPS backend"
    assert "\n" not in message


def test_detect_mps_hands_the_device_to_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where MPS exists, ``--device mps`` measures on it (the harness has an MPS
    recorder; see tests/test_mps.py), rotating inputs past the assumed cache."""
    info = DeviceInfo(kind="mps", name="Apple M9 (MPS)", l2_bytes=device_mod.MPS_CACHE_BYTES)
    monkeypatch.setattr(device_mod, "mps_info", lambda: info)
    assert device_mod.MPS_MEASURABLE
    assert device_mod.detect("mps") is info


def test_torch_baseline_supports_mps() -> None:
    assert torch_ref.torch_matmul.devices == {"cuda", "cpu", "mps"}
    mps = DeviceInfo(kind="mps", name="Apple M9 (MPS)")
    assert TORCH.unsupported_reason(spec(SHAPES[0], "f16"), mps) in (
        None,
        "needs torch, which is not installed",
    )


def test_unknown_device_names_mps() -> None:
    with pytest.raises(MatprobeError, match="use cuda, cpu or mps"):
        device_mod.detect("metal")


@pytest.mark.skipif(device_mod.mps_available(), reason="this machine has an MPS device")
def test_cli_device_mps_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from matprobe.cli import main

    code = main(
        [
            "variants",
            "--device",
            "mps",
            "--spec",
            "op=matmul | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=1",
        ],
        out=io.StringIO(),
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "no MPS device: needs Apple silicon" in err and "Traceback" not in err
