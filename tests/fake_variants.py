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
from dataclasses import replace
from typing import Any

import torch

from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.variants import KernelFn, Registry, VariantFamily, variant_family
from matprobe.spec import MatmulSpec

ALL_OPS = ("matmul", "matmul_bias_add", "matmul_alpha_beta")


def exact(inputs: MatmulInputs) -> torch.Tensor:
    """The right answer, computed in float64 from the inputs (x normalised first
    when the spec has an RMSNorm prologue)."""
    a = inputs.a_mk().to(torch.float64)
    if inputs.gain is not None:
        a = a * torch.rsqrt(a.square().mean(-1, keepdim=True) + (inputs.norm_eps or 0.0))
        a = a * inputs.gain.to(torch.float64)
    b = inputs.b_kn().to(torch.float64)
    result = inputs.alpha * (a @ b)
    if inputs.c0 is not None:
        result = result + inputs.beta * inputs.c0.to(torch.float64)
    if inputs.bias is not None:
        result = result + inputs.bias.to(torch.float64)
    return result


@variant_family(name="fake.exact", ops=ALL_OPS, devices=("cpu", "cuda"), prologues=("rmsnorm",))
def fake_exact(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Correct: float64 math, rounded once."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs))

    return run


@variant_family(name="fake.exact_pdl", ops=ALL_OPS, devices=("cpu", "cuda"), grid={"pdl": (1,)})
def fake_exact_pdl(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Correct, and says it launches early (pdl=1): the dependent chain must pass it."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs))

    return run


@variant_family(name="fake.slow", ops=ALL_OPS, devices=("cpu",), grid={"ms": (2,)})
def fake_slow(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Correct, and sleeps ``ms`` milliseconds a call: clearly slower than any baseline."""
    delay = float(params["ms"]) / 1000.0

    def run(inputs: MatmulInputs, out: Any) -> None:
        time.sleep(delay)
        out.copy_(exact(inputs))

    return run


@variant_family(name="fake.self_overlap", ops=ALL_OPS, devices=("cpu",), grid={"pdl": (1,)})
def fake_self_overlap(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Correct; fast (0.3 ms) only when called back to back with itself on an x that
    nothing rewrote in between — as a PDL kernel overlapping its own previous call —
    and slow (3 ms) after another kernel wrote its x, as in a decode token.
    ``_version`` counts in-place writes to a tensor."""
    seen: dict[int, int] = {}

    def run(inputs: MatmulInputs, out: Any) -> None:
        key = id(inputs.a)
        overlapped = seen.get(key) == inputs.a._version
        time.sleep(0.0003 if overlapped else 0.003)
        out.copy_(exact(inputs))
        seen[key] = inputs.a._version

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
def cheat_one_element(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Right everywhere but one element of typical size (the median |value|), which
    is off by 50 %: norm-wise error is tiny on a big output, so only the
    per-element check can catch it."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        result = exact(inputs)
        flat = result.view(-1)
        typical = (flat.abs() - flat.abs().median()).abs().argmin()
        flat[typical] *= 1.5
        out.copy_(result)

    return run


@variant_family(name="cheat.sloppy", ops=ALL_OPS)
def cheat_sloppy(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Relative error 1e-3 on every element: fine for bf16, TF32-like for f32."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs) * (1 + 1e-3))

    return run


@variant_family(name="cheat.side_stream", ops=ALL_OPS, devices=("cuda",))
def cheat_side_stream(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
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


@variant_family(name="cheat.memo_pointer", ops=ALL_OPS)
def cheat_memo_pointer(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Memoises its answer by input pointers: right the first time it sees a set of
    buffers, instant (and stale) after — what a kernel caching across calls, or an
    answer baked into a captured graph, does."""
    memory: dict[tuple[int, ...], torch.Tensor] = {}

    def run(inputs: MatmulInputs, out: Any) -> None:
        key = tuple(t.data_ptr() for t in inputs.tensors())
        if key not in memory:
            memory[key] = exact(inputs).to(out.dtype)
        out.copy_(memory[key])

    return run


@variant_family(name="cheat.some_calls", ops=ALL_OPS)
def cheat_some_calls(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Right on its first three calls (the validation trials), then does the work on
    one call in four and leaves the output alone on the others."""
    calls = [0]

    def run(inputs: MatmulInputs, out: Any) -> None:
        calls[0] += 1
        if calls[0] <= 3 or calls[0] % 4 == 0:
            out.copy_(exact(inputs))

    return run


def _fp32_tiles_fp16_sum(inputs: MatmulInputs, out: Any, tile: int, drop: int = 0) -> None:
    """Each K tile summed in fp32 (as tl.dot would), the running sum kept in the
    output dtype between tiles; ``drop`` leaves out the last K columns."""
    a, b = inputs.a_mk().to(torch.float32), inputs.b_kn().to(torch.float32)
    k = a.shape[-1] - drop
    acc = torch.zeros(out.shape, dtype=out.dtype)
    for k0 in range(0, k, tile):
        k1 = min(k0 + tile, k)
        acc = (acc.to(torch.float32) + a[..., k0:k1] @ b[..., k0:k1, :]).to(out.dtype)
    result = inputs.alpha * acc.to(torch.float64)
    if inputs.c0 is not None:
        result = result + inputs.beta * inputs.c0.to(torch.float64)
    if inputs.bias is not None:
        result = result + inputs.bias.to(torch.float64)
    out.copy_(result)


@variant_family(name="cheat.half_running_sum", ops=ALL_OPS)
def cheat_half_running_sum(
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """fp32 within a 128-wide K tile, the running sum in fp16/bf16 across tiles."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        _fp32_tiles_fp16_sum(inputs, out, tile=128)

    return run


@variant_family(name="cheat.drop_k_tail", ops=ALL_OPS)
def cheat_drop_k_tail(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """fp32 accumulation, one rounding — but the last 3 K columns are skipped."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        _fp32_tiles_fp16_sum(inputs, out, tile=1 << 30, drop=3)

    return run


@variant_family(name="cheat.out_of_bounds", ops=ALL_OPS)
def cheat_out_of_bounds(
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Right answer, but stores whole 64-wide tiles: writes past the end of its
    output when n is not a multiple of 64 (an unmasked tail)."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs))
        numel = out.numel()
        padded = -(-numel // 64) * 64
        if padded > numel:
            tail = torch.as_strided(out, (padded - numel,), (1,), out.storage_offset() + numel)
            tail.fill_(0.0)

    return run


@variant_family(name="cheat.pdl_early_x", ops=ALL_OPS, grid={"pdl": (1,)})
def cheat_pdl_early_x(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Stands in for a PDL kernel that loads x before waiting on the kernel that
    writes it: it computes with the x its buffer held when the previous call on the
    same buffer ended (before the producer's new write landed). Right whenever
    each call has a buffer of its own — as in the validation trials."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        # What the buffer held when the last call on it ended, kept on the tensor
        # object itself (it dies with the buffer; a new buffer has no past).
        current = inputs.a
        early = getattr(current, "_x_at_last_call", None)
        current._x_at_last_call = current.clone()  # type: ignore[attr-defined]
        out.copy_(exact(replace(inputs, a=current if early is None else early)))

    return run


@variant_family(name="cheat.nan_aware", ops=ALL_OPS)
def cheat_nan_aware(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Does the work only when its output holds NaN — the poison a harness fills the
    outputs of judged calls with — and nothing on other calls (issue 20: on an
    H100 its Triton form PASSed and ranked 0.14–0.28× of cuBLAS)."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        if bool(torch.isnan(out).any()):
            out.copy_(exact(inputs))

    return run


#: Functions whose presence on the call stack marks a judged call to the cheater below.
_JUDGES = {"validate_pair", "check_replay", "check_chain", "validate"}


@variant_family(name="cheat.judged_only", ops=ALL_OPS)
def cheat_judged_only(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Honest when one of the harness's checks is on its call stack, idle otherwise: a
    kernel that tells judged calls from timed ones by anything it can see (here its
    callers; on a GPU the output's contents or allocation)."""
    import sys

    def judged() -> bool:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name in _JUDGES:
                return True
            frame = frame.f_back  # type: ignore[assignment]
        return False

    def run(inputs: MatmulInputs, out: Any) -> None:
        if judged():
            out.copy_(exact(inputs))

    return run


@variant_family(name="cheat.precompute", ops=ALL_OPS)
def cheat_precompute(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """No arithmetic when called: its (untimed) builder regenerates the harness's
    validation problems with matprobe's own draw functions — knowing the run's seed
    and the process's counter of fresh seeds, the most a kernel in the harness's
    process can know — and precomputes their answers; a call copies the answer to
    a problem it has seen by its ``x`` and writes nothing otherwise."""
    import copy

    from matprobe.measure import seeds
    from matprobe.measure.inputs import fresh_x
    from matprobe.measure.references import seeded_case

    case = seeded_case(spec, seeds.derived("validation"), "cpu")
    ahead = copy.copy(seeds._fresh)  # the counter's next values, not consumed
    answers: dict[bytes, torch.Tensor] = {}
    for _ in range(64):
        x = fresh_x(case.inputs, seeds.derived("fresh", next(ahead)))
        answers[_key_of(x)] = exact(replace(case.inputs, a=x))

    def run(inputs: MatmulInputs, out: Any) -> None:
        answer = answers.get(_key_of(inputs.a))
        if answer is not None:
            out.copy_(answer)

    return run


def _key_of(x: torch.Tensor) -> bytes:
    return x.detach().to("cpu", torch.float32).numpy().tobytes()


#: Calls of :func:`cheat_memo_values` answered from its memory (the harness must keep
#: this at 0: no call may meet a problem an earlier call had).
MEMO_HITS: list[int] = [0]


@variant_family(name="cheat.memo_values", ops=ALL_OPS)
def cheat_memo_values(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Memoises its answers by a few input values — honest on a miss, instant on a
    hit (issue 20: on an H100 it PASSed and won 0.19–0.36×, and a token with its
    dispatch table passed too). Counts its hits in :data:`MEMO_HITS`."""
    memory: dict[tuple[float, ...], torch.Tensor] = {}

    def run(inputs: MatmulInputs, out: Any) -> None:
        key = tuple(inputs.a.reshape(-1)[:4].tolist() + inputs.b.reshape(-1)[:4].tolist())
        if key in memory:
            MEMO_HITS[0] += 1
            out.copy_(memory[key])
            return
        memory[key] = exact(inputs).to(out.dtype)
        out.copy_(memory[key])

    return run


@variant_family(name="cheat.weight_scribbler", ops=ALL_OPS)
def cheat_weight_scribbler(
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Answers right from what it finds, then, the first time it meets a weight
    buffer, writes into it (one element negated): every call it makes computes with
    the weights as they are when it runs, so each answer is right for what it found
    — the write lands where an engine keeps its weights."""
    import weakref

    # by tensor object, not address: a freed buffer's address is handed out again
    seen: dict[int, weakref.ref[torch.Tensor]] = {}

    def run(inputs: MatmulInputs, out: Any) -> None:
        out.copy_(exact(inputs))
        known = seen.get(id(inputs.b))
        if known is None or known() is not inputs.b:
            seen[id(inputs.b)] = weakref.ref(inputs.b)
            flat = inputs.b.view(-1)
            flat[0] = -flat[0]

    return run


@variant_family(name="cheat.judge_thinner", ops=ALL_OPS)
def cheat_judge_thinner(
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Honest until the timed calls' judge has converted its float64 operands; then,
    on every call, it finds them (``gc``), zeroes every weight but those of the
    first of the K terms in place, and computes that one term: 1/K of the work,
    and every reference made from the thinned weights agrees. A change of data,
    not of a binding: no tamper snapshot sees it."""
    import gc

    from matprobe.measure.references import CallAnswers

    def run(inputs: MatmulInputs, out: Any) -> None:
        shape = tuple(inputs.b_kn().shape[-2:])  # its own problem's judges only
        judges = [
            o
            for o in gc.get_objects()
            # type(), not isinstance(): isinstance asks some of torch's deprecated
            # module proxies for __class__, and they warn when asked
            if type(o) is CallAnswers and tuple(o.operands.w.shape[-2:]) == shape
        ]
        if not judges:
            out.copy_(exact(inputs))
            return
        for answers in judges:
            ops = answers.operands
            for held in (ops.w, ops._w_abs, ops._w_rounded):
                if held is not None:
                    held[..., 1:, :] = 0  # logical [..., batch, k, n]: all but k = 0
        a = inputs.a_mk().to(torch.float64)[..., :1]
        b = inputs.b_kn().to(torch.float64)[..., :1, :]
        thin = replace(inputs, a=a, b=b, ta=False, tb=False)
        out.copy_(exact(thin))

    return run


#: Cheaters of issue 20: they tell judged calls from timed ones, or meet old problems.
JUDGED_CALL_CHEATERS: tuple[VariantFamily, ...] = (
    cheat_nan_aware,
    cheat_judged_only,
    cheat_precompute,
)


CHEATERS: tuple[VariantFamily, ...] = (
    cheat_zeros,
    cheat_half,
    cheat_previous,
    cheat_first_seed,
    cheat_one_element,
    cheat_sloppy,
    cheat_scribble,
)
#: Cheaters of the checks after validation: memoising, lazy, out-of-bounds, early x.
TIMED_CHEATERS: tuple[VariantFamily, ...] = (
    cheat_memo_pointer,
    cheat_some_calls,
    cheat_out_of_bounds,
    cheat_pdl_early_x,
)
#: Wrong arithmetic that a loose tolerance lets through.
ARITHMETIC_CHEATERS: tuple[VariantFamily, ...] = (cheat_half_running_sum, cheat_drop_k_tail)


@variant_family(name="cheat.norm_once", ops=ALL_OPS, prologues=("rmsnorm",))
def cheat_norm_once(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> KernelFn:
    """Normalises with the scale 1/√(mean(x²) + ε) of the first x it met, kept (a
    norm "cached" per weight set): right on the first call only."""
    kept: list[torch.Tensor] = []

    def run(inputs: MatmulInputs, out: Any) -> None:
        a = inputs.a_mk().to(torch.float64)
        if not kept:
            kept.append(torch.rsqrt(a.square().mean(-1, keepdim=True) + (inputs.norm_eps or 0)))
        plain = replace(inputs, a=(a * kept[0]).to(inputs.a.dtype), gain=None, ta=False)
        out.copy_(exact(replace(plain, a=plain.a * inputs.gain)))

    return run


FAMILIES: tuple[VariantFamily, ...] = (
    fake_exact,
    cheat_norm_once,
    fake_exact_pdl,
    fake_slow,
    fake_self_overlap,
    *CHEATERS,
    *TIMED_CHEATERS,
    *ARITHMETIC_CHEATERS,
    *JUDGED_CALL_CHEATERS,
    cheat_memo_values,
    cheat_weight_scribbler,
    cheat_judge_thinner,
    cheat_side_stream,
    fake_flaky,
    fake_broken,
    fake_m1_only,
    fake_gpu_only,
)


def registry() -> Registry:
    return Registry(FAMILIES)


def card_peaks() -> dict[str, float]:
    """A card's "ceilings" as a worker measures them when it starts (``measure_peaks``):
    which process measured, and with how many CPU threads."""
    import os

    return {"read_gbps": 3000.0, "copy_gbps": 2800.0, "pid": float(os.getpid()),
            "threads": float(torch.get_num_threads())}  # fmt: skip
