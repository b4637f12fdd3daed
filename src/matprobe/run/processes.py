"""How the processes that run kernel code start: the workers and the witness's.

On Linux each is a fork of one server process (multiprocessing's forkserver)
that has imported torch and matprobe's own modules (:data:`PRELOAD`): a worker
is up in a fraction of a second instead of the ~2 s a fresh interpreter takes
to import torch — per plugin, per witness, per replacement after a crash. It
still shares nothing with the judge's process or with another worker: each is
an address space of its own, forked from a server that imports no plugin and
builds no kernel, so what one worker patches reaches no other started after it.
Elsewhere (macOS, where a fork after the Objective-C runtime is up is unsafe;
Windows, which has no fork) a fresh interpreter is spawned.

A child takes the environment its parent has when it starts, as a spawned one
does — not the server's, which dates from the first start. Should the server
be gone (killed by a child, or by the kernel's OOM killer), multiprocessing
starts another where it notices; where a start fails instead, this process
spawns fresh interpreters from then on: slower, not wrong.

What this does not defend: a child runs with the user's rights, as a spawned
one does, so a hostile plugin can rewrite files matprobe reads, or bind its own
listener where the server listens (a socket in the parent's temporary folder)
and start the processes that follow. Neither start method is a sandbox.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import platform
from collections.abc import Callable, Mapping
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from matprobe.run import process_tree

#: What the fork server imports once, before any child: torch, and matprobe's own
#: code that every worker and witness process sets up with — its measuring loop,
#: the tamper snapshot, the shipped families (which import neither triton, whose
#: first import reads the child's ``TRITON_INTERPRET``, nor any plugin). A worker
#: that imported these itself took ~0.45 s more a start on a 2-core machine.
#: ``process_tree`` makes the server the parent of its children's orphans.
PRELOAD = (
    "matprobe.run.process_tree",
    "torch",
    "matprobe.run.worker_process",
    "matprobe.run.witness_child",
    "matprobe.measure.tamper",
    "matprobe.kernels.catalogue",
)

#: Set once a start through the fork server failed: this process spawns from then on.
_SERVER_GONE: list[bool] = []


def context() -> BaseContext:
    """The start method of kernel-running processes here (see the module's doc)."""
    if platform.system() == "Linux" and not _SERVER_GONE:
        forks = multiprocessing.get_context("forkserver")
        forks.set_forkserver_preload(list(PRELOAD))
        return forks
    return multiprocessing.get_context("spawn")


def start(target: Callable[..., Any], args: tuple[Any, ...]) -> BaseProcess:
    """A started daemon process that runs ``target(*args)`` in the environment this
    process has now (the connections among ``args`` made by ``multiprocessing.Pipe``)."""
    ctx = context()
    child = _process(ctx, target, args)
    try:
        child.start()
    except (OSError, EOFError):
        if ctx.get_start_method() != "forkserver":
            raise
        _SERVER_GONE.append(True)  # the server died or refused: spawn from now on
        child = _process(context(), target, args)
        child.start()
    return child


def _process(ctx: BaseContext, target: Callable[..., Any], args: tuple[Any, ...]) -> BaseProcess:
    forked = ctx.get_start_method() == "forkserver"
    return ctx.Process(  # type: ignore[attr-defined, no-any-return]
        target=_in_environment, args=(dict(os.environ), forked, target, *args), daemon=True
    )


def _in_environment(
    environment: Mapping[str, str], forked: bool, target: Callable[..., Any], *args: Any
) -> None:
    # A fork of the server dies with it, and the server ends when the judge does:
    # a judge killed with SIGKILL leaves no worker or witness behind, stopped or
    # running kernels. (Only a fork of the server: a spawned child's parent is the
    # thread of the judge's that started it, which may end first.)
    if forked:
        _let_the_server_end_with_the_judge()
        process_tree.die_with_parent()  # its parent now: the server
    os.environ.clear()
    os.environ.update(environment)
    target(*args)


def _let_the_server_end_with_the_judge() -> None:
    """Close this fork's copy of the write end of the server's "alive" pipe.
    multiprocessing hands one to every fork and the server ends only when all are
    closed, so a judge killed with SIGKILL left the server, and the forks it had
    stopped, for ever (seen after a killed test run: a stopped witness, its card
    context with it). A fork that starts processes of its own gets a server of its
    own. (A private attribute of multiprocessing's, where it has one.)"""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]
