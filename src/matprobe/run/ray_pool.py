"""Measuring a plan on a Ray cluster: ``matprobe run --ray ADDRESS|auto``.

The driver (this process) plans, claims work items and stores results as it
does for ``--gpus``; the cluster measures. :func:`connect` joins the cluster
(``ray.init(address=…)``) and has one of its cards describe itself: the plan is
made for that device, whatever card (or none) the driver has.
:func:`run_on_ray` submits every pair of the work items as a Ray task
(``num_gpus=1`` on CUDA, ``num_cpus=1`` on the CPU), keeps as many in flight
as the cluster has cards, and hands each result to ``on_result`` in the calling
thread, so the store stays the run's single writer.

In a Ray worker a task measures its pair with the ordinary runner code: a
:class:`~matprobe.run.worker.Worker` process that the Ray worker keeps from
task to task (GPU tasks are declared reusable, ``max_calls=0``). A crash, a hang
or a poisoned CUDA context still costs one row, and torch is set up once per
Ray worker, not once per pair.

**Why one pair per Ray task.** Ray retries a task whose worker process died
(``max_retries``), and a retry starts the task from the beginning. A task that
held a whole work item would, on retry, measure again the pairs it had finished
but not yet returned. A task of one pair loses only that pair, and a result that
has been returned is never measured again. Streaming the results of a multi-pair
task through an actor would give the same guarantee with more moving parts. A
Ray task costs a few milliseconds, and a pair takes a second or more.

**Devices.** Each Ray worker describes its own card
(:func:`~matprobe.measure.device.detect`), and its rows carry that device's
fingerprint. A task that lands on a card unlike the plan's (a cluster of mixed
card types) is measured and stored under its own device. The run keeps such rows
out of its report and its rankings, and says how many there were (see
:func:`~matprobe.run.runner.execute`). The cards of one node are taken to be
of one type, as Ray's GPU resource assumes. Each row's notes name the node and
card that measured it.
"""

from __future__ import annotations

import functools
import importlib
import logging
import socket
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.measure.device import DeviceInfo
from matprobe.measure.pair import PairContext, error_result
from matprobe.measure.results import ErrorKind, PairResult
from matprobe.measure.timing import TimingPolicy
from matprobe.run.plugin_process import described_registry
from matprobe.run.task import Task, TaskData, task_data, task_from_data
from matprobe.run.worker import OnResult, OnStart, WorkerSet

#: Times Ray runs a pair again after the Ray worker measuring it died.
MAX_RETRIES = 3
#: Seconds to wait for a cluster card to describe itself (it may be busy).
PROBE_TIMEOUT_S = 600.0
#: Seconds to wait for a TCP connection to a cluster's address.
CONNECT_TIMEOUT_S = 10.0
#: Ray's default GCS port, for an address given without one.
DEFAULT_PORT = 6379
MISSING = "--ray needs Ray on this machine: pip install 'matprobe[ray]'"


@dataclass(frozen=True)
class RayCluster:
    """A cluster joined for a run: the card type the plan is made for, and how
    many pairs it measures at once (its GPUs; its CPUs on a CPU run)."""

    address: str
    device: DeviceInfo
    capacity: int

    def notes(self, elsewhere: Mapping[str, int]) -> list[str]:
        """The report's notes on a run here; ``elsewhere``: the rows measured on
        another card type than the plan's, by device fingerprint."""
        unit = "GPU" if self.device.kind == "cuda" else "CPU"
        notes = [
            f"measured on the Ray cluster at {self.address} ({self.capacity} {unit}s, one pair "
            "per Ray task, a candidate and its baseline always in the same task); each row's "
            "notes name the node and card that measured it"
        ]
        if elsewhere:
            spread = ", ".join(f"{n} on {device}" for device, n in sorted(elsewhere.items()))
            notes.append(
                f"{sum(elsewhere.values())} pairs landed on a card unlike the plan's ({spread}): "
                "stored under that device, never ranked with this report's"
            )
        return notes

    def measure_peaks(self) -> dict[str, Any]:
        """The bandwidth ceilings of a cluster card (CUDA runs), measured there."""
        ray = _ray()
        peaks: dict[str, Any] = ray.get(_remote(_peaks_here, "cuda").remote())
        return peaks


def _ray() -> Any:
    """The ``ray`` module, or a one-line error where it is not installed."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise MatprobeError(MISSING) from None


# --- joining the cluster (driver) -----------------------------------------------------


def connect(address: str, kind: str | None = None) -> RayCluster:
    """Join the cluster at ``address`` ("auto": the one this machine belongs to)
    and describe the card type a run there measures on: CUDA where the cluster
    has GPUs (or ``kind`` says so), else the CPU. One-line errors throughout."""
    ray = _ray()
    if not ray.is_initialized():  # else a program (or a test) already joined one
        _check_reachable(address)
        try:
            ray.init(address=address, logging_level=logging.WARNING)
        except Exception as exc:
            raise MatprobeError(
                f"--ray {address}: cannot reach the Ray cluster ({_line(exc)})"
            ) from None
    resources = ray.cluster_resources()
    kind = _kind(address, kind, resources)
    capacity = int(resources.get("GPU" if kind == "cuda" else "CPU", 0))
    try:
        described = ray.get(_remote(_describe, kind).remote(kind), timeout=PROBE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise MatprobeError(
            f"--ray {address}: no {kind} worker of the cluster answered in {PROBE_TIMEOUT_S:.0f} s"
        ) from None
    except ray.exceptions.RayError as exc:
        raise MatprobeError(f"--ray {address}: a cluster worker failed ({_line(exc)})") from None
    return RayCluster(address, DeviceInfo.from_dict(described), max(capacity, 1))


def _check_reachable(address: str) -> None:
    """A ``host[:port]`` that takes no TCP connection is an error at once (Ray itself
    retries for minutes); "auto" and ``ray://`` addresses are left to Ray."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":") if ":" in address else (address, "", "")
    try:
        socket.create_connection(
            (host, int(port or DEFAULT_PORT)), timeout=CONNECT_TIMEOUT_S
        ).close()
    except (OSError, ValueError) as exc:
        raise MatprobeError(f"--ray {address}: cannot reach the Ray cluster ({exc})") from None


def _kind(address: str, asked: str | None, resources: dict[str, float]) -> str:
    gpus = resources.get("GPU", 0)
    if asked in (None, "cuda") and gpus:
        return "cuda"
    if asked == "cuda":
        raise MatprobeError(f"--ray {address}: the cluster has no GPU (--device cuda asked for)")
    if asked not in (None, "cpu"):
        raise MatprobeError(f"--ray measures on CUDA cards or CPUs; not with --device {asked}")
    return "cpu"


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


# --- submitting pairs (driver) --------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What a Ray worker needs to measure a run's pairs, besides the pair itself."""

    factory: str
    plugins: tuple[str, ...]
    kind: str
    policy: dict[str, Any]
    run_id: int | None
    timeout_s: float


def run_on_ray(
    next_item: Callable[[], Sequence[Task] | None],
    cluster: RayCluster,
    *,
    on_start: OnStart,
    on_result: OnResult,
    factory: str,
    plugins: Sequence[str],
    policy: TimingPolicy,
    run_id: int | None,
    timeout_s: float,
) -> None:
    """Measure work items on the cluster until ``next_item`` gives None; every task
    ends in exactly one ``on_result`` call, in this thread. On Ctrl-C what has
    arrived is handed over, the pairs in flight are cancelled, and
    KeyboardInterrupt is raised again."""
    ray = _ray()
    setup = Setup(factory, tuple(plugins), cluster.device.kind, asdict(policy), run_id, timeout_s)
    measure = _remote(_measure_pair, cluster.device.kind)
    ctx = PairContext(cluster.device, policy, run_id)
    waiting: deque[Task] = deque()
    running: dict[Any, Task] = {}  # Ray object ref → its pair

    def collect(refs: Sequence[Any]) -> None:
        for ref in refs:
            task = running.pop(ref)
            on_result(task, _result_of(ray, ref, task, ctx))

    try:
        while True:
            while len(running) < cluster.capacity and _fill(waiting, next_item):
                task = waiting.popleft()
                running[measure.remote(task_data(task), setup)] = task
                on_start(task)
            if not running:
                return
            done, _ = ray.wait(list(running), num_returns=1)
            collect(done)
    except KeyboardInterrupt:
        if running:
            done, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
            collect(done)
        for ref in running:
            ray.cancel(ref)  # a KeyboardInterrupt in the task: its Worker kills its process
        raise


def _fill(waiting: deque[Task], next_item: Callable[[], Sequence[Task] | None]) -> bool:
    """Whether a pair waits to be submitted, asking for the next item if none does."""
    while not waiting:
        item = next_item()
        if item is None:
            return False
        waiting.extend(item)
    return True


def _result_of(ray: Any, ref: Any, task: Task, ctx: PairContext) -> PairResult:
    """The pair's result; an ERROR row when the task itself failed (its Ray worker
    died on every try, or the worker could not set up)."""
    try:
        return PairResult.from_dict(ray.get(ref))
    except ray.exceptions.RayTaskError as exc:  # raised by our code in the Ray worker
        cause = exc.cause if exc.cause is not None else exc
        return error_result(task.spec, task.variant, ctx, ErrorKind.EXCEPTION, _line(cause))
    except ray.exceptions.RayError as exc:  # the worker or its node died, every time
        why = f"the Ray worker died on all {MAX_RETRIES + 1} tries ({type(exc).__name__})"
        return error_result(task.spec, task.variant, ctx, ErrorKind.CRASH, why)


@functools.cache
def _remote(function: Callable[..., Any], kind: str) -> Any:
    """``function`` as a Ray task that holds one card (one CPU on a CPU run).
    GPU tasks are declared reusable (Ray would start a fresh worker for each):
    a Ray worker keeps its measuring process, as a ``--gpus`` slot does."""
    ray = _ray()
    if kind == "cuda":
        return ray.remote(num_gpus=1, max_calls=0, max_retries=MAX_RETRIES)(function)
    return ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(function)


# --- in a Ray worker ------------------------------------------------------------------


def _describe(kind: str) -> dict[str, Any]:
    """This Ray worker's device, as the plan and the rows name it."""
    from matprobe.measure.device import detect

    return detect(kind).to_dict()


def _peaks_here() -> dict[str, Any]:
    from matprobe.measure.peaks import measure_peaks_cuda

    return dict(measure_peaks_cuda())


@dataclass
class _Kept:
    """What a Ray worker keeps between its tasks: the run's registry, its card and
    the measuring process (re-made when the run or the card assigned changes)."""

    key: tuple[Any, ...]
    worker: WorkerSet
    registry: Any
    card: str


_kept: _Kept | None = None


def _measure_pair(data: TaskData, setup: Setup) -> dict[str, Any]:
    """One pair, measured in this Ray worker's measuring process; its result with a
    note naming the node and card."""
    kept = _keep(setup)
    results: list[PairResult] = []
    kept.worker.run(
        [task_from_data(data, kept.registry)],
        on_start=lambda task: None,
        on_result=lambda task, result: results.append(result),
    )
    (result,) = results
    clocks = replace(result.clocks, notes=(*result.clocks.notes, f"card {kept.card}"))
    return replace(result, clocks=clocks).to_dict()


def _keep(setup: Setup) -> _Kept:
    """The measuring process for ``setup`` on the card Ray assigned this task."""
    global _kept
    ray = _ray()
    gpus = tuple(str(g) for g in ray.get_gpu_ids()) if setup.kind == "cuda" else ()
    key = (setup, gpus)
    if _kept is not None and _kept.key == key:
        return _kept
    if _kept is not None:
        _kept.worker.close()
    from matprobe.measure.device import detect

    device = detect(setup.kind)
    node = ray.util.get_node_ip_address()
    _kept = _Kept(
        key,
        WorkerSet(
            factory=setup.factory,
            plugins=setup.plugins,
            device=device,
            policy=TimingPolicy(**setup.policy),
            run_id=setup.run_id,
            timeout_s=setup.timeout_s,
        ),
        # The plugins imported in a child of this Ray worker only (and in the
        # measuring processes): what this process returns through Ray's pickling
        # was never in reach of plugin code.
        described_registry(setup.factory, setup.plugins),
        f"{node}/cuda:{','.join(gpus)}" if gpus else f"{node}/cpu",
    )
    return _kept
