"""Argument types and options every subcommand shares: numbers, seeds, ``--wide``,
where specs come from (a profile or ``--model``), ``--plugin``."""

from __future__ import annotations

import argparse

from matprobe.spec import DTYPES


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def non_negative(text: str) -> int:
    value = _whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive(text: str) -> int:
    """A whole number of at least 1: one message for every value below (``--context
    -4`` and ``--context 0`` alike), naming the limit and the value given."""
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seed(text: str) -> int:
    """A run seed (``run --seed``): a whole number in the range seeds are drawn from."""
    from matprobe.measure.seeds import check_seed

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


def _add_spec_source(p: argparse.ArgumentParser) -> None:
    """Where specs come from: a profile (default: the built-in one) or a model config."""
    p.add_argument(
        "profile",
        metavar="PROFILE",
        nargs="?",
        help="JSONL profile or text summary (default: the built-in profile)",
    )
    p.add_argument(
        "--model",
        metavar="NAME",
        help="one decode step of a model config instead ('--model list' names them)",
    )
    p.add_argument(
        "--context",
        type=positive,
        default=128,
        metavar="L",
        help="attention context length for --model (default 128)",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        help="weight format for --model (default f16), or the dtype of profile "
        "specs that do not state one",
    )
    p.add_argument(
        "--layer",
        action="store_true",
        help="--model: the decode layer's fused sites (RMSNorm folded into QKV, gate/up "
        "with SwiGLU and the LM head; the residual add into o_proj and down)",
    )


def _add_store(
    p: argparse.ArgumentParser, what: str = "result store", names: tuple[str, ...] = ("--db",)
) -> None:
    """The result store's option, ``--db FILE``: ``what`` says what the command does
    with the store, ``names`` are the flags it goes by (the first names the
    attribute). The default it states, ``matprobe.run.store.default_store_path``'s,
    is written here once."""
    p.add_argument(
        *names,
        metavar="FILE",
        help=f"{what} (default $MATPROBE_DB or ~/.cache/matprobe/results.sqlite)",
    )


def _add_plugin(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        help="also the variant families of this module (its FAMILIES), importable "
        "from the current directory or sys.path; repeatable (a manifest may list "
        "them too: plugins = [...])",
    )
