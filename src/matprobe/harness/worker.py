"""Run a family's pairs in a worker process, so that one crash costs one row.

An illegal memory access poisons a CUDA context, a segfault kills a process,
a kernel can hang: each variant family therefore runs in its own spawned
process. The parent stores every result the moment it arrives; when the
worker dies or a pair outlives its timeout, that pair is recorded as a crash
or a timeout, the worker is replaced, and the family goes on with the pairs
that are left.

A worker rebuilds the run's registry from what it is sent — the factory
string and the plugin module names (:func:`~matprobe.harness.variants.registry_with_plugins`,
the same call the parent made) — and imports no family module by itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

from matprobe.harness.device import DeviceInfo
from matprobe.harness.measure import (
    PairContext,
    PoisonedContextError,
    error_result,
    measure_pair_safely,
)
from matprobe.harness.results import ErrorKind, PairResult
from matprobe.harness.timing import TimingPolicy
from matprobe.harness.variants import SHIPPED_FACTORY, Registry, Variant, registry_with_plugins
from matprobe.spec import MatmulSpec

#: Seconds a fresh worker may take to import torch/triton before its first pair.
STARTUP_TIMEOUT_S = 180.0
POLL_S = 0.1


@dataclass(frozen=True)
class Task:
    index: int  # the caller's handle for the pair
    spec: MatmulSpec
    variant: Variant
    #: timed interleaved with the candidate (None: no ratio, e.g. the baseline itself)
    baseline: Variant | None = None


VariantRef = tuple[str, tuple[tuple[str, Any], ...]]  # family name, params


def _ref(variant: Variant | None) -> VariantRef | None:
    return None if variant is None else (variant.family.name, variant.params)


def load_registry(factory: str = SHIPPED_FACTORY, plugins: Sequence[str] = ()) -> Registry:
    """``"package.module:function"`` (and the plugin modules) → the run's Registry."""
    return registry_with_plugins(factory, plugins)


def _worker_main(
    conn: Connection,
    factory: str,
    plugins: tuple[str, ...],
    device: dict[str, Any],
    policy: dict[str, Any],
    run_id: int | None,
    tasks: list[tuple[int, dict[str, Any], VariantRef, VariantRef | None]],
) -> None:
    # Ctrl-C goes to the whole process group: the parent decides, the worker waits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if device["kind"] == "cpu":
        # Triton reads this when it is first imported: no GPU, so interpret kernels.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        # A plugin found in the parent's current directory is found here too
        # (registry_with_plugins puts the working directory on sys.path).
        registry = load_registry(factory, plugins)
        info = DeviceInfo(
            **{
                **device,
                "capability": tuple(device["capability"]) if device.get("capability") else None,
            }
        )
        if info.kind == "cuda" and info.index:
            # Pinned to its card (one worker per card with --gpus): the measuring code
            # names cuda:<index>, and this makes Triton launches, streams and CUDA
            # graphs, which use the current device, follow it there.
            import torch

            torch.cuda.set_device(info.index)
        ctx = PairContext(info, TimingPolicy(**policy), run_id)

        def resolve(ref: VariantRef) -> Variant:
            return Variant(registry.family(ref[0]), tuple(tuple(p) for p in ref[1]))

        for index, spec_data, candidate, baseline in tasks:
            conn.send(("start", index))
            spec = MatmulSpec.from_dict(spec_data)
            variant = resolve(candidate)
            try:
                result = measure_pair_safely(
                    spec, variant, ctx, resolve(baseline) if baseline else None
                )
            except PoisonedContextError as poisoned:
                conn.send(("done", index, poisoned.args[0].to_dict()))
                conn.send(("exit", "CUDA context poisoned; restarting the worker"))
                return
            conn.send(("done", index, result.to_dict()))
        conn.send(("exit", ""))
    except Exception:
        conn.send(("fatal", traceback.format_exc(limit=5)))
    finally:
        conn.close()


OnStart = Callable[[Task], None]
OnResult = Callable[[Task, PairResult], None]


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
    """Run ``tasks`` (one family's) in worker processes; every task ends in exactly
    one ``on_result`` call, whatever happens to the workers — unless ``cancel`` is
    set (an interrupted multi-GPU run): then the worker is killed and the tasks
    left get none. Each worker builds its registry from ``factory`` and
    ``plugins``, as the parent built its own."""
    ctx = PairContext(device, policy, run_id)
    mp = multiprocessing.get_context("spawn")
    remaining = {task.index: task for task in tasks}
    device_data = asdict(device)
    policy_data = asdict(policy)

    def finish(task: Task, result: PairResult) -> None:
        remaining.pop(task.index, None)
        on_result(task, result)

    while remaining:
        parent_conn, child_conn = mp.Pipe(duplex=False)
        payload = [
            (t.index, t.spec.to_dict(), _ref(t.variant), _ref(t.baseline))
            for t in remaining.values()
        ]
        proc = mp.Process(
            target=_worker_main,
            args=(child_conn, factory, tuple(plugins), device_data, policy_data, run_id, payload),
            daemon=True,
        )
        proc.start()
        child_conn.close()
        current: Task | None = None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        problem = ""
        try:
            while True:
                if cancel is not None and cancel.is_set():
                    proc.kill()
                    proc.join()
                    return
                if parent_conn.poll(POLL_S):
                    try:
                        message = parent_conn.recv()
                    except EOFError:
                        problem = f"worker died (exit code {proc.exitcode})"
                        break
                    kind = message[0]
                    if kind == "start":
                        current = remaining[message[1]]
                        deadline = time.monotonic() + timeout_s
                        on_start(current)
                    elif kind == "done":
                        finish(remaining[message[1]], PairResult.from_dict(message[2]))
                        current = None
                    elif kind == "exit":
                        problem = message[1]
                        break
                    elif kind == "fatal":
                        problem = f"worker failed: {message[1].strip().splitlines()[-1]}"
                        break
                elif time.monotonic() > deadline:
                    if current is not None:
                        finish(
                            current,
                            error_result(
                                current.spec,
                                current.variant,
                                ctx,
                                ErrorKind.TIMEOUT,
                                f"no result after {timeout_s:.0f} s; worker killed",
                            ),
                        )
                    else:
                        problem = "worker did not start in time"
                    proc.kill()
                    break
                elif not proc.is_alive() and not parent_conn.poll(0):
                    problem = f"worker died (exit code {proc.exitcode})"
                    break
        except BaseException:
            proc.kill()
            proc.join()
            raise
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if current is not None and current.index in remaining:
            # The pair in flight when the worker died is the one that killed it.
            finish(
                current,
                error_result(
                    current.spec,
                    current.variant,
                    ctx,
                    ErrorKind.CRASH,
                    f"{problem or 'worker died'} (exit code {proc.exitcode})",
                ),
            )
        elif problem and remaining and current is None and not _progress_possible(problem):
            # The worker cannot even start: every remaining pair gets the reason.
            for task in list(remaining.values()):
                finish(
                    task, error_result(task.spec, task.variant, ctx, ErrorKind.EXCEPTION, problem)
                )


def _progress_possible(problem: str) -> bool:
    """After a clean poisoned-context exit the next worker can go on; after a worker
    that failed to start or died between pairs, retrying would loop forever."""
    return problem.startswith("CUDA context poisoned")
