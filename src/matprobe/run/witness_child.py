"""The process a witness (:mod:`~matprobe.run.witness`) runs a plugin's kernel in.

It sets up, answers the judge's pings before it imports anything of the plugin's
(so the judge learns what a message costs before plugin code could slow one),
imports the plugin, then for each pair: attaches to the judge's block, builds
the kernel on the input sets there, records ``calls`` calls — call ``i`` copies
row ``i`` of the judge's ``x`` into its set's A, then writes row ``i`` of the
judge's output block — and, on ``go``, replays the recording once and says
``done`` when the card has finished. It sends JSON only (the judge unpickles
nothing from plugin code); whatever this process says about itself, the judge
believes only its own clock and the block.

Messages, judge → here: ``("ping",)``, ``("import",)``, ``("pair", spec, family,
params, device, handle, sets, calls)``, ``("go",)``, ``None`` to stop; here →
judge: ``("ready",)``, ``("pong",)``, ``("imported",)``, ``("built",)``,
``("done",)``, ``("error", text)``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any


def input_slot(index: int, name: str) -> str:
    """The shared block's name for tensor ``name`` of input set ``index``."""
    return f"set{index}.{name}"


def send(conn: Connection, *message: Any) -> None:
    """``message`` to the judge, as JSON (the judge unpickles nothing from here)."""
    conn.send_bytes(json.dumps(message).encode())


def set_up(kind: str, index: int, cpu_threads: int | None) -> None:
    """What a process the judge drives does first, before any plugin is imported:
    it leaves Ctrl-C to the judge, makes a process group of its own (the processes
    a plugin starts join it, and the judge stops them with it while it times
    something else) and settles where it measures."""
    from matprobe.run.worker_process import _set_up_place

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the judge decides
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)
    _set_up_place(kind, index, cpu_threads)


#: What answers in a witness's process (:func:`child_main`'s ``served``).
WITNESS = "matprobe.run.witness_child:Witness"


def child_main(
    conn: Connection,
    served: str,
    factory: str,
    plugins: tuple[str, ...],
    kind: str,
    index: int,
    cpu_threads: int | None = None,
) -> None:
    """The loop of a process the judge drives — a witness's, or the token table's
    (:mod:`~matprobe.dispatch.apart_child`): set up (:func:`set_up`), make the
    ``served`` class (``"module:Class"``, called with ``factory``, ``plugins``
    and ``kind``), say ``ready``; then answer a ``ping`` with ``pong`` — before
    anything of a plugin's is imported, so the judge learns what a message costs
    —, ``import`` with ``imported`` once the object has imported the plugins, and
    any other word with what its handler returns (an exception: ``("error",
    traceback)``, and the loop goes on); ``None`` ends it."""
    try:
        set_up(kind, index, cpu_threads)
        module, _, name = served.partition(":")
        server = getattr(importlib.import_module(module), name)(factory, plugins, kind)
        send(conn, "ready")
        while (message := conn.recv()) is not None:
            word, *rest = message
            if word == "ping":
                send(conn, "pong")
                continue
            try:
                if word == "import":
                    server.imports()
                    answer: tuple[Any, ...] = ("imported",)
                else:  # looked up now: what the plugins changed since answers, as it would
                    answer = server.handlers()[word](*rest)
            except Exception:
                send(conn, "error", traceback.format_exc(limit=3))
            else:
                send(conn, *answer)
    except Exception:
        send(conn, "error", traceback.format_exc(limit=3))
    finally:
        conn.close()


class Witness:
    """A witness's process: the registry, and the pair recorded last (the
    recording, and the block's mapping, tensors and kernel it uses: kept until the
    next pair)."""

    def __init__(self, factory: str, plugins: tuple[str, ...], kind: str) -> None:
        from matprobe.measure.sampling import recorder_for
        from matprobe.measure.variants import resolve_factory

        self.registry, self.plugins = resolve_factory(factory), plugins
        self.recorder = recorder_for(kind)
        self.kept: tuple[Any, Any] = (None, None)

    def imports(self) -> None:
        from matprobe.measure.variants import with_plugins

        self.registry = with_plugins(self.registry, self.plugins)

    def handlers(self) -> dict[str, Callable[..., tuple[Any, ...]]]:
        return {"pair": self.pair, "go": self.go}

    def pair(self, *recorded: Any) -> tuple[Any, ...]:
        self.kept = (None, None)
        self.kept = _record(self.registry, self.recorder, *recorded)
        return ("built",)

    def go(self) -> tuple[Any, ...]:
        self.recorder.replay(self.kept[0])
        self.recorder.sync()
        return ("done",)


def _record(
    registry: Any,
    recorder: Any,
    spec_data: dict[str, Any],
    family: str,
    params: list[list[Any]],
    device_data: dict[str, Any],
    handle: dict[str, Any],
    sets: int,
    calls: int,
) -> tuple[Any, Any]:
    """The kernel built on the judge's sets and its ``calls`` calls recorded; the
    recording and what keeps the block attached."""
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import assemble_inputs
    from matprobe.measure.variants import Variant
    from matprobe.run.shared_arena import attach
    from matprobe.spec import MatmulSpec

    spec = MatmulSpec.from_dict(spec_data)
    variant = Variant(registry.family(family), tuple((str(k), v) for k, v in params))
    tensors, keep = attach(handle)
    inputs = [
        assemble_inputs(spec, {name[len(input_slot(s, "")) :]: t for name, t in tensors.items()
                               if name.startswith(input_slot(s, ""))})
        for s in range(sets)
    ]  # fmt: skip
    fn = variant.build(spec, DeviceInfo.from_dict(device_data))
    x, out = tensors["x"], tensors["out"]

    def copy_x(i: int) -> Any:
        return lambda: inputs[i % sets].a.copy_(x[i])

    def call(i: int) -> Any:
        return lambda: fn(inputs[i % sets], out[i])

    steps = [step for i in range(calls) for step in (copy_x(i), call(i))]
    return recorder.record(steps, 1), (keep, tensors, inputs, fn)
