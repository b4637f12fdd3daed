"""What every shipped Triton family must do, checked once for all of them:
import without triton or torch, fingerprint its kernel file, give each grid
point its own fingerprint."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from matprobe.harness.variants import variant_family

MODULES = ["triton_gemv", "triton_gemv_stream", "triton_splitk", "triton_gemv_tn",
           "triton_attention", "triton_gemm"]


def test_family_modules_import_without_triton_or_torch() -> None:
    """Listing and planning must work on a machine without the GPU stack: a
    missing triton is an unsupported reason, not an ImportError."""
    code = "\n".join([
        "import sys; sys.modules['triton'] = None",
        "from matprobe.harness.device import DeviceInfo",
        "from matprobe.spec import MatmulSpec",
        *(f"from matprobe.variants.{m} import FAMILIES as F_{m}" for m in MODULES),
        "assert not {'triton', 'torch'} & {k for k, v in sys.modules.items() if v is not None}",
        "s = MatmulSpec(op='matmul', m=1, n=5, k=2048, tB=True, dtype='f32')",
        *(f"print(F_{m}[0].variants()[0].unsupported_reason(s, DeviceInfo(kind='cpu', "
          "name='x')))" for m in MODULES),
    ])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    reasons = proc.stdout.strip().splitlines()
    assert len(reasons) == len(MODULES)
    # Every family checks requirements before its own predicate (triton.gemm
    # then refuses m=1 for its own reason only when triton is there).
    assert set(reasons) == {"needs triton, which is not installed"}


@pytest.mark.parametrize("name", MODULES)
def test_fingerprint_follows_kernel_file_and_params(name: str) -> None:
    module = importlib.import_module(f"matprobe.variants.{name}")
    (family, *_) = module.FAMILIES
    kernels = Path(module.__file__).with_name(f"_{name}_kernels.py")
    assert kernels.read_text(encoding="utf-8") == module.KERNELS_SOURCE
    variants = family.variants()
    assert len({v.fingerprint for v in variants}) == len(variants)

    def rebuild(source: str) -> str:
        edited = variant_family(name=family.name, ops=family.ops, supports=family.supports,
                                grid=family.grid, sources=(source,))(family.build)
        return edited.variants()[0].fingerprint

    source = module.KERNELS_SOURCE
    assert rebuild(source) != rebuild(source + "\n# edited\n")


@pytest.mark.parametrize("name", MODULES)
def test_shared_epilogue_is_in_the_fingerprint_of_its_users(name: str) -> None:
    """A kernel module that calls the shared epilogue must fingerprint its text too,
    or editing the epilogue would leave stale cached results."""
    module = importlib.import_module(f"matprobe.variants.{name}")
    if "_triton_epilogue" not in module.KERNELS_SOURCE:
        pytest.skip(f"{name} has its own epilogue")
    assert "common.EPILOGUE_SOURCE" in Path(module.__file__).read_text(encoding="utf-8")
