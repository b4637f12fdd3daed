"""Variants for tests/test_ray.py, loaded by name ("ray_variants:registry") in the
Ray workers and their measuring processes, where MATPROBE_RAY_TEST_DIR (set in
the Ray workers' environment by the test) names the folder they write to.

``raytest.logged`` is correct and logs every measurement of it, one line
("<variant id> <spec key>") in ``measured.log``. ``raytest.kill_ray_worker`` logs
too, and the first time any of its pairs is measured (no ``killed`` marker yet)
it kills the Ray worker that runs the pair — its process's parent, or the fork
server's parent where workers fork from one (``matprobe.run.processes``) — and
then itself: a Ray worker lost mid-pair, as a node's OOM killer or a preemption
would.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fake_variants
from fake_variants import ALL_OPS, exact
from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import KernelFn, Registry, variant_family
from matprobe.run import processes
from matprobe.run.process_tree import stat_fields
from matprobe.spec import MatmulSpec

LOG = "measured.log"
MARKER = "killed"


def folder() -> Path:
    return Path(os.environ["MATPROBE_RAY_TEST_DIR"])


def _log(family: str, spec: MatmulSpec) -> None:
    with (folder() / LOG).open("a", encoding="utf-8") as f:
        f.write(f"{family} {spec.key()}\n")


def _correct(inputs: MatmulInputs, out: Any) -> None:
    out.copy_(exact(inputs))


@variant_family(name="raytest.logged", ops=ALL_OPS, devices=("cpu",))
def logged(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Correct; each measurement leaves a line in the log."""
    _log("raytest.logged", spec)
    return _correct


@variant_family(name="raytest.kill_ray_worker", ops=ALL_OPS, devices=("cpu",))
def kill_ray_worker(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Correct, logged — and the first measurement of all kills the Ray worker."""
    _log("raytest.kill_ray_worker", spec)
    marker = folder() / MARKER
    if not marker.exists():
        marker.write_text(f"{spec.key()}\n", encoding="utf-8")
        os.kill(_ray_worker(), signal.SIGKILL)
        os._exit(1)
    return _correct


def _ray_worker() -> int:
    parent = os.getppid()
    if processes.context().get_start_method() != "forkserver":
        return parent
    return int(stat_fields(parent)[1])  # the fork server's parent


def registry() -> Registry:
    return Registry((*fake_variants.FAMILIES, logged, kill_ray_worker))
