"""A fresh process of one plugin's (or of none: the baseline's), driven by the
judge apart (:mod:`~matprobe.run.witness`, and the token's,
:mod:`~matprobe.token.apart`) over a pipe that carries JSON one way; the
process itself runs :mod:`~matprobe.run.witness_child` (or the loop it is
given)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.run import process_tree, processes
from matprobe.run.witness_child import WITNESS, child_main

#: Pings before the plugin is imported; the slowest is what a message costs.
PINGS = 8
START_TIMEOUT_S = 180.0
PAIR_TIMEOUT_S = 300.0
#: Seconds the witness waits, after "done", for outputs still unwritten.
UNFINISHED_S = 30.0


class WitnessError(Exception):
    """The plugin's process did not do what the witness asked (died, timed out, said
    something else, raised): the row gets no verdict."""


class WitnessProcess:
    """A fresh process that imports ``plugins`` (none: the factory's families only,
    as the baseline's process), driven by the witness (see the module doc);
    ``served`` answers there (:func:`~matprobe.run.witness_child.child_main`)."""

    def __init__(
        self,
        factory: str,
        plugins: tuple[str, ...],
        device: DeviceInfo,
        cpu_threads: int | None = None,
        served: str = WITNESS,
    ) -> None:
        self._conn, theirs = multiprocessing.Pipe()
        args = (theirs, served, factory, plugins, device.kind, device.index, cpu_threads)
        self._process = processes.start(child_main, args)
        theirs.close()
        # Where its helpers' orphans go (see process_tree).
        pid = self._process.pid or 0
        server = process_tree.parent_of(pid)
        self._server = server if server not in (None, 0, 1, os.getpid()) else None
        try:
            self.expect("ready", START_TIMEOUT_S)
            #: what a message there and back costs: each ping before the import
            self.pings_s = [self._ping() for _ in range(PINGS)]
            self.latency_s = max(self.pings_s)
            self.send("import")
            self.expect("imported", START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def send(self, *message: Any) -> None:
        self._conn.send(message)  # plain data, to a process that may read it as it likes

    def expect(self, word: str, timeout_s: float) -> None:
        """Wait for ``word``; :class:`WitnessError` for anything else, or nothing."""
        self.answer(word, 0, timeout_s)

    def answer(self, word: str, fields: int, timeout_s: float) -> list[Any]:
        """Wait for ``word`` followed by ``fields`` values, and return those;
        :class:`WitnessError` for anything else, or nothing."""
        try:
            ready = self._conn.poll(timeout_s)
            message = json.loads(self._conn.recv_bytes()) if ready else None
        except (EOFError, OSError, ValueError) as exc:
            self._process.join(1)
            code = self._process.exitcode
            raise WitnessError(
                f"its process ended (exit code {code}) or garbled its answer ({exc!r})"
            ) from None
        if message is None:
            raise WitnessError(f"no answer within {timeout_s:.0f} s")
        if isinstance(message, list) and message[:1] == ["error"] and len(message) == 2:
            last = str(message[1]).strip().splitlines()[-1:] or ["?"]
            raise WitnessError(f"its process raised {last[0]}")
        if not isinstance(message, list) or message[:1] != [word] or len(message) != fields + 1:
            raise WitnessError(f"its process broke the protocol (sent {str(message)[:80]!r})")
        return message[1:]

    def _ping(self) -> float:
        start = time.perf_counter()
        self.send("ping")
        self.expect("pong", START_TIMEOUT_S)
        return time.perf_counter() - start

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """This process frozen (SIGSTOP) for the block, and every process it started,
        wherever that went — its group, its descendants, their orphans
        (:func:`~matprobe.run.process_tree.started_by`): whatever they would do
        meanwhile — work for the host's cores while another process is timed —
        waits. Work already given to a card runs on."""
        pid = self._process.pid
        if pid is None or not hasattr(signal, "SIGSTOP"):
            yield
            return
        frozen = self._freeze(pid)
        try:
            yield
        finally:
            process_tree.thaw(pid, frozen)

    def _freeze(self, pid: int | None) -> set[int]:
        """What ``pid`` (None: a process already gone) started, and ``pid``, stopped
        (:func:`~matprobe.run.process_tree.freeze`): the judge's own children known."""
        known = {child.pid or 0 for child in multiprocessing.active_children()}
        return process_tree.freeze(pid, self._server, known)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()
        if self._process.pid is not None and hasattr(signal, "SIGKILL"):
            # What the plugin started ends with it: its group (the group only: the
            # reaped process's pid may be another's by now), and its orphans.
            process_tree.signal_group(self._process.pid, signal.SIGKILL)
            process_tree.signal_all(self._freeze(None), signal.SIGKILL)
