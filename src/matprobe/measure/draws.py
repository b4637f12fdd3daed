"""Seeded uniform draws that are the same numbers on every device.

The harness's inputs must be a function of (spec, seed) alone, so that a FAIL on
one machine is the same problem on another. A library generator is not: torch's
CPU generator (mt19937) is one stream on one core — seconds for the LM head's
136 M weights, paid again by every worker process that validates it — and its
CUDA generator maps elements to values by launch geometry, which depends on the
card. So the draws here are a counter-based hash: element ``i`` of stream ``s``
under ``seed`` is ``hash(hash(low32(i) ^ key(seed, s)) ^ high32(i))``, a pure
function of its index, computed where the tensor is wanted — vectorized torch
integer arithmetic on a GPU (milliseconds), numpy's uint32 arithmetic on the CPU
— and bit-identical on both (tests/test_draws.py holds them to it).

A draw is ``(2·(h >> 9) + 1) / 2²³ − 1``: 23 random bits, an odd multiple of
2⁻²³ in (−1, 1), exact in float32 and never zero (zeros hide unwritten outputs).
Everything after it — the scale, the cast to fp16 or bf16 — is one correctly
rounded float32 operation at a time, the same on every IEEE device.

The hash is Chris Wellons' ``lowbias32`` (two xor-shift-multiply rounds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_MASK32 = 0xFFFFFFFF
_MUL1, _MUL2 = 0x7FEB352D, 0x846CA68B
#: Elements hashed at a time: bounds the temporaries (a few of this many int64 on
#: a GPU) whatever the tensor's size.
CHUNK = 1 << 22
#: Elements hashed at a time on the CPU: the hash makes ~20 passes over a chunk,
#: each cheap while the chunk stays in a core's cache. The LM head's 136 M draws
#: took 4.6–5.7 s in chunks of 4 M and 0.8–1.7 s in chunks of 64 K (2-core VM).
CPU_CHUNK = 1 << 16


def hash32(x: int) -> int:
    """``lowbias32`` of one 32-bit value (the scalar form of the vectorized hashes)."""
    x ^= x >> 16
    x = (x * _MUL1) & _MASK32
    x ^= x >> 15
    x = (x * _MUL2) & _MASK32
    return x ^ (x >> 16)


def stream_key(seed: int, stream: int) -> int:
    """The 32-bit key of stream ``stream`` (one tensor of an input set) under ``seed``."""
    return hash32((hash32(seed & _MASK32) ^ (seed >> 32) * 0x9E3779B9 + stream) & _MASK32)


def uniform(shape: tuple[int, ...], seed: int, stream: int, device: Any = "cpu") -> torch.Tensor:
    """float32 draws in (−1, 1) of ``shape`` on ``device``, a function of (seed,
    stream, element index) only: the same values on every device."""
    import torch

    numel = 1
    for size in shape:
        numel *= size
    key = stream_key(seed, stream)
    where = torch.device(device)
    if where.type == "cuda":
        out = torch.empty(numel, dtype=torch.float32, device=where)
        for start in range(0, numel, CHUNK):
            stop = min(numel, start + CHUNK)
            out[start:stop] = uniform_torch(stop - start, key, start, where)
        return out.reshape(shape)
    values = uniform_numpy(numel, key)
    return torch.from_numpy(values).reshape(shape).to(where)


def uniform_numpy(numel: int, key: int, start: int = 0) -> Any:
    """Elements ``start … start + numel`` of the stream with ``key`` (numpy float32):
    uint32 arithmetic wraps as the hash wants, :data:`CPU_CHUNK` elements at a time,
    in place."""
    import numpy as np

    u32, u64 = np.uint32, np.uint64
    out = np.empty(numel, dtype=np.float32)
    offsets = np.arange(CPU_CHUNK, dtype=u64)
    index = np.empty(CPU_CHUNK, dtype=u64)
    x, scratch = np.empty(CPU_CHUNK, dtype=u32), np.empty(CPU_CHUNK, dtype=u32)
    for lo in range(0, numel, CPU_CHUNK):
        m = min(numel - lo, CPU_CHUNK)
        i, h, t = index[:m], x[:m], scratch[:m]
        np.add(offsets[:m], u64(start + lo), out=i)
        np.bitwise_and(i, u64(_MASK32), out=h, casting="unsafe")  # the low word
        np.bitwise_xor(h, u32(key), out=h)
        _hash_numpy(h, t)
        np.right_shift(i, u64(32), out=t, casting="unsafe")  # the high word
        np.bitwise_xor(h, t, out=h)
        np.right_shift(_hash_numpy(h, t), u32(9), out=h)
        o = out[lo : lo + m]
        o[...] = h  # < 2²³: exact in float32, as is every step after it
        o *= np.float32(2)
        o += np.float32(1)
        o *= np.float32(2.0**-23)
        o -= np.float32(1)
    return out


def _hash_numpy(x: Any, scratch: Any = None) -> Any:
    """``lowbias32`` of every element of the uint32 array ``x``, in place (``scratch``:
    an array of its shape to use); ``x``."""
    import numpy as np

    u32 = np.uint32
    t = np.empty_like(x) if scratch is None else scratch
    with np.errstate(over="ignore"):
        for shift, multiplier in ((16, _MUL1), (15, _MUL2)):
            np.right_shift(x, u32(shift), out=t)
            np.bitwise_xor(x, t, out=x)
            np.multiply(x, u32(multiplier), out=x)
        np.right_shift(x, u32(16), out=t)
        np.bitwise_xor(x, t, out=x)
    return x


def uniform_torch(numel: int, key: int, start: int = 0, device: Any = "cpu") -> torch.Tensor:
    """The torch form of :func:`uniform_numpy` (what a GPU runs), on any device."""
    import torch

    index = torch.arange(start, start + numel, dtype=torch.int64, device=device)
    bits = _mix_torch(_mix_torch((index & _MASK32) ^ key) ^ (index >> 32)) >> 9
    # 2·bits + 1 < 2²⁴: exact in float32, as is every step after it.
    return (bits * 2 + 1).to(torch.float32) * 2.0**-23 - 1.0


def _mix_torch(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, _MUL1)
    x = x ^ (x >> 15)
    x = _mul32(x, _MUL2)
    return x ^ (x >> 16)


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """``x · constant mod 2³²`` for x < 2³² held in int64, never overflowing it: the
    constant in 16-bit halves (each product < 2⁴⁸)."""
    low = x * (constant & 0xFFFF)
    high = ((x * (constant >> 16)) & 0xFFFF) << 16
    return (low + high) & _MASK32
