"""What runs in a worker process (:func:`_worker_main`, the target the parent's
:class:`~matprobe.run.worker.Worker` spawns): set up once — the tamper snapshot
before any plugin is imported, the run's registry, the card, its ceilings —
then measure the items the parent sends, one pair after another, reporting
each over the pipe (the messages are listed in :mod:`matprobe.run.worker`)."""

from __future__ import annotations

import contextlib
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
from matprobe.measure.timing import TimingPolicy
from matprobe.measure.variants import Registry, import_ref
from matprobe.run.task import Task, TaskData, load_registry, task_from_data


def _worker_main(
    conn: Connection,
    factory: str,
    plugins: tuple[str, ...],
    device: dict[str, Any],
    policy: dict[str, Any],
    run_id: int | None,
    cpu_threads: int | None = None,
    measure_peaks: str | None = None,
) -> None:
    # Ctrl-C goes to the whole process group: the parent decides, the worker waits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if device["kind"] == "cpu":
        # Triton reads this when it is first imported: no GPU, so interpret kernels.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        if cpu_threads is not None:
            # Workers sharing a host share its cores: each drawing float64 inputs
            # with every core's worth of threads would oversubscribe them all.
            import torch

            torch.set_num_threads(cpu_threads)
        # What the judge and the baseline run, as matprobe and torch define it,
        # before any plugin is imported (matprobe.measure.tamper).
        from matprobe.measure.tamper import Snapshot

        snapshot = Snapshot.take()
        # A plugin found in the parent's current directory is found here too
        # (registry_with_plugins puts the working directory on sys.path).
        registry = load_registry(factory, plugins)
        info = DeviceInfo.from_dict(device)
        if info.kind == "cuda" and info.index:
            # Pinned to its card (one worker per card with --gpus): the measuring code
            # names cuda:<index>, and this makes Triton launches, streams and CUDA
            # graphs, which use the current device, follow it there.
            import torch

            torch.cuda.set_device(info.index)
        # This card's ceilings, measured here while the other cards' workers start
        # and measure theirs: no card waits for another's sweep.
        peaks = _call(measure_peaks) if measure_peaks else None
        ctx = PairContext(info, TimingPolicy(**policy), run_id)
        conn.send(("ready", os.getpid(), peaks))
        while True:
            try:
                message = conn.recv()
            except EOFError:  # the parent is gone: nobody wants the results
                return
            if message is None:
                return
            if not _measure_item(conn, message[1], registry, ctx, snapshot):
                return
            conn.send(("idle",))
    except Exception:
        with contextlib.suppress(OSError):  # the parent may be gone (a killed Ray worker)
            conn.send(("fatal", traceback.format_exc(limit=5)))
    finally:
        conn.close()


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
        conn.send(("start", data[0]))
        task = task_from_data(data, registry)
        changed = snapshot.changed()
        if not changed:
            try:
                result = measure_pair_safely(task.spec, task.variant, ctx, task.baseline)
            except PoisonedContextError as poisoned:
                conn.send(("done", task.index, poisoned.args[0].to_dict()))
                conn.send(("exit", "CUDA context poisoned; restarting the worker"))
                return False
            changed = snapshot.changed()
        if changed:
            # Replaced before this pair ran (at import, or by an earlier pair of
            # this item): so it is for the rest of the item; a fresh process for
            # the next one.
            for rest in tasks[number:]:
                rest_task = task_from_data(rest, registry)
                conn.send(("done", rest_task.index, _tampered(rest_task, ctx, changed).to_dict()))
            conn.send(("exit", "code in the worker replaced the judge's or the baseline's"))
            return False
        conn.send(("done", task.index, result.to_dict()))
    _release_cached_memory(ctx.device)
    return True


def _tampered(task: Task, ctx: PairContext, changed: Sequence[str]) -> PairResult:
    shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
    why = f"{shown} replaced in the process that measured it: no verdict is taken there"
    return error_result(task.spec, task.variant, ctx, ErrorKind.TAMPER, why)


def _release_cached_memory(device: DeviceInfo) -> None:
    """Between items, hand the caching allocator's blocks back to the card (as a
    process that exited after each item did), so the next family starts with the
    memory it would have had in a fresh process."""
    torch = sys.modules.get("torch")
    if device.kind == "cuda" and torch is not None:
        torch.cuda.empty_cache()
