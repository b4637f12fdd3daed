"""The processes that run kernel code: how they start, what they share.

Workers and witnesses are forks of a server that imported torch (Linux) or fresh
interpreters (elsewhere); either way a child sees its parent's environment as it
is when the child starts, what one child patches reaches no other, and a child
that kills the server costs the processes after it only their speed.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import platform
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from conftest import process_ends, python_c
from matprobe.run import process_tree, processes


def _report(conn: Connection, name: str) -> None:
    """Send back the variable ``name`` and whether torch was patched; then patch it."""
    import torch

    conn.send((os.environ.get(name), getattr(torch, "_patched_by_a_child", False)))
    torch._patched_by_a_child = True  # type: ignore[attr-defined]
    conn.close()


def _kill_the_server(conn: Connection, name: str) -> None:
    """Report, then kill this process's parent — the fork server where there is one
    (and this process with it: a fork of the server dies with the server)."""
    _report(conn, name)
    if processes.context().get_start_method() == "forkserver":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)  # killed with the server, long before this ends


def _start(name: str, target=_report) -> tuple[str | None, bool]:  # type: ignore[no-untyped-def]
    mine, theirs = multiprocessing.Pipe()
    child = processes.start(target, (theirs, name))
    theirs.close()
    try:
        assert mine.poll(60), "the child said nothing"
        seen: tuple[str | None, bool] = mine.recv()
    finally:
        child.join(10)
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


def _in_a_fresh_interpreter(steps: str) -> list[str]:
    code = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import multiprocessing.forkserver
from matprobe.run import process_tree, processes
from test_processes import _kill_the_server, _start, _up_then_sleep
{steps}
"""
    return python_c(code).splitlines()


@pytest.mark.skipif(platform.system() != "Linux", reason="children fork from a server on Linux")
def test_a_child_that_kills_the_server_costs_the_next_ones_nothing() -> None:
    """(In an interpreter of its own: what it does to the server is for that process.)"""
    lines = _in_a_fresh_interpreter(
        "print(_start('HOME'))\n"
        "print(_start('HOME', _kill_the_server))\n"
        "for _ in range(3):\n"
        "    print(_start('HOME'))"
    )
    assert lines == [repr((os.environ.get("HOME"), False))] * 5


@pytest.mark.skipif(platform.system() != "Linux", reason="children fork from a server on Linux")
def test_a_server_that_cannot_be_reached_leaves_the_next_children_spawned() -> None:
    """Its socket gone (as if it died between a check and a start): the start that
    finds out spawns its child, and so does every later one."""
    lines = _in_a_fresh_interpreter(
        "print(_start('HOME'), processes.context().get_start_method())\n"
        "os.unlink(multiprocessing.forkserver._forkserver._forkserver_address)\n"
        "for _ in range(2):\n"
        "    print(_start('HOME'), processes.context().get_start_method())"
    )
    home = repr((os.environ.get("HOME"), False))
    assert lines == [f"{home} forkserver", f"{home} spawn", f"{home} spawn"]


def _leave_an_orphan(conn: Connection, name: str) -> None:
    """Fork a process that leaves its session and then its parent (the fork, whose
    parent ends, is an orphan); send back its pid, once its parent is gone."""
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            conn.send(os.getpid())
            time.sleep(60)
        os._exit(0)
    os.waitpid(middle, 0)
    conn.send("orphaned")
    conn.close()


@pytest.mark.skipif(platform.system() != "Linux", reason="children fork from a server on Linux")
def test_the_server_adopts_the_orphans_of_its_children_the_judge_does_not() -> None:
    """A plugin's helper that left its group and its parent is handed to the fork
    server (a child subreaper), where the witness finds it (process_tree); the
    judge that imports the same module stays an ordinary process."""
    mine, theirs = multiprocessing.Pipe()
    child = processes.start(_leave_an_orphan, (theirs, ""))
    theirs.close()
    try:
        assert mine.poll(60)
        orphan = mine.recv()
        assert mine.recv() == "orphaned"
        assert process_tree.parent_of(orphan) == process_tree.parent_of(child.pid or 0)
        assert process_tree.parent_of(orphan) != os.getpid()
    finally:
        os.kill(orphan, signal.SIGKILL)
        child.join(10)
    import ctypes

    got = ctypes.c_int(-1)  # prctl PR_GET_CHILD_SUBREAPER (37) of this process
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(got), 0, 0, 0) == 0
    assert got.value == 0


def _up_then_sleep(conn: Connection) -> None:
    """Say so once running (its death with its parent asked for), then wait."""
    conn.send("up")
    conn.close()
    time.sleep(120)


def _ends_with_its_judge(what: str, steps: str) -> None:
    """The process a fresh interpreter (the judge) prints the pid of after ``steps``,
    stopped with SIGSTOP as the witness and the describer stop theirs, ends once
    that interpreter is killed with SIGKILL, as a time limit or the OOM killer kills."""
    pid = _judge_killed_after(steps)
    try:
        assert process_ends(pid), f"{what} is still there ({process_tree.stat_fields(pid)[0]})"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _judge_killed_after(steps: str) -> int:
    """The pid a fresh interpreter prints after ``steps``, stopped; the interpreter
    then killed with SIGKILL."""
    code = f"""
import multiprocessing, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from matprobe.run import processes
from test_processes import _leave_an_orphan, _up_then_sleep
{steps}
time.sleep(120)
"""
    judge = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert judge.stdout is not None
        pid = int(judge.stdout.readline())
        os.kill(pid, signal.SIGSTOP)
    finally:
        judge.kill()
        judge.wait()
    return pid


@pytest.mark.skipif(platform.system() != "Linux", reason="children fork from a server on Linux")
def test_a_judge_killed_with_sigkill_leaves_no_fork_behind_even_a_stopped_one() -> None:
    """A witness's plugin process is stopped while the judge times. A judge killed
    with SIGKILL left it stopped for ever (with its memory and, on a card, its
    context and what it queued: seen after a killed test run on an H200). The
    server ends at the end of the judge's pipe, and its forks die with it."""
    _ends_with_its_judge(
        "the fork",
        "mine, theirs = multiprocessing.Pipe()\n"
        "child = processes.start(_up_then_sleep, (theirs,))\n"
        "assert mine.recv() == 'up'\n"
        "print(child.pid, flush=True)",
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl, SIGSTOP")
def test_a_judge_killed_with_sigkill_leaves_no_plugin_describer_behind() -> None:
    """The process that imports the plugins is stopped between questions: a judge
    killed with SIGKILL left it stopped for ever. It dies with the judge now."""
    _ends_with_its_judge(
        "the describer",
        "from matprobe.run.plugin_process import PluginProcess\n"
        "describer = PluginProcess(['fake_variants'])\n"
        "print(describer._child.pid, flush=True)",
    )


@pytest.mark.skipif(platform.system() != "Linux", reason="children fork from a server on Linux")
def test_a_judge_killed_with_sigkill_leaves_no_orphan_the_server_adopted() -> None:
    """A plugin's helper that left its worker is the server's (a subreaper); when the
    server ended with the judge it went on under init. The server kills what is
    left below it as it exits."""
    _ends_with_its_judge(
        "the orphan",
        "mine, theirs = multiprocessing.Pipe()\n"
        "child = processes.start(_leave_an_orphan, (theirs, ''))\n"
        "orphan = mine.recv()\n"
        "assert mine.recv() == 'orphaned'\n"
        "print(orphan, flush=True)",
    )
