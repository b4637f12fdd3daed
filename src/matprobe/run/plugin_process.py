"""Plugins imported in a process of their own, never in the one that keeps the results.

A plugin is the user's code, and importing it runs it. The process that plans a
run, receives its workers' results, stores them and writes the report (and the
ones that export a dispatch table or check a table's verdicts) used to import
every plugin to learn its families; a plugin that, on import, replaced
``PairResult.from_dict`` there turned its own FAIL rows into PASS rows in the
store — a kernel writing zeros was reported as passing. Those processes now
learn a plugin's families as data: a child process imports the plugins and
describes each family in JSON (name, ops, grid, flags, source fingerprint), and
answers the one question that needs the family's own code — whether a variant
supports a spec on a device — over the same pipe. Nothing crosses but JSON (a
pickle from a process running plugin code could run code when read). The
families are built, run and judged in the workers, each plugin in its own.

The parent's copy of a plugin family has no builder: building one here is an
error that says where it runs. Between questions the child is stopped (SIGSTOP),
with its group and what it started (:mod:`~matprobe.run.process_tree`): a thread
or helper a plugin starts on import runs only while a question is answered —
during planning — never while a worker or a witness times a kernel; and it is
killed with the child; the child is a child subreaper, so a helper that leaves
the group and its parent is handed to it and found the same way. (A plugin can
undo that, or a helper leave before the child is stopped: this process runs as
the user, not in a sandbox.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.measure.device import DeviceInfo
from matprobe.measure.variants import (
    SHIPPED_FACTORY,
    Registry,
    VariantFamily,
    plugin_families,
    resolve_factory,
    with_plugins,
)
from matprobe.run import process_tree
from matprobe.spec import MatmulSpec

#: The family fields a description carries, and how each is read back.
_FIELDS: dict[str, Callable[[Any], Any]] = {
    "ops": frozenset,
    "devices": frozenset,
    "dtypes": frozenset,
    "baseline": bool,
    "peer": bool,
    "requires": tuple,
    "interpreted_on_cpu": bool,
    "description": str,
    "source_fingerprint": str,
    "early_launch_param": lambda value: value,
    "activation_quant": lambda value: value,
    "prologues": frozenset,
}

#: Grid values a description may carry: what a variant id and a store row hold.
_PLAIN = (bool, int, float, str, type(None))


def _describe(family: VariantFamily) -> dict[str, Any]:
    """A family as JSON-able data (in the child)."""
    for name, values in family.grid.items():
        for value in values:
            if not isinstance(value, _PLAIN):
                raise MatprobeError(
                    f"plugin {family.origin!r}: family {family.name!r}'s grid value "
                    f"{value!r} of {name!r} is a {type(value).__name__}; grid values "
                    "are numbers, strings, booleans or None"
                )
    data: dict[str, Any] = {"name": family.name, "origin": family.origin}
    data["grid"] = {name: list(values) for name, values in family.grid.items()}
    for name, kind in _FIELDS.items():
        value = getattr(family, name)
        data[name] = sorted(value) if kind is frozenset else list(value) if kind is tuple else value
    return data


def _serve(requests: Any, replies: Any) -> None:
    """The child: import the plugins it is sent, describe their families, then answer
    ``supports`` questions until the parent closes the pipe."""
    families: dict[str, VariantFamily] = {}

    def reply(message: Mapping[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    setup = json.loads(requests.readline())
    sys.path[:] = setup["path"]
    described = []
    try:
        for module in setup["plugins"]:
            for family in plugin_families(module):
                families[family.name] = family
                described.append(_describe(family))
    except MatprobeError as exc:
        reply({"error": str(exc)})
        return
    reply({"families": described})
    for line in requests:
        ask = json.loads(line)
        try:
            family = families[ask["family"]]
            spec = MatmulSpec.from_dict(ask["spec"])
            device = DeviceInfo.from_dict(ask["device"])
            reason = family.supports(spec, ask["params"], device)
            reply({"reason": None if reason is None else str(reason)})
        except Exception as exc:  # the plugin's predicate raised
            reply({"error": f"{type(exc).__name__}: {exc}"})


class PluginProcess:
    """A child process that imported ``plugins``: their families as data, and the
    answers of their ``supports`` predicates."""

    def __init__(self, plugins: Sequence[str]) -> None:
        read_replies, write_replies = os.pipe()
        # The child finds this very matprobe wherever the parent found it (a
        # relative PYTHONPATH, then a chdir, would lose it); its sys.path follows.
        here = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        # It dies with this process (stopped as it is between questions, it would
        # outlive a SIGKILL of this one for ever), but only if started from the main
        # thread: the kernel signals the end of the thread that started it.
        parent = os.getpid() if threading.current_thread() is threading.main_thread() else 0
        self._child = subprocess.Popen(
            [sys.executable, "-m", "matprobe.run.plugin_process", str(write_replies), str(parent)],
            stdin=subprocess.PIPE,
            pass_fds=(write_replies,),
            text=True,
            env={**os.environ, "PYTHONPATH": path},
            start_new_session=True,  # a group of its own, stopped and killed as one
        )
        self._held: set[int] = set()
        self._answers: dict[str, dict[str, Any]] = {}
        os.close(write_replies)
        self._replies = os.fdopen(read_replies, encoding="utf-8")
        assert self._child.stdin is not None
        self._requests = self._child.stdin
        # The child ends when its registry is dropped (or at exit): nothing here
        # holds this object alive, so many runs in one process leave no children.
        self.close = weakref.finalize(
            self, _end, self._child, self._requests, self._replies, self._held
        )
        first = self._ask({"plugins": list(plugins), "path": list(sys.path)})
        if "error" in first:
            self.close()
            raise MatprobeError(str(first["error"]))
        self.described: list[dict[str, Any]] = list(first["families"])

    def _ask(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """``message`` answered by the child, woken for it and stopped again after."""
        process_tree.thaw(self._child.pid, self._held)
        self._held.clear()
        try:
            self._requests.write(json.dumps(message) + "\n")
            self._requests.flush()
            line = self._replies.readline()
        except (BrokenPipeError, OSError):
            line = ""
        finally:
            self._held |= process_tree.freeze(self._child.pid, None, set())
        if not line:
            code = self._child.poll()
            raise MatprobeError(f"the process that imports the plugins ended (exit code {code})")
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise MatprobeError("the process that imports the plugins answered nonsense")
        return answer

    def supports(
        self, family: str, spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
    ) -> str | None:
        question = {"family": family, "params": dict(params), "spec": spec.to_dict(),
                    "device": device.to_dict()}  # fmt: skip
        # Asked once each: a plan asks again what it asked before (each ask wakes
        # the child and stops it again: two looks through /proc, ~7 ms on a 2-core VM).
        key = json.dumps(question, sort_keys=True)
        if (answer := self._answers.get(key)) is None:
            answer = self._answers[key] = self._ask(question)
        if "error" in answer:
            raise MatprobeError(f"family {family!r}: its supports check raised {answer['error']}")
        reason = answer.get("reason")
        return None if reason is None else str(reason)

    def families(self) -> dict[str, tuple[VariantFamily, ...]]:
        """Each plugin module's families, as the parent keeps them."""
        by_module: dict[str, list[VariantFamily]] = {}
        for data in self.described:
            by_module.setdefault(str(data["origin"]), []).append(self._family(data))
        return {module: tuple(found) for module, found in by_module.items()}

    def _family(self, data: Mapping[str, Any]) -> VariantFamily:
        name, origin = str(data["name"]), str(data["origin"])

        def build(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> Any:
            raise MatprobeError(
                f"family {name!r} of plugin {origin!r} is built in its own worker, "
                "never in the process that keeps the results"
            )

        def supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> Any:
            return self.supports(name, spec, params, device)

        fields = {key: kind(data[key]) for key, kind in _FIELDS.items()}
        grid = {str(key): tuple(values) for key, values in dict(data["grid"]).items()}
        return VariantFamily(
            name=name, build=build, supports=supports, grid=grid, origin=origin, **fields
        )


def _end(child: subprocess.Popen[str], requests: Any, replies: Any, held: set[int]) -> None:
    """Close the child's pipe (it exits at the end of its input) and wait for it;
    what it started killed after it."""
    helpers = process_tree.started_by(child.pid, None, set()) - {child.pid}
    process_tree.thaw(child.pid, held)
    if child.poll() is None:
        with contextlib.suppress(OSError):
            requests.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    replies.close()
    if hasattr(signal, "SIGKILL"):
        process_tree.signal_all(helpers, signal.SIGKILL)
        process_tree.signal_group(child.pid, signal.SIGKILL)


def described_plugin_families(plugins: Sequence[str]) -> Callable[[str], tuple[VariantFamily, ...]]:
    """``plugin_families`` for a parent process: the plugins imported in a child
    (one for all of them), their families described to this one."""
    modules = list(dict.fromkeys(plugins))
    if not modules:
        return plugin_families
    found = PluginProcess(modules).families()

    def families_of(module: str) -> tuple[VariantFamily, ...]:
        return found[module]

    return families_of


def described_registry(factory: str = SHIPPED_FACTORY, plugins: Sequence[str] = ()) -> Registry:
    """The registry of a run as the process that keeps its results holds it: the
    factory's families, then the plugins' as described by a child process."""
    return with_plugins(resolve_factory(factory), plugins, described_plugin_families(plugins))


if __name__ == "__main__":
    if int(sys.argv[2]):
        process_tree.die_with_parent(int(sys.argv[2]))
    # Before any plugin is imported: a helper one orphans becomes this process's
    # child, stopped with it between questions and killed with it (it went to init).
    process_tree.become_subreaper()
    with os.fdopen(int(sys.argv[1]), "w", encoding="utf-8") as _replies:
        _serve(sys.stdin, _replies)
