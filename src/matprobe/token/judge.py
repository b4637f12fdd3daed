"""Every timed replay of a token mode judged: a fresh input before it (an embedding
and a RoPE position: written outside the clock before a latency replay, staged on
the device and copied into place inside a back-to-back window), its logits kept
after it, and all of them compared with float64 after the rounds
(:class:`ReplayJudge`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Protocol

import torch

from matprobe.errors import MatprobeError
from matprobe.profile.models import ModelConfig
from matprobe.token.modes import Mode
from matprobe.token.timing import Inputs, Staged, TokenCall
from matprobe.token.validate import LogitError, Tolerance, logit_error, worst
from matprobe.token.weights import MAX_POSITION, embeddings


class JudgedBench(Protocol):
    """What a judge needs of the token bench it judges for (``TokenBench``)."""

    weights: Any  # the step's weights: ``x0`` is the embedding a replay starts from
    config: ModelConfig
    dtype: str
    context: int
    inputs: list[torch.Tensor]  # validation's embeddings; the first is put back
    references: list[torch.Tensor]  # their float64 logits

    def place(self, position: int) -> None: ...

    def scramble_new_slot(self) -> None: ...

    def new_slot(self, *, exact: bool = False) -> torch.Tensor: ...

    def tables(self, position: int) -> tuple[torch.Tensor, torch.Tensor]: ...

    def reference(self, x0: torch.Tensor, position: int | None = None) -> torch.Tensor: ...


#: A kept replay: its embedding, RoPE position, logits and, where judged, the KV
#: slot it appended (``TokenBench.new_slot``).
Kept = tuple[torch.Tensor, int, torch.Tensor, torch.Tensor | None]


class ReplayJudge:
    """Every timed replay of one mode on a fresh input — an embedding and a RoPE
    position, written before the replay, outside the clock — its logits kept and
    judged against float64 after the rounds: a table kernel that memoises, or
    computes only on the validation trials' inputs, fails on the replays it is
    timed on, and so does a step that baked the validation's RoPE tables in.

    The KV slot the replay appends is judged too: scrambled before each latency
    replay and each back-to-back window, kept after it (a window's last replay
    is the one whose slot survives), and compared with the float64 step's. An
    attention that appends only while validated — then attends the new key from
    registers and leaves the cache stale — gets every timed token right and the
    next one wrong: the logits alone cannot see it."""

    def __init__(self, owner: JudgedBench, mode: Mode) -> None:
        self.owner = owner
        self.mode = mode
        self.draws = InputDraws(owner)
        self.inputs: dict[int, tuple[torch.Tensor, int]] = {}
        self.outputs: list[Kept] = []
        self.last: torch.Tensor | None = None
        self.posed: int | None = None  # the position :meth:`fresh` posed last

    def fresh(self, index: int) -> None:
        x0, position = self.draws.next()
        self.owner.weights.x0.copy_(x0)
        self.owner.place(position)
        self.owner.scramble_new_slot()
        self.inputs[index] = (x0, position)
        self.posed = position

    def elsewhere(self, call: Callable[[], object]) -> None:
        """``call`` (the untimed one before a timed replay) on an input drawn for it
        alone, which no judged replay sees; then the posed input put back and the
        new KV slot scrambled again."""
        x0, position = self.draws.next()
        posed = self.owner.weights.x0.clone()
        self.owner.weights.x0.copy_(x0)
        self.owner.place(position)
        call()
        self.owner.weights.x0.copy_(posed)
        if self.posed is not None:
            self.owner.place(self.posed)
        self.owner.scramble_new_slot()

    def keep_window(
        self, drawn: list[tuple[torch.Tensor, int]], kept: list[torch.Tensor], slot: torch.Tensor
    ) -> None:
        """A back-to-back window's logits, one per input it was given, and the KV slot
        its last replay appended."""
        slots: list[torch.Tensor | None] = [None] * (len(kept) - 1) + [slot]
        self.outputs.extend(
            (x0, at, logits, appended)
            for (x0, at), logits, appended in zip(drawn, kept, slots, strict=True)
        )

    def keep(self, index: int) -> None:
        if self.last is None:
            raise MatprobeError(f"{self.mode.name}: a timed replay returned no logits")
        x0, position = self.inputs.pop(index)
        self.outputs.append((x0, position, self.last.detach().clone(), self.owner.new_slot()))
        self.last = None

    def verdict(self, tolerance: Tolerance) -> tuple[int, str | None]:
        """(replays judged, why the worst failed or None); the validation input and
        position are put back."""
        owner = self.owner
        owner.weights.x0.copy_(owner.inputs[0])
        owner.place(owner.context - 1)
        for number, (x0, position, logits, slot) in enumerate(self.outputs, start=1):
            failure = tolerance.failure(logit_error(logits, owner.reference(x0, position)))
            if failure is None and slot is not None:
                failure = slot_failure(slot, owner.new_slot(exact=True), tolerance)
            if failure:
                return number, (
                    f"timed replay {number} of {len(self.outputs)} (position {position}): {failure}"
                )
        return len(self.outputs), None


def validation_error(owner: JudgedBench, call: TokenCall) -> LogitError:
    """The worst logit error of ``call`` over the validation inputs of ``owner``, each
    written in place (the KV slot scrambled before each), the first put back."""
    errors = []
    try:
        for x0, ref in zip(owner.inputs, owner.references, strict=True):
            owner.weights.x0.copy_(x0)
            owner.scramble_new_slot()
            errors.append(logit_error(call(), ref))
    finally:
        owner.weights.x0.copy_(owner.inputs[0])
    return worst(errors)


def cache_failure(owner: JudgedBench, tolerance: Tolerance) -> str | None:
    """After :func:`validation_error`, why the KV cache's new slot is wrong (None: it
    is right): each layer's key and value written at ``context - 1`` for the last
    input, against the float64 step's on that input, within the logits' bounds.
    An attention that attends the new key from registers but never appends it —
    or appends it unroped — gets this token right and the next one wrong; the
    logits alone cannot see that."""
    appended = owner.new_slot()
    owner.reference(owner.inputs[-1])  # the float64 step's caches: that input's
    return slot_failure(appended, owner.new_slot(exact=True), tolerance)


def slot_failure(got: torch.Tensor, want: torch.Tensor, tolerance: Tolerance) -> str | None:
    """Why the KV slot ``got`` (``[layers, 2, kv_width]``, ``TokenBench.new_slot``) is
    not the float64 step's ``want``, within the logits' bounds; None when it is."""
    got, want = (t.detach().to(device="cpu", dtype=torch.float64) for t in (got, want))
    for layer, (appended, exact) in enumerate(zip(got, want, strict=True)):
        for name, row, ref in (("key", appended[0], exact[0]), ("value", appended[1], exact[1])):
            failure = tolerance.failure(logit_error(row.reshape(1, -1), ref.reshape(1, -1)))
            if failure is not None:
                return f"layer {layer}'s new {name} in the KV cache: {failure}"
    return None


def keeping(call: TokenCall, judge: ReplayJudge | None) -> TokenCall:
    """``call``, handing each output to ``judge`` (kept after the clock stops)."""
    if judge is None:
        return call

    def kept() -> torch.Tensor:
        judge.last = call()
        return judge.last

    return kept


class InputDraws:
    """Fresh token inputs for one mode: an embedding and a RoPE position each, from a
    seed no earlier draw of this process used, never the same twice."""

    def __init__(self, owner: JudgedBench) -> None:
        from matprobe.measure.seeds import fresh_seed

        self.owner = owner
        self.seed = fresh_seed()
        self.count = itertools.count()

    def next(self) -> tuple[torch.Tensor, int]:
        seed = self.seed + next(self.count)
        w = self.owner.weights
        (x0,) = embeddings(self.owner.config, 1, dtype=self.owner.dtype, device=w.x0.device,
                           seed=seed)  # fmt: skip
        draw = torch.Generator().manual_seed(seed)
        return x0, int(torch.randint(0, MAX_POSITION, (1,), generator=draw))

    def window(self, size: int) -> tuple[list[tuple[torch.Tensor, int]], list[Staged]]:
        """``size`` fresh inputs, and each staged on the device for a window."""
        drawn = [self.next() for _ in range(size)]
        staged = [Staged(x0, *self.owner.tables(at)) for x0, at in drawn]
        return drawn, staged


def step_inputs(owner: JudgedBench) -> Inputs:
    """Where the owner's recorded graphs read their input."""
    w = owner.weights
    return Inputs(w.x0, w.cos, w.sin)
