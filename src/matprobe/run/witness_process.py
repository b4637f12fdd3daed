"""A fresh process of one plugin's (or of none: the baseline's), driven by the
judge apart (:mod:`~matprobe.run.witness`) over a pipe that carries JSON one
way; the process itself runs :mod:`~matprobe.run.witness_child`."""

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
from matprobe.run import processes
from matprobe.run.witness_child import _witness_main

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
    as the baseline's process), driven by the witness (see the module doc)."""

    def __init__(
        self,
        factory: str,
        plugins: tuple[str, ...],
        device: DeviceInfo,
        cpu_threads: int | None = None,
    ) -> None:
        self._conn, theirs = multiprocessing.Pipe()
        args = (theirs, factory, plugins, device.kind, device.index, cpu_threads)
        self._process = processes.start(_witness_main, args)
        theirs.close()
        try:
            self.expect("ready", START_TIMEOUT_S)
            self.latency_s = max(self._ping() for _ in range(PINGS))
            self.send("import")
            self.expect("imported", START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def send(self, *message: Any) -> None:
        self._conn.send(message)  # plain data, to a process that may read it as it likes

    def expect(self, word: str, timeout_s: float) -> None:
        """Wait for ``word``; :class:`WitnessError` for anything else, or nothing."""
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
        if message != [word]:
            raise WitnessError(f"its process broke the protocol (sent {str(message)[:80]!r})")

    def _ping(self) -> float:
        start = time.perf_counter()
        self.send("ping")
        self.expect("pong", START_TIMEOUT_S)
        return time.perf_counter() - start

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """This process frozen (SIGSTOP) for the block, and the processes it started
        (its process group, made before any plugin was imported): whatever they
        would do meanwhile — work for the host's cores while another process is
        timed — waits. Work already given to a card runs on, and so does a process
        that left the group (``setsid``): a plugin must do that on purpose."""
        pid = self._process.pid
        if pid is None or not hasattr(signal, "SIGSTOP"):
            yield
            return
        _signal_process_and_group(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            _signal_process_and_group(pid, signal.SIGCONT)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()
        if self._process.pid is not None and hasattr(os, "killpg"):
            # What the plugin started and left in the process's group ends with it
            # (the group only: the reaped process's pid may be another's by now).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)


def _signal_process_and_group(pid: int, signum: int) -> None:
    """``signum`` to the process ``pid`` and to the group it leads (the processes it
    started), each that still exists: the process may have left its group, the group
    may be that process alone."""
    for send in (os.kill, os.killpg):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            send(pid, signum)
