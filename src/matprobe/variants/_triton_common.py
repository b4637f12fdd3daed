"""What every Triton family's wrapper does the same way: parameter checks, the
interpreter/compiled mode check, operand checks that name the operand, and the
epilogue operands (C₀ and bias, or a never-read placeholder pointer).

Importing this module imports neither triton nor torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

from matprobe.errors import MatprobeError

if TYPE_CHECKING:
    import torch

    from matprobe.harness.device import DeviceInfo
    from matprobe.harness.inputs import MatmulInputs

#: Beyond this many weight elements (batch·n·k) the interpreter takes minutes.
INTERPRETER_MAX_ELEMENTS = 2**22

#: Triton's cap on the elements of one block (``TRITON_MAX_TENSOR_NUMEL``).
MAX_TILE_ELEMENTS = 2**20


def is_pow2(value: object) -> TypeGuard[int]:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value > 0
        and value & (value - 1) == 0
    )


def interpreter_too_large(device: DeviceInfo, batch: int, n: int, k: int) -> str | None:
    if device.kind == "cpu" and batch * n * k > INTERPRETER_MAX_ELEMENTS:
        return (
            f"too large for the Triton interpreter (CPU): batch·n·k = {batch * n * k} "
            f"> {INTERPRETER_MAX_ELEMENTS}"
        )
    return None


def check_mode(name: str, kernel: Any, device: DeviceInfo) -> None:
    """The kernel must be interpreted on the CPU and compiled on a GPU."""
    interpreted = type(kernel).__name__ == "InterpretedFunction"
    if device.kind == "cpu" and not interpreted:
        raise MatprobeError(
            f"{name} on the CPU runs in the Triton interpreter: set TRITON_INTERPRET=1 "
            "before triton kernels are first imported in this process"
        )
    if device.kind != "cpu" and interpreted:
        raise MatprobeError(
            f"{name}: TRITON_INTERPRET=1 is set, so the kernel would run in the "
            f"interpreter, not on the {device.kind} device; unset it"
        )


def check_tensor(
    name: str, tensor: Any, what: str, shape: tuple[int, ...], dtype: Any, where: Any
) -> None:
    """Shape, dtype and device of one operand, with a message that names it."""
    if tensor is None:
        raise ValueError(f"{name}: {what} is missing")
    if tuple(tensor.shape) != shape:
        raise ValueError(f"{name}: {what} has shape {tuple(tensor.shape)}, expected {shape}")
    if tensor.dtype != dtype:
        raise ValueError(f"{name}: {what} is {tensor.dtype}, expected {dtype}")
    if tensor.device != where:
        raise ValueError(f"{name}: {what} lives on {tensor.device}, expected {where}")


def target(device: DeviceInfo) -> torch.device:
    import torch

    if device.kind == "cuda":
        return torch.device("cuda", device.index)
    return torch.device(device.kind)


def epilogue_operands(
    name: str,
    inputs: MatmulInputs,
    out: Any,
    *,
    has_c0: bool,
    has_bias: bool,
    c0_shape: tuple[int, ...],
    n: int,
    dtype: Any,
    where: Any,
) -> tuple[Any, Any]:
    """(C₀, bias) checked against the spec, each replaced by ``out`` — a valid
    pointer the kernel never reads — when the spec does not use it."""
    c0: Any = inputs.c0
    if has_c0:
        check_tensor(name, c0, "C0", c0_shape, dtype, where)
    elif c0 is not None:
        raise ValueError(f"{name}: inputs carry C0 but the spec does not read it (beta=0)")
    else:
        c0 = out
    bias: Any = inputs.bias
    if has_bias:
        check_tensor(name, bias, "bias", (n,), dtype, where)
    elif bias is not None:
        raise ValueError(f"{name}: inputs carry a bias but the spec has none")
    else:
        bias = out
    return c0, bias


def check_current_device(name: str, where: Any) -> None:
    import torch

    if where.type == "cuda" and torch.cuda.current_device() != where.index:
        raise ValueError(
            f"{name}: current CUDA device is {torch.cuda.current_device()}, tensors are "
            f"on {where}; Triton launches on the current device's current stream"
        )


def row_gemv_operands(
    name: str,
    inputs: MatmulInputs,
    out: Any,
    *,
    batch: int,
    n: int,
    k: int,
    dtype: Any,
    where: Any,
    has_c0: bool,
    has_bias: bool,
) -> tuple[Any, Any, Any, Any]:
    """(x, W, C₀, bias) of a GEMV with W stored ``[batch, n, k]`` (tB = 1), each
    checked against the built spec, on the current device: what every row-GEMV
    family's ``run`` checks before it launches."""
    if not inputs.tb:
        raise ValueError(f"{name}: W must be stored [batch, n, k] (tb=True)")
    x = inputs.a_mk()
    w = inputs.b
    check_tensor(name, x, "A (as [batch, 1, k])", (batch, 1, k), dtype, where)
    check_tensor(name, w, "W", (batch, n, k), dtype, where)
    check_tensor(name, out, "out", (batch, 1, n), dtype, where)
    c0, bias = epilogue_operands(
        name,
        inputs,
        out,
        has_c0=has_c0,
        has_bias=has_bias,
        c0_shape=(batch, 1, n),
        n=n,
        dtype=dtype,
        where=where,
    )
    if where.type == "cuda":
        check_current_device(name, where)
    return x, w, c0, bias


# ---- programmatic dependent launch -------------------------------------------------

#: Launch options and the kernels' constexpr for ``pdl=1`` (never given to the
#: interpreter, which knows neither the option nor the griddepcontrol instructions).
PDL_CONSTANTS: dict[str, bool] = {"PDL": True, "launch_pdl": True}


def flag_reason(params: Mapping[str, Any], name: str) -> str | None:
    """A 0/1 grid parameter (absent means 0): the reason it is neither."""
    value = params.get(name, 0)
    if value not in (0, 1) or isinstance(value, bool):
        return f"{name}={value!r}: 0 or 1"
    return None


def pdl_device_reason(device: DeviceInfo) -> str | None:
    """``pdl=1`` needs Hopper or later (``griddepcontrol``, programmatic launch)."""
    if device.kind != "cuda" or (device.capability or (0, 0)) < (9, 0):
        return "pdl=1 needs programmatic dependent launch: a CUDA GPU of compute capability ≥ 9.0"
    return None
