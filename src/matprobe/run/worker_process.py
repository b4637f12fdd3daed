"""What runs in a worker process (:func:`_worker_main`, the target the parent's
:class:`~matprobe.run.worker.Worker` spawns): set up once — the tamper snapshot
before any plugin is imported, the run's registry, the card, its ceilings —
then measure the items the parent sends, one pair after another, reporting
each over the pipe (the messages are listed in :mod:`matprobe.run.worker`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.pair import (
    PairContext,
    PoisonedContextError,
    error_result,
    measure_pair_safely,
)
from matprobe.measure.results import ErrorKind, PairResult
from matprobe.measure.tamper import describe
from matprobe.measure.timing import TimingPolicy, gpu_clock_state
from matprobe.measure.variants import Registry, import_ref, resolve_factory, with_plugins
from matprobe.run.task import Task, TaskData, task_from_data


def _worker_main(
    conn: Connection,
    factory: str,
    plugins: tuple[str, ...],
    place: dict[str, Any],
    policy: dict[str, Any],
    cpu_threads: int | None = None,
    measure_peaks: str | None = None,
) -> None:
    # Ctrl-C goes to the whole process group: the parent decides, the worker waits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        kind, index = _set_up_place(place["kind"], int(place["index"]), cpu_threads)
        # The card's clock as this process finds it, before it loads the card or
        # imports a plugin (the parent, still importing torch, cannot name the card
        # to nvidia-smi yet).
        clocks = gpu_clock_state(index) if kind == "cuda" else {}
        # What the judge and the baseline run, as matprobe and torch define it —
        # matprobe's families loaded, the settings as this process set them, and
        # the pipe it answers on — before any plugin is imported
        # (matprobe.measure.tamper). The snapshot reads ``registry`` again at each
        # comparison: by then it holds the plugins' families too.
        from matprobe.measure.tamper import Snapshot, worker_objects

        registry = resolve_factory(factory)
        snapshot = Snapshot.take(extra=lambda: worker_objects(registry, conn))
        # A plugin found in the parent's current directory is found here too
        # (with_plugins puts the working directory on sys.path).
        registry = with_plugins(registry, plugins)
        # This card's ceilings, measured here while the other cards' workers start
        # and measure theirs: no card waits for another's sweep. A process that chose
        # its device itself measures a card's ceilings only if it found a card.
        if place["kind"] is None and kind != "cuda":
            measure_peaks = None
        peaks = _call(measure_peaks) if measure_peaks else None
        timing = TimingPolicy(**policy)
        _say(conn, ("ready", os.getpid(), peaks, clocks))
        while True:
            try:
                message = conn.recv()
            except EOFError:  # the parent is gone: nobody wants the results
                return
            if message is None:
                return
            # The run and the device come with each item: the process starts before
            # the parent has detected the device and recorded the run.
            _, run_id, device, tasks = message
            info = DeviceInfo.from_dict(device)
            if (info.kind, info.index) != (kind, index):
                asked = f"{info.kind}:{info.index}"
                raise RuntimeError(f"set up on {kind}:{index}, sent pairs for {asked}")
            ctx = PairContext(info, timing, run_id)
            if not _measure_item(conn, tasks, registry, ctx, snapshot):
                return
            _say(conn, ("idle",))
    except Exception:
        with contextlib.suppress(OSError):  # the parent may be gone (a killed Ray worker)
            _say(conn, ("fatal", traceback.format_exc(limit=5)))
    finally:
        conn.close()


def _say(conn: Connection, message: tuple[Any, ...]) -> None:
    """A message to the parent as JSON, never a pickle: this process runs plugin
    code, and a pickle can run code in the process that reads it."""
    conn.send_bytes(json.dumps(message).encode())


def _set_up_place(kind: str | None, index: int, cpu_threads: int | None) -> tuple[str, int]:
    """Settle where this process measures (None: the CUDA card if there is one,
    else the CPU) and set the process up for it; the kind and card index."""
    if kind is None:
        from matprobe.measure.device import cuda_available

        kind = "cuda" if cuda_available() else "cpu"
    if kind == "cpu":
        # Triton reads this when it is first imported: no GPU, so interpret kernels.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if cpu_threads is not None:
        # Workers sharing a host share its cores: each drawing float64 inputs
        # with every core's worth of threads would oversubscribe them all.
        import torch

        torch.set_num_threads(cpu_threads)
    if kind == "cuda" and index:
        # Pinned to its card (one worker per card with --gpus): the measuring code
        # names cuda:<index>, and this makes Triton launches, streams and CUDA
        # graphs, which use the current device, follow it there.
        import torch

        torch.cuda.set_device(index)
    return kind, index


def _call(ref: str) -> dict[str, Any]:
    """``"module:function"`` imported and called: the dict it returns."""
    return dict(import_ref(ref)())


def _measure_item(
    conn: Connection, tasks: list[TaskData], registry: Registry, ctx: PairContext, snapshot: Any
) -> bool:
    """Measure one item's pairs, reporting each; False when this process must exit
    (its CUDA context is poisoned, or code in it replaced what the judge or the
    baseline runs) — the parent goes on in a fresh one."""
    for number, data in enumerate(tasks):
        _say(conn, ("start", data[0]))
        task = task_from_data(data, registry)
        changed = snapshot.changed()
        if not changed:
            try:
                result = measure_pair_safely(task.spec, task.variant, ctx, task.baseline)
            except PoisonedContextError as poisoned:
                _say(conn, ("done", task.index, poisoned.args[0].to_dict()))
                _say(conn, ("exit", "CUDA context poisoned; restarting the worker"))
                return False
            changed = snapshot.changed()
        if changed:
            # Replaced before this pair ran (at import, or by an earlier pair of
            # this item): so it is for the rest of the item; a fresh process for
            # the next one.
            for rest in tasks[number:]:
                rest_task = task_from_data(rest, registry)
                _say(conn, ("done", rest_task.index, _tampered(rest_task, ctx, changed).to_dict()))
            _say(conn, ("exit", "code in the worker replaced the judge's or the baseline's"))
            return False
        _say(conn, ("done", task.index, result.to_dict()))
    _release_cached_memory(ctx.device)
    return True


def _tampered(task: Task, ctx: PairContext, changed: Sequence[str]) -> PairResult:
    why = f"{describe(list(changed))}; no verdict is taken"
    return error_result(task.spec, task.variant, ctx, ErrorKind.TAMPER, why)


def _release_cached_memory(device: DeviceInfo) -> None:
    """Between items, hand the caching allocator's blocks back to the card (as a
    process that exited after each item did), so the next family starts with the
    memory it would have had in a fresh process."""
    torch = sys.modules.get("torch")
    if device.kind == "cuda" and torch is not None:
        torch.cuda.empty_cache()
