"""A decode layer's attention in one kernel: RoPE, the KV-cache append and
grouped-query attention over the cache (scores, fp32 softmax, weighted values).

:func:`decode_attention` takes the QKV projection's output ``[1, (heads +
2·kv_heads)·head_dim]`` as it comes (bias already added), the layer's caches
``[kv_heads, context, head_dim]`` and the new position's RoPE tables, writes the
new token's roped key and its value at ``pos`` and returns the heads' outputs
``[1, heads·head_dim]`` — what ``matprobe token``'s ``layer`` mode runs between
its norm+QKV and o_proj+residual kernels (the step's RoPE, KV append, both
attention products and the softmax: five torch ops, or three Inductor kernels,
become one launch).

The context is cut into chunks of :func:`default_chunk` positions, one program
per (KV head, chunk); several chunks merge in the same launch (the last program
to finish a head merges its chunks: flash-decoding without a second kernel),
through a workspace and arrival counters kept per (device, shape) and reset by
the kernel itself. RoPE, the softmax and the merge are fp32; q·k and p·v run on
tensor cores in the cache's dtype with fp32 sums (roped q and p rounded to it
once, as the eager step rounds them), and the result is rounded once on store.
In Triton's interpreter (``TRITON_INTERPRET=1``) the products are fp32 instead:
it multiplies bf16 tiles as raw integers (numpy has no bf16).

Importing this module never imports triton.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from matprobe.kernels.triton import _common as common

if TYPE_CHECKING:
    import torch

NAME = "triton.decode_attention"

#: Positions a tile: a tl.dot of [group, 64] × [64, BLOCK_L] per step. Each tile
#: of a program costs a memory round trip more than its bytes (at context 1024 on
#: an H200, one program of eight 128-position tiles per KV head took 13.7 µs a
#: layer, eight programs of one tile 6.4), so tiles are as long as the registers
#: allow: 128 positions beat 64 at every context and model measured (Qwen2.5-0.5B
#: at 128: 2.92 against 3.33 µs a layer; at 4096: 9.70 against 11.51 —
#: ``benchmarks/attention_sweep.py``, BENCHMARKS.md, eighteenth session).
BLOCK_L = 128
#: Chunks a KV head is cut into by default, at most: the last program merges them
#: from L2 (:data:`MERGE` at a time), which longer chunks make cheaper than more.
MAX_CHUNKS = 16
#: Programs worth launching: the chunk is shortened until the grid has this many
#: (an H100 has 132 SMs), but never below one tile.
TARGET_PROGRAMS = 128
#: Tiles a chunk holds at least: one (a chunk of one 128-position tile and a merge
#: beat a chunk of two at context 1024: 6.4 against 8.2 µs a layer).
MIN_TILES = 1
#: Chunks the merging program reads at once (their loads in flight together) —
#: :data:`MERGE_WIDE` where there are more than this many: at context 4096 sixteen
#: chunks merged in one step took 9.70 µs a layer, in two steps of eight 11.10.
MERGE = 8
MERGE_WIDE = 16
#: tl.dot's least M and N: the group and head_dim are padded up to it.
MIN_DOT = 16

KERNELS_SOURCE: str = common.kernels_source(__file__, "_decode_attention_kernels.py")


def _pow2(n: int, least: int = 1) -> int:
    return max(least, 1 << (max(n, 1) - 1).bit_length())


def default_chunk(context: int, kv_heads: int) -> int:
    """Positions a program attends: at least :data:`MIN_TILES` tiles, enough chunks
    for :data:`TARGET_PROGRAMS` programs over the KV heads, at most
    :data:`MAX_CHUNKS` of them (on an H200 with 128-position tiles, Qwen2.5-0.5B:
    one chunk at context 128, 2.92 µs a layer; 8 of 128 at 1024, 6.38 — 4 of 256
    8.15; 16 of 256 at 4096, 9.70 — 32 of 128 10.46, 8 of 512 11.60:
    ``benchmarks/attention_sweep.py``)."""
    tiles = -(-context // BLOCK_L)
    want = max(1, min(MAX_CHUNKS, TARGET_PROGRAMS // max(kv_heads, 1)))
    per_chunk = max(MIN_TILES, -(-tiles // want))
    return per_chunk * BLOCK_L


#: Workspaces and counters by (device, kv_heads, chunks, BLOCK_G, BLOCK_D):
#: a CUDA graph records their addresses, so one shape keeps the same ones.
_scratch: dict[tuple[str, int, int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _scratch_for(
    device: torch.device, kv_heads: int, chunks: int, block_g: int, block_d: int
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    key = (str(device), kv_heads, chunks, block_g, block_d)
    if key not in _scratch:
        ws = torch.empty((kv_heads, chunks, block_g, block_d + 2), dtype=torch.float32,
                         device=device)  # fmt: skip
        counters = torch.zeros((kv_heads,), dtype=torch.int32, device=device)
        _scratch[key] = (ws, counters)
    return _scratch[key]


def decode_attention(
    qkv: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    heads: int,
    pos: int,
    scale: float,
    chunk: int | None = None,
    warps: int = 4,
    out: torch.Tensor | None = None,
    pdl: bool = False,
) -> torch.Tensor:
    """The heads' attention outputs ``[1, heads·head_dim]`` of the new token whose
    q, k, v are ``qkv``'s, over ``k_cache``/``v_cache`` ``[kv_heads, context,
    head_dim]`` with the new key and value written at ``pos`` first.

    ``chunk``: positions a program (a multiple of :data:`BLOCK_L`; None:
    :func:`default_chunk`). ``pdl``: launched with programmatic dependent launch
    (Hopper+, never in the interpreter): the first tile of the cache is read
    before waiting on the kernels before it."""
    from matprobe.kernels.triton._decode_attention_kernels import decode_attention_kernel

    kv_heads, context, head_dim = k_cache.shape
    problem = None
    if heads % kv_heads:
        problem = f"{heads} query heads do not group over {kv_heads} KV heads"
    elif head_dim % 2:
        problem = f"head_dim must be even for RoPE, got {head_dim}"
    elif qkv.numel() != (heads + 2 * kv_heads) * head_dim or not qkv.is_contiguous():
        problem = f"qkv must be {(heads + 2 * kv_heads) * head_dim} contiguous values"
    elif v_cache.shape != k_cache.shape or v_cache.stride() != k_cache.stride():
        problem = "the K and V caches must have one shape and one layout"
    elif k_cache.stride(2) != 1:
        problem = "the caches' head_dim must be contiguous"
    elif not 0 <= pos < context:
        problem = f"position {pos} is outside the cache's {context}"
    elif cos.numel() != head_dim or sin.numel() != head_dim:
        problem = f"the RoPE tables must hold head_dim = {head_dim} values"
    chunk = default_chunk(context, kv_heads) if chunk is None else chunk
    if problem is None and (chunk < BLOCK_L or chunk % BLOCK_L):
        problem = f"a chunk is a positive multiple of {BLOCK_L} positions, got {chunk}"
    chunks = -(-context // chunk)
    if problem is not None:
        raise ValueError(f"{NAME}: {problem}")
    group = heads // kv_heads
    block_g, block_d = _pow2(group, MIN_DOT), _pow2(head_dim, MIN_DOT)
    y = qkv.new_empty((1, heads * head_dim)) if out is None else out
    ws, counters = _scratch_for(qkv.device, kv_heads, chunks, block_g, block_d)
    decode_attention_kernel[(kv_heads, chunks)](
        qkv, k_cache, v_cache, cos, sin, y, ws, counters,
        context, pos, chunks, chunk, k_cache.stride(0), k_cache.stride(1), float(scale),
        D=head_dim, GROUP=group, Q_WIDTH=heads * head_dim, KV_WIDTH=kv_heads * head_dim,
        BLOCK_D=block_d, BLOCK_G=block_g, GR=_pow2(group), BLOCK_L=BLOCK_L, TILES=chunk // BLOCK_L,
        SPLIT=chunks > 1, MERGE=MERGE_WIDE if chunks > MERGE else MERGE,
        EXACT=os.environ.get("TRITON_INTERPRET") == "1",
        num_warps=warps, **(common.PDL_CONSTANTS if pdl else {}),
    )  # fmt: skip
    return y
