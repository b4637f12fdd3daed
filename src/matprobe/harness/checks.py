"""Checks that run after validation, on what was actually timed.

* :func:`check_replay` — after timing, every input set is refilled *in place*
  with new values, every per-call output is poisoned, the timed recording is
  replayed once, and every call's output is compared with the float64 answer to
  the new problem. A kernel that memoised its answer by input pointer (during
  capture or across calls), that does real work only on some calls, or that
  enqueues its work outside the recorded stream fails here.
* :func:`check_chain` — for kernels that launch early (programmatic dependent
  launch): a chain of dependent calls, each output feeding the next call's
  ``x``, intermediates poisoned with NaN before each replay. A kernel that reads
  ``x`` before waiting on the kernel that writes it computes with the poison.
* Guard zones around every output (:class:`~matprobe.harness.inputs.GuardedOutputs`)
  are checked after each of these and after each validation trial.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from matprobe.harness.inputs import (
    GuardedOutputs,
    MatmulInputs,
    copy_all,
    make_input_sets,
    references,
    refill_sets,
    shapes,
)
from matprobe.harness.sampling import producer_sources
from matprobe.harness.validate import compare_many, spec_tolerance
from matprobe.spec import MatmulSpec

#: Seed of the dependent chain's weights (the replay check's refills take fresh
#: seeds: :func:`matprobe.harness.bench.fresh_seed`).
CHAIN_SEED = 9500
#: Dependent calls in a chain, and replays of it (each replay re-poisoned).
CHAIN_LINKS = 24
CHAIN_REPLAYS = 20


def _judge_calls(
    spec: MatmulSpec,
    outs: Sequence[Any],
    answers: Sequence[tuple[Any, Any]],
    activation_quant: str | None = None,
) -> tuple[str, str] | None:
    """(\"call i\", what is wrong) for the first call whose output fails, else None;
    ``activation_quant``: the family's declaration (see ``validate.spec_tolerance``)."""
    import torch

    assert spec.k is not None
    tolerances = spec_tolerance(spec, activation_quant=activation_quant)
    figures = compare_many(
        torch.stack(list(outs)),
        torch.stack([ref for ref, _ in answers]),
        torch.stack([scale for _, scale in answers]),
        spec.k,
    )
    for i, figure in enumerate(figures):
        if problem := figure.failure(*tolerances):
            return f"call {i + 1}", problem
    return None


def check_replay(
    spec: MatmulSpec,
    recorder: Any,
    recording: Any,
    sets: Sequence[MatmulInputs],
    sources: Sequence[Any],
    outputs: GuardedOutputs,
    calls: int,
    where: str,
    *,
    seed: int,
    activation_quant: str | None = None,
) -> str | None:
    """Refill (from ``seed``: values the recording was never made on), poison, replay
    once, check every call's output and the guards. ``sources`` are the producer's
    sources (``−a`` per set), refilled to match; ``activation_quant``: the family's
    declaration (see ``validate.spec_tolerance``)."""
    refill_sets(sets, spec, seed)
    copy_all(sources, producer_sources(sets))
    outputs.poison()
    recorder.sync()
    recorder.replay(recording)
    recorder.sync()
    answers = references(sets, where)
    problem = _judge_calls(
        spec,
        [outputs.views[i] for i in range(calls)],
        [answers[i % len(sets)] for i in range(calls)],
        activation_quant,
    )
    if problem:
        return f"{problem[0]}/{calls} of the timed replay, on refilled inputs: {problem[1]}"
    return outputs.breach()


def chain_reason(spec: MatmulSpec) -> str | None:
    """None when calls of ``spec`` can be chained (output i → x of call i + 1)."""
    if spec.batch != 1 or spec.m != 1 or spec.tA:
        return "a dependent chain needs batch = 1, m = 1 and x not transposed"
    return None


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
    replayed ``replays`` times with every intermediate poisoned first. Each call is
    judged on the input it actually found, so one bad link does not blame the next.
    """
    import torch

    if (reason := chain_reason(spec)) is not None:
        return reason
    n, k = spec.n_total, spec.k
    assert n is not None and k is not None
    (base,) = make_input_sets(spec, CHAIN_SEED, 1, where)
    # Weights scaled by √3 so the chain neither fades nor grows: inputs.py draws w
    # uniform in ±1/√K (E[w²] = 1/(3K)); times √3, Var(y) = K·E[w²]·Var(x) = Var(x).
    weights = (base.b.to(torch.float32) * math.sqrt(3.0)).to(base.b.dtype)
    width = max(n, k)
    chain = torch.empty((links + 1, width), dtype=base.a.dtype, device=where)
    chain[0].uniform_(-1.0, 1.0)
    chain[1:].uniform_(-1.0, 1.0)  # the tails (k > n) keep these values
    links_in: list[MatmulInputs] = []
    out_shape = shapes(spec)["out"]
    for i in range(links):
        x = chain[i, :k].view(1, 1, k)
        links_in.append(
            MatmulInputs(
                x, weights, base.bias, base.c0, base.alpha, base.beta, ta=False, tb=bool(spec.tB)
            )
        )
    outs = [chain[i + 1, :n].view(out_shape) for i in range(links)]

    def link(i: int) -> Any:
        return lambda: fn(links_in[i], outs[i])

    recording = recorder.record([link(i) for i in range(links)], 1)
    for replay in range(replays):
        # A new x₀ each replay changes every link's input, so a value read too early
        # (left over from the previous replay) is a wrong value, not a lucky one.
        chain[0].uniform_(-1.0, 1.0)
        chain[1:, :n].fill_(float("nan"))
        recorder.sync()
        recorder.replay(recording)
        recorder.sync()
        problem = _judge_calls(
            spec,
            outs,
            references(links_in, where),
            activation_quant,
        )
        if problem:
            return (
                f"dependent chain (each output feeds the next call's x): {problem[0]}/"
                f"{links} of replay {replay + 1}/{replays}: {problem[1]}"
            )
    return None
