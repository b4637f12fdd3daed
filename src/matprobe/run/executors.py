"""Where a run's work items are measured, and the worker processes that measure them.

One executor interface (:data:`Executor`, made by :func:`executor_for`) over the
four places a run can measure: one long-lived worker on one device, every GPU
of a host (:mod:`~matprobe.run.pool`), a Ray cluster
(:mod:`~matprobe.run.ray_pool`), or — in tests — a custom runner called once per
family. The workers of a run on this host are made and started before the
device is even detected (:func:`start_workers`, :func:`adopt_workers`): each
imports torch and sets up its card while the parent process does the same and
plans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import PairResult
from matprobe.measure.timing import TimingPolicy
from matprobe.run.task import Task
from matprobe.run.work import WorkQueue
from matprobe.run.worker import CARD_PEAKS, OnResult, OnStart, Place, WorkerSet, run_tasks

if TYPE_CHECKING:
    from matprobe.run.pool import DeviceSlot
    from matprobe.run.ray_pool import RayCluster


#: Where a run's work items are measured: it takes items from the queue (the next
#: family's tasks, None when the work is done) until none is left, reports each
#: task as it starts and each result as it comes, and records the read ceiling of
#: every card it measured on in the dict it is given (also when interrupted).
Executor = Callable[[WorkQueue, OnStart, OnResult, dict[str, Any]], None]


def start_workers(
    places: Sequence[Place],
    *,
    factory: str,
    plugins: Sequence[str],
    policy: TimingPolicy,
    timeout_s: float,
) -> list[WorkerSet]:
    """The worker processes a run on this host keeps, started now (not waited for):
    one WorkerSet per place (a card of ``--gpus``, or the run's one device), each
    measuring its card's peaks as it starts and with its share of the host's
    cores. Started before the device is detected, they import torch and set up
    their cards while the parent does the same and plans;
    :meth:`WorkerSet.bind_run` gives each its device, :func:`execute` its run
    (and closes them)."""
    from matprobe.run.pool import cores_per_slot

    options: dict[str, Any] = {
        "factory": factory,
        "plugins": tuple(plugins),
        "policy": policy,
        "run_id": None,
        "timeout_s": timeout_s,
        "cpu_threads": cores_per_slot(len(places)),
        "device": None,
    }
    # A place whose kind the process settles (None) measures peaks only on a card.
    peaks = {None: CARD_PEAKS, "cuda": CARD_PEAKS}
    workers = [
        WorkerSet(place=place, measure_peaks=peaks.get(place.kind), **options) for place in places
    ]
    for worker in workers:
        worker.spawn()
    return workers


def executor_for(
    device: DeviceInfo,
    slots: Sequence[DeviceSlot] | None,
    ray: RayCluster | None,
    runner: Callable[..., None],
    options: Mapping[str, Any],
    workers: Sequence[WorkerSet] | None = None,
) -> Executor:
    """The executor of a run: a Ray cluster, every GPU of a host (several
    ``slots``), one long-lived worker on one device, or — in tests — a custom
    ``runner`` called once per family. ``workers``: the processes
    :func:`start_workers` made for ``slots`` (or ``device``), already starting
    (needed for the ordinary runner on this host)."""
    where = slots[0].device if slots else device

    def on_ray(
        work: WorkQueue, on_start: OnStart, on_result: OnResult, peaks: dict[str, Any]
    ) -> None:
        from matprobe.run.ray_pool import run_on_ray

        assert ray is not None
        run_on_ray(work.take, ray, on_start=on_start, on_result=on_result, **options)

    def on_every_gpu(
        work: WorkQueue, on_start: OnStart, on_result: OnResult, peaks: dict[str, Any]
    ) -> None:
        from matprobe.run.pool import run_on_slots, with_card

        assert slots is not None

        def on_result_at(task: Task, result: PairResult, slot: DeviceSlot) -> None:
            on_result(task, with_card(result, slot))

        peaks.update(
            run_on_slots(
                work.take,
                slots,
                on_start=on_start,
                on_result=on_result_at,
                runner=runner,
                card_peaks=CARD_PEAKS if device.kind == "cuda" else None,
                workers=workers,
                **options,
            )
        )

    def on_one_device(
        work: WorkQueue, on_start: OnStart, on_result: OnResult, peaks: dict[str, Any]
    ) -> None:
        # One worker process for the whole run, as each card of a --gpus run
        # has: a family no longer pays a process start (torch, CUDA context).
        assert workers is not None  # execute makes them for the ordinary runner
        (worker,) = workers
        try:
            with worker:
                while (tasks := work.take()) is not None:
                    worker.run(tasks, on_start=on_start, on_result=on_result)
        finally:  # an interrupted run's report still has its card's ceilings
            if worker.peaks is not None:
                peaks[f"cuda:{where.index}"] = worker.peaks

    def with_runner(
        work: WorkQueue, on_start: OnStart, on_result: OnResult, peaks: dict[str, Any]
    ) -> None:
        while (tasks := work.take()) is not None:
            runner(tasks, device=where, on_start=on_start, on_result=on_result, **options)

    if ray is not None:
        return on_ray
    if slots is not None and len(slots) > 1:
        return on_every_gpu
    return on_one_device if runner is run_tasks else with_runner


def early_places(*, device: str | None, gpus: str | None, ray: str | None) -> list[Place]:
    """Where a run's worker processes measure, as far as is known before torch is
    imported: the run's ``device`` (None: CUDA if any), or each card of ``gpus``;
    none for a Ray cluster (it starts its own), a ``gpus`` that the detection will
    refuse, or ``gpus`` "all" where the cards cannot be counted without torch."""
    if ray is not None:
        return []
    if gpus is None:
        return [Place(device)]
    from matprobe.errors import MatprobeError
    from matprobe.run.pool import parse_gpus, visible_cuda_count

    try:
        wanted = parse_gpus(gpus)
    except MatprobeError:
        return []
    if wanted is None:
        wanted = list(range(visible_cuda_count() or 0))
    return [Place("cuda", index) for index in wanted]


def adopt_workers(
    workers: list[WorkerSet],
    devices: Sequence[DeviceInfo] | None,
    **options: Any,
) -> list[WorkerSet]:
    """The workers started early, each given the device detected for its place;
    fresh ones (:func:`start_workers` with ``options``) where they were started
    for other places than ``devices`` (torch counts the cards otherwise than
    nvidia-smi did); none, all killed, for ``devices`` None (a Ray cluster)."""
    if devices is None:
        for worker in workers:
            worker.kill()
        return []
    places_hold = len(workers) == len(devices) and all(
        worker.place.holds(device) for worker, device in zip(workers, devices, strict=True)
    )
    if not places_hold:
        for worker in workers:
            worker.kill()
        workers = start_workers([Place(d.kind, d.index) for d in devices], **options)
    for worker, device in zip(workers, devices, strict=True):
        worker.bind_run(None, device)
    return workers
