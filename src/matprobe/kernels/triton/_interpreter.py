"""Triton's interpreter, made to patch ``triton.language`` once a launch.

Under ``TRITON_INTERPRET=1`` (the CPU: a kernel runs as Python over numpy) each
launch patches the language module for the interpreter and restores it when the
launch ends. Every call *inside* the kernel of another ``@triton.jit`` function —
this package's shared blocks (``_blocks``), and ``tl.sum`` or ``tl.zeros``
themselves — patches it again (triton 3.x: ``InterpretedFunction.__call__`` →
``_patch_lang``), setting what is already set: about half the interpreter's time
in matprobe's kernels (one conformance case 6.7 → 3.6 s on a 2-core machine).

:func:`patch_once` makes such a nested call skip the patching when the language
modules its function sees were patched during the launch running, and leaves all
else to triton: every launch, a nested function that sees another language
module (patched then, as triton would), a triton without these names, a process
that does not interpret. What runs in the kernel is unchanged
(``tests/test_interpreter.py`` compares outputs with and without).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

#: Triton's own ``_patch_lang``, once :func:`patch_once` has replaced it here.
ORIGINAL: list[Callable[[Any], Any]] = []


class _AlreadyPatched:
    """The scope a skipped nested patch returns: nothing to restore (triton's own
    nested scopes are never restored either; the launch's restores the language)."""

    def restore(self) -> None:
        return None


def patch_once() -> None:
    """Install the once-a-launch patching where Triton interprets (see the module doc)."""
    if ORIGINAL or os.environ.get("TRITON_INTERPRET") != "1":
        return
    try:
        import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from triton.runtime import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            interpreter,
        )
    except ImportError:
        return
    original = getattr(interpreter, "_patch_lang", None)
    if original is None or not hasattr(interpreter, "InterpretedFunction"):
        return
    interpreter._patch_lang = once(original, (tl, tl.core))
    ORIGINAL.append(original)


def once(original: Callable[[Any], Any], languages: tuple[Any, ...]) -> Callable[[Any], Any]:
    """``original`` (triton's ``_patch_lang``), skipped for a nested call whose
    function sees only ``languages`` modules the running launch has patched."""
    # The language modules patched by each launch under way (one at a time: the
    # interpreter runs a launch's programs in turn, from one thread).
    patched: list[set[int]] = []

    def patch_lang(fn: Any) -> Any:
        seen = {
            id(value)
            for value in fn.__globals__.values()
            if inspect.ismodule(value) and any(value is lang for lang in languages)
        }
        if patched:  # a call from inside a kernel
            if seen <= patched[-1]:
                return _AlreadyPatched()
            patched[-1] |= seen
            return original(fn)
        scope = original(fn)  # a launch: patched now, restored when it ends
        patched.append(seen)
        restore = scope.restore

        def restore_and_forget() -> None:
            patched.pop()
            restore()

        scope.restore = restore_and_forget
        return scope

    return patch_lang
