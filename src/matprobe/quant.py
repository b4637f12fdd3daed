"""Q8_0 weights (GGUF-compatible, DESIGN.md §2), in torch.

A block covers 32 consecutive weights along K: an fp16 scale ``d`` and 32 int8
``q``, ``w = d·q``, 34 bytes. Quantizing follows ggml's reference
(``quantize_row_q8_0_ref``) step for step in fp32 — ``d = amax / 127``,
``q = roundf(w · (1/d))`` with round-half-away-from-zero, ``d`` stored as fp16 —
so the bytes equal those of the ``gguf`` package's quantizer (tests check it
bit for bit). Note that ``q`` is computed with the fp32 ``d``, the stored scale
is its fp16 rounding: ``d·q`` is what every reader computes, and what the
harness's float64 reference is made from.

Layouts: GGUF rows of blocks (``[..., K/32, 34]`` bytes: scale then quants),
and the *split* layout fast kernels read — int8 quants ``[..., K]`` plus fp16
scales ``[..., K/32]``. :func:`to_gguf_blocks` / :func:`from_gguf_blocks`
convert between them, exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from matprobe.errors import MatprobeError
from matprobe.spec import Q8_0_BLOCK, Q8_0_BLOCK_BYTES

if TYPE_CHECKING:
    import torch


class QuantError(MatprobeError):
    """A tensor that cannot be stored as Q8_0 (K not a multiple of 32, …)."""


def check_k(k: int) -> None:
    if k % Q8_0_BLOCK:
        raise QuantError(f"Q8_0 needs K a multiple of {Q8_0_BLOCK} (blocks of 32), got K={k}")


def quantize_q8_0(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 quants ``[..., K]``, fp16 scales ``[..., K/32]``) of ``weights`` (any
    float dtype, converted to fp32 first as ggml does), blocks along the last axis."""
    import torch

    k = weights.shape[-1]
    check_k(k)
    blocks = weights.to(torch.float32).reshape(*weights.shape[:-1], k // Q8_0_BLOCK, Q8_0_BLOCK)
    # Tensor by tensor: CUDA divides by a Python scalar as a multiply by its
    # reciprocal (off by an ulp at times), so the quants would differ from gguf's
    # and from the CPU's; a tensor divisor divides correctly rounded everywhere.
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    d = amax / torch.full_like(amax, 127)
    inverse = torch.where(d == 0, torch.zeros_like(d), torch.ones_like(d) / d)
    scaled = blocks * inverse
    # roundf (half away from zero) as gguf writes it: floor(a) + floor(2·(a − floor(a))),
    # exact in fp32 where floor(a + 0.5) can round a + 0.5 up to the next integer.
    magnitude = scaled.abs()
    floored = torch.floor(magnitude)
    rounded = torch.sign(scaled) * (floored + torch.floor(2 * (magnitude - floored)))
    quants = rounded.to(torch.int8).reshape(weights.shape)
    return quants, d.squeeze(-1).to(torch.float16)


def dequantize_q8_0(
    quants: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``d·q`` per weight, in ``dtype`` (default fp32, where every product is exact:
    an 11-bit scale times an 8-bit quant)."""
    import torch

    target = dtype or torch.float32
    k = quants.shape[-1]
    check_k(k)
    blocks = quants.reshape(*quants.shape[:-1], k // Q8_0_BLOCK, Q8_0_BLOCK).to(target)
    return (blocks * scales.to(target).unsqueeze(-1)).reshape(quants.shape)


def to_gguf_blocks(quants: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The GGUF bytes: ``[..., K/32 · 34]`` uint8, each block its fp16 scale
    (little-endian) then its 32 quants."""
    import torch

    k = quants.shape[-1]
    check_k(k)
    lead = quants.shape[:-1]
    q = quants.contiguous().view(torch.uint8).reshape(*lead, k // Q8_0_BLOCK, Q8_0_BLOCK)
    d = scales.contiguous().view(torch.uint8).reshape(*lead, k // Q8_0_BLOCK, 2)
    return torch.cat([d, q], dim=-1).reshape(*lead, (k // Q8_0_BLOCK) * Q8_0_BLOCK_BYTES)


def from_gguf_blocks(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(quants, scales) from GGUF bytes ``[..., K/32 · 34]``."""
    import torch

    width = data.shape[-1]
    if width % Q8_0_BLOCK_BYTES:
        raise QuantError(f"{width} bytes a row is not a whole number of 34-byte Q8_0 blocks")
    lead = data.shape[:-1]
    blocks = data.contiguous().reshape(*lead, width // Q8_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES)
    scales = blocks[..., :2].contiguous().view(torch.float16).reshape(*lead, -1)
    quants = blocks[..., 2:].contiguous().view(torch.int8).reshape(*lead, -1)
    return quants, scales


def quantize_x_int8_block32(x: torch.Tensor) -> torch.Tensor:
    """The activations an int8-dot kernel computes with (llama.cpp's mmvq; the
    ``int8_block32`` declaration, ``VariantFamily.activation_quant``): per block of 32
    along the last axis, ``d = max|x| / 127`` and ``q = round(x · (1/d))`` half away
    from zero, each step one correctly rounded fp32 operation (tensor by tensor: CUDA
    divides by a Python scalar as a multiply by its reciprocal) — so ``q`` is the
    kernel's own, on any device. Returns ``q · d`` in float64 (exact), shaped like x."""
    import torch

    check_k(x.shape[-1])
    blocks = x.to(torch.float32).reshape(*x.shape[:-1], -1, Q8_0_BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    d = amax / torch.full_like(amax, 127.0)
    zero = d == 0
    inverse = torch.where(zero, 0.0, torch.ones_like(d) / torch.where(zero, 1.0, d))
    scaled = blocks * inverse
    magnitude = scaled.abs()
    floored = torch.floor(magnitude)
    rounded = floored + torch.floor(2.0 * (magnitude - floored))
    q = torch.where(scaled < 0, -rounded, rounded)
    return (q.to(torch.float64) * d.to(torch.float64)).reshape(x.shape)
