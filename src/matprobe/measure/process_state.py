"""Settings of a process that steer the baseline without replacing any function.

A plugin need not patch ``torch.matmul`` to slow the baseline it is ranked
against: ``torch.set_num_threads(1)`` at import halves a CPU baseline on two
cores; ``CUBLAS_WORKSPACE_CONFIG=:0:0`` set before the worker's first matmul
leaves cuBLAS no workspace for its split-K kernels; turning off
``allow_fp16_reduced_precision_reduction`` or choosing another BLAS library
sends the baseline's half-precision GEMMs to other kernels; pinning the process
to one core starves a threaded library. None of these rebinds a name, so the
binding snapshot (:mod:`matprobe.measure.tamper`) cannot see them; their
values can be read. :func:`process_state` reads every one the measuring code
depends on, as text, and the snapshot counts any that differs from what it was
before the plugin was imported as tampering.

What is read: torch's thread counts, deterministic-algorithm switches, float32
matmul precision, default dtype, the ``torch.backends`` flags that choose or
steer matmul and convolution kernels, the preferred BLAS and linear-algebra
libraries, the CPU affinity, and every environment variable that a CUDA, BLAS,
OpenMP or torch library reads (by prefix, :data:`ENV_PREFIXES`).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

#: Environment variables read by the libraries that run the baseline and the
#: judge: CUDA and its math libraries, the CPU BLAS and OpenMP runtimes, torch
#: (``TORCH_BLAS_PREFER_CUBLASLT``, ``PYTORCH_TUNABLEOP_ENABLED``), the dynamic
#: loader and the allocator. Not Triton's nor the compiler's (``TRITON_``,
#: ``TORCHINDUCTOR_``): they steer a family's own kernels, and torch sets them
#: itself when it first compiles (its cache folders).
ENV_PREFIXES = (
    "CUBLAS",
    "CUDA_",
    "CUDNN",
    "NVIDIA_",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO",
    "BLIS_",
    "PYTORCH_",
    "TORCH_",
    "LD_",
    "MALLOC_",
)


def _torch_settings(torch: Any) -> dict[str, Callable[[], object]]:
    """Each setting torch exposes that changes which kernel runs a matmul or how
    fast, by the expression a reader would type to see it."""
    backends = torch.backends
    matmul = backends.cuda.matmul
    settings: dict[str, Callable[[], object]] = {
        "torch.get_num_threads()": torch.get_num_threads,
        "torch.get_num_interop_threads()": torch.get_num_interop_threads,
        "torch.are_deterministic_algorithms_enabled()": (
            torch.are_deterministic_algorithms_enabled
        ),
        "torch.is_deterministic_algorithms_warn_only_enabled()": (
            torch.is_deterministic_algorithms_warn_only_enabled
        ),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
        "torch.get_default_dtype()": torch.get_default_dtype,
        "torch.backends.cuda.preferred_blas_library()": backends.cuda.preferred_blas_library,
        "torch.backends.cuda.preferred_linalg_library()": backends.cuda.preferred_linalg_library,
        "torch.backends.cudnn.enabled": lambda: backends.cudnn.enabled,
        "torch.backends.cudnn.benchmark": lambda: backends.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": lambda: backends.cudnn.deterministic,
        "torch.backends.cudnn.allow_tf32": lambda: backends.cudnn.allow_tf32,
        "torch.backends.mkldnn.enabled": lambda: backends.mkldnn.enabled,
    }
    for flag in (
        "allow_tf32",
        "allow_fp16_reduced_precision_reduction",
        "allow_bf16_reduced_precision_reduction",
        "allow_fp16_accumulation",
    ):
        if hasattr(type(matmul), flag) or hasattr(matmul, flag):
            settings[f"torch.backends.cuda.matmul.{flag}"] = functools.partial(
                getattr, matmul, flag
            )
    return settings


def _read(getter: Callable[[], object]) -> str:
    try:
        return repr(getter())
    except Exception as exc:  # a setting this build or machine does not have
        return f"<unreadable: {type(exc).__name__}>"


def process_state() -> dict[str, str]:
    """Every setting above, by name, as text (what a tamper report shows)."""
    state: dict[str, str] = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        state.update((name, _read(get)) for name, get in _torch_settings(torch).items())
    if hasattr(os, "sched_getaffinity"):
        state["os.sched_getaffinity(0)"] = _read(lambda: sorted(os.sched_getaffinity(0)))
    for name, value in os.environ.items():
        if name.startswith(ENV_PREFIXES):
            state[f"${name}"] = repr(value)
    return state


def state_changes(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between two readings, one line a setting, for a tamper report
    (``$CUBLAS_WORKSPACE_CONFIG set to ':0:0'``)."""
    changes = []
    for name in sorted(before.keys() | now.keys()):
        was, is_ = before.get(name), now.get(name)
        if was == is_:
            continue
        if is_ is None:
            changes.append(f"{name} removed (was {was})")
        elif was is None:
            changes.append(f"{name} set to {is_}")
        else:
            changes.append(f"{name} changed from {was} to {is_}")
    return changes
