"""Shared test set-up: the Triton interpreter switch, and the user's seed documents.

TRITON_INTERPRET: the Triton families' tests run their kernels in Triton's
interpreter on the CPU. A ``@triton.jit`` function decides when it is defined
whether it is interpreted, so the switch is set here, once, before any test
module imports triton — except on a machine with a CUDA GPU, where the GPU
tests (``pytest -m gpu``) need compiled kernels and the
tests marked ``interpreter`` skip themselves. Set TRITON_INTERPRET yourself to
choose either way.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from matprobe.measure.device import DeviceInfo, cuda_available
from matprobe.measure.timing import TimingPolicy

if "TRITON_INTERPRET" not in os.environ and not cuda_available():
    os.environ["TRITON_INTERPRET"] = "1"
#: The switch as this session starts: a test module that flips it at import turns
#: every kernel defined after it into an interpreted one (on a card, 46 of the GPU
#: tests failed so when the whole suite was collected), so collection checks it.
_INTERPRET_AT_START = os.environ.get("TRITON_INTERPRET")

#: The CPU as the harness's tests name it (the device most of them measure on).
CPU = DeviceInfo(kind="cpu", name="test-cpu")
#: A timing policy for tests that measure pairs: few samples, a small budget (the
#: figures are not what they check).
FAST = TimingPolicy(min_samples=3, max_samples=5, budget_s=0.01, host_samples=3)


@pytest.fixture(autouse=True)
def _same_draws_in_every_test() -> None:
    """Every test starts its process's draws from one run seed (a run takes its own
    from the OS): a test's values do not depend on which tests ran before it.
    Tests of the seeds themselves set others."""
    from matprobe.measure import seeds

    if importlib.util.find_spec("torch") is not None:
        seeds.restart(TEST_SEED)


#: The run seed every test starts from (see ``_same_draws_in_every_test``).
TEST_SEED = 20261127

#: Copies of the user's analyzer summaries (``seeds/000``, ``001``, ``003``): the
#: tests' data lives in the repo, never beside it.
SEEDS = Path(__file__).resolve().parent / "data"


#: Why a test that runs Triton kernels on the CPU skips where they are compiled.
NOT_INTERPRETING = (
    "Triton kernels are compiled in this session (TRITON_INTERPRET is not 1: "
    "a CUDA GPU is here, or it was set so); these tests run without a GPU, "
    "or with TRITON_INTERPRET=1"
)


#: Why a GPU test skips (``on_a_card``).
NO_GPU = "no CUDA GPU on this machine"

_Test = TypeVar("_Test", bound=Callable[..., Any])


def on_a_card(test: _Test) -> _Test:
    """A GPU test: marked ``gpu`` (``pytest -m gpu``) and skipped, saying why, where no
    CUDA GPU is."""
    return pytest.mark.gpu(pytest.mark.skipif(not cuda_available(), reason=NO_GPU)(test))  # type: ignore[no-any-return]


def interpreting() -> bool:
    """Triton kernels are interpreted in this process (a CPU run of a Triton family works)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "interpreter: runs Triton kernels in the interpreter (needs TRITON_INTERPRET=1)"
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    now = os.environ.get("TRITON_INTERPRET")
    if now != _INTERPRET_AT_START:
        raise pytest.UsageError(
            f"a test module changed TRITON_INTERPRET at import ({_INTERPRET_AT_START!r} -> "
            f"{now!r}): mark its tests `interpreter` instead (conftest sets the switch)"
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("interpreter") is not None and not interpreting():
        pytest.skip(NOT_INTERPRETING)


def seed(prefix: str) -> Path:
    """A user seed document kept in tests/data (a missing one is an error, not a skip)."""
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    assert found, f"seed {prefix}_* not found under {SEEDS}"
    return found[0]


def digest(path: Path) -> str:
    """A file's bytes, hashed: equal before and after means a command only read it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_cli(*argv: str) -> tuple[int, str]:
    """Exit status and stdout of ``matprobe ARGV`` (a usage error exits through argparse)."""
    from matprobe.cli import main

    out = io.StringIO()
    try:
        code = main(list(argv), out=out)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue()


def python_c(
    code: str,
    *args: str,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> str:
    """Stdout of ``python -c CODE ARGS`` in a fresh interpreter (what a test process has
    imported cannot leak in); a non-zero exit fails the test with its stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def process_ends(pid: int, seconds: float = 30) -> bool:
    """Whether process ``pid`` ends within ``seconds``: gone, or a zombie awaiting
    whoever adopted it (reading ``/proc``: Linux)."""
    import time

    from matprobe.run.process_tree import stat_fields

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if stat_fields(pid)[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.01)
    return False
