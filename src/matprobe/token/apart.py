"""Token modes whose kernels run in another process, judged from this one.

A dispatch table may name plugins: code the user wrote, which could patch torch
or matprobe when imported — slow the eager baseline it is compared with, or the
comparison that judges it. So ``matprobe token`` never imports them: their
table modes run in a process of their own (:mod:`matprobe.dispatch.apart`
starts it), which builds the same step over the same seeded weights and only
replays. This process poses every input (a fresh embedding and RoPE position
per replay, as for its own modes), takes every time on its own clock and judges
every logit and KV slot against its own float64 step; what the other process
says of itself is a kernel count and, with ``--profile``, a profile.

The protocols here are what :class:`~matprobe.token.bench.TokenBench` needs of
that process (:class:`Apart`) and of one mode run there (:class:`RemoteCall`);
:class:`ApartOwner` is the bench as the judge of such a mode sees it — its
inputs, references and weights, and the KV slot the other process wrote back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import torch

from matprobe.profile.models import ModelConfig
from matprobe.token.judge import JudgedBench
from matprobe.token.modes import Mode
from matprobe.token.timing import KernelCount, Staged


class RemoteCall(Protocol):
    """One mode's call, replayed in the other process on this one's inputs."""

    @property
    def failure(self) -> str | None:
        """Why the other process stopped answering (its replays then return NaN)."""
        ...

    #: µs this process's clock gave the last call (a message's cost and the copies off)
    last_us: float
    #: the KV slot the last replay appended, as written back (None before a replay)
    slot: torch.Tensor | None

    def __call__(self) -> torch.Tensor:
        """One replay on the bench's current input (its ``x0`` and RoPE tables)."""
        ...

    def replays(self, staged: Sequence[Staged]) -> tuple[float, list[torch.Tensor]]:
        """µs a replay and the logits of each, ``staged`` replayed back to back."""
        ...

    def count(self) -> KernelCount:
        """The kernels one replay runs, as the other process counts them."""
        ...

    def warm(self) -> None:
        """One untimed replay on an input of noise (its outputs unjudged)."""
        ...


class Apart(Protocol):
    """The other process, as the bench drives it."""

    #: the modes' kernels (``Mode.kernels``) that run there
    kernels: tuple[str, ...]
    #: what the clock of its modes is, for the report
    clock: str

    def call(self, mode: Mode, bench: JudgedBench) -> RemoteCall:
        """``mode`` built there over ``bench``'s step; an exception if it cannot be."""
        ...

    def aside(self) -> AbstractContextManager[None]:
        """A block while this process times a mode of its own: the other process
        and whatever it started stopped meanwhile."""
        ...

    def problem(self) -> str | None:
        """Why the token's figures are no verdict (the card was busy while this
        process timed its own modes, say); None: nothing."""
        ...


class ApartOwner:
    """``bench`` as the judge of a mode run apart sees it: the bench's inputs,
    references and RoPE tables, and the KV slot ``call``'s process wrote back
    (which it fills with NaN before each replay: a slot left unwritten fails)."""

    def __init__(self, bench: JudgedBench, call: RemoteCall) -> None:
        self.bench, self.call = bench, call
        # the bench's own (the same objects: what is written to them is the bench's)
        self.weights: Any = bench.weights
        self.config: ModelConfig = bench.config
        self.dtype: str = bench.dtype
        self.context: int = bench.context
        self.inputs: list[torch.Tensor] = bench.inputs
        self.references: list[torch.Tensor] = bench.references

    def place(self, position: int) -> None:
        self.bench.place(position)

    def scramble_new_slot(self) -> None:
        """Nothing here: each replay's slot is written afresh in the shared block."""

    def new_slot(self, *, exact: bool = False) -> torch.Tensor:
        if exact:
            return self.bench.new_slot(exact=True)
        if self.call.slot is None:
            raise ValueError("no replay has run apart yet")
        return self.call.slot

    def tables(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bench.tables(position)

    def reference(self, x0: torch.Tensor, position: int | None = None) -> torch.Tensor:
        return self.bench.reference(x0, position)


def aside(
    apart: Apart | None, timer: Callable[[], float], warm: Callable[[], object]
) -> Callable[[], float]:
    """``timer`` of one of this process's modes right after an untimed ``warm`` call
    of the same mode, with ``apart``'s process (if any) stopped meanwhile. The warm
    call whether or not a process runs apart: a serving loop replays a token's graph
    after the same graph, and a call right after another mode's is slower by what
    that one left in the caches (an H200's eager Qwen2.5-0.5B token read 2297 µs
    after the other modes and 1941 µs after itself, its compile mode 1047 and 925
    µs; an eager token on a 2-core machine, after the other process ran and the
    stop read ``/proc``, 2.0 ms against 1.2)."""

    def after_itself() -> float:
        with nullcontext() if apart is None else apart.aside():
            warm()
            return timer()

    return after_itself


def warmed(remote: RemoteCall, timer: Callable[[], float]) -> Callable[[], float]:
    """``timer`` of a mode run apart, right after an untimed replay there on an input
    no judged call sees (as :func:`aside`'s warm call, for that process's caches)."""

    def timed() -> float:
        remote.warm()
        return timer()

    return timed
