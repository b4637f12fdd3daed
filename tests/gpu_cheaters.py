"""Real GPU kernels that cheat the harness, one way each (imported by test_gpu.py only).

* ``cheat.gpu_pdl_early_x`` — a PDL GEMV that loads x *before* ``gdc_wait``: right
  when launched after a kernel that does not trigger early, wrong in a chain of
  itself (the previous call's output is not there yet);
* ``cheat.gpu_unmasked_store`` — the same GEMV storing whole BLOCK_N tiles: writes
  past the end of its output when n is not a multiple of BLOCK_N;
* ``cheat.gpu_store_past_guard`` — honest, plus one element stored 64 past the guard
  zone after its output (issue 20: it PASSed on an H100, landing in memory no
  guard covered);
* ``cheat.gpu_half_running_sum`` — fp32 within a K tile, the running sum in the
  output dtype across tiles;
* ``cheat.gpu_memo_capture`` — memoises its answer by input pointers on the host:
  a captured graph replays a copy of a stale answer;
* ``cheat.gpu_nan_aware`` — computes only where its output holds NaN (the poison a
  harness used to mark judged calls with) and stores nothing elsewhere (issue 20:
  it PASSed on an H100 and ranked 0.14–0.28× of cuBLAS);
* ``cheat.gpu_pdl_early_x_undeclared`` — ``cheat.gpu_pdl_early_x`` without the
  ``pdl`` parameter that declared its early launch (issue 20: it skipped the
  dependent-chain check and PASSed);
* ``cheat.gpu_memo_values`` — remembers, per input buffer, the first four values of
  the last ``x`` it saw and its answer; when they match it copies the answer
  instead of reading W (honest on a miss; issue 20: it won 0.19–0.36×). Its hits
  are counted on the card (``MEMO_HITS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import triton
import triton.language as tl

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import KernelFn, Registry, VariantFamily, variant_family
from matprobe.spec import MatmulSpec


@triton.jit
def _tile_dot(x_ptr, w_ptr, rows, mask_n, k, k0, BLOCK_K: tl.constexpr):  # noqa: N803
    """One K tile of x·Wᵀ for ``rows``, from ``k0``: both loaded masked, summed in fp32."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    mask_k = offs_k < k
    x = tl.load(x_ptr + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    w = tl.load(
        w_ptr + rows[:, None] * k + offs_k[None, :],
        mask=mask_n[:, None] & mask_k[None, :],
        other=0.0,
    ).to(tl.float32)
    return tl.sum(w * x[None, :], axis=1)


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
    NAN_AWARE: tl.constexpr = False,  # noqa: N803
    STRAY_AT: tl.constexpr = 0,  # noqa: N803
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = rows < n
    if NAN_AWARE:  # the cheat: no work unless the output looks judged (NaN-poisoned)
        held = tl.load(out_ptr + rows, mask=mask_n, other=0.0)
        poisoned = held != held
        mask_n = mask_n & poisoned
        if tl.sum(poisoned.to(tl.int32)) == 0:
            return
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
            part = _tile_dot(x_ptr, w_ptr, rows, mask_n, k, k0, BLOCK_K)
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
    # the bug: one element far past the output, past its guard zone (a constexpr test
    # apart from the runtime one: Triton folds the first away)
    if STRAY_AT > 0:  # noqa: SIM102
        if tl.program_id(0) == 0:
            tl.store(out_ptr + STRAY_AT, tl.sum(acc).to(out_ptr.dtype.element_ty))


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
    nan_aware: bool = False,
    declared: bool = True,
    stray: bool = False,
) -> VariantFamily:
    def build(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
        n, k = spec.n_total, spec.k
        assert n is not None and k is not None
        block_n = 64 if not pdl else 8
        block_k = triton.next_power_of_2(k) if pdl else 128
        extra = {"launch_pdl": True} if pdl else {}
        # 64 elements past the guard after the output (GuardedOutputs' guard rule)
        stray_at = n + max(4096, n) + 64 if stray else 0

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
                NAN_AWARE=nan_aware,
                STRAY_AT=stray_at,
                **extra,
            )

        return run

    build.__doc__ = name
    grid = {"pdl": (1,)} if pdl and declared else {}
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
STORE_PAST_GUARD = _gemv_family("cheat.gpu_store_past_guard", stray=True)
HALF_RUNNING_SUM = _gemv_family("cheat.gpu_half_running_sum", half_sum=True)
NAN_AWARE = _gemv_family("cheat.gpu_nan_aware", nan_aware=True)
PDL_EARLY_X_UNDECLARED = _gemv_family(
    "cheat.gpu_pdl_early_x_undeclared", pdl=True, early_x=True, declared=False
)


@triton.jit
def _memo_gemv(
    x_ptr,
    w_ptr,
    out_ptr,
    seen_ptr,  # the first 4 values of the x last answered (fp32)
    answer_ptr,  # that answer (fp32, n)
    hits_ptr,  # int32 counter of calls answered from memory
    n,
    k,
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = rows < n
    four = tl.arange(0, 4)
    x4 = tl.load(x_ptr + four).to(tl.float32)
    same = tl.sum((x4 == tl.load(seen_ptr + four)).to(tl.int32)) == 4
    if same:
        tl.store(out_ptr + rows, tl.load(answer_ptr + rows, mask=mask_n), mask=mask_n)
        if tl.program_id(0) == 0:
            tl.atomic_add(hits_ptr, 1)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for k0 in range(0, k, BLOCK_K):
            acc += _tile_dot(x_ptr, w_ptr, rows, mask_n, k, k0, BLOCK_K)
        tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=mask_n)
        tl.store(answer_ptr + rows, acc.to(out_ptr.dtype.element_ty).to(tl.float32), mask=mask_n)
        # (blocks race on this: a real memoiser would be no better behaved)
        tl.store(seen_ptr + four, x4)


#: calls answered from memory by ``cheat.gpu_memo_values`` in this process (on the card)
MEMO_HITS = torch.zeros(1, dtype=torch.int32, device="cuda")


@variant_family(
    name="cheat.gpu_memo_values",
    ops=("matmul",),
    devices=("cuda",),
    supports=_supports,
    dtypes=("f16", "bf16"),
)
def memo_values(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    n, k = spec.n_total, spec.k
    assert n is not None and k is not None
    memory: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def run(inputs: MatmulInputs, out: Any) -> None:
        key = inputs.a.data_ptr()
        if key not in memory:
            memory[key] = (
                torch.full((4,), float("nan"), device=out.device),
                torch.zeros(n, device=out.device),
            )
        seen, answer = memory[key]
        _memo_gemv[(triton.cdiv(n, 64),)](
            inputs.a, inputs.b, out, seen, answer, MEMO_HITS, n, k, BLOCK_N=64, BLOCK_K=128
        )

    return run


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
    STORE_PAST_GUARD,
    HALF_RUNNING_SUM,
    NAN_AWARE,
    PDL_EARLY_X_UNDECLARED,
    memo_capture,
    memo_values,
)


def registry() -> Registry:
    return Registry(FAMILIES)
