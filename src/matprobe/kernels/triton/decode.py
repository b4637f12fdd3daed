"""``triton.gemv_decode``: the decode step's GEMV with its neighbours folded in.

One kernel (``_decode_kernels``) for every weight matmul of a decode
layer, f16/bf16 or Q8_0 weights stored ``[rows, k]``: an optional RMSNorm
prologue (the kernel reads the residual stream and normalises it on the way),
an optional SwiGLU pair of rows per output (gate and up), and the shared
epilogue ``alpha·acc + beta·C0 + bias`` (the residual add of o_proj and down
is C0 with beta = 1). :func:`decode_gemv` is what ``matprobe token --fused``
calls; the family exposes the same kernel to the harness for the specs a
profile can state (``matmul`` with bias/α/β, ``matmul_swiglu``, batch 1), so
its sums and epilogue pass the same conformance suite and cheater checks as
every family. The RMSNorm prologue is the spec key ``rmsnorm=ε`` (the decode
layer's QKV, gate/up + SwiGLU and LM head sites: ``matprobe shapes --model …
--layer``), judged like any spec against a float64 RMSNorm + matmul.

Importing this module never imports triton or torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from matprobe.kernels.triton import _common as common
from matprobe.measure.variants import KernelFn, VariantFamily
from matprobe.spec import Q8_0_BLOCK, MatmulSpec

if TYPE_CHECKING:
    import torch

    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

NAME = "triton.gemv_decode"

KERNELS_SOURCE: str = common.kernels_source(__file__, "_decode_kernels.py")


@dataclass(frozen=True)
class DecodeTile:
    """A program's work: ``bn`` outputs, K in tiles of ``bk``, over ``warps`` warps."""

    bn: int
    bk: int
    warps: int

    @property
    def params(self) -> dict[str, int]:
        return {"bn": self.bn, "bk": self.bk, "w": self.warps}


def tile_problem(tile: DecodeTile, *, k: int, swiglu: bool, quantized: bool) -> str | None:
    """Why ``tile`` cannot run a k-long row (None: it can)."""
    bn, bk, warps = tile.bn, tile.bk, tile.warps
    if (reason := common.tile_reason(bn, bk, warps, min_bk=Q8_0_BLOCK)) is not None:
        return reason
    return (
        common.spill_reason(bn, bk, warps, tiles="gate and up" if swiglu else "")
        or (common.q8_k_reason(k) if quantized else None)
        or common.unroll_reason(k, bk, common.MAX_UNROLLED_TILES)
    )


def decode_gemv(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    tile: DecodeTile,
    scales: torch.Tensor | None = None,
    gain: torch.Tensor | None = None,
    eps: float = 1e-6,
    bias: torch.Tensor | None = None,
    c0: torch.Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    swiglu: bool = False,
    out: torch.Tensor | None = None,
    pdl: bool = False,
) -> torch.Tensor:
    """``y = alpha·(W·x̂) + beta·C0 + bias`` as ``[1, n]`` (a new tensor unless ``out``).

    x: ``k`` activations (``[k]`` or ``[1, k]``, contiguous); W ``[rows, k]``, or
    int8 quants with ``scales`` ``[rows, k/32]`` fp16 (Q8_0); x̂ = RMSNorm(x)·gain
    when ``gain`` is given, else x; with ``swiglu`` the rows are gate then up
    (n = rows/2) and y = silu(gate)·up (no epilogue operands). ``pdl``: launched
    with programmatic dependent launch (Hopper+, never in the interpreter): the
    first weight tile is read before waiting on the kernels before it."""
    from matprobe.kernels.triton._decode_kernels import decode_gemv_kernel

    rows, k = w.shape
    n = rows // 2 if swiglu else rows
    quantized = scales is not None
    problem = tile_problem(tile, k=k, swiglu=swiglu, quantized=quantized)
    if problem is None and x.numel() != k:
        problem = f"x has {x.numel()} elements, W rows {k}"
    if problem is None and swiglu and (rows % 2 or bias is not None or c0 is not None):
        problem = "SwiGLU needs gate and up rows of one width and no epilogue operands"
    if problem is None and (w.stride(1) != 1 or not x.is_contiguous()):
        problem = "x and the rows of W must be contiguous along K"
    if problem is None and gain is not None and (gain.numel() != k or gain.stride(-1) != 1):
        problem = f"the gain must be {k} contiguous values"
    if problem is not None:
        raise ValueError(f"{NAME}: {problem}")
    y = x.new_empty((1, n)) if out is None else out
    placeholder = y  # never read: its flag is off
    bn, bk = tile.bn, tile.bk
    decode_gemv_kernel[(-(-n // bn),)](
        x, w,
        placeholder if scales is None else scales,
        placeholder if gain is None else gain,
        placeholder if c0 is None else c0,
        placeholder if bias is None else bias,
        y,
        n, k, n if swiglu else 0,
        w.stride(0), 0 if scales is None else scales.stride(0),
        float(alpha), float(beta), float(eps),
        Q8=quantized, NORM=gain is not None, SWIGLU=swiglu,
        HAS_C0=c0 is not None, HAS_BIAS=bias is not None,
        BLOCK_N=bn, BLOCK_K=bk, K_TILES=-(-k // bk), EVEN_K=k % bk == 0,
        EVEN=k % bk == 0 and n % bn == 0, NB=bk // Q8_0_BLOCK if quantized else 1,
        num_warps=tile.warps, **(common.PDL_CONSTANTS if pdl else {}),
    )  # fmt: skip
    return y


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    swiglu = spec.is_swiglu
    if swiglu and (problem := spec.swiglu_problem()) is not None:
        return problem
    if spec.m != 1 or spec.batch != 1:
        return "needs batch=1, m=1 (one decode row)"
    if not spec.tB:
        return "needs W stored [n, k] (tB=1)"
    k = spec.k or 0
    tile = DecodeTile(params.get("bn", 0), params.get("bk", 0), params.get("w", 0))
    problem = tile_problem(tile, k=k, swiglu=swiglu, quantized=spec.dtype == "q8_0")
    return problem or common.interpreter_too_large(device, 1, spec.n_total or 0, k)


@common.triton_family(
    name=NAME,
    ops=common.MATMUL_OPS | {"matmul_swiglu"},
    supports=_supports,
    # bn 4 first: the CPU validates a family's first grid point, and the
    # interpreter's cost is per program (4 rows a program: a quarter of bn 1's).
    grid={"bn": (4, 2, 1), "bk": (512, 1024), "w": (4, 8)},
    dtypes=("f16", "bf16", "q8_0"),
    prologues=("rmsnorm",),
)
def GEMV_DECODE(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """The decode GEMV on one spec: bn outputs a program, fp32 sums, one cast on store."""
    import torch

    from matprobe.kernels.triton._decode_kernels import decode_gemv_kernel
    from matprobe.measure.inputs import activation_dtype, shapes, torch_dtype

    common.check_mode(NAME, decode_gemv_kernel, device)
    swiglu, quantized = spec.is_swiglu, spec.dtype == "q8_0"
    n = shapes(spec)["out"][2]
    k = spec.k or 0
    rows = spec.n_total or 0
    dtype = torch_dtype(activation_dtype(spec))
    where = common.target(device)
    tile = DecodeTile(int(params["bn"]), int(params["bk"]), int(params["w"]))
    has_c0, has_bias = spec.reads_c0, spec.has_bias
    norm_eps = spec.rmsnorm  # the spec's ε, never the inputs' say

    def run(inputs: MatmulInputs, out: Any) -> None:
        if inputs.swiglu != swiglu:
            raise ValueError(f"{NAME}: inputs {'are not' if swiglu else 'are'} a SwiGLU set")
        x, w, c0, bias = common.row_gemv_operands(
            NAME, inputs, out, batch=1, n=rows, k=k, dtype=dtype, where=where,
            has_c0=has_c0, has_bias=has_bias,
            weight_dtype=torch.int8 if quantized else None,
            out_n=n,
        )  # fmt: skip
        scales: Any = None
        if quantized:
            scales = inputs.scales
            common.check_tensor(NAME, scales, "scales", (1, rows, k // Q8_0_BLOCK),
                                torch.float16, where)  # fmt: skip
            scales = scales[0]
        gain: Any = None
        if norm_eps is not None:
            gain = inputs.gain
            common.check_tensor(NAME, gain, "gain", (k,), dtype, where)
        decode_gemv(
            x[0, 0], w[0], tile=tile, scales=scales, gain=gain, eps=norm_eps or 0.0,
            bias=bias if has_bias else None, c0=c0[0, 0] if has_c0 else None,
            alpha=float(inputs.alpha), beta=float(inputs.beta), swiglu=swiglu, out=out[0],
        )  # fmt: skip

    return run


FAMILIES: tuple[VariantFamily, ...] = (GEMV_DECODE,)
