"""Where every drawn value of a run comes from: one run seed, taken from the
operating system when the run starts (stored with the run; ``run --seed N``
replays it exactly).

Why not fixed seeds: a kernel's builder runs before it is timed, in the same
process, and may call matprobe's own draw functions. With fixed seeds it could
regenerate the validation and timing inputs and precompute every answer, and
answers saved by one run would replay in the next. Every draw of a process is
derived from the run seed, each under its own purpose (:func:`derived`), and
the draws made while a pair is measured — each use of a timing bench, each
replay check's refill — take :func:`fresh_seed`, a counter no two draws of a
process share. The values written *into* the timed calls (each call's ``x``
and the fill of its output) come from the device's generator inside the
recording (:mod:`matprobe.measure.bench`): new on every replay.

This is defence in depth, not isolation: code in the same process can read the
seed. What keeps a memoised or precomputed answer from winning is that every
timed call's output is judged against the problem it was actually given.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets

#: Largest seed: 63 bits (a non-negative int64 everywhere it travels: SQLite, JSON, torch).
SEED_BITS = 63

_run_seed: int | None = None
_fresh = itertools.count()


def new_run_seed() -> int:
    """A seed from the operating system's entropy source."""
    return secrets.randbits(SEED_BITS)


def check_seed(seed: int) -> int:
    """``seed`` if it is one a run can use, else ValueError (the CLI's message)."""
    if not 0 <= seed < 1 << SEED_BITS:
        raise ValueError(f"a seed is an integer from 0 to 2^{SEED_BITS} - 1, not {seed}")
    return seed


def use_run_seed(seed: int | None) -> None:
    """Make ``seed`` this process's run seed (None: keep the one in use, or take one
    from the OS — code that measures outside a run); the device generators are
    seeded from it. Calling it again with the current seed changes nothing, so a
    worker can call it per pair."""
    if _run_seed is not None and seed in (None, _run_seed):
        return
    restart(new_run_seed() if seed is None else seed)


def restart(seed: int) -> None:
    """Start this process's draws again under ``seed``, as at the start of a run
    (tests: the same values whatever ran before)."""
    global _run_seed, _fresh
    _run_seed = check_seed(seed)
    _fresh = itertools.count()
    import torch

    torch.manual_seed(derived("torch"))  # every device's default generator


def run_seed() -> int:
    """This process's run seed (one from the OS the first time, if none was set)."""
    if _run_seed is None:
        use_run_seed(None)
    assert _run_seed is not None
    return _run_seed


def derived(purpose: str, *parts: int) -> int:
    """A seed for ``purpose`` (and ``parts``, e.g. a trial's number) under the run seed:
    the same in every process of the run, unrelated across purposes and runs."""
    text = f"{run_seed()}\0{purpose}\0" + "\0".join(str(p) for p in parts)
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") >> (64 - SEED_BITS)


def fresh_seed() -> int:
    """A seed no earlier call of this process returned (under this run seed)."""
    return derived("fresh", next(_fresh))
