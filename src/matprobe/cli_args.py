"""Argument types every subcommand shares (kept apart from ``cli.py``, which
imports the subcommand modules)."""

from __future__ import annotations

import argparse


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive(text: str) -> int:
    """A whole number of at least 1: one message for every value below (``--context
    -4`` and ``--context 0`` alike), naming the limit and the value given."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seed(text: str) -> int:
    """A run seed (``run --seed``): a whole number in the range seeds are drawn from."""
    from matprobe.harness.seeds import check_seed

    try:
        return check_seed(int(text))
    except ValueError as exc:
        message = (
            str(exc)
            if text.strip().lstrip("-").isdigit()
            else f"expected a whole number, got {text!r}"
        )
        raise argparse.ArgumentTypeError(message) from None


#: ``--wide``, for every command that prints a run's report.
WIDE_HELP = (
    "every column and every note in place (default: the text report fits 100 columns, "
    "leaving out empty columns, then the least telling, and says which)"
)
