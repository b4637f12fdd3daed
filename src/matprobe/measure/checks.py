"""Checks that run besides the timed rounds, on what was actually timed.

* :func:`check_replay` — after timing, every input set's weights are refilled
  *in place* with new values and the timed recording is replayed once (its
  calls' ``x`` and outputs are fresh anyway: :mod:`matprobe.measure.bench`);
  every call's output is judged. A kernel that memoised or baked in something
  derived from the weights fails here.
* :func:`check_chain` — a chain of dependent calls, each output feeding the next
  call's ``x``, intermediates filled with fresh values before each replay. A
  kernel that reads ``x`` before waiting on the kernel that writes it (early
  launch) computes with the fill. Run for every variant on a card that can
  launch early (:func:`runs_chain`), declared or not.
* Guard zones around every output (:class:`~matprobe.measure.inputs.GuardedOutputs`)
  are checked after each of these and after each validation trial.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from matprobe.measure.bench import Bench
from matprobe.measure.device import DeviceInfo
from matprobe.measure.inputs import MatmulInputs, make_input_sets, shapes, torch_float64
from matprobe.measure.outputs import GuardedOutputs
from matprobe.measure.references import Operands64, declared_x
from matprobe.measure.seeds import fresh_seed
from matprobe.measure.validate import Verdicts, spec_tolerance
from matprobe.spec import MatmulSpec

#: Dependent calls in a chain, and replays of it (each replay filled afresh).
CHAIN_LINKS = 24
CHAIN_REPLAYS = 20


def check_replay(
    bench: Bench,
    recorder: Any,
    recording: Any,
    outputs: GuardedOutputs,
    *,
    activation_quant: str | None = None,
) -> str | None:
    """Refill the bench's sets (values the recording was never made on), replay
    once, judge every call's output and the guards; ``activation_quant``: the
    family's declaration (see ``inputs.declared_x``)."""
    bench.refill()
    recorder.sync()
    recorder.replay(recording)
    recorder.sync()
    problem = bench.judge(outputs, activation_quant=activation_quant)
    return f"the timed replay on refilled weights, {problem}" if problem else None


def chain_reason(spec: MatmulSpec) -> str | None:
    """None when calls of ``spec`` can be chained (output i → x of call i + 1)."""
    if spec.batch != 1 or spec.m != 1 or spec.tA:
        return "a dependent chain needs batch = 1, m = 1 and x not transposed"
    if spec.is_swiglu:
        # silu(g)·u of O(1) inputs shrinks each link (≈ g·u/2): a chain of them
        # fades to fp16's subnormals, where nothing is judged.
        return "a dependent chain of SwiGLU calls fades to zero"
    return None


def runs_chain(spec: MatmulSpec, device: DeviceInfo, declared: bool) -> bool:
    """Whether a variant gets the dependent-chain check: one that declares early
    launch always (it fails where the spec cannot be chained: its overlap is
    unchecked there); on a card that can launch early (CUDA, compute capability 9.0
    and up) every other variant too, wherever the spec can be chained — a kernel's
    parameters saying nothing about early launch prove nothing."""
    return declared or (device.early_launch and chain_reason(spec) is None)


def check_chain(
    spec: MatmulSpec,
    fn: Any,
    recorder: Any,
    where: str,
    links: int = CHAIN_LINKS,
    replays: int = CHAIN_REPLAYS,
    *,
    activation_quant: str | None = None,
) -> str | None:
    """``links`` dependent calls recorded once: call i reads ``x`` from the buffer call
    i − 1 wrote (its first min(n, k) elements; when k > n the rest are fixed values),
    replayed ``replays`` times with every intermediate filled afresh first. Each call
    is judged on the input it actually found, so one bad link does not blame the next.
    """
    import torch

    if (reason := chain_reason(spec)) is not None:
        return reason
    n, k = spec.n_total, spec.k
    assert n is not None and k is not None
    (base,) = make_input_sets(spec, fresh_seed(), 1, where)
    # Weights scaled by √3 so the chain neither fades nor grows: inputs.py draws w
    # uniform in ±1/√K (E[w²] = 1/(3K)); times √3, Var(y) = K·E[w²]·Var(x) = Var(x).
    # (Q8_0: the blocks' scales carry the factor; the quants stay as drawn.)
    weights, scales = base.b, base.scales
    if scales is None:
        weights = (weights.to(torch.float32) * math.sqrt(3.0)).to(weights.dtype)
    else:
        scales = (scales.to(torch.float32) * math.sqrt(3.0)).to(scales.dtype)
    width = max(n, k)
    chain = torch.empty((links + 1, width), dtype=base.a.dtype, device=where)
    chain.uniform_(-1.0, 1.0)  # the tails (k > n) keep these values
    links_in: list[MatmulInputs] = []
    out_shape = shapes(spec)["out"]
    for i in range(links):
        x = chain[i, :k].view(1, 1, k)
        links_in.append(
            MatmulInputs(
                x, weights, base.bias, base.c0, base.alpha, base.beta, ta=False, tb=bool(spec.tB),
                scales=scales, gain=base.gain, norm_eps=base.norm_eps,
            )
        )  # fmt: skip
    outs = [chain[i + 1, :n].view(out_shape) for i in range(links)]
    # Every link has the same weights: converted to float64 once for all replays.
    operands = Operands64.of(links_in[0], where)

    def link(i: int) -> Any:
        return lambda: fn(links_in[i], outs[i])

    def fresh() -> None:
        # A new x₀ each replay changes every link's input, and fresh values in every
        # intermediate: a value read too early is a wrong value, not a lucky one.
        # Inside the recording (the device's generator): new on every replay.
        chain.uniform_(-1.0, 1.0)

    recording = recorder.record([fresh, *(link(i) for i in range(links))], 1)
    for replay in range(replays):
        recorder.sync()
        recorder.replay(recording)
        recorder.sync()
        x = declared_x(chain[:links, :k].to(torch_float64()).view(links, 1, 1, k), activation_quant)
        problem = _judge_calls(
            spec, outs, operands.answer(x), operands.scale(x), operands.rounded_answer(x)
        )
        if problem:
            return (
                f"dependent chain (each output feeds the next call's x): {problem[0]}/"
                f"{links} of replay {replay + 1}/{replays}: {problem[1]}"
            )
    return None


def _judge_calls(
    spec: MatmulSpec, outs: Sequence[Any], answers: Any, scales: Any, rounded: Any | None
) -> tuple[str, str] | None:
    """(\"call i\", what is wrong) for the first call whose output fails, else None;
    ``rounded``: Q8_0's answers from fp16-rounded weights (``validate``'s module doc)."""
    import torch

    assert spec.k is not None
    tolerances = spec_tolerance(spec)
    outputs = torch.stack(list(outs))
    failed = Verdicts(outputs, answers, scales, spec.k, *tolerances, rounded=rounded).describe()
    return None if failed is None else (f"call {failed[0] + 1}", failed[1])
