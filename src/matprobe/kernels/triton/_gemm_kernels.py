"""Triton kernel of the ``triton.gemm`` family (imported only by its builder).

``out[b] = alpha * (A[b] @ B[b]) + beta * C0[b] + bias`` as a tiled GEMM in the
style of Triton's tutorial 03: each program owns one BLOCK_M × BLOCK_N tile of
one batch entry and walks K in BLOCK_K steps with ``tl.dot`` into an fp32
accumulator; the epilogue (alpha, beta·C0, bias) runs in fp32 and the result is
cast once on store.

Layouts: the kernel indexes A as ``[m, k]`` and B as ``[k, n]`` through the
strides it is given, so all four tA/tB storage layouts are the same kernel
with different strides (the wrapper passes the strides of the logical views).

Program order: tiles are numbered in groups of GROUP_M tile-rows (the
tutorial's "grouped ordering"), so programs that run at the same time share
A rows and B columns in L2 instead of streaming all of B once per tile-row.

Ragged edges: row and column indices of the *loads* wrap modulo m and n (always
in bounds, no mask on the M/N edges, the tutorial's trick); the store is
masked. K is masked only when BLOCK_K does not divide k (EVEN_K).

f32 inputs: ``tl.dot`` would use TF32 by default (~5e-4 relative error), which
fails matprobe's f32 tolerance; IEEE selects ``input_precision="ieee"`` (full
fp32 products, no tensor cores).

bf16 in the Triton interpreter (CPU): its ``tl.dot`` multiplies the uint16 bit
patterns it stores bf16 in (triton 3.9), so the wrapper sets INTERPRETED_BF16
there and the tiles are upcast to f32 first (bf16 products are exact in fp32:
the same sums the tensor cores make). Compiled for a GPU the flag is off and
the branch is not generated.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import epilogue_terms, store_out


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def gemm_kernel(  # type: ignore[no-untyped-def]
    a_ptr,  # A viewed as [batch, m, k]
    b_ptr,  # B viewed as [batch, k, n]
    c0_ptr,  # [batch, m, n], read only when HAS_C0
    bias_ptr,  # [n], read only when HAS_BIAS
    out_ptr,  # [batch, m, n]
    m,
    n,
    k,
    stride_ab,
    stride_am,
    stride_ak,
    stride_bb,
    stride_bk,
    stride_bn,
    stride_cb,
    stride_cm,
    stride_cn,
    stride_bias,
    stride_ob,
    stride_om,
    stride_on,
    alpha,
    beta,
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    IEEE: tl.constexpr,  # noqa: N803 - f32 operands: exact fp32 dot, not TF32
    INTERPRETED_BF16: tl.constexpr,  # noqa: N803 - CPU interpreter with bf16 operands
    EVEN_K: tl.constexpr,  # noqa: N803 - BLOCK_K divides k: no K mask
    BLOCK_M: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
    GROUP_M: tl.constexpr,  # noqa: N803
) -> None:
    # Grouped ordering: GROUP_M tile-rows are walked column by column.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(m, BLOCK_M)
    num_pid_n = tl.cdiv(n, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    # Batch base in int64: batch · m · k may pass 2**31 elements.
    pid_b = tl.program_id(1).to(tl.int64)

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Loads wrap at the M/N edges (in bounds, unmasked); those rows and
    # columns are never stored. Row/column offsets in int64 (n · k of the
    # lm_head is 136M; larger matrices must not wrap around int32).
    rows_a = (rows % m).to(tl.int64)
    cols_b = (cols % n).to(tl.int64)
    a_ptrs = a_ptr + pid_b * stride_ab + (rows_a[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + pid_b * stride_bb + (offs_k[:, None] * stride_bk + cols_b[None, :] * stride_bn)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(k, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = k - kk * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if INTERPRETED_BF16:
            # The interpreter's dot multiplies bf16 bit patterns as integers:
            # upcast (exact) and take fp32 products, the sums the GPU makes.
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        elif IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    rows64 = rows.to(tl.int64)
    cols64 = cols.to(tl.int64)
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    c0_ptrs = c0_ptr + pid_b * stride_cb + rows64[:, None] * stride_cm + cols64[None, :] * stride_cn
    bias_ptrs = bias_ptr + cols64[None, :] * stride_bias
    c0_term, bias_term = epilogue_terms(
        c0_ptrs, mask, bias_ptrs, (cols < n)[None, :], beta, HAS_C0, HAS_BIAS
    )
    out_ptrs = (
        out_ptr + pid_b * stride_ob + rows64[:, None] * stride_om + cols64[None, :] * stride_on
    )
    store_out(acc, c0_term, bias_term, alpha, out_ptrs, mask)
