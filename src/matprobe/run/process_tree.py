"""The processes a plugin's process started, wherever they went (Linux's ``/proc``).

The witness stops a plugin's process, and what it started, while the baseline's
rounds are timed, and ends them with it (:mod:`~matprobe.run.witness_process`).
A helper may leave the process group it was born in (``setsid``) and, by forking
once more and letting the middle process end, its parent too: the kernel hands
an orphan to its nearest ancestor that is a *child subreaper*, else to init. The
fork server every kernel-running process is forked from (:mod:`~matprobe.run.
processes`) makes itself one when it imports this module, so such an orphan
becomes a child of the fork server that the judge did not start — and is found
by :func:`started_by` like a child still in the group. (The plugin's own process
is no subreaper the judge could rely on: its code could turn that off.)

Elsewhere (no ``/proc``, no ``prctl``) only the process and its group are found.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
import warnings
from collections.abc import Iterator, Set
from types import FrameType

#: ``prctl`` option (linux/prctl.h): orphans below this process become its children.
PR_SET_CHILD_SUBREAPER = 36

#: ``prctl`` option (linux/prctl.h): the signal this process gets when its parent ends.
PR_SET_PDEATHSIG = 1


def stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after ``(comm)`` — ``[state, ppid, pgrp, …]``;
    the name may hold spaces and parentheses, so it is cut at the last ``)``.
    FileNotFoundError when the process is gone (ProcessLookupError on a race)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:  # not pathlib: a scan reads hundreds
        return stat.read().rsplit(b")", 1)[1].decode().split()


def parent_of(pid: int) -> int | None:
    """The process ``pid``'s parent; None where that is not known."""
    try:
        return int(stat_fields(pid)[1])
    except (OSError, IndexError, ValueError):
        return None


def _table() -> dict[int, tuple[int, int]]:
    """Every process there is: pid → (parent, group). Empty without /proc."""
    table: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    fields = stat_fields(int(entry.name))
                    table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def started_by(pid: int | None, server: int | None, known: Set[int]) -> set[int]:
    """``pid`` (None: one already gone), the processes in the group it leads, the
    children of ``server`` (the subreaper it was forked from; None: it was not)
    that are not in ``known`` (the processes the judge started: every other child
    of the server is an orphan it adopted, from this plugin's process or from an
    earlier one of the run's — a worker's helper that outlived it), and every
    descendant of those. A pid may be stale by the time it is signalled: a caller
    signals what it finds, then looks again until nothing new is found."""
    table = _table()
    roots = set()
    if pid is not None:
        roots = {pid} | {p for p, (_, group) in table.items() if group == pid}
    if server is not None:
        roots |= {p for p, (parent, _) in table.items() if parent == server and p not in known}
    children: dict[int, list[int]] = {}
    for p, (parent, _) in table.items():
        children.setdefault(parent, []).append(p)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        p = stack.pop()
        if p not in found:
            found.add(p)
            stack.extend(children.get(p, ()))
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` by parent links, now (``pid`` not included)."""
    return started_by(None, pid, set()) if pid > 1 else set()


@contextlib.contextmanager
def ending_what_it_started(pid: int | None) -> Iterator[None]:
    """The processes below ``pid`` (None: none), looked for now, while it lives —
    once it has gone they are the fork server's orphans, which a witness stops
    while it times a baseline, and kills — and killed after the block, which is
    to end ``pid``."""
    below = descendants(pid) if pid else set()
    yield
    if hasattr(signal, "SIGKILL"):
        signal_all(below, signal.SIGKILL)


def freeze(pid: int | None, server: int | None, known: Set[int]) -> set[int]:
    """SIGSTOP to what ``pid`` (None: a process already gone) started
    (:func:`started_by`), and to ``pid``, until a look finds nothing new (a stopped
    process starts none, and Linux restarts a fork that a stop signal met); the
    processes stopped. Without SIGSTOP (not a POSIX system): none."""
    if not hasattr(signal, "SIGSTOP"):
        return set()
    if pid is not None:
        signal_group(pid, signal.SIGSTOP)
    frozen: set[int] = set()
    while found := started_by(pid, server, known) - frozen:
        signal_all(found, signal.SIGSTOP)
        frozen |= found
    return frozen


def thaw(pid: int | None, frozen: Set[int]) -> None:
    """SIGCONT to what :func:`freeze` stopped, and to ``pid``'s group."""
    if hasattr(signal, "SIGCONT"):
        signal_all(frozen, signal.SIGCONT)
        if pid is not None:
            signal_group(pid, signal.SIGCONT)


def signal_all(pids: Set[int], signum: int) -> None:
    """``signum`` to each of ``pids`` that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def signal_group(pid: int, signum: int) -> None:
    """``signum`` to the group ``pid`` leads, if it still exists (where there is no
    ``/proc`` to find its members one by one)."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` on this process (Linux); whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make this process the one its descendants' orphans are handed to (Linux);
    whether that took."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(parent: int | None = None) -> None:
    """SIGKILL to this process once its parent ends (Linux; elsewhere nothing). A
    process the judge stops while it times (a plugin's describer between questions,
    a witness's plugin process) would otherwise stay stopped for ever when the judge
    is killed with SIGKILL: holding its memory and, on a card, its context with
    whatever it queued. ``parent``, where the caller knows who started it: this
    process ends now if that one already has (it was adopted before the signal was
    asked for). The kernel sends the signal when the *thread* that forked this
    process ends, so the parent must start it from a thread that outlives it (its
    main thread; the fork server's only one). A plugin running in this process can
    undo it (it runs as the user): this is for a judge that dies, not a defence."""
    asked = _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if asked and parent is not None and os.getppid() != parent:
        os._exit(1)


def _imported_by_the_fork_server() -> bool:
    """Whether multiprocessing's fork server is importing this module (as a preload,
    :data:`matprobe.run.processes.PRELOAD`), not the judge or a child."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if (
            frame.f_code.co_name == "main"
            and frame.f_globals.get("__name__") == "multiprocessing.forkserver"
        ):
            return True
        frame = frame.f_back
    return False


def _end_what_is_left_below() -> None:
    """SIGKILL to every process below this one (the fork server, as it exits once the
    judge has gone): its forks die with it on their own, but the orphans it adopted
    — a plugin's helpers that left their worker — would go on under init."""
    if hasattr(signal, "SIGKILL"):
        signal_all(descendants(os.getpid()), signal.SIGKILL)


if _imported_by_the_fork_server() and become_subreaper():
    # The server reaps every child, its adopted orphans too, and warns of each of
    # those it did not fork: a plugin's helper ending is no news for the user.
    warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")
    atexit.register(_end_what_is_left_below)
