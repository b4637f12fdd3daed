"""What every Triton family's wrapper does the same way: its declaration
(:func:`triton_family`), parameter checks (:func:`tile_reason`), the
interpreter/compiled mode check, operand checks that name the operand, the
epilogue operands (C₀ and bias, or a never-read placeholder pointer) and a row
GEMV's launch arguments (:func:`row_strides`, :func:`epilogue_args`).

Importing this module imports neither triton nor torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from matprobe.errors import MatprobeError
from matprobe.spec import Q8_0_BLOCK

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs
    from matprobe.measure.variants import Builder, VariantFamily
    from matprobe.spec import MatmulSpec

#: Beyond this many weight elements (batch·n·k) the interpreter takes minutes.
INTERPRETER_MAX_ELEMENTS = 2**22

#: Triton's cap on the elements of one block (``TRITON_MAX_TENSOR_NUMEL``).
MAX_TILE_ELEMENTS = 2**20

#: CUDA's limit on grid dimensions y and z (splits of K, the batch).
MAX_GRID_YZ = 65535

#: SM count assumed where the device does not say (the CPU interpreter, a fake
#: device): an H100's, so that a plan made on the CPU is the one an H100 runs.
DEFAULT_SM_COUNT = 132


#: A matmul with the shared epilogue (bias, alpha, beta·C0): the ops the GEMV and
#: GEMM families take.
MATMUL_OPS = frozenset({"matmul", "matmul_bias_add", "matmul_alpha_beta"})


def sm_count(device: DeviceInfo) -> int:
    return device.sm_count or DEFAULT_SM_COUNT


def triton_family(**declared: Any) -> Callable[[Builder], VariantFamily]:
    """``variant_family`` for a family of this package: every one runs on CUDA, or
    on the CPU in Triton's interpreter, and needs triton and torch; ``declared`` is
    the rest of its declaration (name, ops, supports, grid, dtypes, …)."""
    from matprobe.measure.variants import variant_family

    return variant_family(
        devices=("cuda", "cpu"), requires=("triton", "torch"), interpreted_on_cpu=True, **declared
    )


# ---- split-K planning -----------------------------------------------------------------


@dataclass(frozen=True)
class KSplit:
    """K cut into ``slices`` slices of ``tiles`` BLOCK_K tiles (the last may be short)."""

    k_tiles: int
    tiles: int

    @property
    def slices(self) -> int:
        return -(-self.k_tiles // self.tiles)


def plan_k_split(
    k: int,
    bk: int,
    split: int,
    *,
    programs_per_slice: int,
    sm_count: int,
    programs_per_sm: float,
    candidates: Iterable[int] | None = None,
) -> KSplit:
    """How a split-K family cuts K for its ``split`` parameter.

    ``split = S > 0`` asks for S slices of whole tiles, none empty (so S may
    come out smaller, never above the tile count). ``split = 0`` picks the
    tiles per slice — from ``candidates`` (default: any count) — whose program
    count (``programs_per_slice`` × slices) is nearest, in ratio, to
    ``programs_per_sm`` programs on each of ``sm_count`` SMs (0: a device that
    does not say, planned as :data:`DEFAULT_SM_COUNT`); ties go to more programs.
    """
    k_tiles = -(-k // bk)
    if split > 0:
        return KSplit(k_tiles, -(-k_tiles // min(split, k_tiles)))
    goal = programs_per_sm * (sm_count or DEFAULT_SM_COUNT)

    def distance(tiles: int) -> tuple[float, int]:
        return abs(math.log(programs_per_slice * -(-k_tiles // tiles) / goal)), tiles

    options = [t for t in (candidates or range(1, k_tiles + 1)) if 1 <= t <= k_tiles]
    return KSplit(k_tiles, min(options or [1], key=distance))


def pow2_up_to(limit: int) -> list[int]:
    """1, 2, 4, … up to ``limit``."""
    return [1 << i for i in range(max(limit, 1).bit_length())]


def kernels_source(module_file: str, name: str) -> str:
    """The text of a family's kernel module ``name`` beside ``module_file``,
    read without importing it (so listing a family never imports triton)."""
    from pathlib import Path

    return Path(module_file).with_name(name).read_text(encoding="utf-8")


def is_pow2(value: object) -> TypeGuard[int]:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value > 0
        and value & (value - 1) == 0
    )


def tile_reason(
    bn: Any, bk: Any, warps: Any, *, min_bn: int = 1, min_bk: int = 16, bk_note: str = ""
) -> str | None:
    """Why ``bn`` outputs × ``bk`` of K over ``warps`` warps is not a tile a Triton
    kernel can take (None: it is): each a power of two — bn at least ``min_bn``,
    bk at least ``min_bk`` (``bk_note`` says why, where a family has a reason) —
    at most 32 warps, and within Triton's block limit."""
    if not is_pow2(bn) or bn < min_bn:
        least = f" >= {min_bn}" if min_bn > 1 else ""
        return f"bn={bn!r}: BLOCK_N must be a power of two{least}"
    if not is_pow2(bk) or bk < min_bk:
        return f"bk={bk!r}: BLOCK_K must be a power of two >= {min_bk}{bk_note}"
    if not is_pow2(warps) or warps > 32:
        return f"w={warps!r}: num_warps must be a power of two <= 32"
    if bn * bk > MAX_TILE_ELEMENTS:
        return f"tile bn·bk = {bn * bk} exceeds Triton's block limit of {MAX_TILE_ELEMENTS}"
    return None


def gemv_layout_reason(spec: MatmulSpec, *, tb: bool | None = None) -> str | None:
    """Why a row GEMV family cannot take ``spec``'s shape (None: it can): m must
    be 1 and, where ``tb`` is given, W stored as it says (``[n, k]`` when true)."""
    if spec.m != 1:
        return "needs m=1 (GEMV)"
    if tb is True and not spec.tB:
        return "needs tB=1: W stored [n, k]"
    if tb is False and spec.tB:
        return "needs tB=0: W stored [k, n]"
    return None


def q8_k_reason(k: int) -> str | None:
    """Q8_0 weights come in blocks of 32 along K: why ``k`` is not whole blocks."""
    if k % Q8_0_BLOCK:
        return f"Q8_0 needs k a multiple of {Q8_0_BLOCK}, got k={k}"
    return None


#: Most fp32 tile elements a thread of a GEMV holds in registers before they spill
#: (every live tile counted: gate and up are two).
MAX_PER_THREAD = 256

#: K loops of a decode GEMV up to this many tiles are unrolled at compile time.
MAX_UNROLLED_TILES = 32


def spill_reason(
    bn: int, bk: int, warps: int, max_per_thread: int = MAX_PER_THREAD, *, tiles: str = ""
) -> str | None:
    """Why a ``bn``×``bk`` register tile over ``warps`` warps is too large: more
    than ``max_per_thread`` elements a thread, where the registers would spill.
    ``tiles`` names two live tiles of that size (``"gate and up"``), counted twice."""
    live = 2 if tiles else 1
    if live * bn * bk > max_per_thread * 32 * warps:
        what = (
            f"two tiles {bn}×{bk} ({tiles}) over w={warps} warps are"
            if tiles
            else (f"tile {bn}×{bk} over w={warps} warps is")
        )
        return (
            f"{what} {live * bn * bk // (32 * warps)} elements per thread, "
            f"> {max_per_thread}: registers would spill (raise w or lower bn)"
        )
    return None


def unroll_reason(k: int, bk: int, max_tiles: int) -> str | None:
    """Why a K loop a kernel unrolls at compile time is too long for ``bk`` tiles."""
    if -(-k // bk) > max_tiles:
        return f"k={k} needs more than {max_tiles} tiles of bk={bk}: raise bk"
    return None


def tile_params(params: Mapping[str, Any]) -> tuple[int, int, int]:
    """A built variant's ``bn``, ``bk`` and ``w`` grid parameters."""
    return int(params["bn"]), int(params["bk"]), int(params["w"])


def unrolled_tile_constants(n: int, k: int, bn: int, bk: int) -> dict[str, Any]:
    """The tile constexprs of a row-blocked kernel whose K loop is unrolled
    (``tl.static_range(K_TILES)``), with the masks it can leave out."""
    return {
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "K_TILES": -(-k // bk),
        "EVEN_K": k % bk == 0,  # no K masks
        "EVEN_N": n % bn == 0,  # no row masks
    }


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
    tb: bool = True,
    weight_dtype: Any = None,
    out_n: int | None = None,
) -> tuple[Any, Any, Any, Any]:
    """(x, W, C₀, bias) of a GEMV (m = 1) with W stored ``[batch, n, k]``
    (``tb``, the default) or ``[batch, k, n]``, each checked against the built
    spec, on the current device: what every GEMV family's ``run`` checks before
    it launches. ``weight_dtype``: W's own (int8 quants of Q8_0), when not ``dtype``;
    ``out_n``: the outputs' width when not n (SwiGLU: half the rows)."""
    if inputs.tb != tb:
        layout = "[batch, n, k] (tb=True)" if tb else "[batch, k, n] (tb=False)"
        raise ValueError(f"{name}: W must be stored {layout}, got tb={inputs.tb}")
    x = inputs.a_mk()
    w = inputs.b
    check_tensor(name, x, "A (as [batch, 1, k])", (batch, 1, k), dtype, where)
    w_shape = (batch, n, k) if tb else (batch, k, n)
    check_tensor(name, w, "W", w_shape, dtype if weight_dtype is None else weight_dtype, where)
    width = n if out_n is None else out_n
    check_tensor(name, out, "out", (batch, 1, width), dtype, where)
    c0, bias = epilogue_operands(
        name,
        inputs,
        out,
        has_c0=has_c0,
        has_bias=has_bias,
        c0_shape=(batch, 1, width),
        n=width,
        dtype=dtype,
        where=where,
    )
    if where.type == "cuda":
        check_current_device(name, where)
    return x, w, c0, bias


@dataclass(frozen=True)
class RowGemv:
    """What a row GEMV family's builder reads off its spec once: ``batch`` entries of
    ``n`` outputs over ``k``, the dtype, the device, which epilogue operands it
    reads and W's layout (``tb``: ``[batch, n, k]``); :meth:`operands` checks a
    call's tensors against them."""

    name: str
    batch: int
    n: int
    k: int
    dtype: Any
    where: Any
    has_c0: bool
    has_bias: bool
    tb: bool

    @property
    def epilogue_constants(self) -> dict[str, bool]:
        """The kernels' epilogue flags: ``HAS_C0``, ``HAS_BIAS``."""
        return {"HAS_C0": self.has_c0, "HAS_BIAS": self.has_bias}

    def operands(self, inputs: MatmulInputs, out: Any) -> tuple[Any, Any, Any, Any]:
        """(x, W, C₀, bias) of a call, checked (:func:`row_gemv_operands`)."""
        return row_gemv_operands(
            self.name, inputs, out, batch=self.batch, n=self.n, k=self.k, dtype=self.dtype,
            where=self.where, has_c0=self.has_c0, has_bias=self.has_bias, tb=self.tb,
        )  # fmt: skip


def row_gemv(name: str, kernel: Any, spec: MatmulSpec, device: DeviceInfo) -> RowGemv:
    """The start of a row GEMV builder (m = 1, W stored as the spec says): the
    kernel's mode checked (:func:`check_mode`), then what it reads off ``spec``."""
    from matprobe.measure.inputs import shapes, torch_dtype

    check_mode(name, kernel, device)
    batch, _, n = shapes(spec)["out"]
    return RowGemv(
        name, batch, n, spec.k or 0, torch_dtype(spec.dtype or "f32"), target(device),
        spec.reads_c0, spec.has_bias, bool(spec.tB),
    )  # fmt: skip


def row_strides(x: Any, w: Any) -> tuple[int, ...]:
    """x's batch and K strides, then W's three (either layout): the operands' launch
    arguments of a row GEMV kernel (x ``[batch, 1, k]``), in the kernels' order."""
    return (x.stride(0), x.stride(2), w.stride(0), w.stride(1), w.stride(2))


def epilogue_args(inputs: MatmulInputs, c0: Any, bias: Any, out: Any) -> tuple[Any, ...]:
    """The epilogue's launch arguments of a row GEMV kernel (``[batch, 1, n]``
    outputs), the one tuple ``_blocks.epilogue_store`` takes after the tuple of
    pointers ``(c0, bias, out)``: C0's batch and column strides, the bias's,
    out's, then alpha and beta."""
    return (
        c0.stride(0), c0.stride(-1),
        bias.stride(-1),
        out.stride(0), out.stride(2),
        float(inputs.alpha), float(inputs.beta),
    )  # fmt: skip


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
