"""``triton.gemv_nt``: a plain Triton row-block GEMV for decode-shaped matmuls.

``y[b, 0, :] = alpha * (W[b] @ x[b, 0, :]) + beta * C0[b, 0, :] + bias`` for
m = 1 with W stored ``[batch, n, k]`` (tB = 1, the weight layout). With m = 1
A is ``[batch, 1, k]`` in memory whether tA is set or not, so either is taken.

Importing this module never imports triton or torch: the kernel lives in
``_triton_gemv_kernels`` and is imported by the builder only. Its source text
is read from the file (not imported) into the family's fingerprint, so editing
the kernel re-runs exactly this family's pairs.

On the CPU the kernel runs in the Triton interpreter, which must be switched on
(``TRITON_INTERPRET=1``) before the kernels module is first imported; the
builder says so when it is not, and refuses the interpreter on a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from matprobe.errors import MatprobeError
from matprobe.harness.variants import KernelFn, VariantFamily, variant_family
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    import torch

    from matprobe.harness.device import DeviceInfo
    from matprobe.harness.inputs import MatmulInputs

NAME = "triton.gemv_nt"

#: The kernel's source, read without importing it (part of the fingerprint).
KERNELS_SOURCE: str = (
    Path(__file__).with_name("_triton_gemv_kernels.py").read_text(encoding="utf-8")
)

#: Beyond this many weight elements (batch·n·k) the interpreter takes minutes.
INTERPRETER_MAX_ELEMENTS = 2**22

#: Triton's cap on the elements of one block (``TRITON_MAX_TENSOR_NUMEL``).
MAX_TILE_ELEMENTS = 2**20


def _is_pow2(value: object) -> TypeGuard[int]:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value > 0
        and value & (value - 1) == 0
    )


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if spec.m != 1:
        return "needs m=1 (GEMV)"
    if not spec.tB:
        return "needs tB=1: W stored [n, k]"
    bn, bk, warps = params.get("bn"), params.get("bk"), params.get("w")
    if not _is_pow2(bn):
        return f"bn={bn!r}: BLOCK_N must be a power of two"
    if not _is_pow2(bk) or bk < 16:
        return f"bk={bk!r}: BLOCK_K must be a power of two >= 16"
    if not _is_pow2(warps) or warps > 32:
        return f"w={warps!r}: num_warps must be a power of two <= 32"
    if bn * bk > MAX_TILE_ELEMENTS:
        return f"tile bn·bk = {bn * bk} exceeds Triton's block limit of {MAX_TILE_ELEMENTS}"
    batch, n, k = spec.batch or 0, spec.n_total or 0, spec.k or 0
    if n == 0 or k == 0:
        return "empty matmul (n or k is 0)"
    if device.kind == "cpu" and batch * n * k > INTERPRETER_MAX_ELEMENTS:
        return (
            f"too large for the Triton interpreter (CPU): batch·n·k = {batch * n * k} "
            f"> {INTERPRETER_MAX_ELEMENTS}"
        )
    return None


def _check_mode(kernel: Any, device: DeviceInfo) -> None:
    """The kernel must be interpreted on the CPU and compiled on a GPU."""
    interpreted = type(kernel).__name__ == "InterpretedFunction"
    if device.kind == "cpu" and not interpreted:
        raise MatprobeError(
            f"{NAME} on the CPU runs in the Triton interpreter: set TRITON_INTERPRET=1 "
            "before triton kernels are first imported in this process"
        )
    if device.kind != "cpu" and interpreted:
        raise MatprobeError(
            f"{NAME}: TRITON_INTERPRET=1 is set, so the kernel would run in the "
            f"interpreter, not on the {device.kind} device; unset it"
        )


def _check_tensor(tensor: Any, what: str, shape: tuple[int, ...], dtype: Any, where: Any) -> None:
    """Shape, dtype and device of one operand, with a message that names it."""
    if tensor is None:
        raise ValueError(f"{NAME}: {what} is missing")
    if tuple(tensor.shape) != shape:
        raise ValueError(f"{NAME}: {what} has shape {tuple(tensor.shape)}, expected {shape}")
    if tensor.dtype != dtype:
        raise ValueError(f"{NAME}: {what} is {tensor.dtype}, expected {dtype}")
    if tensor.device != where:
        raise ValueError(f"{NAME}: {what} lives on {tensor.device}, expected {where}")


def _target(device: DeviceInfo) -> torch.device:
    import torch

    if device.kind == "cuda":
        return torch.device("cuda", device.index)
    return torch.device(device.kind)


@variant_family(
    name=NAME,
    ops={"matmul", "matmul_bias_add", "matmul_alpha_beta"},
    devices=("cuda", "cpu"),
    supports=_supports,
    grid={"bn": (64, 128), "bk": (128, 256), "w": (4,)},
    dtypes=("f32", "f16", "bf16"),
    requires=("triton", "torch"),
    interpreted_on_cpu=True,
    sources=(KERNELS_SOURCE, _is_pow2, _check_mode, _check_tensor, _target),
)
def GEMV_NT(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Plain Triton GEMV: BLOCK_N rows of W [n, k] per program, K in BLOCK_K tiles, fp32 sums."""
    reason = _supports(spec, params, device)
    if reason is not None:
        raise MatprobeError(f"{NAME}: {reason}")
    import torch

    from matprobe.harness.inputs import shapes, torch_dtype
    from matprobe.variants._triton_gemv_kernels import gemv_nt_kernel

    _check_mode(gemv_nt_kernel, device)
    dims = shapes(spec)
    batch, _, n = dims["out"]
    k = dims["b"][2]
    dtype = torch_dtype(spec.dtype or "f32")
    where = _target(device)
    bn, bk, warps = int(params["bn"]), int(params["bk"]), int(params["w"])
    has_c0, has_bias = spec.reads_c0, spec.has_bias
    launch = gemv_nt_kernel[(-(-n // bn), batch)]
    constants: dict[str, Any] = {
        "HAS_C0": has_c0,
        "HAS_BIAS": has_bias,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "num_warps": warps,
    }
    on_cuda = device.kind == "cuda"

    def run(inputs: MatmulInputs, out: Any) -> None:
        if not inputs.tb:
            raise ValueError(f"{NAME}: W must be stored [batch, n, k] (tb=True)")
        x = inputs.a_mk()
        w = inputs.b
        _check_tensor(x, "A (as [batch, 1, k])", (batch, 1, k), dtype, where)
        _check_tensor(w, "W", (batch, n, k), dtype, where)
        _check_tensor(out, "out", (batch, 1, n), dtype, where)
        c0: Any = inputs.c0
        if has_c0:
            _check_tensor(c0, "C0", (batch, 1, n), dtype, where)
        elif c0 is not None:
            raise ValueError(f"{NAME}: inputs carry C0 but the spec does not read it (beta=0)")
        else:
            c0 = out  # a placeholder pointer, never read: HAS_C0 is off
        bias: Any = inputs.bias
        if has_bias:
            _check_tensor(bias, "bias", (n,), dtype, where)
        elif bias is not None:
            raise ValueError(f"{NAME}: inputs carry a bias but the spec has none")
        else:
            bias = out  # a placeholder pointer, never read: HAS_BIAS is off
        if on_cuda and torch.cuda.current_device() != where.index:
            raise ValueError(
                f"{NAME}: current CUDA device is {torch.cuda.current_device()}, tensors are "
                f"on {where}; Triton launches on the current device's current stream"
            )
        launch(
            x, w, c0, bias, out,
            n, k,
            x.stride(0), x.stride(2),
            w.stride(0), w.stride(1), w.stride(2),
            c0.stride(0), c0.stride(-1),
            bias.stride(-1),
            out.stride(0), out.stride(2),
            float(inputs.alpha), float(inputs.beta),
            **constants,
        )  # fmt: skip

    return run


FAMILIES: tuple[VariantFamily, ...] = (GEMV_NT,)
