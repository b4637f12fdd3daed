"""Has code in this process replaced what the judge and the baseline run?

A plugin's module is imported into the worker that measures its families, and
its kernels run there; nothing stops it from assigning a slow wrapper to
``torch.matmul`` (the baseline's library), a lenient comparison to
``matprobe.measure.validate``, or a new ``__code__`` to one of their
functions. Each worker takes a :class:`Snapshot` of those namespaces before it
imports any plugin, and compares after the import and after every pair: a
difference makes the pair's result an ERROR, never a verdict. Hooks that
change what runs without replacing anything — a torch mode, a tracer — are
counted too (:mod:`matprobe.measure.hooks`), and the comparison itself refuses
to judge while one is active.

What is watched: every module of the measurement core (``measure/``, as
:func:`~matprobe.measure.fingerprint.measurement_sources` finds them — the
modules its policy fingerprint hashes) and every other matprobe module loaded
when the snapshot is taken (the worker's loop and the message it sends back,
the shipped families: a plugin that replaced the worker's ``_say`` stored its
zeros kernel as PASS); Python's ``builtins``, ``math``, ``time`` (the CPU
clock), ``os``, ``json`` (every message a worker sends) and
``multiprocessing.connection``; ``torch``, ``torch.Tensor``,
``torch.nn.functional``, torch's C function table, ``torch.cuda`` with its
graphs, events and streams (the device clock); ``numpy`` — each name bound
there, and for a Python function its code object, defaults and closure; the
methods of the classes matprobe's watched modules define and of the clock's and
the pipe's classes (their bases too); the set of names of each such class and of
``torch.Tensor`` (a method *added* to one, a ``__getattribute__`` say, counts);
the families of the registry the worker measures with (an entry replaced, or a
family's builder); the members of matprobe's enumerations (a FAIL whose value
reads ``"pass"``); the value of every constant of a matprobe module (an
upper-case name bound to plain data: the judge's bounds, its unit roundoffs);
and the settings that steer the baseline without rebinding
anything (:mod:`matprobe.measure.process_state`: thread counts, backend flags,
library environment variables). What is not: changes below Python (a C
extension patching memory), or state that is not a binding (a tensor's values —
the input checksums watch those). This is a tripwire for the plugin that
monkeypatches, not isolation: code that knows the tripwire can disable it in
its own process, or write to its worker's pipe directly; only a judge in a
process of its own closes that. The families of other plugins and matprobe's
own run in processes that never import it.
"""

from __future__ import annotations

import enum
import importlib
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import CodeType, FunctionType, ModuleType
from typing import Any, NamedTuple

from matprobe.measure.fingerprint import measurement_sources
from matprobe.measure.hooks import active_hooks
from matprobe.measure.process_state import process_state, state_changes

#: Namespaces watched besides matprobe's own modules (see the module doc).
WATCHED = (
    "builtins",
    "math",
    "time",
    "os",
    "json",
    "json.encoder",
    "multiprocessing.connection",
    "torch",
    "torch.nn.functional",
    "torch._C._VariableFunctions",
    "torch.cuda",
    "torch.cuda.graphs",
    "numpy",
)

#: Classes watched with their bases (``module:Class``): the device clock's graphs,
#: events and streams, the pipe a worker answers on, the encoder of its answers.
WATCHED_CLASSES = (
    "torch:Tensor",
    "torch.cuda:CUDAGraph",
    "torch.cuda:Event",
    "torch.cuda:Stream",
    "multiprocessing.connection:Connection",
    "json:JSONEncoder",
)


#: Bindings torch itself rewraps when a part of it loads later: importing
#: ``torch._dynamo`` (the torch.compile peer's first build does) wraps
#: ``torch.manual_seed`` in ``torch._disable_dynamo``. Such a binding counts as
#: unchanged only while it is exactly that: torch's own wrapper code around the
#: function the snapshot saw (:func:`_wrapped_by_torch`).
REWRAPPED_BY_TORCH = frozenset({"torch.manual_seed"})


def _wrapped_by_torch(now: Any, before: Any) -> bool:
    """Whether ``now`` is ``torch._disable_dynamo(before)``: the wrapper's code is the
    inner function of torch's ``_disable_dynamo`` (itself a watched binding) and its
    closure holds ``before`` — not another function given ``before`` as its
    ``__wrapped__``."""
    import torch

    disable = getattr(torch, "_disable_dynamo", None)
    if not isinstance(now, FunctionType) or not isinstance(disable, FunctionType):
        return False
    inner = {c for c in disable.__code__.co_consts if isinstance(c, CodeType)}
    held = [cell.cell_contents for cell in now.__closure__ or ()]
    return now.__code__ in inner and any(value is before for value in held)


def watched_namespaces() -> Iterator[tuple[str, Any]]:
    """(name, namespace object) of everything a snapshot covers, importing each."""
    core = [name for name in measurement_sources() if name != "matprobe.measure"]
    loaded = sorted(
        name for name in list(sys.modules) if name.startswith("matprobe.") and name not in core
    )
    for name in (*core, *loaded, *WATCHED):
        try:
            module: ModuleType = importlib.import_module(name)
        except ImportError:  # numpy-only installs: no torch to watch
            continue
        yield name, module
    for ref in WATCHED_CLASSES:
        module_name, _, class_name = ref.partition(":")
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(cls, type):
            yield from class_namespaces(f"{module_name}.{class_name}", cls)


def class_namespaces(label: str, cls: type) -> Iterator[tuple[str, type]]:
    """``cls`` and its bases but ``object``, each named in full: torch.cuda.Event's
    bases include torch.Event, and under one short name the second hid the first's
    methods (a plugin's ``elapsed_time`` went unseen on an H100)."""
    for base in cls.__mro__[:-1]:
        yield f"{label}[{base.__module__}.{base.__qualname__}]", base


class _Constant(NamedTuple):
    """A matprobe module's constant as text: its value, not its identity, is what
    the judge reads (a dict of unit roundoffs changed in place keeps its id)."""

    text: str


#: A matprobe module's constants: public upper-case names bound to plain data.
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_PLAIN_DATA = (int, float, str, bytes, bool, type(None), tuple, frozenset, list, dict, set)


def _identity(value: Any) -> tuple[int, ...]:
    """What changes when a binding is replaced or a function's body is swapped (for
    a class's set of names: when a name is added or removed; for a constant: when
    its value changes)."""
    if isinstance(value, _Constant):
        return (hash(value.text),)
    if isinstance(value, frozenset):
        return (hash(value),)
    if isinstance(value, FunctionType):
        return (id(value), id(value.__code__), id(value.__defaults__), id(value.__kwdefaults__))
    return (id(value),)


def _names(namespace: Any) -> dict[str, Any]:
    return dict(vars(namespace) if isinstance(namespace, ModuleType) else namespace.__dict__)


def _bindings(name: str, namespace: Any) -> Iterator[tuple[str, Any]]:
    """The callables bound in ``namespace`` (data such as a module's counters is
    rebound by honest code), and for matprobe's modules the methods of the classes
    they define and the members of their enumerations. A class's names are
    watched as a set too: a method *added* to a judging class — a
    ``__getattribute__`` that hides failures — changes nothing already bound, yet
    everything the class answers. For an object that is neither a module nor a
    class (a family, the worker's pipe), the names of its attributes as a set and
    each callable one."""
    if not isinstance(namespace, ModuleType):
        yield f"{name}.<names>", _method_names(namespace)
    mine = isinstance(namespace, ModuleType) and name.startswith("matprobe.")
    for attr, value in _names(namespace).items():
        if mine and isinstance(value, _PLAIN_DATA) and _CONSTANT_NAME.fullmatch(attr):
            # The judge's bounds are data: ELEMENT_ACCUMULATION set to 1e12 at
            # import PASSed a kernel writing zeros. (Underscored state such as a
            # cache is rebound by honest code; a constant never is.)
            yield f"{name}.{attr}", _Constant(repr(value))
        if not callable(value):
            continue
        yield f"{name}.{attr}", value
        if isinstance(value, type) and name.startswith("matprobe.") and value.__module__ == name:
            yield f"{name}.{attr}.<names>", _method_names(value)
            if issubclass(value, enum.Enum):
                # A member's value is data on the member: FAIL's set to "pass" is
                # stored as a pass.
                members = frozenset((m.name, repr(m.value)) for m in value)
                yield f"{name}.{attr}.<members>", members
            for method, inner in _names(value).items():
                if callable(inner) or isinstance(inner, (staticmethod, classmethod, property)):
                    yield f"{name}.{attr}.{method}", inner


def _method_names(holder: Any) -> frozenset[str]:
    """The names of what a class's instances (or an object) would call: its
    functions and descriptors. Data Python caches on a class as it runs
    (``copy.copy`` stores ``__slotnames__`` on the class of what it copies) is not
    among them."""
    return frozenset(
        attr
        for attr, value in _names(holder).items()
        if callable(value) or hasattr(value, "__get__")
    )


#: Objects a caller asks a snapshot to watch besides the namespaces (the worker's
#: registry's families, its pipe), as (name, object) pairs: read at the snapshot
#: and again at each comparison, so an entry replaced since is compared too.
Extra = Callable[[], Iterable[tuple[str, Any]]]


def _no_extra() -> Iterable[tuple[str, Any]]:
    return ()


@dataclass(frozen=True)
class Snapshot:
    #: ``namespace.name`` → identity of what is bound there
    bindings: dict[str, tuple[int, ...]]
    #: the objects themselves, kept alive so that no id is reused by another
    held: tuple[Any, ...]
    #: what :data:`REWRAPPED_BY_TORCH` named bound at the snapshot
    originals: dict[str, Any]
    #: the settings that steer the baseline (:func:`process_state`)
    state: dict[str, str] = field(default_factory=dict)
    extra: Extra = _no_extra

    @classmethod
    def take(
        cls, namespaces: Iterable[tuple[str, Any]] | None = None, *, extra: Extra = _no_extra
    ) -> Snapshot:
        bindings: dict[str, tuple[int, ...]] = {}
        held: list[Any] = []
        originals: dict[str, Any] = {}
        for name, namespace in (*(namespaces or watched_namespaces()), *extra()):
            for key, value in _bindings(name, namespace):
                bindings[key] = _identity(value)
                held.append(value)
                if isinstance(value, FunctionType):
                    held.extend((value.__code__, value.__defaults__, value.__kwdefaults__))
                if key in REWRAPPED_BY_TORCH:
                    originals[key] = value
        # After the namespaces: importing them loads torch, whose settings are read.
        return cls(bindings, tuple(held), originals, process_state(), extra)

    def changed(self, namespaces: Iterable[tuple[str, Any]] | None = None) -> list[str]:
        """``namespace.name`` of every callable replaced, removed or given another
        body since the snapshot (names bound since are not counted: a module may
        fill a cache lazily), then every setting changed
        (:func:`~matprobe.measure.process_state.process_state`), then every foreign
        hook active now (:func:`~matprobe.measure.hooks.active_hooks`: a torch
        mode, a tracer)."""
        values = {
            key: value
            for name, namespace in (*(namespaces or watched_namespaces()), *self.extra())
            for key, value in _bindings(name, namespace)
        }
        replaced = sorted(
            key
            for key, ident in self.bindings.items()
            if (key not in values or _identity(values[key]) != ident)
            and not (
                key in self.originals and _wrapped_by_torch(values.get(key), self.originals[key])
            )
        )
        return replaced + state_changes(self.state, process_state()) + active_hooks()


def worker_objects(registry: Any, conn: Any = None) -> Iterator[tuple[str, Any]]:
    """What a worker asks its snapshot to watch besides the namespaces: each family
    of ``registry`` (its builder and checks; an entry replaced by another family
    changes them) and the pipe it answers on (a method set on it)."""
    for family in registry.families():
        yield f"family {family.name}", family
    if conn is not None:
        yield "the worker's pipe", conn


def describe(changed: list[str]) -> str:
    """A tamper report's words for what :meth:`Snapshot.changed` found (the first
    four, then how many more)."""
    shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
    return f"{shown}: replaced or installed in the process that measured it"
