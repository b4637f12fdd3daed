"""Several device slots measuring one plan at once: every GPU of a host.

A *slot* is one place a worker process measures — a CUDA card (its
:class:`DeviceInfo`, whose ``index`` pins the worker to the card) or, in tests,
a CPU slot. :func:`run_on_slots` hands out *work items* (a chunk of one
family's tasks; a candidate and its baseline are one task, so they are always
measured on the same card, interleaved) to whichever slot is free. Each slot is
a thread in the parent that owns one long-lived worker process
(:class:`~matprobe.run.worker.Worker`, pinned to its card) and feeds it one
item after another: torch, the CUDA context and the families are set up once
per card, not once per item (~8 s each on a GPU host). A crash or a hang still
costs only its pair: the worker records it, starts a fresh process and goes on
with the rest of the item. The threads never touch the store: every event
comes back to the calling thread, which asks for work and stores results —
the store stays the single writer it was (an SQLite connection belongs to one
thread).
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import PairResult
from matprobe.run.task import Task
from matprobe.run.worker import OnResult, OnStart, WorkerSet, run_tasks


@dataclass(frozen=True)
class DeviceSlot:
    """Where one worker measures; ``label`` says so in each row ("cuda:1")."""

    label: str
    device: DeviceInfo


def parse_gpus(text: str) -> list[int] | None:
    """``--gpus``: "all" (None: every card) or card indices "0,1,…"; a one-line error else."""
    if text.strip() == "all":
        return None
    parts = [part.strip() for part in text.split(",")]
    if not parts or not all(part.isdigit() for part in parts):
        raise MatprobeError(f"--gpus {text!r}: give 'all' or card indices such as 0,1")
    indices = [int(part) for part in parts]
    if len(set(indices)) != len(indices):
        raise MatprobeError(f"--gpus {text!r}: a card is named twice")
    return indices


def visible_cuda_count() -> int | None:
    """How many CUDA cards this host has, without importing torch (nvidia-smi's
    list); None where that is not what torch would count (CUDA_VISIBLE_DEVICES
    set) or nvidia-smi says nothing. A hint for starting work early, never a fact
    a run records: torch's count decides."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return None
    try:
        proc = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    cards = [line for line in proc.stdout.splitlines() if line.startswith("GPU ")]
    return len(cards) if proc.returncode == 0 and cards else None


def cuda_slots(
    gpus: str, detect_card: Callable[[int], DeviceInfo] | None = None
) -> list[DeviceSlot]:
    """One slot per card ``--gpus`` names, each described by its own DeviceInfo.

    Cards of one run must share a device fingerprint (the plan's result keys hold
    it): a host with two card types runs each type with its own ``--gpus``."""
    wanted = parse_gpus(gpus)
    from matprobe.measure.device import cuda_available, detect

    if not cuda_available():
        raise MatprobeError(f"--gpus {gpus}: torch sees no CUDA GPU on this machine")
    import torch

    count = int(torch.cuda.device_count())
    indices = list(range(count)) if wanted is None else wanted
    missing = [i for i in indices if i >= count]
    if missing:
        raise MatprobeError(
            f"--gpus {gpus}: no card {', '.join(map(str, missing))} here "
            f"({count} CUDA card(s): 0–{count - 1})"
        )
    describe = detect_card or (lambda index: detect("cuda", index))
    slots = [DeviceSlot(f"cuda:{i}", describe(i)) for i in indices]
    kinds = {slot.device.fingerprint for slot in slots}
    if len(kinds) > 1:
        raise MatprobeError(
            f"--gpus {gpus}: the cards differ ({'; '.join(sorted(kinds))}); "
            "run each card type with its own --gpus"
        )
    return slots


def with_card(result: PairResult, slot: DeviceSlot) -> PairResult:
    """The result with the card that measured it among its notes (the device
    fingerprint names the card type, not which of a host's cards it was)."""
    note = f"card {slot.label}"
    return replace(result, clocks=replace(result.clocks, notes=(*result.clocks.notes, note)))


#: The next work item for the slot numbered so (None: no more); see ``work.WorkQueue``.
NextItem = Callable[[int], Sequence[Task] | None]
OnResultAt = Callable[[Task, PairResult, DeviceSlot], None]
#: Measures one work item on a slot: ``(tasks, on_start, on_result, cancel)``.
ItemRunner = Callable[[Sequence[Task], OnStart, OnResult, threading.Event], None]


def slot_runner(
    runner: Callable[..., None],
    slot: DeviceSlot,
    options: dict[str, Any],
    worker: WorkerSet | None = None,
) -> tuple[ItemRunner, WorkerSet | None]:
    """How a slot measures its items, and the :class:`WorkerSet` it keeps, if any.

    The ordinary runner (:func:`~matprobe.run.worker.run_tasks`, which starts
    a process per call) becomes one Worker the slot keeps for the whole run
    (``options`` may then also hold Worker's ``cpu_threads`` and
    ``measure_peaks``), or ``worker``, the one made for the slot before (already
    starting); any other runner (tests, a custom one) is called once per item with
    the run's options."""
    if runner is run_tasks:
        if worker is None:
            worker = WorkerSet(device=slot.device, **options)

        def on_worker(
            tasks: Sequence[Task], start: OnStart, result: OnResult, cancel: threading.Event
        ) -> None:
            worker.run(tasks, on_start=start, on_result=result, cancel=cancel)

        return on_worker, worker
    shared = {k: v for k, v in options.items() if k not in _WORKER_ONLY}

    def per_item(
        tasks: Sequence[Task], start: OnStart, result: OnResult, cancel: threading.Event
    ) -> None:
        runner(tasks, device=slot.device, on_start=start, on_result=result, cancel=cancel, **shared)

    return per_item, None


#: Options only a slot's Worker takes (a custom runner is not given them).
_WORKER_ONLY = frozenset({"cpu_threads", "measure_peaks"})


def cores_per_slot(slots: int, cores: int | None = None) -> int | None:
    """torch CPU threads for each of ``slots`` workers on one host: the cores shared
    out (None, torch's own default, for a lone worker). Four workers each drawing
    float64 inputs with every core's worth of threads would oversubscribe them."""
    if slots <= 1:
        return None
    return max(1, (cores if cores is not None else os.cpu_count() or 1) // slots)


def run_on_slots(
    next_item: NextItem,
    slots: Sequence[DeviceSlot],
    *,
    on_start: Callable[[Task], None],
    on_result: OnResultAt,
    runner: Callable[..., None] = run_tasks,
    card_peaks: str | None = None,
    workers: Sequence[WorkerSet] | None = None,
    **runner_options: Any,
) -> dict[str, dict[str, Any]]:
    """Run work items on ``slots`` in parallel until ``next_item`` gives None (it is
    asked with the number of the slot the item is for: a card's next item may
    depend on what it measured before).

    ``next_item``, ``on_start`` and ``on_result`` are called in this thread only.
    With the default ``runner`` each slot keeps one worker process for the whole
    run (:func:`slot_runner`), with its share of the host's cores; another
    ``runner`` is called as ``runner(tasks, device=slot.device, on_start=…,
    on_result=…, cancel=threading.Event, **runner_options)`` in the slot's
    thread, once per item.
    ``card_peaks`` (``"module:function"``, :data:`~matprobe.run.worker.CARD_PEAKS`
    on GPUs): each slot's worker measures its card's ceilings with it as it
    starts, all cards at once; returned by slot label (a slot that never got an
    item, or a custom runner, has none). ``workers``: each slot's WorkerSet, made
    (and started) by the caller with :func:`slot_workers` before it planned.
    On Ctrl-C the slots are cancelled, what already arrived is still handed to
    ``on_result``, and KeyboardInterrupt is raised again; an exception in a slot's
    runner stops the handing out of work and is raised once the others have finished."""
    if not slots:
        raise ValueError("run_on_slots needs at least one slot")
    options = {
        **runner_options,
        "cpu_threads": cores_per_slot(len(slots)),
        "measure_peaks": card_peaks,
    }
    pool = _SlotPool(slots, next_item, on_start, on_result)
    pool.start(runner, options, workers)
    try:
        pool.hand_out()
    except KeyboardInterrupt:
        pool.stop_after_interrupt()
        raise
    if pool.failure is not None:
        raise pool.failure
    return {slot.label: pool.peaks[slot.label] for slot in slots if slot.label in pool.peaks}


class _SlotPool:
    """:func:`run_on_slots`'s state: a thread per slot that measures the items put
    in its inbox, and the calling thread, which hands out items and takes every
    event the slots put in ``events`` (``("start", slot, task)``, ``("result",
    slot, task, result)``, ``("failed", slot, exc)``, ``("idle", slot)``: ready for
    the next item, ``("stopped", slot)``: its thread ends)."""

    def __init__(
        self,
        slots: Sequence[DeviceSlot],
        next_item: NextItem,
        on_start: Callable[[Task], None],
        on_result: OnResultAt,
    ) -> None:
        self.slots = slots
        self.next_item = next_item
        self.on_start = on_start
        self.on_result = on_result
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.inboxes: list[queue.Queue[Sequence[Task] | None]] = [queue.Queue() for _ in slots]
        self.cancel = threading.Event()
        self.peaks: dict[str, dict[str, Any]] = {}
        self.threads: list[threading.Thread] = []
        self.running = 0
        self.failure: BaseException | None = None
        self.exhausted = False

    def start(
        self,
        runner: Callable[..., None],
        options: dict[str, Any],
        workers: Sequence[WorkerSet] | None,
    ) -> None:
        self.threads = [
            threading.Thread(
                target=self._serve,
                args=(n, slot, runner, options, workers[n] if workers else None),
                name=f"matprobe-{slot.label}",
                daemon=True,
            )
            for n, slot in enumerate(self.slots)
        ]
        for thread in self.threads:
            thread.start()
        self.running = len(self.threads)

    def _serve(
        self,
        number: int,
        slot: DeviceSlot,
        runner: Callable[..., None],
        options: dict[str, Any],
        made: WorkerSet | None,
    ) -> None:
        """A slot's thread: measure each item of its inbox until a None."""
        events = self.events
        measure, worker = slot_runner(runner, slot, options, made)
        try:
            while True:
                item = self.inboxes[number].get()
                if item is None:
                    break
                try:
                    measure(
                        item,
                        lambda task: events.put(("start", number, task)),
                        lambda task, result: events.put(("result", number, task, result)),
                        self.cancel,
                    )
                except BaseException as exc:  # reported to the caller's thread
                    events.put(("failed", number, exc))
                events.put(("idle", number))
        finally:
            if worker is not None:
                worker.close()
                if worker.peaks is not None:
                    self.peaks[slot.label] = worker.peaks
            events.put(("stopped", number))

    def hand_out(self) -> None:
        """An item to every slot, then one to each that comes back idle, until
        every slot's thread has stopped."""
        for number in range(len(self.slots)):
            self._feed(number)
        while self.running:
            self._handle(self.events.get())

    def _feed(self, number: int) -> None:
        """The slot's next item, or None (it stops) once the work is done or failed."""
        done = self.exhausted or self.failure is not None
        item = None if done else self.next_item(number)
        if item is None:
            self.exhausted = True
        self.inboxes[number].put(item)

    def _handle(self, event: tuple[Any, ...]) -> None:
        kind, number = event[0], event[1]
        if kind == "start":
            self.on_start(event[2])
        elif kind == "result":
            self.on_result(event[2], event[3], self.slots[number])
        elif kind == "failed":
            self.failure = self.failure or event[2]
        elif kind == "idle":
            self._feed(number)
        elif kind == "stopped":
            self.running -= 1

    def stop_after_interrupt(self) -> None:
        """Ctrl-C: cancel the slots, wait for their threads (30 s each at most) and
        hand on the results that arrived meanwhile."""
        self.cancel.set()
        self.exhausted = True
        for inbox in self.inboxes:
            inbox.put(None)
        for thread in self.threads:
            thread.join(timeout=30)
        # What finished before the interrupt is stored, never dropped.
        while not self.events.empty():
            event = self.events.get()
            if event[0] == "result":
                self.on_result(event[2], event[3], self.slots[event[1]])


def card_peaks_note(peaks: dict[str, dict[str, Any]], used: str) -> str:
    """One line: every card's streaming read and copy (as its worker measured them
    when it started), and whose the report's % of the read ceiling is taken against."""
    cards = "; ".join(
        f"{label} read {p.get('read_gbps', 0):.0f} GB/s, copy {p.get('copy_gbps', 0):.0f} GB/s"
        for label, p in peaks.items()
    )
    return (
        f"peaks per card, each measured by its worker: {cards}; the report's % read uses {used}'s"
    )
