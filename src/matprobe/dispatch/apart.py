"""A dispatch table that names plugins, run for ``matprobe token`` in a process of
its own (:mod:`matprobe.token.apart` says why; the process runs
:mod:`~matprobe.dispatch.apart_child`).

:class:`TableApart` starts that process — a fork of the server that imported no
plugin, which answers pings before it imports the table's plugins, so this
process learns what a message costs before plugin code could slow one — and
drives it over a pipe that carries JSON back, and a block of memory both map
(CUDA IPC on a card, shared memory on the CPU;
:mod:`~matprobe.run.shared_arena`). For each replay this process writes the
input into the block, fills the outputs with NaN, sends one message and waits
until the other says the card has finished and no output is left unwritten:
the time a replay took is that wait, less the fastest message there and back
and less the block's copies (which this process times itself): an upper
bound of what the replays took, never the other process's word. While this
process times a mode of its own, the other is stopped with everything it
started (:meth:`~matprobe.run.witness_process.WitnessProcess.stopped`), and on a
card a canary says whether work it queued before was still running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from matprobe.dispatch.apart_child import TABLE_SERVER
from matprobe.dispatch.table import DispatchTable
from matprobe.errors import MatprobeError
from matprobe.measure.device import DeviceInfo
from matprobe.measure.variants import SHIPPED_FACTORY
from matprobe.profile.models import ModelConfig
from matprobe.run.shared_arena import Arena
from matprobe.run.witness_process import WitnessError, WitnessProcess
from matprobe.run.witness_rounds import BUSY_US, QUIET_WAIT_S, Canary, where
from matprobe.safetext import term_safe
from matprobe.token.judge import JudgedBench
from matprobe.token.modes import Mode
from matprobe.token.profile import RangeSample
from matprobe.token.timing import WINDOW, KernelCount, Staged

#: Seconds a mode may take to build there (torch.compile of a whole step included).
BUILD_TIMEOUT_S = 900.0
#: Seconds one message's replays may take.
RUN_TIMEOUT_S = 300.0
#: Seconds this process waits, after "done", for outputs still unwritten: the other
#: process says "done" once its card has finished, so an honest one leaves none.
UNWRITTEN_S = 2.0
#: What the report says of the clock of the modes run apart.
CLOCK = (
    "run in a process of their own, which imported the table's plugins (this one never "
    "does); their inputs posed, logits and KV slots judged and time taken here, on the "
    "wall clock around each message to that process, less the fastest message there and "
    "back and the copies; their kernels as that process counted them"
)


class TableApart:
    """The table's process (see the module doc), for a bench of ``config`` at
    ``context`` in ``dtype`` from ``seed`` (the same as this process's bench)."""

    kernels: tuple[str, ...] = ("table", "table-op")
    clock: str = CLOCK

    def __init__(
        self,
        table: DispatchTable,
        device: DeviceInfo,
        *,
        config: ModelConfig,
        context: int,
        dtype: str,
        seed: int,
    ) -> None:
        self.table, self.device = table, device
        self.setup = {
            "config": dataclasses.asdict(config),
            "context": context,
            "dtype": dtype,
            "seed": seed,
            "table": table.to_dict(),
            "kernels": list(self.kernels),
        }
        self.block: Arena | None = None
        self.failure: str | None = None
        self._copies: dict[int, float] = {}
        self._canary = Canary(device)
        self._busy = 0
        # On the CPU both processes share the host's cores, and the idle OpenMP
        # workers of one spin while the other runs (the small token's table mode was
        # timed 3.8 → 6–7 ms beside the judge's spinning workers on a 2-core VM):
        # one thread each, in this process until close, so neither times the other.
        self._threads = torch.get_num_threads()
        threads = 1 if device.kind == "cpu" else None
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            self.process = WitnessProcess(
                SHIPPED_FACTORY, table.plugins, device, threads, served=TABLE_SERVER
            )
        except WitnessError as exc:
            torch.set_num_threads(self._threads)
            why = term_safe(str(exc))
            raise MatprobeError(f"the table's plugins, in a process of their own: {why}") from None
        try:
            self._ask(("table", self.setup), "loaded", 0, BUILD_TIMEOUT_S)
        except MatprobeError as exc:  # the table refused there: for another card, changed code
            self.close()
            raise MatprobeError(f"--table, in its own process: {exc}") from None

    def call(self, mode: Mode, bench: JudgedBench) -> _Remote:
        """``mode`` built there over the same step as ``bench``'s."""
        if self.failure is not None:
            raise MatprobeError(f"the table's process: {self.failure}")
        if self.block is None:
            self.block = _block(bench, where(self.device))
            self._ask(("bench", self.block.handle()), "built", 0, BUILD_TIMEOUT_S)
        self._ask(("build", mode.name), "built", 0, BUILD_TIMEOUT_S)
        return _Remote(self, mode.name, bench)

    def _ask(self, message: tuple[Any, ...], word: str, fields: int, timeout_s: float) -> list[Any]:
        """``message`` sent, and the ``fields`` values of its answer ``word``; a
        one-line :class:`MatprobeError` where the other process does not cooperate."""
        try:
            self.process.send(*message)
            return self.process.answer(word, fields, timeout_s)
        except WitnessError as exc:
            raise MatprobeError(f"the table's process: {term_safe(str(exc))}") from None

    def run(
        self, name: str, staged: Sequence[Staged]
    ) -> tuple[float, list[torch.Tensor], torch.Tensor]:
        """µs a replay, each replay's logits and the KV slot the last appended:
        ``staged`` replayed back to back there (see the module doc). Once the other
        process has failed, NaN at once (:attr:`failure` says why)."""
        assert self.block is not None
        block, n = self.block.tensors, len(staged)
        logits, slot = block["logits"][:n], block["slot"]
        for i, one in enumerate(staged):
            block["x0"][i].copy_(one.x0)
            block["cos"][i].copy_(one.cos)
            block["sin"][i].copy_(one.sin)
        logits.fill_(math.nan)
        slot.fill_(math.nan)
        seconds = 0.0 if self.failure is not None else self._timed_message(name, n, (logits, slot))
        kept = [row.clone() for row in logits]
        fastest = min(self.process.pings_s)
        us = max(seconds - fastest - self._copies_s(n), 0.0) / n * 1e6
        return us, kept, slot.clone()

    def _timed_message(self, name: str, n: int, outputs: Sequence[torch.Tensor]) -> float:
        """Seconds from the message to the last output written (0 and
        :attr:`failure` set, where the process fails)."""
        self._sync()
        start = time.perf_counter()
        try:
            self.process.send("run", name, n)
            self.process.expect("done", RUN_TIMEOUT_S)
            deadline = time.perf_counter() + UNWRITTEN_S
            while any(bool(torch.isnan(t).any()) for t in outputs):
                if time.perf_counter() > deadline:
                    raise WitnessError(
                        f"its process said done, its outputs unwritten {UNWRITTEN_S:.0f} s after"
                    )
        except WitnessError as exc:
            self.failure = term_safe(str(exc))
            return 0.0
        return time.perf_counter() - start

    def count(self, name: str) -> KernelCount:
        """The kernels a replay of ``name`` runs, as the other process counts them."""
        kernels, copies, _ = self._ask(("count", name), "counted", 3, RUN_TIMEOUT_S)
        if not all(isinstance(v, int) and v >= 0 for v in (kernels, copies)):
            raise MatprobeError("the table's process sent a kernel count that is not one")
        return KernelCount(kernels, copies, "kernels the table's process counted (its word)")

    def profile(self, name: str, tokens: int) -> list[list[RangeSample]]:
        """``tokens`` of ``name`` recorded there under the profiler (its word)."""
        (recorded,) = self._ask(("profile", name, tokens), "profiled", 1, BUILD_TIMEOUT_S)
        try:
            return [
                [RangeSample(str(label), float(start), [(str(k), float(us)) for k, us in kernels])
                 for label, start, kernels in one]
                for one in recorded
            ]  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise MatprobeError(
                f"the table's process sent no profile: {term_safe(str(exc))}"
            ) from None

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """The other process stopped with what it started, for a block where this
        one times a mode of its own; on a card, busy before or after counted."""
        with self.process.stopped():
            # once busy, the figures are no verdict: no more waiting for quiet
            self._busy += not self._canary.quiet(0.0 if self._busy else QUIET_WAIT_S)
            yield
            self._busy += not self._canary.quiet(0.0)

    def problem(self) -> str | None:
        if not self._busy:
            return None
        return (
            f"the card was busy with work not this process's around {self._busy} of its "
            f"own timed calls (a canary took over {BUSY_US:.0f} µs): work the table's "
            "process queued before it was stopped, or another process's"
        )

    def close(self) -> None:
        self.process.close()
        torch.set_num_threads(self._threads)
        if self.block is not None:
            self.block.close()
            self.block = None

    def _sync(self) -> None:
        if self.device.kind == "cuda":
            torch.cuda.synchronize()

    def _copies_s(self, n: int) -> float:
        """Seconds the block's copies of ``n`` replays take alone, here (the smallest
        of three; once per ``n``)."""
        if n not in self._copies:
            assert self.block is not None
            block = self.block.tensors
            private = {name: t[0].clone() for name, t in block.items() if name != "slot"}
            private["slot"] = block["slot"].clone()

            def copies() -> None:
                for i in range(n):
                    for name in ("x0", "cos", "sin", "logits"):
                        private[name].copy_(block[name][i])
                private["slot"].copy_(block["slot"])

            times = []
            for _ in range(3):
                self._sync()
                start = time.perf_counter()
                copies()
                self._sync()
                times.append(time.perf_counter() - start)
            self._copies[n] = min(times)
        return self._copies[n]


class _Remote:
    """One mode's call run apart (:class:`~matprobe.token.apart.RemoteCall`)."""

    def __init__(self, apart: TableApart, name: str, bench: JudgedBench) -> None:
        self.apart, self.name, self.bench = apart, name, bench
        self.last_us = 0.0
        self.slot: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor:
        w = self.bench.weights
        self.last_us, (logits,) = self.replays([Staged(w.x0, w.cos, w.sin)])
        return logits

    def replays(self, staged: Sequence[Staged]) -> tuple[float, list[torch.Tensor]]:
        us, kept, self.slot = self.apart.run(self.name, staged)
        return us, kept

    @property
    def failure(self) -> str | None:
        return self.apart.failure

    def count(self) -> KernelCount:
        return self.apart.count(self.name)

    def warm(self) -> None:
        w = self.bench.weights
        noise = torch.rand_like(w.x0).mul_(2).sub_(1)
        self.apart.run(self.name, [Staged(noise, w.cos, w.sin)])


def _block(bench: JudgedBench, device: str) -> Arena:
    """The shared block on ``device`` for ``bench``'s step: :data:`WINDOW` rows of
    inputs (an embedding, the RoPE tables) and logits, and one KV slot, in its dtype."""
    w = bench.weights
    rows = [
        (name, (WINDOW, *t.shape), t.dtype)
        for name, t in (("x0", w.x0), ("cos", w.cos), ("sin", w.sin))
    ]
    logits, slot = bench.references[0], bench.new_slot()
    wanted: list[tuple[str, tuple[int, ...], Any]] = [
        *rows,
        ("logits", (WINDOW, *logits.shape), w.x0.dtype),
        ("slot", tuple(slot.shape), slot.dtype),
    ]
    return Arena(wanted, device)
