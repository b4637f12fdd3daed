"""Where a kernel writes, and what it must not: guarded outputs and checksums.

:class:`GuardedOutputs` lays every output of a call between sentinel-filled
guard zones, a long sentinel tail after the last, and prefills the outputs
with fresh finite values before every call (inside a recording, on every
replay): an element the kernel never writes fails, no output says whether it is
judged, and a store past an output — a tile not masked, a stray index — lands
on a guard. :func:`checksums` sums the bits of many tensors at once: the
weights, bias and C₀ of every input set a bench rotates over are checked with
them after the rounds and after the clocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from matprobe.measure.inputs import activation_dtype, shapes, torch_dtype
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    import torch


#: Positions are weighted ``(i mod CHECKSUM_MODULUS) + 1`` (a prime below 2¹⁶: a
#: 16-bit element times its weight fits an int32).
CHECKSUM_MODULUS = 65521
#: Elements a checksum batch stacks at once (~16 M: 64 MB of int32): the hundreds of
#: small sets a bench rotates over are summed a few launches a batch, not a few
#: launches a tensor (1300 attention sets took 0.13 s a pass on an H100, four
#: passes a pair: BENCHMARKS.md "Every timed call judged"). A whole number of
#: moduli, so every slice of a large tensor (an LM head) takes the same weights,
#: made once a call: with the weights made again for each slice, in int64, a
#: checksum of the LM head's fp16 weights took 6.2–6.6 s on a 2-core CPU, now
#: 2.5–2.6 s (BENCHMARKS.md, twenty-third session).
CHECKSUM_BATCH = CHECKSUM_MODULUS * 256


def checksums(tensors: Sequence[Any]) -> Any:
    """One int64 checksum per tensor, computed where it lives: its bits as integers,
    each times a weight from its position (so swapped or offsetting writes change it
    too), summed with wrap-around. A write into a tensor no kernel should write —
    an input set's weights, say — changes its checksum. Tensors of one size and
    element width are stacked and summed together, a batch at a time."""
    import torch

    if not tensors:
        return torch.zeros(0, dtype=torch.int64)
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    where = tensors[0].device
    groups: dict[tuple[int, int], list[int]] = {}
    for index, tensor in enumerate(tensors):
        groups.setdefault((tensor.element_size(), tensor.numel()), []).append(index)
    # The weights from position 0, made here (a kept copy is state a kernel could zero).
    base = _position_weights(0, min(max(n for _, n in groups), CHECKSUM_BATCH), where)
    sums = torch.empty(len(tensors), dtype=torch.int64, device=where)
    for (size, numel), indices in groups.items():
        if numel > CHECKSUM_BATCH:  # one large tensor (an LM head), a slice at a time
            for i in indices:
                flat = tensors[i].detach().reshape(-1).view(ints[size])
                total = torch.zeros((), dtype=torch.int64, device=where)
                for start in range(0, numel, CHECKSUM_BATCH):
                    part = flat[start : start + CHECKSUM_BATCH]
                    reused = start % CHECKSUM_MODULUS == 0
                    at = (
                        base[: part.numel()]
                        if reused
                        else _position_weights(start, part.numel(), where)
                    )
                    total += _weighted_sums(part, at)
                sums[i] = total
            continue
        step = max(1, CHECKSUM_BATCH // max(1, numel))
        for start in range(0, len(indices), step):
            batch = indices[start : start + step]
            rows = torch.stack([tensors[i].detach().reshape(-1) for i in batch])
            sums[torch.tensor(batch, device=where)] = _weighted_sums(
                rows.view(ints[size]), base[:numel]
            )
    return sums


def _position_weights(start: int, count: int, where: Any) -> Any:
    """``(i mod CHECKSUM_MODULUS) + 1`` for positions ``start … start + count − 1``, int32."""
    import torch

    at = torch.arange(start, start + count, device=where, dtype=torch.int64)
    return (at % CHECKSUM_MODULUS + 1).to(torch.int32)


def _weighted_sums(bits: Any, weights: Any) -> Any:
    """Σ bits × weights along the last axis, int64: 8- and 16-bit elements multiplied
    in int32 (exact), wider ones in int64 (wrapping, as the sums do)."""
    import torch

    wide = torch.int32 if bits.element_size() <= 2 else torch.int64
    products = bits.to(wide, copy=True)  # its own buffer: multiplied in place
    return products.mul_(weights).sum(dim=-1, dtype=torch.int64)


def bit_sums(tensors: Sequence[Any]) -> Any:
    """Each tensor's bits summed as integers (int64, wrapping), where it lives: one
    pass, no temporaries — for tensors whose values may not change but whose
    order nobody gains by swapping (:func:`checksums` sees swaps too, at ~40×
    the cost: 2.2 s for the LM head's float64 weights on a 2-core CPU)."""
    import torch

    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return torch.stack(
        [
            # a view as integers of the same width, whatever the strides: no copy (the
            # judge's float64 weights are a transposed view of 1.1 GB for the LM head)
            t.detach().view(ints[t.element_size()]).sum(dtype=torch.int64)
            for t in tensors
        ]
    )


def empty_output(spec: MatmulSpec, device: Any) -> torch.Tensor:
    import torch

    dtype = torch_dtype(activation_dtype(spec))
    return torch.empty(shapes(spec)["out"], dtype=dtype, device=device)


#: Guard elements on each side of an output, at least (a whole output's worth when
#: larger: a kernel that pads rows or columns to its tile writes that far past).
GUARD_MIN_ELEMENTS = 4096


#: Sentinel elements after the last output, at least: a store past the guard
#: zone — 64 elements past it PASSed on an H100 (issue 20), landing in memory no
#: one checked — lands here (a megabyte or more of the buffer, compared at once).
TAIL_MIN_ELEMENTS = 1 << 20


#: What the guard zones hold: a finite value no kernel computes by accident.
GUARD_SENTINEL = -1234.5


#: Outputs are filled with uniform values in ±this before every call: the size of
#: the answers (O(1), see the module doc), so nothing about them stands out.
PREFILL_RANGE = 1.0


class GuardedOutputs:
    """``count`` outputs of a spec in one buffer, each between sentinel-filled
    guard zones, and a long sentinel tail after the last:
    ``[guard | out₀ | guard | out₁ | … | out₋₁ | tail]``. A kernel that writes
    past either end of its output (a tile not masked at n = 53, say), or far past
    the last one, changes a guard, which :meth:`breach` reports; the allocator's
    neighbours would have hidden it."""

    def __init__(self, spec: MatmulSpec, device: Any, count: int = 1) -> None:
        import torch

        shape = shapes(spec)["out"]
        self.numel = math.prod(shape)
        self.guard = max(GUARD_MIN_ELEMENTS, self.numel)
        self.tail = max(TAIL_MIN_ELEMENTS, self.guard)
        stride = self.numel + self.guard
        self.buffer = torch.full(
            (self.guard + count * stride - self.guard + self.tail,),
            GUARD_SENTINEL,
            dtype=torch_dtype(activation_dtype(spec)),
            device=device,
        )
        self.views = [
            self.buffer[self.guard + i * stride : self.guard + i * stride + self.numel].view(shape)
            for i in range(count)
        ]
        self._stride = stride
        # Which elements are guards (True) — compared all at once: one sync per check.
        offset = torch.arange(self.buffer.numel(), device=device) - self.guard
        self._is_guard = (offset < 0) | (offset >= count * stride) | (offset % stride >= self.numel)
        self._pristine = self.buffer.clone()

    @property
    def block(self) -> Any:
        """Every output at once, ``[count, *shape]`` (a strided view of the buffer)."""
        count = len(self.views)
        rows = self.buffer[self.guard : self.guard + count * self._stride].view(count, -1)
        return rows[:, : self.numel].view(count, *self.views[0].shape)

    def prefill(self) -> None:
        """Fresh finite values in every output, from the device's generator: new on
        every call (inside a recording, on every replay). An element the kernel never
        writes keeps a value unrelated to its answer and fails; no call can tell a
        judged call from another by what its output holds (NaN poison could)."""
        self.block.uniform_(-PREFILL_RANGE, PREFILL_RANGE)

    def changed_guards(self) -> Any:
        """Which guard elements no longer hold the sentinel (a bool tensor where the
        buffer lives: computed without a transfer)."""
        import torch

        size = self.buffer.element_size()
        changed = self.buffer.view(torch.uint8) != self._pristine.view(torch.uint8)
        return changed.view(-1, size).any(dim=1) & self._is_guard

    def breach(self) -> str | None:
        """None when every guard still holds the sentinel, else what was written where."""
        import torch

        changed = self.changed_guards()
        if not bool(changed.any()):
            return None
        first = int(torch.nonzero(changed)[0])
        count = len(self.views)
        zone = min(first // self._stride, count)  # guard i sits before output i; the tail last
        where = (
            "before output 0"
            if zone == 0
            else f"after output {zone - 1}"
            if zone == count
            else f"between outputs {zone - 1} and {zone}"
        )
        return (
            f"wrote outside its output: {int(changed.sum())} guard elements changed, "
            f"first in the guard zone {where} (element {first - zone * self._stride} "
            f"of {self.tail if zone == count else self.guard})"
        )
