"""``triton.gemv_splitk``: a split-K Triton GEMV for large K and small N (tB = 1).

``y[b, 0, :] = alpha * (W[b] @ x[b, 0, :]) + beta * C0[b, 0, :] + bias`` for
m = 1 with W stored ``[batch, n, k]``. With few rows (the Qwen2.5 down
projection: n = 896, k = 4864) a row-block GEMV launches too few programs to
keep 132 SMs streaming, so K is split too: program (row block, slice, batch)
sums BLOCK_N rows over one slice of TILES·BLOCK_K columns.

Grid parameters:

* ``mode`` — how the slices' fp32 partial sums meet:
  ``twopass`` stores them in ``[slices, batch, n]`` and a second kernel sums
  them and applies the epilogue (reproducible bit for bit);
  ``atomic`` adds them atomically into a ``[batch, n]`` workspace and a second
  kernel applies the epilogue and zeroes the workspace for the next call;
  ``atomic_last`` is one kernel: a counter per (batch, row block) tells the
  last-arriving program, which reads the workspace, applies the epilogue,
  writes ``out`` and zeroes its workspace rows and counter.
* ``split`` — number of K slices; 0 chooses from the shape and the SM count
  (:func:`plan_split`, the shared planner). Slices are whole BLOCK_K tiles, so the number actually
  launched is ``ceil(kt / ceil(kt / split))`` with ``kt = ceil(k / bk)``.
* ``bn`` — rows per program (BLOCK_N); ``bk`` — columns per tile (BLOCK_K);
  ``w`` — num_warps.

Loads: a slice's tiles are read as few [BLOCK_N, CHUNK·BLOCK_K] loads (one
when the slice's W fits :data:`LOAD_BUDGET_BYTES`), contiguous along K, so the
compiler emits 16-byte loads and issues them before the first use. No load of
W is masked unless a single slice is wider than K: rows past n re-read row
n − 1 (never stored), and a short last slice slides its window back to end at
k, with x zeroed on the columns the previous slice owns (W there is read
twice, from L2, and must be finite — as any weight is — since 0·inf is NaN).

The atomic workspace is zeroed by whoever consumes it (the finalize kernel, or
the last program), so ``atomic`` needs no memset launch either. Workspaces are
allocated (zeroed) by the builder, never in ``run``; a built kernel must not
run on two streams at once (they share the workspace).

Importing this module never imports triton or torch (the kernels live in
``_splitk_kernels``, read as text for the fingerprint).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from matprobe.kernels.triton import _common as common
from matprobe.measure.variants import VariantFamily
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

NAME = "triton.gemv_splitk"

#: The kernels' source, read without importing it (part of the fingerprint).
KERNELS_SOURCE: str = common.kernels_source(__file__, "_splitk_kernels.py")

MODES: dict[str, int] = {"twopass": 0, "atomic": 1, "atomic_last": 2}
MIN_K = 1024
#: Most tiles per slice (the kernel unrolls the slice's loads); more is refused.
MAX_TILES_PER_SLICE = 64
#: W bytes one program loads at once (64 registers a thread at 4 warps).
LOAD_BUDGET_BYTES = 32 * 1024
#: Aim for this many programs per SM (the geometric middle of 2–4).
PROGRAMS_PER_SM = 2 * math.sqrt(2)

#: The finalize kernel: outputs per program, and at most this many slices per load.
FINALIZE_BLOCK_R = 256
FINALIZE_MAX_BLOCK_S = 16


@dataclass(frozen=True)
class SplitPlan:
    """How K is cut: ``slices`` slices of ``tiles`` BLOCK_K tiles (the last may be short)."""

    row_blocks: int
    k_tiles: int
    tiles: int
    slices: int

    def programs(self, batch: int) -> int:
        return self.row_blocks * self.slices * batch


def plan_split(
    n: int, k: int, batch: int, bn: int, bk: int, split: int, sm_count: int = 0
) -> SplitPlan:
    """Slices for ``split`` (0: automatic) on a device with ``sm_count`` SMs
    (0: :data:`~matprobe.kernels.triton._common.DEFAULT_SM_COUNT`).

    Automatic: the tiles per slice, a power of two (one load per slice) of at
    most :data:`MAX_TILES_PER_SLICE`, whose program count is nearest, in ratio,
    to 2√2 programs per SM (the shared planner, ``plan_k_split``).
    """
    row_blocks = -(-n // bn)
    cut = common.plan_k_split(
        k,
        bk,
        split,
        programs_per_slice=row_blocks * batch,
        sm_count=sm_count,
        programs_per_sm=PROGRAMS_PER_SM,
        candidates=common.pow2_up_to(MAX_TILES_PER_SLICE),
    )
    return SplitPlan(row_blocks, cut.k_tiles, cut.tiles, cut.slices)


def chunk_tiles(tiles: int, bn: int, bk: int, itemsize: int) -> int:
    """Tiles per load: the largest power of two dividing ``tiles`` whose W fits
    :data:`LOAD_BUDGET_BYTES` (at least one tile, whatever its size)."""
    chunk = tiles & -tiles  # the largest power of two dividing tiles
    while chunk > 1 and chunk * bn * bk * itemsize > LOAD_BUDGET_BYTES:
        chunk //= 2
    return chunk


def k_mode(k: int, slice_width: int) -> int:
    """0: every slice full (no masks); 1: the short last slice slides back to
    end at k (no W masks, x zeroed where the slices overlap); 2: one slice
    wider than K (masked loads)."""
    if k % slice_width == 0:
        return 0
    return 1 if k > slice_width else 2


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if (reason := common.gemv_layout_reason(spec, tb=True)) is not None:
        return reason
    batch, n, k = spec.batch or 0, spec.n_total or 0, spec.k or 0
    if k < MIN_K:
        return f"split-K is for large K (k >= {MIN_K})"
    mode, split = params.get("mode"), params.get("split")
    bn, bk, warps = params.get("bn"), params.get("bk"), params.get("w")
    if mode not in MODES:
        return f"mode={mode!r}: one of {', '.join(MODES)}"
    if not isinstance(split, int) or isinstance(split, bool) or split < 0:
        return f"split={split!r}: number of K slices must be an integer >= 0 (0 = automatic)"
    if (reason := common.tile_reason(bn, bk, warps)) is not None:
        return reason
    # tile_reason checked them: the assert narrows the types
    assert common.is_pow2(bn) and common.is_pow2(bk) and common.is_pow2(warps)
    if batch > common.MAX_GRID_YZ:
        return f"batch={batch} exceeds the grid's limit of {common.MAX_GRID_YZ}"
    plan = plan_split(n, k, batch, bn, bk, split, device.sm_count)
    if plan.tiles > MAX_TILES_PER_SLICE:
        return (
            f"a slice of {plan.tiles} tiles exceeds the {MAX_TILES_PER_SLICE} unrolled tiles "
            "per program: raise split or bk"
        )
    if plan.slices > common.MAX_GRID_YZ:
        return f"{plan.slices} slices exceed the grid's limit of {common.MAX_GRID_YZ}: raise bk"
    return common.interpreter_too_large(device, batch, n, k)


class SplitKGemv:
    """A built variant: launches, and the workspace it owns (exposed for tests)."""

    def __init__(self, spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> None:
        import torch

        from matprobe.kernels.triton._splitk_kernels import (
            splitk_finalize_kernel,
            splitk_partial_kernel,
        )

        self.row = row = common.row_gemv(NAME, splitk_partial_kernel, spec, device)
        batch, n, k = row.batch, row.n, row.k
        self.mode = str(params["mode"])
        bn, bk, warps = common.tile_params(params)
        self.plan = plan_split(n, k, batch, bn, bk, int(params["split"]), device.sm_count)
        plan = self.plan

        f32, where = torch.float32, row.where
        self.counters: Any = None
        if self.mode == "twopass":
            # Every program writes its rows of its slice: no zeroing needed.
            self.workspace: Any = torch.empty(plan.slices, batch, n, dtype=f32, device=where)
        else:
            self.workspace = torch.zeros(batch, n, dtype=f32, device=where)
        if self.mode == "atomic_last":
            self.counters = torch.zeros(batch, plan.row_blocks, dtype=torch.int32, device=where)
        ws = self.workspace
        chunk = chunk_tiles(plan.tiles, bn, bk, row.dtype.itemsize)
        self._partial = splitk_partial_kernel[(plan.row_blocks, plan.slices, batch)]
        self._partial_args = (n, k, plan.slices)
        self._ws_strides = (ws.stride(0) if self.mode == "twopass" else 0, ws.stride(-2))
        self._partial_constants: dict[str, Any] = {
            "MODE": MODES[self.mode],
            **row.epilogue_constants,
            "BLOCK_N": bn,
            "BLOCK_K": bk,
            "TILES": plan.tiles,
            "CHUNK": chunk,
            "NUM_CHUNKS": plan.tiles // chunk,
            "K_MODE": k_mode(k, plan.tiles * bk),
            "EVEN_N": n % bn == 0,
            "num_warps": warps,
        }
        finalize_slices = plan.slices if self.mode == "twopass" else 1
        block_s = min(1 << (finalize_slices - 1).bit_length(), FINALIZE_MAX_BLOCK_S)
        self._finalize_slices = finalize_slices
        self._finalize: Any = None
        if self.mode != "atomic_last":
            self._finalize = splitk_finalize_kernel[(-(-n // FINALIZE_BLOCK_R), batch)]
        self._finalize_constants: dict[str, Any] = {
            "RESET": self.mode == "atomic",
            **row.epilogue_constants,
            "BLOCK_R": FINALIZE_BLOCK_R,
            "BLOCK_S": block_s,
            "num_warps": 4,
        }

    def __call__(self, inputs: MatmulInputs, out: Any) -> None:
        x, w, c0, bias = self.row.operands(inputs, out)
        ws = self.workspace
        counters = ws if self.counters is None else self.counters
        epilogue = common.epilogue_args(inputs, c0, bias, out)
        try:
            self._partial(
                x, w, ws, counters, (c0, bias, out),
                *self._partial_args,
                *common.row_strides(x, w),
                *self._ws_strides,
                counters.stride(0),
                epilogue,
                **self._partial_constants,
            )  # fmt: skip
            if self._finalize is not None:
                self._finalize(
                    ws, (c0, bias, out),
                    self.row.n, self._finalize_slices,
                    *self._ws_strides,
                    epilogue,
                    **self._finalize_constants,
                )  # fmt: skip
        except BaseException:
            # A launch that failed half-way may leave partial sums behind:
            # restore the all-zero state the next call relies on.
            if self.mode != "twopass":
                ws.zero_()
            if self.counters is not None:
                self.counters.zero_()
            raise


GEMV_SPLITK: VariantFamily = common.triton_family(
    name=NAME,
    ops=common.MATMUL_OPS,
    supports=_supports,
    # The automatic split gives every program 32 KB of fp16 W for bk 256 or
    # 512 alike (bn16: one [16, 1024] load, bn32: one [32, 512] load), so bk
    # stays at 256 and the warps vary instead: the compiled sm_90 code issues
    # all loads of a slice at once for bn32/w4 and bn16/w8.
    # H100 sweep (BENCHMARKS.md): w8 won for every mode, atomic_last (one
    # launch) first, twopass last; the default keeps the leaders.
    grid={
        "mode": ("atomic_last", "atomic"),
        "split": (0,),
        "bn": (16, 32),
        "bk": (256,),
        "w": (8,),
    },
    dtypes=("f32", "f16", "bf16"),
    description="Split-K Triton GEMV: BLOCK_N rows × one K slice per program, slices summed "
    "in fp32.",
)(SplitKGemv)  # the kernel's class is its builder: built from (spec, params, device)

FAMILIES: tuple[VariantFamily, ...] = (GEMV_SPLITK,)
