"""``triton.gemm``: a tiled Triton GEMM (``tl.dot``) for prefill-shaped matmuls, m >= 16.

``out[b] = alpha * (A[b] @ B[b]) + beta * C0[b] + bias`` in the style of Triton's
tutorial 03 (grouped program ordering for L2 reuse, BLOCK_M × BLOCK_N tiles, K in
BLOCK_K steps, fp32 accumulator, fp32 epilogue, one cast on store). Any of the
four tA/tB layouts: the kernel reads A as ``[m, k]`` and B as ``[k, n]`` through
the strides of the logical views; the batch is the grid's second axis.

Grid parameters: ``bm``/``bn``/``bk`` the tile (BLOCK_M, BLOCK_N, BLOCK_K), ``w``
num_warps, ``s`` num_stages (software-pipelining depth: ``s`` K-steps of A and
B tiles in shared memory). GROUP_M is fixed at 8 tile-rows.

f32 inputs use ``tl.dot(..., input_precision="ieee")``: Triton's default for an
f32 dot is TF32 (~5e-4 relative error), which fails matprobe's f32 tolerance
(2e-6·(1+√K/32)). IEEE f32 runs on the FMA units, not the tensor cores, so f32
is a correctness point, not a speed one; f16/bf16 use the tensor cores.

Importing this module never imports triton or torch: the kernel lives in
``_gemm_kernels`` and is imported by the builder only; its source text
is read from the file into the family's fingerprint. On the CPU the kernel runs
in the Triton interpreter (``TRITON_INTERPRET=1`` before the kernels module is
first imported).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from matprobe.kernels.triton import _common as common
from matprobe.measure.variants import KernelFn, VariantFamily
from matprobe.spec import DTYPE_BYTES, MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

NAME = "triton.gemm"

#: The kernel's source, read without importing it (part of the fingerprint).
KERNELS_SOURCE: str = common.kernels_source(__file__, "_gemm_kernels.py")

#: Tile-rows per group in the program ordering (tutorial 03's GROUP_SIZE_M).
GROUP_M = 8

#: Shared memory one block may use on Hopper (H100/H200): 227 KB.
MAX_SHARED_BYTES = 227 * 1024

#: Below this m a tile is mostly padding: the GEMV families serve decode.
MIN_M = 16

#: On the CPU the interpreter's cost grows with the products it computes.
INTERPRETER_MAX_MACS = 2**28


def shared_bytes(bm: int, bn: int, bk: int, stages: int, dtype: str) -> int:
    """Shared memory of the software pipeline: ``stages`` A and B tiles."""
    return (bm * bk + bk * bn) * int(DTYPE_BYTES.get(dtype, 4)) * stages


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    m = spec.m or 0
    if m < MIN_M:
        return f"tiled GEMM is for m >= {MIN_M}; use a GEMV family for decode"
    bm, bn, bk = params.get("bm"), params.get("bn"), params.get("bk")
    warps, stages = params.get("w"), params.get("s")
    for name, value in (("bm", bm), ("bn", bn), ("bk", bk)):
        if not common.is_pow2(value) or value < 16:
            return f"{name}={value!r}: tile sides must be powers of two >= 16 (tl.dot)"
    assert common.is_pow2(bm) and common.is_pow2(bn) and common.is_pow2(bk)
    if not common.is_pow2(warps) or warps > 32:
        return f"w={warps!r}: num_warps must be a power of two <= 32"
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        return f"s={stages!r}: num_stages must be an integer >= 1"
    if max(bm * bn, bm * bk, bk * bn) > common.MAX_TILE_ELEMENTS:
        return f"tile {bm}×{bn}×{bk} exceeds Triton's block limit of {common.MAX_TILE_ELEMENTS}"
    dtype = spec.dtype or "f32"
    smem = shared_bytes(bm, bn, bk, stages, dtype)
    if smem > MAX_SHARED_BYTES:
        return (
            f"shared memory (bm·bk + bk·bn)·{int(DTYPE_BYTES.get(dtype, 4))} B·s = {smem} B "
            f"exceeds the {MAX_SHARED_BYTES // 1024} KB a block may use"
        )
    batch, n, k = spec.batch or 0, spec.n_total or 0, spec.k or 0
    too_large = common.interpreter_too_large(device, batch, n, k)
    if too_large is not None:
        return too_large
    if device.kind == "cpu" and batch * m * n * k > INTERPRETER_MAX_MACS:
        return (
            f"too large for the Triton interpreter (CPU): batch·m·n·k = {batch * m * n * k} "
            f"> {INTERPRETER_MAX_MACS}"
        )
    return None


@common.triton_family(
    name=NAME,
    ops=common.MATMUL_OPS,
    supports=_supports,
    grid={"bm": (64, 128), "bn": (64, 128), "bk": (64,), "w": (4,), "s": (3,)},
    dtypes=("f32", "f16", "bf16"),
)
def GEMM(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Tiled Triton GEMM (tutorial 03 style): BM×BN tiles, tl.dot over BK steps, fp32 acc."""

    from matprobe.kernels.triton._gemm_kernels import gemm_kernel
    from matprobe.measure.inputs import shapes, torch_dtype

    common.check_mode(NAME, gemm_kernel, device)
    dims = shapes(spec)
    batch, m, n = dims["out"]
    k = spec.k or 0
    dtype = torch_dtype(spec.dtype or "f32")
    where = common.target(device)
    bm, bn, bk = int(params["bm"]), int(params["bn"]), int(params["bk"])
    has_c0, has_bias = spec.reads_c0, spec.has_bias
    launch = gemm_kernel[(-(-m // bm) * -(-n // bn), batch)]
    constants: dict[str, Any] = {
        "HAS_C0": has_c0,
        "HAS_BIAS": has_bias,
        "IEEE": spec.dtype == "f32",
        "INTERPRETED_BF16": device.kind == "cpu" and spec.dtype == "bf16",
        "EVEN_K": k % bk == 0,
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "GROUP_M": GROUP_M,
        "num_warps": int(params["w"]),
        "num_stages": int(params["s"]),
    }
    on_cuda = device.kind == "cuda"

    def run(inputs: MatmulInputs, out: Any) -> None:
        a = inputs.a_mk()  # [batch, m, k] view of either storage layout
        b = inputs.b_kn()  # [batch, k, n] view
        common.check_tensor(NAME, a, "A (as [batch, m, k])", (batch, m, k), dtype, where)
        common.check_tensor(NAME, b, "B (as [batch, k, n])", (batch, k, n), dtype, where)
        common.check_tensor(NAME, out, "out", (batch, m, n), dtype, where)
        c0, bias = common.epilogue_operands(
            NAME,
            inputs,
            out,
            has_c0=has_c0,
            has_bias=has_bias,
            c0_shape=(batch, m, n),
            n=n,
            dtype=dtype,
            where=where,
        )
        if on_cuda:
            common.check_current_device(NAME, where)
        launch(
            a, b, c0, bias, out,
            m, n, k,
            a.stride(0), a.stride(1), a.stride(2),
            b.stride(0), b.stride(1), b.stride(2),
            c0.stride(0), c0.stride(-2), c0.stride(-1),
            bias.stride(-1),
            out.stride(0), out.stride(1), out.stride(2),
            float(inputs.alpha), float(inputs.beta),
            **constants,
        )  # fmt: skip

    return run


FAMILIES: tuple[VariantFamily, ...] = (GEMM,)
