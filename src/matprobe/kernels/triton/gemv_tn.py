"""``triton.gemv_tn``: a Triton GEMV for W stored ``[k, n]`` (tB = 0), split-K optional.

``y[b, 0, :] = alpha * (x[b, 0, :] @ W[b]) + beta * C0[b, 0, :] + bias`` for
m = 1 with W stored ``[batch, k, n]`` row-major: the Qwen2.5 fused QKV
projection (``matmul_bias_add n=1152 k=896 tB=0``) and the attention P·V
products (``matmul_alpha_beta batch=14 n=64 k=L tB=0``, one launch for all
heads: the batch is a grid axis). With m = 1 A is ``[batch, 1, k]`` in memory
whether tA is set or not, so either is taken.

A program owns ``bn`` contiguous columns (coalesced 16-byte loads along N) and
walks K in ``bk``-row tiles. Few column blocks (n = 1152 / 64 = 18) would leave
most SMs idle, so K can be split: ``split`` = 1 is one kernel with the epilogue;
S > 1 asks for S splits; 0 picks them from n, k, the batch and the SM count
(:func:`plan_split`). Splits write fp32 partial sums into a workspace with
atomic adds, and ``fin`` says who finishes: ``last`` — the last program of each
column block (an atomic counter) applies the epilogue and zeroes the workspace
and counter, one launch; ``kernel`` — a second small kernel does it. Either way
the workspace (allocated once, by the builder) is zero again after every call,
so the kernel replays in a CUDA graph.

Importing this module never imports triton or torch: the kernels live in
``_gemv_tn_kernels`` and are imported by the builder only. Their source
text is read from the file (not imported) into the family's fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from matprobe.kernels.triton import _common as common
from matprobe.measure.variants import VariantFamily
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

NAME = "triton.gemv_tn"

#: The kernels' source, read without importing it (part of the fingerprint).
KERNELS_SOURCE: str = common.kernels_source(__file__, "_gemv_tn_kernels.py")

#: ``split=0`` aims for this many programs per SM (all resident at once: a
#: 4-warp program leaves room for 16 per SM), each at least one bk-row tile.
AUTO_PROGRAMS_PER_SM = 4
#: fp32 accumulators per thread beyond which the [bk, bn] tile spills registers.
MAX_ACC_PER_THREAD = 128
#: Columns per program of the ``fin=kernel`` finalize launch.
FINALIZE_BLOCK_N = 256
FINISHERS = ("last", "kernel")


def plan_split(
    split: int, n_blocks: int, batch: int, k: int, bk: int, sm_count: int
) -> tuple[int, int]:
    """``(splits, rows per split)`` for a ``split`` parameter (the shared planner,
    ``plan_k_split``): each split a whole number of ``bk``-row tiles, none
    empty; ``split=0`` aims at ``AUTO_PROGRAMS_PER_SM`` programs per SM from
    ``n_blocks · batch`` column blocks (1 split when they alone come nearest).
    """
    cut = common.plan_k_split(
        k,
        bk,
        split,
        programs_per_slice=n_blocks * batch,
        sm_count=sm_count,
        programs_per_sm=AUTO_PROGRAMS_PER_SM,
    )
    return cut.slices, cut.tiles * bk


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if (reason := common.gemv_layout_reason(spec, tb=False)) is not None:
        return reason
    bn, bk, split, warps = params.get("bn"), params.get("bk"), params.get("split"), params.get("w")
    fin = params.get("fin", "last")
    if not common.is_pow2(bn) or bn < 8:
        return f"bn={bn!r}: BLOCK_N must be a power of two >= 8"
    if not common.is_pow2(bk) or bk < 8:
        return f"bk={bk!r}: BLOCK_K must be a power of two >= 8"
    if not common.is_pow2(warps) or warps > 32:
        return f"w={warps!r}: num_warps must be a power of two <= 32"
    if not isinstance(split, int) or isinstance(split, bool) or split < 0:
        return f"split={split!r}: must be 1 (no split), S > 1 (S splits) or 0 (auto)"
    if fin not in FINISHERS:
        return f"fin={fin!r}: must be one of {', '.join(FINISHERS)}"
    if bn * bk > common.MAX_TILE_ELEMENTS:
        return f"tile bn·bk = {bn * bk} exceeds Triton's block limit of {common.MAX_TILE_ELEMENTS}"
    if bn * bk > MAX_ACC_PER_THREAD * 32 * warps:
        return (
            f"tile bn·bk = {bn * bk} needs more than {MAX_ACC_PER_THREAD} fp32 accumulators "
            f"per thread with w={warps} (register spills)"
        )
    batch, n, k = spec.batch or 0, spec.n_total or 0, spec.k or 0
    if batch > common.MAX_GRID_YZ:
        return f"batch={batch} exceeds the grid's z limit of {common.MAX_GRID_YZ}"
    splits, _ = plan_split(split, -(-n // bn), batch, k, bk, device.sm_count)
    if splits > common.MAX_GRID_YZ:
        return f"{splits} splits exceed the grid's y limit of {common.MAX_GRID_YZ}: raise bk"
    return common.interpreter_too_large(device, batch, n, k)


class GemvTNKernel:
    """A built ``triton.gemv_tn`` kernel: checks the operands, then one or two launches.

    ``splits`` and ``k_chunk`` are the resolved split-K plan; ``workspace``
    (fp32 ``[batch · n]``) and ``counters`` (int32 ``[batch · column blocks]``)
    exist only where the plan needs them and are zero between calls.
    """

    def __init__(self, spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> None:
        import torch

        from matprobe.kernels.triton._gemv_tn_kernels import (
            gemv_tn_finalize_kernel,
            gemv_tn_kernel,
        )

        self.row = row = common.row_gemv(NAME, gemv_tn_kernel, spec, device)
        bn, bk, warps = common.tile_params(params)
        fin = params.get("fin", "last")
        n_blocks = -(-row.n // bn)
        self.splits, self.k_chunk = plan_split(
            int(params["split"]), n_blocks, row.batch, row.k, bk, device.sm_count
        )
        self.mode = 0 if self.splits == 1 else (1 if fin == "last" else 2)
        self.workspace: Any = None
        self.counters: Any = None
        if self.mode:
            self.workspace = torch.zeros(row.batch * row.n, dtype=torch.float32, device=row.where)
        if self.mode == 1:
            self.counters = torch.zeros(row.batch * n_blocks, dtype=torch.int32, device=row.where)
        self._launch = gemv_tn_kernel[(n_blocks, self.splits, row.batch)]
        self._constants: dict[str, Any] = {
            **row.epilogue_constants,
            "MODE": self.mode,
            "BLOCK_N": bn,
            "BLOCK_K": bk,
            "num_warps": warps,
        }
        self._finalize = gemv_tn_finalize_kernel[(-(-row.n // FINALIZE_BLOCK_N), row.batch)]

    def __call__(self, inputs: MatmulInputs, out: Any) -> None:
        n, k = self.row.n, self.row.k
        x, w, c0, bias = self.row.operands(inputs, out)
        # Unused pointers get a valid placeholder the kernel never touches.
        ws = out if self.workspace is None else self.workspace
        counters = ws if self.counters is None else self.counters
        epilogue = common.epilogue_args(inputs, c0, bias, out)
        self._launch(
            x, w, (c0, bias, out), ws, counters,
            n, k, self.k_chunk,
            *common.row_strides(x, w),
            epilogue,
            **self._constants,
        )  # fmt: skip
        if self.mode == 2:
            self._finalize(
                ws, (c0, bias, out),
                n,
                epilogue,
                **self.row.epilogue_constants, BLOCK_N=FINALIZE_BLOCK_N,
                num_warps=4,
            )  # fmt: skip


GEMV_TN: VariantFamily = common.triton_family(
    name=NAME,
    ops=common.MATMUL_OPS,
    supports=_supports,
    # H100 sweep (BENCHMARKS.md): bk64 with bn32/bn128 led; no split wins for
    # short contexts, the automatic split for QKV and long ones.
    grid={"bn": (32, 128), "bk": (64,), "split": (1, 0), "w": (4,), "fin": ("last",)},
    dtypes=("f32", "f16", "bf16"),
    description="Triton GEMV for W [k, n]: bn contiguous columns per program, K in bk tiles, "
    "split-K.",
)(GemvTNKernel)  # the kernel's class is its builder: built from (spec, params, device)

FAMILIES: tuple[VariantFamily, ...] = (GEMV_TN,)
