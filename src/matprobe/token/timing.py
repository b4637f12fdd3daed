"""Running a mode's token repeatedly and timing it, on a GPU or on the CPU.

On CUDA each mode's step is warmed up (compiled, autotuned, allocated) on a
side stream and captured as ONE CUDA graph; a call replays the graph and
returns its static logits. Graphs are replayed in interleaved rounds — every
mode once a round, the order rotated each round so no mode always follows the
same one — timed on two clocks: one replay after a sync, between two CUDA events
(latency: the graph's launch included), and a window of replays back to back
(a serving loop: the next replay queued while one runs), each replay of the
window on its own fresh input, copied into place on the device before it, its
logits copied out after it, and the same copies alone, timed beside it,
subtracted. A whole token reads
~1 GB on Qwen2.5-0.5B, twenty times an H100's L2, so its weights are cold in
every replay, as in decode.

On the CPU there are no graphs: a call is the step itself, timed by the host
clock, in the same interleaved rounds.

Kernels per token are counted with the PyTorch profiler over one call: on
CUDA the kernels a graph replay launches (memcpy and memset nodes apart); on
the CPU the top-level ATen ops (a compiled mode's fused C++ kernels are not
seen there).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from matprobe.measure.timing import cuda_event_ms

TokenCall = Callable[[], torch.Tensor]
Timed = TypeVar("Timed")

#: Replays in one back-to-back window: enough that the launch of one hides
#: behind the previous one's work; each is judged, so few.
WINDOW = 4


class GraphToken:
    """A step captured as one CUDA graph; calling it replays the graph and returns
    the logits it wrote (the same tensor every time)."""

    def __init__(self, step: TokenCall, warmup: int = 2) -> None:
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):  # compiles, autotunes, fills the allocator's pool
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = step()
        torch.cuda.synchronize()

    def __call__(self) -> torch.Tensor:
        self.graph.replay()
        return self.logits


def prepare(step: TokenCall, device_kind: str) -> TokenCall:
    """The call that runs (and is timed) for a step: its graph on CUDA, else itself
    after one warm-up call."""
    if device_kind == "cuda":
        return GraphToken(step)
    step()
    return step


def cuda_time_us(call: TokenCall) -> float:
    return cuda_event_ms(call) * 1000.0


@dataclass(frozen=True)
class Staged:
    """One replay of a back-to-back window: its fresh input on the device (an
    embedding and the RoPE tables of a position), copied into place before it."""

    x0: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


@dataclass(frozen=True)
class Inputs:
    """Where a step reads its input: the tensors a recorded graph reads at replay."""

    x0: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor

    def stage(self, staged: Staged) -> None:
        self.x0.copy_(staged.x0)
        self.cos.copy_(staged.cos)
        self.sin.copy_(staged.sin)


def back_to_back_us(
    call: TokenCall, inputs: Inputs, window: Sequence[Staged]
) -> tuple[float, list[torch.Tensor]]:
    """(µs per token, the logits of every replay): ``window``'s replays queued back
    to back, each after device copies of its own input into place and followed
    by a copy of its logits; the same copies alone (and the same allocations)
    are timed right after and subtracted, so what is left is the replays'. On
    the CPU (tests) the host clock stands in for the events."""
    kept: list[torch.Tensor] = []

    def replays() -> None:
        for staged in window:
            inputs.stage(staged)
            kept.append(call().clone())

    def copies() -> None:
        for staged, logits in zip(window, kept, strict=True):
            inputs.stage(staged)
            logits.clone()

    on = inputs.x0.device
    both = _elapsed_us(replays, on)
    return (both - _elapsed_us(copies, on)) / len(window), kept


#: GPU cycles (about 1 ms) the stream sleeps before a back-to-back window's first
#: event, so that the host has queued the window's work when the clock starts:
#: the copies alone would otherwise be timed at the host's launch rate (several
#: µs each) and subtracted from replays that hide them behind the GPU's work.
LEAD_CYCLES = 2_000_000


def _elapsed_us(work: Callable[[], None], device: torch.device) -> float:
    """µs of the device work ``work`` queues, all of it queued before the clock
    starts (on the CPU, the host clock around it)."""
    if device.type != "cuda":
        return host_time_us(work)
    torch.cuda.synchronize()
    torch.cuda._sleep(LEAD_CYCLES)  # type: ignore[no-untyped-call]
    return cuda_event_ms(work) * 1000.0


def host_time_us(call: Callable[[], object]) -> float:
    started = time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - started) / 1000.0


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """The order of one round: the names rotated by the round's index."""
    if not names:
        return []
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


#: ``hook(name, round_index)``: called before and after each timed call, outside
#: the clock (a fresh input written before, the output kept after).
RoundHook = Callable[[str, int], None]


def interleaved_rounds(
    calls: Mapping[str, Timed],
    rounds: int,
    clock: Callable[[Timed], float],
    *,
    warmup_rounds: int = 1,
    before: RoundHook | None = None,
    after: RoundHook | None = None,
) -> dict[str, list[float]]:
    """µs of every call, once a round for ``rounds`` rounds (after ``warmup_rounds``
    not recorded); sample i of every mode comes from round i."""
    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(warmup_rounds + rounds):
        for name in rotation(names, index):
            if before is not None:
                before(name, index)
            elapsed = clock(calls[name])
            if after is not None:
                after(name, index)
            if index >= warmup_rounds:
                samples[name].append(elapsed)
    return samples


@dataclass(frozen=True)
class KernelCount:
    kernels: int  # kernels launched (CUDA) or top-level ATen ops (CPU)
    copies: int  # memcpy/memset nodes (CUDA), 0 on the CPU
    what: str  # what was counted

    def to_dict(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "copies": self.copies, "what": self.what}


def count_kernels(call: TokenCall, device_kind: str) -> KernelCount:
    """Kernels of one call of ``call``, from the PyTorch profiler."""
    from torch.profiler import DeviceType, ProfilerActivity

    from matprobe.quiet_profiler import quiet_profile

    activities = [ProfilerActivity.CPU]
    if device_kind == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with quiet_profile(activities) as prof:
        call()
        if device_kind == "cuda":
            torch.cuda.synchronize()
    events = list(prof.events())
    if device_kind == "cuda":
        device_events = [e for e in events if e.device_type == DeviceType.CUDA]
        copies = sum(1 for e in device_events if e.name.startswith(("Memcpy", "Memset")))
        return KernelCount(
            len(device_events) - copies, copies, "kernels of one graph replay (CUPTI)"
        )
    return KernelCount(sum(1 for e in events if _top_level_aten(e)), 0, "top-level ATen ops")


def _top_level_aten(event: Any) -> bool:
    if not str(event.name).startswith("aten::"):
        return False
    parent = event.cpu_parent
    while parent is not None:
        if str(parent.name).startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True
