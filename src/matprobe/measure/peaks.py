"""The device's own bandwidth ceilings, measured at the start of every CUDA run.

A GEMV only reads, so its roofline is the device's *read* bandwidth. The first
ceiling was ``torch.sum`` over 1 GiB: 2943 GB/s on an H100, while an LM-head
GEMV read 3103 GB/s — 105 % of a "ceiling". A reduction library call is not
built to saturate memory, and one launch between two events also counts its
launch and drain; this module measures with a kernel that is, the way the
variants are measured:

* a persistent grid — a few programs on every SM — in which each program
  walks its strided share of the buffer (blocks ``pid, pid + G, …``) with wide
  unmasked loads (``BLOCK`` elements at a time, marked ``evict_first``: read
  once, never again; the loop software-pipelined so the next block's loads are
  in flight while one is summed), accumulates in registers and writes ONE
  partial sum, so the kernel reads everything and writes almost nothing;
* swept over a few (programs per SM, BLOCK, warps) configurations and buffer
  sizes well above L2 (4× and 8× L2, and 1 GiB), each timed with CUDA events
  as the median of several CUDA-graph replays of back-to-back reads (as the
  device clock times variants) after warm-up.

On an H100 (2026-11-26, torch 2.11, triton 3.6) the ceiling came out at
3152-3155 GB/s (1 GiB, 2-4 programs per SM, BLOCK 16384, 8 warps; ~3 % less at
4× L2), where the LM-head GEMV read 3022 GB/s (96 %); one launch between two
events gave 2960-3000 GB/s — below that GEMV — and ``torch.sum`` 2948 eager,
3020 replayed. The whole measurement takes ~0.5 s (~2-3 s when the kernels
compile). On an H200, a first version (single launches, no pipelining) read 4243 GB/s.

The read ceiling is the best figure of the sweep, reported with the config and
size that gave it; the copy figure (bytes read + written by ``copy_``) and
``torch.sum``'s are kept beside it. Importing this module imports neither torch
nor triton.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from matprobe.measure.timing import cuda_event_ms

GIB = 2**30

#: L2 size when the device does not say (an H100's is 50 MiB).
DEFAULT_L2_BYTES = 50 * 2**20

#: Software-pipelining depth of the read loop (``tl.range(num_stages=…)``): 3 read
#: ~0.6 % faster than none on an H100.
STAGES = 3


@dataclass(frozen=True)
class ReadConfig:
    """One point of the read-kernel sweep. ``block`` and ``warps`` are compiled
    in; ``per_sm`` only sizes the grid, so it costs no compilation."""

    per_sm: int
    block: int
    warps: int

    @property
    def label(self) -> str:
        return f"{self.per_sm} programs/SM, BLOCK={self.block}, {self.warps} warps"


#: Three compiled kernels × three grid sizes. 16-32 fp16 elements (2-4 16-byte
#: loads) per thread a step, pipelined, keep far more than the ~16 KB per SM in
#: flight that Little's law asks of HBM3 (~3.3 TB/s × ~0.6 µs over 132 SMs); on
#: an H100 all nine lay within 1 % of each other at 1 GiB.
READ_CONFIGS: tuple[ReadConfig, ...] = tuple(
    ReadConfig(per_sm, block, warps)
    for block, warps in ((8192, 8), (16384, 8), (16384, 16))
    for per_sm in (2, 4, 8)
)


def read_sizes(l2_bytes: int, max_bytes: int = GIB) -> list[int]:
    """Buffer sizes for the sweep, ascending: 4× and 8× L2 and ``max_bytes``, all
    kept > L2 (so reads come from memory) and ≤ ``max_bytes``."""
    l2 = l2_bytes if l2_bytes > 0 else DEFAULT_L2_BYTES
    sizes = {min(4 * l2, max_bytes), min(8 * l2, max_bytes), max_bytes}
    return sorted(s for s in sizes if s > l2)


def grid_size(sm_count: int, per_sm: int) -> int:
    """``per_sm`` programs on every SM (at least one program)."""
    return max(1, sm_count * per_sm)


def calls_per_sample(size_bytes: int) -> int:
    """Back-to-back reads in one timed replay: ≥ 4, and ≥ 1 GiB read in all, so
    the gap between launches is a small part of the sample."""
    return max(4, math.ceil(GIB / max(size_bytes, 1)))


@functools.cache
def _read_kernel() -> Any:
    """The streaming-read kernel, defined on first use: triton is imported only
    here, and ``@triton.jit`` picks interpreter or compiler at definition time
    (``TRITON_INTERPRET=1`` set before the first call runs it on the CPU)."""
    import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
    import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]

    @triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
    def stream_read_kernel(  # type: ignore[no-untyped-def]
        x_ptr,  # the buffer, flat
        partial_ptr,  # [programs] float32: one sum a program
        n,  # elements
        full_blocks,  # n // BLOCK: blocks read without masks
        BLOCK: tl.constexpr,  # noqa: N803
        STAGES: tl.constexpr,  # noqa: N803
    ):
        pid = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        # Block index times a constexpr power of two: the compiler knows each
        # block starts aligned and contiguous, so the loads vectorize to 16 bytes.
        for b in tl.range(pid, full_blocks, tl.num_programs(0), num_stages=STAGES):
            x = tl.load(x_ptr + b * BLOCK + offs, eviction_policy="evict_first")
            acc += x.to(tl.float32)
        # The ragged tail (< BLOCK elements) is program 0's; elsewhere the mask
        # is all false and the load moves no bytes.
        start = full_blocks * BLOCK
        tail = start + offs
        end = tl.where(pid == 0, n, start)
        x = tl.load(x_ptr + tail, mask=tail < end, other=0.0)
        acc += x.to(tl.float32)
        tl.store(partial_ptr + pid, tl.sum(acc, axis=0))

    return stream_read_kernel


def stream_read(x: Any, programs: int, block: int, warps: int = 4, partials: Any = None) -> Any:
    """Read every element of the contiguous tensor ``x`` once with ``programs``
    programs; returns their ``[programs]`` float32 partial sums (their total is
    ``x``'s sum: the tests hold the kernel to that)."""
    import torch

    if not x.is_contiguous():
        raise ValueError("stream_read needs a contiguous tensor")
    if block <= 0 or block & (block - 1):
        raise ValueError(f"BLOCK must be a power of two, got {block}")
    n = x.numel()
    if n + programs * block >= 2**31:  # 32-bit offsets in the kernel
        raise ValueError(f"{n} elements: too many for 32-bit offsets")
    if partials is None:
        partials = torch.empty(programs, dtype=torch.float32, device=x.device)
    kernel = _read_kernel()
    kernel[(programs,)](
        x.view(-1), partials, n, n // block, BLOCK=block, STAGES=STAGES, num_warps=warps
    )
    return partials


# ---- CUDA ------------------------------------------------------------------------------


def _graph_of(op: Callable[[], Any]) -> Any:
    """``op`` (warmed up on a side stream: compiles, allocator) captured as one
    CUDA graph, replayed as the device clock replays variants."""
    import torch

    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        op()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op()
    return graph


def _median_ms(op: Callable[[], Any], repeats: int, warmup: int = 2) -> float:
    """Median device time of ``op`` (CUDA events around it), after warm-up."""
    import torch

    for _ in range(warmup):
        op()
    torch.cuda.synchronize()
    times = [cuda_event_ms(op) for _ in range(repeats)]
    times.sort()
    return times[len(times) // 2]


def _replayed_gbps(
    op: Callable[[], Any], bytes_per_call: int, repeats: int, *, graph: bool = True
) -> float:
    """GB/s of ``op`` called back to back (see :func:`calls_per_sample`), replayed
    in a CUDA graph unless ``graph`` is false."""
    calls = calls_per_sample(bytes_per_call)

    def many() -> None:
        for _ in range(calls):
            op()

    ms = _median_ms(_graph_of(many).replay if graph else many, repeats)
    return calls * bytes_per_call / (ms * 1e-3) / 1e9


def _check_partials(buf: Any, config: ReadConfig, sm_count: int) -> None:
    """The kernel's total must be the buffer's: a kernel that skips data would
    report a ceiling no real kernel can reach."""
    import torch

    partials = stream_read(buf, grid_size(sm_count, config.per_sm), config.block, config.warps)
    got = float(partials.double().sum())
    want = float(torch.sum(buf, dtype=torch.float32))
    if not math.isclose(got, want, rel_tol=1e-3):
        raise RuntimeError(
            f"streaming-read kernel ({config.label}) summed {got}, "
            f"expected {want}: it does not read the whole buffer"
        )


def _sweep_reads(
    buf: Any, sizes: Sequence[int], configs: Sequence[ReadConfig], sm_count: int, repeats: int
) -> list[dict[str, Any]]:
    """GB/s of every (config, size)."""
    import torch

    figures = []
    for size in sizes:
        view = buf[: size // buf.element_size()]
        for config in configs:
            programs = grid_size(sm_count, config.per_sm)
            partials = torch.empty(programs, dtype=torch.float32, device=buf.device)

            def read(view: Any = view, config: ReadConfig = config, partials: Any = partials,
                     programs: int = programs) -> None:  # fmt: skip
                stream_read(view, programs, config.block, config.warps, partials)

            gbps = _replayed_gbps(read, size, repeats)
            figures.append(
                {"config": config.label, "programs": programs, "size_bytes": size, "gbps": gbps}
            )
    return figures


def _copy_and_sum_gbps(buf: Any, repeats: int) -> tuple[float, float]:
    """A device-to-device copy of ``buf`` (bytes read + written) and ``torch.sum``
    over it (the first read ceiling, kept for comparison)."""
    import torch

    size = buf.numel() * buf.element_size()
    dst = torch.empty_like(buf)
    # Eager: captured in a graph, the copy becomes a memcpy node that the copy
    # engines serve (2430 GB/s on an H100, against 2980 for the SMs' copy).
    copy_gbps = 2 * _replayed_gbps(lambda: dst.copy_(buf), size, repeats, graph=False)
    acc = torch.empty((), device=buf.device, dtype=torch.float32)
    sum_gbps = _replayed_gbps(
        lambda: torch.sum(buf, dim=0, dtype=torch.float32, out=acc), size, repeats
    )
    return copy_gbps, sum_gbps


def measure_peaks_cuda(
    *,
    max_bytes: int = GIB,
    repeats: int = 15,
    configs: Sequence[ReadConfig] = READ_CONFIGS,
) -> dict[str, Any]:
    """The device's ceilings now: ``read_gbps`` (best streaming read of the sweep,
    with ``read_config`` and ``size_bytes`` that gave it), ``copy_gbps`` (a
    ``max_bytes`` copy, read + write), ``torch_sum_gbps`` (the old figure, for
    comparison), ``read_sweep`` (every figure) and ``seconds`` it took."""
    import torch

    started = time.perf_counter()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)
    sm_count = int(props.multi_processor_count)
    sizes = read_sizes(l2, max_bytes)
    buf = torch.rand(max(sizes) // 2, device="cuda", dtype=torch.float16)
    for config in configs:  # compiles each kernel once, and proves it reads everything
        _check_partials(buf[: sizes[0] // 2], config, sm_count)
    sweep = _sweep_reads(buf, sizes, configs, sm_count, repeats)
    best = max(sweep, key=lambda f: f["gbps"])
    copy_gbps, sum_gbps = _copy_and_sum_gbps(buf, repeats)
    copy_bytes = buf.numel() * buf.element_size()
    del buf
    torch.cuda.empty_cache()  # give the 2 GiB back before kernels are measured
    return {
        "read_gbps": best["gbps"],
        "read_config": best["config"],
        "size_bytes": float(best["size_bytes"]),
        "copy_gbps": copy_gbps,
        "copy_size_bytes": float(copy_bytes),
        "torch_sum_gbps": sum_gbps,
        "l2_bytes": float(l2),
        "read_sweep": sweep,
        "seconds": time.perf_counter() - started,
    }
