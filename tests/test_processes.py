"""The processes that run kernel code: how they start, what they share.

Workers and witnesses are forks of a server that imported torch (Linux) or fresh
interpreters (elsewhere); either way a child sees its parent's environment as it
is when the child starts, and what one child patches reaches no other.
"""

from __future__ import annotations

import os
import platform
from multiprocessing.connection import Connection

import pytest

from matprobe.run import processes


def _report(conn: Connection, name: str) -> None:
    """Send back the variable ``name`` and whether torch was patched; then patch it."""
    import torch

    conn.send((os.environ.get(name), getattr(torch, "_patched_by_a_child", False)))
    torch._patched_by_a_child = True  # type: ignore[attr-defined]
    conn.close()


def _start(name: str) -> tuple[str | None, bool]:
    ctx = processes.context()
    mine, theirs = ctx.Pipe()
    child = processes.process(ctx, _report, (theirs, name))
    child.start()
    theirs.close()
    try:
        assert mine.poll(60), "the child said nothing"
        seen: tuple[str | None, bool] = mine.recv()
    finally:
        child.join(10)
    assert child.exitcode == 0
    return seen


def test_a_child_sees_the_environment_of_its_start_and_nothing_an_earlier_child_patched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MATPROBE_PROCESSES_TEST", "first")
    assert _start("MATPROBE_PROCESSES_TEST") == ("first", False)
    # The server (where there is one) is running by now: a later change still reaches
    # the next child, and the torch the first child patched is not the next one's.
    monkeypatch.setenv("MATPROBE_PROCESSES_TEST", "second")
    assert _start("MATPROBE_PROCESSES_TEST") == ("second", False)
    monkeypatch.delenv("MATPROBE_PROCESSES_TEST")
    assert _start("MATPROBE_PROCESSES_TEST") == (None, False)


def test_children_fork_from_a_server_on_linux_else_spawn() -> None:
    method = processes.context().get_start_method()
    assert method == ("forkserver" if platform.system() == "Linux" else "spawn")
