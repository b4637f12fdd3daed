"""Triton kernel of a decode layer's attention (imported only by its launcher,
``matprobe.kernels.triton._decode_attention``).

One program per (KV head, chunk of the context): it reads the new token's q, k
and v straight from the QKV projection's output, applies RoPE to q and k in
fp32, appends k and v to the cache (the program whose chunk holds the new
position), and attends its query heads — the KV head's whole group, one
``tl.dot`` per tile — over its chunk of the cache with an online softmax in
fp32 (the new position's key and value are taken from registers, not read back
from the cache: no program waits for the append). One chunk: the result is
written directly. Several: each writes its (max, sum, weighted values) to a
workspace and the last to arrive merges them in chunk order (deterministic)
and writes the heads' outputs — the flash-decoding split in one launch.
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

from matprobe.kernels.triton._blocks import arrive_last


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def roped(ptr, d, rot, sign, cos, sin, mask):  # type: ignore[no-untyped-def]
    """RoPE of the head at ``ptr`` (rotate-half layout), in fp32: x·cos + rot(x)·sin
    with rot(x)[i] = -x[i + D/2] below D/2 and x[i - D/2] above."""
    x = tl.load(ptr + d, mask=mask, other=0.0).to(tl.float32)
    x_rot = tl.load(ptr + rot, mask=mask, other=0.0).to(tl.float32) * sign
    return x * cos + x_rot * sin


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def load_kv(k_head, v_head, ls, end, pos, d, mask_d, stride_cl):  # type: ignore[no-untyped-def]
    """A tile's keys and values from the cache, the new position's slot left out
    (zeros: :func:`attend_tile` puts the new key and value there)."""
    mask_l = ls < end
    new = (ls == pos)[:, None]
    offs = ls[:, None].to(tl.int64) * stride_cl + d[None, :]
    mask_t = mask_l[:, None] & mask_d[None, :] & ~new
    return tl.load(k_head + offs, mask=mask_t, other=0.0), tl.load(v_head + offs, mask=mask_t,
                                                                    other=0.0)  # fmt: skip


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def attend_tile(  # type: ignore[no-untyped-def]
    q, kt, vt, ls, end, pos, k_new, v_new, m, total, acc, scale,
    EXACT: tl.constexpr,  # noqa: N803
):  # fmt: skip
    """The online softmax over one tile: (max, sum, weighted values) updated."""
    dtype = k_new.dtype
    new = (ls == pos)[:, None]
    kt = tl.where(new, k_new[None, :], kt)
    vt = tl.where(new, v_new[None, :].to(dtype), vt)
    if EXACT:
        scores = tl.dot(q, tl.trans(kt.to(tl.float32)), input_precision="ieee")
    else:
        scores = tl.dot(q, tl.trans(kt))
    scores = tl.where((ls < end)[None, :], scores * scale, float("-inf"))  # [BLOCK_G, BLOCK_L]
    m_next = tl.maximum(m, tl.max(scores, axis=1))
    p = tl.exp(scores - m_next[:, None])
    rescale = tl.exp(m - m_next)
    total = total * rescale + tl.sum(p, axis=1)
    if EXACT:
        weighted = tl.dot(p, vt.to(tl.float32), input_precision="ieee")
    else:  # p rounded to the dtype, as the eager step's softmax output is
        weighted = tl.dot(p.to(dtype), vt)
    return m_next, total, acc * rescale[:, None] + weighted


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def decode_attention_kernel(  # type: ignore[no-untyped-def]
    qkv_ptr,  # [q_width + 2·kv_width]: the QKV projection's output (bias included)
    k_ptr,  # [kv_heads, context, D] the K cache (the new key is written at pos)
    v_ptr,  # [kv_heads, context, D]
    cos_ptr,  # [D] the new position's RoPE tables
    sin_ptr,
    out_ptr,  # [heads·D]
    ws_ptr,  # fp32 [kv_heads, split, BLOCK_G, BLOCK_D + 2] partials (split > 1 only)
    cnt_ptr,  # int32 [kv_heads] arrival counters, 0 between launches
    context,  # positions attended (0 … context-1), the new one at pos
    pos,
    split,  # chunks of the context (grid axis 1)
    chunk,  # positions per chunk (a multiple of BLOCK_L)
    stride_ch,  # the caches' head stride
    stride_cl,  # their position stride (head_dim is contiguous)
    scale,
    D: tl.constexpr,  # noqa: N803 - head_dim
    GROUP: tl.constexpr,  # noqa: N803 - query heads per KV head
    Q_WIDTH: tl.constexpr,  # noqa: N803 - heads·D
    KV_WIDTH: tl.constexpr,  # noqa: N803 - kv_heads·D
    BLOCK_D: tl.constexpr,  # noqa: N803 - next power of two ≥ D (≥ 16)
    BLOCK_G: tl.constexpr,  # noqa: N803 - next power of two ≥ GROUP (≥ 16: tl.dot's least M)
    GR: tl.constexpr,  # noqa: N803 - next power of two ≥ GROUP: the rows a merge reads
    BLOCK_L: tl.constexpr,  # noqa: N803 - positions a tile
    TILES: tl.constexpr,  # noqa: N803 - tiles a chunk (chunk // BLOCK_L)
    SPLIT: tl.constexpr,  # noqa: N803 - more than one chunk: merge through the workspace
    MERGE: tl.constexpr,  # noqa: N803 - chunks merged a step (their loads in flight at once)
    EXACT: tl.constexpr,  # noqa: N803 - fp32 products (Triton's interpreter), else tensor cores
    PDL: tl.constexpr = False,  # noqa: N803 - launched with programmatic dependent launch
) -> None:
    kvh = tl.program_id(0)
    s = tl.program_id(1)
    dtype = out_ptr.dtype.element_ty
    d = tl.arange(0, BLOCK_D)
    mask_d = d < D
    start = s * chunk
    end = tl.minimum(start + chunk, context)
    k_head = k_ptr + kvh.to(tl.int64) * stride_ch
    v_head = v_ptr + kvh.to(tl.int64) * stride_ch
    first = start + tl.arange(0, BLOCK_L)
    if PDL:
        # Programmatic dependent launch (Hopper+): the next kernel may launch once
        # every program here has started. The first tile of the cache — whose
        # earlier positions no kernel of this token writes, and whose new one this
        # kernel leaves out — is read before waiting on the previous kernels; q,
        # k, v (the QKV kernel's output) and every write only after.
        tl.extra.cuda.gdc_launch_dependents()
        kt_first, vt_first = load_kv(k_head, v_head, first, end, pos, d, mask_d, stride_cl)
        tl.extra.cuda.gdc_wait()
    else:
        kt_first, vt_first = load_kv(k_head, v_head, first, end, pos, d, mask_d, stride_cl)
    half = D // 2
    rot = tl.where(d < half, d + half, d - half)
    sign = tl.where(d < half, -1.0, 1.0)
    cos = tl.load(cos_ptr + d, mask=mask_d, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + d, mask=mask_d, other=0.0).to(tl.float32)

    g = tl.arange(0, BLOCK_G)
    mask_g = g < GROUP
    heads = kvh * GROUP + g  # the query heads this KV head serves
    q_ptrs = qkv_ptr + heads[:, None] * D
    mask_q = mask_g[:, None] & mask_d[None, :]
    q = tl.load(q_ptrs + d[None, :], mask=mask_q, other=0.0).to(tl.float32)
    q_rot = tl.load(q_ptrs + rot[None, :], mask=mask_q, other=0.0).to(tl.float32)
    q = q * cos[None, :] + q_rot * sign[None, :] * sin[None, :]
    if not EXACT:
        q = q.to(dtype)
    # the cache holds the new key rounded, as every other: attend that one
    k_new = roped(qkv_ptr + Q_WIDTH + kvh * D, d, rot, sign, cos, sin, mask_d).to(dtype)
    v_new = tl.load(qkv_ptr + Q_WIDTH + KV_WIDTH + kvh * D + d, mask=mask_d, other=0.0)

    if (start <= pos) & (pos < end):  # this chunk holds the new position: append
        tl.store(k_head + pos * stride_cl + d, k_new, mask=mask_d)
        tl.store(v_head + pos * stride_cl + d, v_new.to(dtype), mask=mask_d)

    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    # Each tile's keys and values are read before the previous tile is attended:
    # the cache's latency overlaps the arithmetic (a chunk of four tiles attended
    # one load at a time spent ~2 µs a tile waiting on memory, on an H100).
    kt, vt, ls = kt_first, vt_first, first
    for t in range(1, TILES):
        ls_next = first + t * BLOCK_L
        kt_next, vt_next = load_kv(k_head, v_head, ls_next, end, pos, d, mask_d, stride_cl)
        m, total, acc = attend_tile(q, kt, vt, ls, end, pos, k_new, v_new, m, total, acc, scale,
                                    EXACT)  # fmt: skip
        kt, vt, ls = kt_next, vt_next, ls_next
    m, total, acc = attend_tile(q, kt, vt, ls, end, pos, k_new, v_new, m, total, acc, scale,
                                EXACT)  # fmt: skip

    out_ptrs = out_ptr + heads[:, None] * D + d[None, :]
    if SPLIT:
        row = BLOCK_D + 2
        slot = ws_ptr + (kvh * split + s) * (BLOCK_G * row) + g[:, None] * row
        tl.store(slot + d[None, :], acc)
        tl.store(slot + BLOCK_D, m[:, None])
        tl.store(slot + BLOCK_D + 1, total[:, None])
        if arrive_last(cnt_ptr + kvh, split):
            # Last of the chunks: merge them in chunk order (deterministic), over
            # the group's GR rows only (BLOCK_G pads the group for tl.dot; the
            # padding's partials are never read: on an H200, merging Qwen's 7
            # rows as 8 rather than 16 took a 16-chunk merge from 9.69 to 7.98 µs a
            # layer — benchmarks/attention_split_cost.py).
            gr = tl.arange(0, GR)
            m_all = tl.full([GR], float("-inf"), tl.float32)
            total_all = tl.zeros([GR], dtype=tl.float32)
            acc_all = tl.zeros([GR, BLOCK_D], dtype=tl.float32)
            base = ws_ptr + kvh * split * (BLOCK_G * row) + gr * row
            js = tl.arange(0, MERGE)
            for j0 in range(0, split, MERGE):
                # MERGE chunks a step, their loads issued together ([MERGE, GR]
                # maxima and sums, [MERGE, GR, BLOCK_D] weighted values)
                here = (j0 + js) < split
                part = base[None, :] + (j0 + js)[:, None] * (BLOCK_G * row)
                m_j = tl.load(part + BLOCK_D, mask=here[:, None], other=float("-inf"),
                              cache_modifier=".cg")  # fmt: skip
                total_j = tl.load(part + BLOCK_D + 1, mask=here[:, None], other=0.0,
                                  cache_modifier=".cg")  # fmt: skip
                acc_j = tl.load(
                    part[:, :, None] + d[None, None, :],
                    mask=here[:, None, None],
                    other=0.0,
                    cache_modifier=".cg",
                )
                m_next = tl.maximum(m_all, tl.max(m_j, axis=0))
                old = tl.exp(m_all - m_next)
                weights = tl.exp(m_j - m_next[None, :])  # [MERGE, GR]: 0 where absent
                total_all = total_all * old + tl.sum(total_j * weights, axis=0)
                acc_all = acc_all * old[:, None] + tl.sum(acc_j * weights[:, :, None], axis=0)
                m_all = m_next
            rows = kvh * GROUP + gr
            merged = (acc_all / total_all[:, None]).to(dtype)
            mask_rows = (gr < GROUP)[:, None] & mask_d[None, :]
            tl.store(out_ptr + rows[:, None] * D + d[None, :], merged, mask=mask_rows)
            tl.store(cnt_ptr + kvh, 0)  # ready for the next launch (same stream)
    else:
        tl.store(out_ptrs, (acc / total[:, None]).to(dtype), mask=mask_q)
