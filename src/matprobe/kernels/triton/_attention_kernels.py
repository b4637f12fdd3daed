"""Triton kernels of the ``triton.attn_bmv`` family (imported only by its builder).

Both compute ``out[b, 0, :] = alpha * (A[b, 0, :] @ B[b]) + beta * C0[b, 0, :] + bias``
for every batch entry (attention head) in ONE launch, with m = 1:

* ``attn_scores_kernel`` — B stored ``[batch, n, k]`` (tB = 1: the K cache,
  n = context L keys, k = head_dim). A program owns BLOCK_N keys of one head:
  it loads their ``[BLOCK_N, BLOCK_K]`` tile (coalesced along head_dim) and
  the query once, and reduces along head_dim. head_dim is a compile-time
  constant K, so for K <= BLOCK_K there is no loop at all.
* ``attn_values_kernel`` — B stored ``[batch, k, n]`` (tB = 0: the V cache,
  k = context L rows, n = head_dim). A program owns BLOCK_K rows of L and
  BLOCK_N columns of one head: ONE ``[BLOCK_K, BLOCK_N]`` tile load (coalesced
  along head_dim), a column sum, no loop. When L needs more than one chunk
  (SPLIT_P2 > 1) each program stores its fp32 partial to a workspace and bumps
  a per-(head, column block) counter; the program that arrives last sums the
  partials in chunk order (deterministic), applies the epilogue, stores the
  output and resets the counter to 0 for the next launch.

All sums are fp32; the epilogue runs in fp32 before one cast on store. C0 and
the bias are loaded before the reduction so their latency overlaps it.
Kept in its own module so that importing ``matprobe.kernels.triton.attention``
never imports triton, and so that the family can fingerprint this file's text.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import (
    arrive_last,
    block_outputs,
    row_block,
    row_epilogue_terms,
    row_out_ptrs,
    row_ptrs,
    row_store,
)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def _masked_query_keys(q_base, k_rows, ks, mask_n, K, stride_qk, stride_kk):  # type: ignore[no-untyped-def]  # noqa: N803
    """The query at head_dim indices ``ks`` and the keys' ``[BLOCK_N, len(ks)]`` tile,
    zeros past K and on the keys ``mask_n`` leaves out: a head_dim that does not
    fill its tile, or one chunk of a long one."""
    mask_k = ks < K
    q = tl.load(q_base + ks * stride_qk, mask=mask_k, other=0.0)
    kt = tl.load(k_rows + ks[None, :] * stride_kk, mask=mask_n[:, None] & mask_k[None, :],
                 other=0.0)  # fmt: skip
    return q, kt


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def attn_scores_kernel(  # type: ignore[no-untyped-def]
    q_ptr,  # [batch, 1, K] (A viewed as [batch, m, k])
    k_ptr,  # [batch, n, K] (B stored [batch, n, k], tB = 1)
    epilogue_ptrs,  # (C0, bias, out): C0 read only when HAS_C0, the bias when HAS_BIAS
    n,
    stride_qb,
    stride_qk,
    stride_kb,
    stride_kn,
    stride_kk,
    epilogue_args,  # their strides, alpha, beta
    K: tl.constexpr,  # noqa: N803 - head_dim, fixed per model
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
) -> None:
    pid_b, row0, rows, offs_n, mask_n = row_block(n, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    # Epilogue operands first: their loads overlap the tile's.
    c0_term, bias_term = row_epilogue_terms(
        pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS
    )

    q_base = q_ptr + pid_b * stride_qb
    k_rows = row_ptrs(k_ptr, pid_b, row0, rows, stride_kb, stride_kn)
    if K <= BLOCK_K:
        # The whole head_dim in one tile: one load of K rows, one of q, one reduction.
        if K == BLOCK_K:
            q = tl.load(q_base + offs_k * stride_qk)
            kt = tl.load(k_rows + offs_k[None, :] * stride_kk, mask=mask_n[:, None], other=0.0)
        else:
            q, kt = _masked_query_keys(q_base, k_rows, offs_k, mask_n, K, stride_qk, stride_kk)
        acc = tl.sum(kt.to(tl.float32) * q.to(tl.float32)[None, :], axis=1)
    else:
        # A long row: walk it in BLOCK_K chunks, accumulating in a 2-D fp32 tile
        # so the cross-lane reduction happens once, after the loop.
        acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            q, kt = _masked_query_keys(q_base, k_rows, k0 + offs_k, mask_n, K, stride_qk, stride_kk)
            acc2 += kt.to(tl.float32) * q.to(tl.float32)[None, :]
        acc = tl.sum(acc2, axis=1)

    out_ptrs = row_out_ptrs(pid_b, offs_n, epilogue_ptrs, epilogue_args)
    row_store(acc, c0_term, bias_term, out_ptrs, mask_n, epilogue_args)


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def attn_values_kernel(  # type: ignore[no-untyped-def]
    p_ptr,  # [batch, 1, k] (A viewed as [batch, m, k]): the probabilities
    v_ptr,  # [batch, k, N] (B stored [batch, k, n], tB = 0)
    epilogue_ptrs,  # (C0, bias, out): C0 read only when HAS_C0, the bias when HAS_BIAS
    ws_ptr,  # fp32 [batch * n_blocks, SPLIT_P2, BLOCK_N] partials (only when SPLIT_P2 > 1)
    cnt_ptr,  # int32 [batch * n_blocks] arrival counters, 0 between launches
    k,
    split,  # chunks of BLOCK_K rows that L is cut into (grid axis 1)
    stride_pb,
    stride_pk,
    stride_vb,
    stride_vk,
    stride_vn,
    epilogue_args,  # their strides, alpha, beta
    N: tl.constexpr,  # noqa: N803 - head_dim, fixed per model
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
    SPLIT_P2: tl.constexpr,  # noqa: N803 - next power of two >= split; 1: no reduction
    MASK_N: tl.constexpr,  # noqa: N803 - N % BLOCK_N != 0: the last column block is ragged
    PDL: tl.constexpr = False,  # noqa: N803 - launched with programmatic dependent launch
) -> None:
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_b = tl.program_id(2).to(tl.int64)
    _, cols, offs_n, mask_n = block_outputs(pid_n, N, BLOCK_N)
    row0 = pid_s * BLOCK_K
    rows = tl.arange(0, BLOCK_K)
    mask_k = (row0 + rows) < k

    p_base = p_ptr + pid_b * stride_pb + row0.to(tl.int64) * stride_pk
    v_base = v_ptr + pid_b * stride_vb + row0.to(tl.int64) * stride_vk
    v_ptrs = v_base + rows[:, None] * stride_vk + offs_n[None, :] * stride_vn
    # (an if block, not a conditional expression: Triton folds it on the constexpr)
    if MASK_N:  # noqa: SIM108
        v_mask = mask_k[:, None] & mask_n[None, :]
    else:
        v_mask = mask_k[:, None]  # broadcast along n by the load
    if PDL:
        # Programmatic dependent launch (Hopper+), for weights only (the builder
        # refuses a KV cache): the next kernel may launch once every program here
        # has started, and this one reads its weight tile before waiting on the
        # previous kernel, which never writes weights. Everything the previous
        # kernel may write or read (the activations, C0, the bias, out, the
        # workspace and counters) is touched only after the wait.
        tl.extra.cuda.gdc_launch_dependents()
        v = tl.load(v_ptrs, mask=v_mask, other=0.0)
        tl.extra.cuda.gdc_wait()
    if SPLIT_P2 == 1:
        c0_term, bias_term = row_epilogue_terms(
            pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS
        )
    out_ptrs = row_out_ptrs(pid_b, offs_n, epilogue_ptrs, epilogue_args)
    p = tl.load(p_base + rows * stride_pk, mask=mask_k, other=0.0)
    if not PDL:
        v = tl.load(v_ptrs, mask=v_mask, other=0.0)
    acc = tl.sum(p.to(tl.float32)[:, None] * v.to(tl.float32), axis=0)

    if SPLIT_P2 == 1:
        row_store(acc, c0_term, bias_term, out_ptrs, mask_n, epilogue_args, MASK_N)
    else:
        slot = pid_b * tl.cdiv(N, BLOCK_N) + pid_n
        ws_slot = ws_ptr + slot * (SPLIT_P2 * BLOCK_N)
        tl.store(ws_slot + pid_s * BLOCK_N + cols, acc)
        if arrive_last(cnt_ptr + slot, split):
            # Last of the chunks: sum all partials in chunk order (deterministic).
            c0_term, bias_term = row_epilogue_terms(
                pid_b, offs_n, mask_n, epilogue_ptrs, epilogue_args, HAS_C0, HAS_BIAS
            )
            chunks = tl.arange(0, SPLIT_P2)
            parts = tl.load(
                ws_slot + chunks[:, None] * BLOCK_N + cols[None, :],
                mask=(chunks < split)[:, None],
                other=0.0,
                cache_modifier=".cg",  # from L2: written by other SMs
            )
            total = tl.sum(parts, axis=0)
            row_store(total, c0_term, bias_term, out_ptrs, mask_n, epilogue_args, MASK_N)
            tl.store(cnt_ptr + slot, 0)  # ready for the next launch (same stream)
