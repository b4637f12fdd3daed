"""The calls a token mode runs: the step's forward as a function with a code
object of its own (Dynamo caches compiled code per code object, so each
compiled mode keeps its own cache entry), compiled or not, and what a row of
the token says of its device and of a failure."""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import cast

import torch

from matprobe.token.linear import LinearFn
from matprobe.token.step import AttentionFn, DecodeStep, FusedOps
from matprobe.token.timing import TokenCall

#: ``compiler(step, mode)``: the step compiled in a torch.compile mode.
Compiler = Callable[[TokenCall, str], TokenCall]


def inductor(step: TokenCall, mode: str) -> TokenCall:
    """``torch.compile`` of the whole step as one graph (a graph break would leave
    part of the step eager and is an error), static shapes."""
    return torch.compile(
        step, mode=None if mode == "default" else mode, fullgraph=True, dynamic=False
    )


_builds = itertools.count()


def step_call(step: DecodeStep, linear: LinearFn) -> TokenCall:
    """``step.forward(linear)`` as a function with a code object of its own: Dynamo
    caches compiled code per code object, so each compiled mode keeps its own
    cache entry (never another mode's, never past the recompile limit)."""

    def token() -> torch.Tensor:
        return step.forward(linear)

    return _own_code(token)


def fused_step_call(
    step: DecodeStep, fused: FusedOps, attention: AttentionFn | None = None
) -> TokenCall:
    """``step.forward_fused(fused, attention=attention)``, with a code object of its
    own (as :func:`step_call`)."""

    def token() -> torch.Tensor:
        return step.forward_fused(fused, attention=attention)

    return _own_code(token)


def _own_code(token: Callable[[], torch.Tensor]) -> TokenCall:
    code = token.__code__
    fresh = code.replace(co_name=f"token_{next(_builds)}")
    return cast(
        TokenCall,
        types.FunctionType(fresh, token.__globals__, fresh.co_name, None, token.__closure__),
    )


def device_description(kind: str) -> tuple[str, dict[str, str]]:
    """The device's name and what makes its figures comparable: the versions, and
    on CUDA the compute capability and the driver (as ``matprobe run`` records them)."""
    from matprobe.measure.device import detect

    info = detect(kind)
    versions = dict(info.versions)
    if info.driver:
        versions["driver"] = info.driver
    name = info.name
    if info.capability is not None:
        name += f" (cuda sm_{info.capability[0]}{info.capability[1]})"
    return name, versions


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
