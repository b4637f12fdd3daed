"""Fake and deliberately cheating variants the harness must handle.

`registry()` is also loaded by name inside worker processes
("fake_variants:registry"), so everything here must be importable from the
tests folder.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any

import torch

from matprobe.harness.device import DeviceInfo
from matprobe.harness.inputs import MatmulInputs
from matprobe.harness.variants import KernelFn, Registry, VariantFamily, variant_family
from matprobe.spec import MatmulSpec

ALL_OPS = ("matmul", "matmul_bias_add", "matmul_alpha_beta")


def exact(inputs: MatmulInputs) -> torch.Tensor:
    """The right answer, computed in float64 from the inputs."""
    a = inputs.a_mk().to(torch.float64)
    b = inputs.b_kn().to(torch.float64)
    result = inputs.alpha * (a @ b)
    if inputs.c0 is not None:
        result = result + inputs.beta * inputs.c0.to(torch.float64)
    if inputs.bias is not None:
        result = result + inputs.bias.to(torch.float64)
    return result


@variant_family(name="fake.exact", ops=ALL_OPS, devices=("cpu", "cuda"))
def fake_exact(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Correct: float64 math, rounded once."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs))

    return run


@variant_family(name="cheat.zeros", ops=ALL_OPS)
def cheat_zeros(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    def run(inputs: MatmulInputs, out: Any) -> None:
        out.zero_()

    return run


@variant_family(name="cheat.half", ops=ALL_OPS)
def cheat_half(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Writes only the first half of the columns."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        half = out.shape[-1] // 2 or 1
        out[..., :half].copy_(exact(inputs)[..., :half])

    return run


@variant_family(name="cheat.previous", ops=ALL_OPS)
def cheat_previous(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Returns the previous call's output (right on the first call only)."""
    memory: list[torch.Tensor] = []

    def run(inputs: MatmulInputs, out: Any) -> None:
        current = exact(inputs)
        out.copy_(memory[-1] if memory else current)
        memory.append(current)

    return run


@variant_family(name="cheat.first_seed", ops=ALL_OPS)
def cheat_first_seed(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Computes once and caches across calls: right only for the first input set."""
    cache: dict[str, torch.Tensor] = {}

    def run(inputs: MatmulInputs, out: Any) -> None:
        if "result" not in cache:
            cache["result"] = exact(inputs)
        out.copy_(cache["result"])

    return run


@variant_family(name="cheat.one_element", ops=ALL_OPS)
def cheat_one_element(spec: MatmulSpec, params: Mapping[str, Any],
                      device: DeviceInfo) -> KernelFn:
    """Right everywhere but one element, which is off by 50 %: norm-wise error is
    tiny on a big output, so only the per-element check can catch it."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        result = exact(inputs)
        flat = result.view(-1)
        flat[flat.numel() // 3] *= 1.5
        out.copy_(result)

    return run


@variant_family(name="cheat.sloppy", ops=ALL_OPS)
def cheat_sloppy(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Relative error 1e-3 on every element: fine for bf16, TF32-like for f32."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs) * (1 + 1e-3))

    return run


@variant_family(name="cheat.side_stream", ops=ALL_OPS, devices=("cuda",))
def cheat_side_stream(spec: MatmulSpec, params: Mapping[str, Any],
                      device: DeviceInfo) -> KernelFn:
    """Does the work on a private stream, unsynchronized with the caller's: events
    on the current stream (and a graph captured on it) miss the work."""
    side = torch.cuda.Stream()

    def run(inputs: MatmulInputs, out: Any) -> None:
        with torch.cuda.stream(side):
            torch.matmul(inputs.a_mk(), inputs.b_kn(), out=out)

    return run


def _misbehave(mode: str) -> None:
    if mode == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "exit":
        os._exit(3)
    if mode == "hang":
        time.sleep(3600)


@variant_family(name="fake.flaky", ops=ALL_OPS, grid={"mode": ("ok", "segv", "hang", "exit")})
def fake_flaky(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Crashes, hangs or exits the worker, by parameter; "ok" is correct."""
    mode = str(params["mode"])

    def run(inputs: MatmulInputs, out: Any) -> None:
        _misbehave(mode)
        out.copy_(exact(inputs))

    return run


class CompilationError(Exception):
    """Named like Triton's, so the harness classifies it as a compile error."""


class OutOfMemoryError(RuntimeError):
    pass


@variant_family(name="fake.broken", ops=ALL_OPS, grid={"fault": ("compile", "oom", "raise")})
def fake_broken(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Fails to build (compile), runs out of memory, or raises a plain error."""
    fault = params["fault"]
    if fault == "compile":
        raise CompilationError("at 12:4: unsupported tensor shape")

    def run(inputs: MatmulInputs, out: Any) -> None:
        if fault == "oom":
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        raise ValueError("index 7 is out of bounds")

    return run


def _needs_m1(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    return None if spec.m == 1 else "needs m=1"


@variant_family(name="fake.m1_only", ops=("matmul",), supports=_needs_m1)
def fake_m1_only(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs))

    return run


@variant_family(name="fake.gpu_only", ops=ALL_OPS, devices=("cuda",))
def fake_gpu_only(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs))

    return run


@variant_family(name="cheat.scribble", ops=ALL_OPS)
def cheat_scribble(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Overwrites its inputs with a problem whose answer is trivial, then answers
    that one: a harness that derives the reference from the inputs after the call
    would grade it correct."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        inputs.a.fill_(0.5)
        inputs.b.fill_(0.25)
        for extra in (inputs.bias, inputs.c0):
            if extra is not None:
                extra.fill_(0.125)
        out.copy_(exact(inputs))

    return run


CHEATERS: tuple[VariantFamily, ...] = (
    cheat_zeros, cheat_half, cheat_previous, cheat_first_seed, cheat_one_element, cheat_sloppy,
    cheat_scribble,
)
FAMILIES: tuple[VariantFamily, ...] = (
    fake_exact, *CHEATERS, cheat_side_stream, fake_flaky, fake_broken, fake_m1_only,
    fake_gpu_only,
)


def registry() -> Registry:
    return Registry(FAMILIES)
