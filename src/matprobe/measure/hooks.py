"""Code a process runs without calling it: hooks that see or rewrite the judge's work.

A plugin need not replace a function to change what the judge computes. A
torch function mode entered once (``TorchFunctionMode().__enter__()``) runs for
every torch call after it — the judge's float64 subtraction included: one that
returned zeros for float64 differences PASSed a kernel writing zeros, ranked
faster than anything, with no binding changed. A dispatch mode does the same a
level lower; a trace or profile function sees (and through frames, can touch)
every Python call. (Threads and garbage-collector callbacks are not counted:
libraries start and register them honestly — hypothesis registers a callback —
so a tripwire cannot tell a plugin's from theirs.)

The measuring code installs none of these, so any that is active while a pair is
measured or judged is foreign. :func:`active_hooks` names them; the tamper
snapshot counts them as replaced bindings (:mod:`matprobe.measure.tamper`),
and the comparison refuses to judge while one is active
(:func:`refuse_if_hooked`). Reading them calls nothing a mode intercepts:
torch's private stack lengths are not torch functions a mode sees.
"""

from __future__ import annotations

import sys
import threading
from typing import Any


class HookedError(Exception):
    """A foreign hook was active where the judge works: no verdict is taken."""


def _state() -> tuple[object, object]:
    """(trace function, profile function)."""
    return (sys.gettrace() or threading.gettrace(), sys.getprofile() or threading.getprofile())


#: What was installed when the measuring code was first imported — before any
#: plugin: a coverage tool's or a debugger's tracer is the user's, not a plugin's.
AT_IMPORT = _state()


def active_hooks() -> list[str]:
    """What is installed now that the measuring code never installs and that was
    not there when it was imported, as names for a tamper report (empty:
    nothing)."""
    found = []
    torch = sys.modules.get("torch")
    if torch is not None:
        if _foreign_function_modes(torch):
            found.append("a torch function mode (active)")
        if torch._C._len_torch_dispatch_stack():
            found.append("a torch dispatch mode (active)")
    trace, profile = _state()
    if trace is not AT_IMPORT[0]:
        found.append("a trace function (sys.settrace)")
    if profile is not AT_IMPORT[1]:
        found.append("a profile function (sys.setprofile)")
    return found


def _foreign_function_modes(torch: Any) -> int:
    """Torch function modes active, but for torch's own default-device mode
    (``torch.set_default_device``, exactly that class: it only names a device
    for the tensors a factory makes)."""
    from torch.utils._device import DeviceContext

    stack = torch._C._len_torch_function_stack()
    modes = (torch._C._get_function_stack_at(i) for i in range(stack))
    return sum(type(mode) is not DeviceContext for mode in modes)


def refuse_if_hooked() -> None:
    """Raise :class:`HookedError` when a foreign hook is active: the judge's
    arithmetic would run through it."""
    if found := active_hooks():
        raise HookedError(
            f"{', '.join(found)}: installed in the process that measured it; no verdict is taken"
        )
