"""Entry points: :func:`generate` (lines and truth), :func:`iter_lines` (streamed)
and :func:`write_profile` (exactly N events to a file, constant memory)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Final

from matprobe.profile.synth.broken import broken_plan, write_broken
from matprobe.profile.synth.emitter import _Emitter
from matprobe.profile.synth.model import SynthConfig, SynthError, Truth
from matprobe.profile.synth.shapes import _attention_matmuls


def _batches(config: SynthConfig, truth: Truth | None) -> Iterator[tuple[list[str], list[int]]]:
    """Lines in batches (one per block), each with the positions of its non-event lines.

    The batch lists are reused: a consumer must be done with one before asking
    for the next.
    """
    config.validate()
    e = _Emitter(config, truth)
    out, invalid = e.out, e.invalid
    plan = broken_plan(config)
    e.header()
    for _ in range(config.prompt_tokens):
        e.prompt_token()
    slot = 0
    for t in range(config.tokens):
        context = config.prompt_tokens + t + 1
        scores, values = _attention_matmuls(context)
        e.token_start(t)
        forward = 0
        for b in range(config.layers):
            forward += e.layer(t, b, context, scores, values)
            for kind in plan.get(slot, ()):
                write_broken(e, kind)
            slot += 1
            yield out, invalid
            out.clear()
            invalid.clear()
        e.token_end(t, forward)
    if config.tokens == 0:  # no block slots: the plan put every kind in slot 0
        for kind in plan.get(0, ()):
            write_broken(e, kind)
    if config.broken:
        write_broken(e, "blank")  # a trailing blank line, as editors leave them
    yield out, invalid


def generate(config: SynthConfig) -> tuple[list[str], Truth]:
    """All lines (no trailing newlines) and what an analyzer must find in them."""
    truth = Truth()
    lines = [text for batch, _ in _batches(config, truth) for text in batch]
    return lines, truth


def iter_lines(config: SynthConfig) -> Iterator[str]:
    """The same lines as :func:`generate`, streamed, without the truth."""
    for batch, _ in _batches(config, None):
        yield from batch


#: Fewest valid events one decoder block always emits (legacy off): a lower bound
#: used to pick enough tokens for :func:`write_profile`.
_MIN_EVENTS_PER_LAYER: Final = 28


def write_profile(
    path: str | os.PathLike[str],
    *,
    events: int,
    seed: int = 0,
    broken: bool = False,
    layers: int = 24,
) -> int:
    """Write exactly ``events`` valid events (plus any broken lines) to ``path``.

    Runs a ``layers``-block decode (legacy matmuls on, 4 prompt tokens) long
    enough to reach ``events`` and stops there, mid-token if need be. Streams
    in constant memory. Returns the number of valid events written.
    """
    if events < 0:
        raise SynthError(f"events must be >= 0, got {events}")
    tokens = -(-events // (max(layers, 1) * _MIN_EVENTS_PER_LAYER)) + 1
    config = SynthConfig(
        tokens=tokens, layers=layers, seed=seed, broken=broken, legacy=True, prompt_tokens=4
    )
    config.validate()
    written = 0
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        if events == 0:
            return 0
        for batch, invalid in _batches(config, None):
            valid = len(batch) - len(invalid)
            if written + valid < events:
                written += valid
                handle.write("\n".join(batch))
                handle.write("\n")
                continue
            skip = set(invalid)
            for index, text in enumerate(batch):
                handle.write(text)
                handle.write("\n")
                if index not in skip:
                    written += 1
                    if written == events:
                        break
            break
    if written != events:  # pragma: no cover - the token bound guarantees enough
        raise AssertionError(f"generated only {written} of {events} events")
    return written
