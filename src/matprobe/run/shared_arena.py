"""Tensors two processes share without a pickle: one block of memory, named slots.

The judge apart (:mod:`~matprobe.run.witness`) owns the block and the process
that runs a plugin's kernel attaches to it. What crosses the pipe is JSON — a
block's handle and its slots' names, shapes, dtypes and offsets — never an
object: the judge reads nothing from that process but JSON and the block.

On the CPU the block is a :class:`multiprocessing.shared_memory.SharedMemory`
named in the handle; on a CUDA card it is one device allocation shared by CUDA
IPC (``torch.UntypedStorage._share_cuda_``, the handle's bytes as hex), as
``torch.multiprocessing`` shares a CUDA tensor.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Every slot starts on this boundary (bytes): any dtype's view is aligned.
ALIGN = 256


@dataclass(frozen=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    dtype: str  # a torch dtype's name: "float16"
    offset: int  # bytes from the block's start

    def to_json(self) -> list[Any]:
        return [self.name, list(self.shape), self.dtype, self.offset]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> Slot:
        name, shape, dtype, offset = data
        return cls(str(name), tuple(int(d) for d in shape), str(dtype), int(offset))


def layout(wanted: Sequence[tuple[str, tuple[int, ...], Any]]) -> tuple[list[Slot], int]:
    """Slots for ``(name, shape, torch dtype)`` in order, aligned; the block's size."""
    import torch

    slots, end = [], 0
    for name, shape, dtype in wanted:
        offset = -(-end // ALIGN) * ALIGN
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        slots.append(Slot(name, tuple(shape), str(dtype).removeprefix("torch."), offset))
        end = offset + size
    return slots, max(end, 1)


def _views(block: Any, slots: Sequence[Slot]) -> dict[str, Any]:
    """Each slot as a tensor over ``block`` (a uint8 tensor)."""
    import torch

    views = {}
    for slot in slots:
        dtype = getattr(torch, slot.dtype)
        size = math.prod(slot.shape) * torch.empty((), dtype=dtype).element_size()
        views[slot.name] = block[slot.offset : slot.offset + size].view(dtype).view(slot.shape)
    return views


class Arena:
    """The judge's side: a block on ``device`` ("cpu" or "cuda:N") holding ``wanted``
    (see :func:`layout`); :attr:`tensors` by name, :meth:`handle` for the other
    process, :meth:`close` when done (the CPU block is unlinked)."""

    def __init__(self, wanted: Sequence[tuple[str, tuple[int, ...], Any]], device: str) -> None:
        import torch

        self.slots, size = layout(wanted)
        self._shm: Any = None
        if device == "cpu":
            from multiprocessing import shared_memory

            self._shm = shared_memory.SharedMemory(create=True, size=size)
            block = torch.frombuffer(self._shm.buf, dtype=torch.uint8, count=size)
            self._where: dict[str, Any] = {"kind": "cpu", "name": self._shm.name, "size": size}
        else:
            block = torch.empty(size, dtype=torch.uint8, device=device)
            shared = block.untyped_storage()._share_cuda_()  # type: ignore[no-untyped-call]
            encoded = [x.hex() if isinstance(x, bytes) else x for x in shared]
            self._where = {"kind": "cuda", "ipc": encoded, "size": size}
        self._block: Any = block
        self.tensors = _views(block, self.slots)

    def handle(self) -> dict[str, Any]:
        """What the other process needs to attach (JSON)."""
        return {**self._where, "slots": [s.to_json() for s in self.slots]}

    def close(self) -> None:
        self.tensors = {}
        self._block = None
        if self._shm is not None:
            # A view still held elsewhere keeps the mapping; the name goes regardless.
            with contextlib.suppress(BufferError):
                self._shm.close()
            self._shm.unlink()
            self._shm = None


#: Positions in ``_share_cuda_``'s tuple that hold bytes (handles), sent as hex.
_CUDA_BYTES = (1, 4, 6)


def attach(handle: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The other process's side: the slots of the block ``handle`` names, and an
    object to keep while they are used (the CPU block's mapping)."""
    import torch

    slots = [Slot.from_json(s) for s in handle["slots"]]
    size = int(handle["size"])
    if handle["kind"] == "cpu":
        from multiprocessing import shared_memory

        shm = shared_memory.SharedMemory(name=str(handle["name"]))
        block = torch.frombuffer(shm.buf, dtype=torch.uint8, count=size)
        return _views(block, slots), shm
    ipc = list(handle["ipc"])
    for i in _CUDA_BYTES:
        ipc[i] = bytes.fromhex(ipc[i])
    # As torch.multiprocessing does: opening a handle needs the driver up.
    torch.cuda.init()  # type: ignore[no-untyped-call]
    storage = torch.UntypedStorage._new_shared_cuda(*ipc)
    block = torch.empty(0, dtype=torch.uint8, device=f"cuda:{int(ipc[0])}").set_(storage)
    return _views(block[:size], slots), storage
