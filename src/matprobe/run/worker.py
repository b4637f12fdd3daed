"""Run a family's pairs in a worker process, so that one crash costs one row.

An illegal memory access poisons a CUDA context, a segfault kills a process, a
kernel can hang: pairs therefore run in another process. A :class:`Worker` keeps
one for as long as its owner wants it — a card's slot of a multi-GPU run for
the whole run, fed one work item after another, so that torch, the CUDA context
and the families are imported once per card rather than once per item (~8 s
each on a GPU host). The parent stores every result the moment it arrives; when
the process dies or a pair outlives its timeout, that pair is recorded as a
crash or a timeout, the process is replaced, and the item goes on.

A worker rebuilds the run's registry from what it is sent — the factory
string and the plugin module names (:func:`~matprobe.measure.variants.registry_with_plugins`,
the same call the parent made) — and imports no family module by itself.

The pipe carries, parent to child, one item's tasks at a time with the run and
the device they are measured for (``("item", run_id, device, payload)``: the
process may start before either is known) and ``None`` to stop; child to parent,
as JSON, ``("ready", pid, peaks, clocks)`` once set up (``peaks``: the card's
ceilings when asked, else None; ``clocks``: the card's clock state before the
process loaded it), ``("start", index)`` and ``("done", index, result)`` per pair
— in turn, the result that pair's, or the process is ended as broken —
``("idle",)`` after an item, ``("exit", why)`` before a deliberate exit (a
poisoned CUDA context) and ``("fatal", traceback)``.

The child's side is :mod:`~matprobe.run.worker_process`; what a task is, and
what of it is sent, :mod:`~matprobe.run.task`.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, TypeVar, cast

from matprobe.measure.device import DeviceInfo
from matprobe.measure.pair import PairContext, error_result
from matprobe.measure.results import ErrorKind, PairResult
from matprobe.measure.timing import TimingPolicy
from matprobe.measure.variants import SHIPPED_FACTORY, SHIPPED_ORIGIN
from matprobe.run import process_tree, processes
from matprobe.run.task import Task, result_of, task_data
from matprobe.run.worker_process import _worker_main

#: Seconds a fresh worker may take to import torch/triton before it says it is ready.
STARTUP_TIMEOUT_S = 180.0
POLL_S = 0.1
#: Seconds a worker asked to stop may take before it is killed.
STOP_TIMEOUT_S = 10.0
#: What a worker calls for its card's bandwidth ceilings (``measure_peaks``).
CARD_PEAKS = "matprobe.measure.peaks:measure_peaks_cuda"


@dataclass(frozen=True)
class Place:
    """Where a worker process sets up, as known before torch is imported: ``kind``
    "cuda", "cpu" or "mps", or None for the CUDA card if there is one, else the CPU
    (the process decides, as :func:`~matprobe.measure.device.detect` would); the
    card ``index``. The :class:`DeviceInfo` of its pairs comes with each item."""

    kind: str | None
    index: int = 0

    def holds(self, device: DeviceInfo) -> bool:
        """Whether a process set up here measures on ``device``."""
        chosen = self.kind or ("cuda" if device.kind == "cuda" else "cpu")
        return chosen == device.kind and self.index == device.index

    def __str__(self) -> str:
        return f"{self.kind or 'the default device'}:{self.index}"


OnStart = Callable[[Task], None]
OnResult = Callable[[Task, PairResult], None]

#: ``_next_message``'s made-up messages (compared by identity): cancelled, late.
CANCELLED = ("cancelled",)
LATE = ("late",)
STARTUP_LATE = "worker did not start in time"


_Stoppable = TypeVar("_Stoppable", bound="_StopsOnExit")


class _StopsOnExit:
    """A worker as a ``with`` block's: asked to stop (:meth:`close`) when the block
    ends, killed at once (:meth:`kill`) when it ends by an exception — an
    interrupted run does not wait for a pair to finish."""

    def close(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Stoppable) -> _Stoppable:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
        else:
            self.kill()


class Worker(_StopsOnExit):
    """One long-lived worker process on one device, fed work items one after another.

    :meth:`run` measures an item; every task ends in exactly one ``on_result``
    call, whatever happens to the process — unless ``cancel`` is set (an
    interrupted multi-GPU run): then the process is killed and the tasks left get
    none. The process is started on the first item — or earlier, by :meth:`spawn`,
    so that it imports torch and sets up its card while the parent plans — and
    replaced after a crash, a timeout or a poisoned context; :meth:`close` stops it."""

    def __init__(
        self,
        *,
        factory: str = SHIPPED_FACTORY,
        plugins: Sequence[str] = (),
        device: DeviceInfo | None,
        policy: TimingPolicy,
        run_id: int | None,
        timeout_s: float,
        cpu_threads: int | None = None,
        measure_peaks: str | None = None,
        place: Place | None = None,
    ) -> None:
        """``cpu_threads``: torch's CPU threads in the process (None: torch's
        default, every core); ``measure_peaks``: ``"module:function"`` the first
        process calls, once set up, for its card's bandwidth ceilings (a dict,
        kept in :attr:`peaks`; :data:`CARD_PEAKS` on a GPU). ``place``: where the
        process sets up, for a worker made before ``device`` is known (it is
        then given by :meth:`bind_run`, before the first item)."""
        if place is None:
            if device is None:
                raise ValueError("a Worker needs its device or its place")
            place = Place(device.kind, device.index)
        self._device, self._policy, self._run_id = device, policy, run_id
        self.place = place
        self.timeout_s = timeout_s
        self._args = (factory, tuple(plugins), asdict(place), asdict(policy), cpu_threads)
        self._measure_peaks = measure_peaks
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        #: the process has said it is set up (False while it starts, or without one)
        self._ready = False
        #: when the process was started (time.monotonic()), for its start-up deadline
        self._spawned_at = 0.0
        #: the pid of every process started, as each reported it from inside itself
        self.pids: list[int] = []
        #: the card's peaks, once the first process has measured them (see measure_peaks)
        self.peaks: dict[str, Any] | None = None
        #: the card's clock state (nvidia-smi) as the first process found it, before
        #: it loaded the card; {} off CUDA, None before a process has started
        self.clocks_before: dict[str, str] | None = None

    @property
    def ctx(self) -> PairContext:
        """The device, policy and run the results of this worker's pairs are for."""
        if self._device is None:
            raise RuntimeError("the worker was made for a place: bind_run gives its device")
        return PairContext(self._device, self._policy, self._run_id)

    def bind_run(self, run_id: int | None, device: DeviceInfo | None = None) -> None:
        """The run (and, for a worker made for a place, the device) the next items'
        results belong to: a worker spawned before the parent detected its device and
        recorded the run learns them here; the process is sent both with each item."""
        self._run_id = run_id
        if device is not None:
            if not self.place.holds(device):
                raise ValueError(f"a worker set up for {self.place} cannot measure on {device}")
            self._device = device

    def spawn(self) -> None:
        """Start the process now, without waiting for it to be set up: the next
        :meth:`run` waits for it (a process that has not started is started there)."""
        if self._proc is not None:
            return
        parent_conn, child_conn = multiprocessing.Pipe()
        # Only the first process measures the card (a replacement after a crash
        # would measure a card that just misbehaved, and take the time again).
        measure = None if self.pids else self._measure_peaks
        proc = processes.start(_worker_main, (child_conn, *self._args, measure))
        child_conn.close()
        self._proc, self._conn = proc, parent_conn
        self._spawned_at = time.monotonic()

    def close(self) -> None:
        """Ask the process to exit (killed if it does not within STOP_TIMEOUT_S, at once
        while starting up: it measured nothing), and kill what it started."""
        with process_tree.ending_what_it_started(self._proc.pid if self._proc else None):
            if self._conn is not None and self._ready:
                with contextlib.suppress(OSError):  # already gone
                    self._conn.send(None)
            self._reap(kill=not self._ready)

    def kill(self) -> None:
        with process_tree.ending_what_it_started(self._proc.pid if self._proc else None):
            self._reap(kill=True)

    def run(
        self,
        tasks: Sequence[Task],
        *,
        on_start: OnStart,
        on_result: OnResult,
        cancel: threading.Event | None = None,
    ) -> None:
        """Measure ``tasks`` (one work item) in this worker's process."""
        remaining = {task.index: task for task in tasks}

        def finish(task: Task, result: PairResult) -> None:
            remaining.pop(task.index, None)
            on_result(task, result)

        try:
            while remaining:
                fresh = not self._ready
                if fresh:
                    message = self._start(cancel)
                    if message is CANCELLED:
                        return
                    if message[0] != "ready":
                        self._fail_all(remaining, finish, self._problem(message, STARTUP_LATE))
                        return
                if not self._measure(remaining, on_start, finish, cancel, fresh=fresh):
                    return
        except BaseException:
            self._reap(kill=True)
            raise

    # --- the process ------------------------------------------------------------------

    def _start(self, cancel: threading.Event | None) -> tuple[Any, ...]:
        """Start a process (unless :meth:`spawn` did) and wait until it is set up: its
        ``("ready", pid, peaks, clocks)``, or the message that says why not (the process is
        then gone)."""
        measures_peaks = not self.pids and self._measure_peaks is not None
        self.spawn()
        message = self._next_message(self._spawned_at + STARTUP_TIMEOUT_S, cancel)
        if message[0] == "ready":
            self._ready = True
            if not self.pids:
                self.clocks_before = dict(message[3])
            self.pids.append(int(message[1]))
            if measures_peaks and message[2] is not None:
                self.peaks = dict(message[2])
        else:
            self._reap(kill=True)
        return message

    def _next_message(self, deadline: float, cancel: threading.Event | None) -> tuple[Any, ...]:
        """The process's next message, CANCELLED, LATE (past ``deadline``) or ``("died",)``."""
        proc, conn = self._proc, self._conn
        assert proc is not None and conn is not None
        while True:
            if cancel is not None and cancel.is_set():
                return CANCELLED
            if conn.poll(POLL_S):
                try:
                    message = tuple(json.loads(conn.recv_bytes()))  # JSON: never unpickled
                except EOFError:
                    return ("died",)
                except ValueError:  # not the worker's own words: plugin code wrote them
                    return ("fatal", "the worker sent a message that is not JSON")
                return message
            if time.monotonic() > deadline:
                return LATE
            if not proc.is_alive() and not conn.poll(0):
                return ("died",)

    @staticmethod
    def _problem(message: tuple[Any, ...], late: str) -> str:
        """Why the process stopped, from its last message (``late``: it said nothing in time)."""
        if message is LATE:
            return late
        if message[0] == "exit":
            return str(message[1])
        if message[0] == "fatal":
            return f"worker failed: {str(message[1]).strip().splitlines()[-1]}"
        return "worker died"

    def _reap(self, kill: bool = False) -> int | None:
        """Forget the process, killing it first if asked; its exit code (None: none)."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        self._ready = False
        if proc is None:
            return None
        if kill:
            proc.kill()
        proc.join(timeout=STOP_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if conn is not None:
            conn.close()
        return proc.exitcode

    # --- one item ---------------------------------------------------------------------

    def _measure(
        self,
        remaining: dict[int, Task],
        on_start: OnStart,
        finish: OnResult,
        cancel: threading.Event | None,
        *,
        fresh: bool,
    ) -> bool:
        """Send the pairs left to the process and follow it until the item is done or
        the process is gone (its pair then recorded); False when cancelled. A reused
        process found dead before its first pair died idle: a fresh one takes the item."""
        assert self._conn is not None
        current: Task | None = None
        started = broke = False
        try:
            tasks = [task_data(task) for task in remaining.values()]
            ctx = self.ctx
            self._conn.send(("item", ctx.run_id, asdict(ctx.device), tasks))
        except OSError:
            message: tuple[Any, ...] = ("died",)
        else:
            deadline = time.monotonic() + self.timeout_s
            while True:
                message = self._next_message(deadline, cancel)
                if message[0] == "start" and current is None and message[1] in remaining:
                    current, started = remaining[message[1]], True
                    deadline = time.monotonic() + self.timeout_s
                    on_start(current)
                elif message[0] == "done" and current and (result := result_of(current, message)):
                    finish(current, result)
                    current = None
                elif message[0] == "idle" and current is None:
                    return True
                else:
                    if message[0] in ("start", "done", "idle"):  # out of turn, or not a result
                        message = ("fatal", f"the worker broke its protocol: {message!r:.120}")
                        broke = True  # killed: a process that broke it may never stop
                    break
        code = self._reap(kill=broke or message is LATE or message is CANCELLED)
        if message is CANCELLED:
            return False
        if message is LATE and current is not None:
            why = f"no result after {self.timeout_s:.0f} s; worker killed"
            finish(current, self._error(current, ErrorKind.TIMEOUT, why))
            return True
        problem = self._problem(message, "worker stopped answering")
        if current is not None:
            # The pair in flight when the process died is the one that killed it.
            finish(current, self._error(current, ErrorKind.CRASH, f"{problem} (exit code {code})"))
        elif (started or fresh) and not _progress_possible(problem):
            self._fail_all(remaining, finish, problem)
        return True

    def _error(self, task: Task, kind: ErrorKind, message: str) -> PairResult:
        return error_result(task.spec, task.variant, self.ctx, kind, message)

    def _fail_all(self, remaining: dict[int, Task], finish: OnResult, problem: str) -> None:
        """Every pair left gets ``problem``: the process could not start, or died
        between pairs, and another would only do the same again."""
        for task in list(remaining.values()):
            finish(task, self._error(task, ErrorKind.EXCEPTION, problem))


def _progress_possible(problem: str) -> bool:
    """After a clean poisoned-context exit the next process can go on; after one
    that failed to start or died between pairs, retrying would loop forever."""
    return problem.startswith("CUDA context poisoned")


def plugins_needed(tasks: Sequence[Task], plugins: Sequence[str]) -> tuple[str, ...]:
    """The run's plugins (in their order) that define the families of ``tasks``'
    candidates and baselines: the only ones their worker imports."""
    origins = {t.variant.family.origin for t in tasks}
    origins |= {t.baseline.family.origin for t in tasks if t.baseline is not None}
    origins.discard(SHIPPED_ORIGIN)
    return tuple(p for p in plugins if p in origins)


class WorkerSet(_StopsOnExit):
    """:class:`Worker`'s interface over one worker per set of plugins: a family is
    measured in a process that imported matprobe's families and its own plugin
    only, so a plugin that patches torch or matprobe when imported reaches its own
    rows (where :mod:`~matprobe.measure.tamper` refuses them), never the shipped
    families' nor another plugin's. Each process is started on its first item and
    kept for the next; the card's peaks are measured by the one without plugins."""

    def __init__(
        self, *, plugins: Sequence[str] = (), measure_peaks: str | None = None, **options: Any
    ) -> None:
        self._plugins = tuple(plugins)
        self._measure_peaks = measure_peaks
        self._options = options
        self._workers: dict[tuple[str, ...], Worker] = {}

    def worker_for(self, tasks: Sequence[Task]) -> Worker:
        return self._worker(plugins_needed(tasks, self._plugins))

    def _worker(self, plugins: tuple[str, ...]) -> Worker:
        if plugins not in self._workers:
            peaks = self._measure_peaks if not plugins else None
            self._workers[plugins] = Worker(plugins=plugins, measure_peaks=peaks, **self._options)
        return self._workers[plugins]

    def spawn(self) -> None:
        """Start the process of matprobe's own families (the one that measures the
        card's peaks) ahead of its first item; a plugin's starts on its first item."""
        self._worker(()).spawn()

    @property
    def place(self) -> Place:
        """Where the processes set up (see :class:`Place`)."""
        place = self._options.get("place")
        if place is None:
            device = self._options["device"]
            return Place(device.kind, device.index)
        return cast(Place, place)

    @property
    def clocks_before(self) -> dict[str, str] | None:
        """The card's clock state as the first of these processes found it."""
        found = [w.clocks_before for w in self._workers.values() if w.clocks_before is not None]
        return found[0] if found else None

    def bind_run(self, run_id: int | None, device: DeviceInfo | None = None) -> None:
        """The run (and device: see :meth:`Worker.bind_run`) the results of every
        worker, started or to come, belong to."""
        self._options["run_id"] = run_id
        if device is not None:
            self._options["device"] = device
        for worker in self._workers.values():
            worker.bind_run(run_id, device)

    def run(
        self,
        tasks: Sequence[Task],
        *,
        on_start: OnStart,
        on_result: OnResult,
        cancel: threading.Event | None = None,
    ) -> None:
        if tasks:
            self.worker_for(tasks).run(tasks, on_start=on_start, on_result=on_result, cancel=cancel)

    @property
    def peaks(self) -> dict[str, Any] | None:
        shipped = self._workers.get(())
        return shipped.peaks if shipped is not None else None

    @property
    def pids(self) -> list[int]:
        return [pid for worker in self._workers.values() for pid in worker.pids]

    def close(self) -> None:
        for worker in self._workers.values():
            worker.close()

    def kill(self) -> None:
        for worker in self._workers.values():
            worker.kill()


def run_tasks(
    tasks: Sequence[Task],
    *,
    factory: str = SHIPPED_FACTORY,
    plugins: Sequence[str] = (),
    device: DeviceInfo,
    policy: TimingPolicy,
    run_id: int | None,
    timeout_s: float,
    on_start: OnStart,
    on_result: OnResult,
    cancel: threading.Event | None = None,
) -> None:
    """Run ``tasks`` (one family's) in a worker process of their own (replaced
    after a crash), stopped at the end: :meth:`Worker.run` once. Each process
    builds its registry from ``factory`` and ``plugins``, as the parent built its own."""
    workers = WorkerSet(
        factory=factory,
        plugins=plugins,
        device=device,
        policy=policy,
        run_id=run_id,
        timeout_s=timeout_s,
    )
    with workers:
        workers.run(tasks, on_start=on_start, on_result=on_result, cancel=cancel)
