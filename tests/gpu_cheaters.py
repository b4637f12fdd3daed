"""Real GPU kernels that cheat the harness, one way each (imported by test_gpu.py only).

* ``cheat.gpu_pdl_early_x`` — a PDL GEMV that loads x *before* ``gdc_wait``: right
  when launched after a kernel that does not trigger early, wrong in a chain of
  itself (the previous call's output is not there yet);
* ``cheat.gpu_unmasked_store`` — the same GEMV storing whole BLOCK_N tiles: writes
  past the end of its output when n is not a multiple of BLOCK_N;
* ``cheat.gpu_half_running_sum`` — fp32 within a K tile, the running sum in the
  output dtype across tiles;
* ``cheat.gpu_memo_capture`` — memoises its answer by input pointers on the host:
  a captured graph replays a copy of a stale answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import triton
import triton.language as tl

from matprobe.harness.device import DeviceInfo
from matprobe.harness.inputs import MatmulInputs
from matprobe.harness.variants import KernelFn, Registry, VariantFamily, variant_family
from matprobe.spec import MatmulSpec


@triton.jit
def _gemv(  # Triton's constexpr parameters are upper case by convention
    x_ptr,
    w_ptr,
    out_ptr,
    n,
    k,
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
    EARLY_X: tl.constexpr,  # noqa: N803
    PDL: tl.constexpr,  # noqa: N803
    MASK_STORE: tl.constexpr,  # noqa: N803
    HALF_SUM: tl.constexpr,  # noqa: N803
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = rows < n
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        offs_k = tl.arange(0, BLOCK_K)
        mask_k = offs_k < k
        w = tl.load(
            w_ptr + rows[:, None] * k + offs_k[None, :],
            mask=mask_n[:, None] & mask_k[None, :],
            other=0.0,
        )
        if EARLY_X:  # the bug: x read before the kernel that writes it has finished
            x = tl.load(x_ptr + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            tl.extra.cuda.gdc_wait()
        else:
            tl.extra.cuda.gdc_wait()
            x = tl.load(x_ptr + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        acc = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
    else:
        half = tl.zeros([BLOCK_N], dtype=out_ptr.dtype.element_ty)
        for k0 in range(0, k, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < k
            x = tl.load(x_ptr + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            w = tl.load(
                w_ptr + rows[:, None] * k + offs_k[None, :],
                mask=mask_n[:, None] & mask_k[None, :],
                other=0.0,
            ).to(tl.float32)
            part = tl.sum(w * x[None, :], axis=1)
            if HALF_SUM:
                half = (half.to(tl.float32) + part).to(out_ptr.dtype.element_ty)
            else:
                acc += part
        if HALF_SUM:
            acc = half.to(tl.float32)
    if MASK_STORE:
        tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=mask_n)
    else:
        tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty))


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if (
        spec.batch != 1
        or spec.m != 1
        or spec.tA
        or not spec.tB
        or spec.has_bias
        or spec.reads_c0
        or spec.alpha_value != 1.0
    ):
        return "plain x·Wᵀ GEMVs only"
    return None


def _gemv_family(
    name: str,
    *,
    early_x: bool = False,
    pdl: bool = False,
    mask_store: bool = True,
    half_sum: bool = False,
) -> VariantFamily:
    def build(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
        n, k = spec.n_total, spec.k
        assert n is not None and k is not None
        block_n = 64 if not pdl else 8
        block_k = triton.next_power_of_2(k) if pdl else 128
        extra = {"launch_pdl": True} if pdl else {}

        def run(inputs: MatmulInputs, out: Any) -> None:
            _gemv[(triton.cdiv(n, block_n),)](
                inputs.a,
                inputs.b,
                out,
                n,
                k,
                BLOCK_N=block_n,
                BLOCK_K=block_k,
                EARLY_X=early_x,
                PDL=pdl,
                MASK_STORE=mask_store,
                HALF_SUM=half_sum,
                **extra,
            )

        return run

    build.__doc__ = name
    grid = {"pdl": (1,)} if pdl else {}
    return variant_family(
        name=name,
        ops=("matmul",),
        devices=("cuda",),
        supports=_supports,
        grid=grid,
        dtypes=("f16", "bf16"),
    )(build)


PDL_HONEST = _gemv_family("fake.gpu_pdl", pdl=True)
PDL_EARLY_X = _gemv_family("cheat.gpu_pdl_early_x", pdl=True, early_x=True)
UNMASKED_STORE = _gemv_family("cheat.gpu_unmasked_store", mask_store=False)
HALF_RUNNING_SUM = _gemv_family("cheat.gpu_half_running_sum", half_sum=True)


@variant_family(
    name="cheat.gpu_memo_capture",
    ops=("matmul",),
    devices=("cuda",),
    supports=_supports,
    dtypes=("f16", "bf16"),
)
def memo_capture(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Answers each new set of buffers with torch, then replays a copy of that answer."""
    memory: dict[tuple[int, ...], torch.Tensor] = {}

    def run(inputs: MatmulInputs, out: Any) -> None:
        key = tuple(t.data_ptr() for t in inputs.tensors())
        if key not in memory:
            memory[key] = torch.matmul(inputs.a_mk(), inputs.b_kn())
        out.copy_(memory[key])

    return run


FAMILIES: tuple[VariantFamily, ...] = (
    PDL_HONEST,
    PDL_EARLY_X,
    UNMASKED_STORE,
    HALF_RUNNING_SUM,
    memo_capture,
)


def registry() -> Registry:
    return Registry(FAMILIES)
