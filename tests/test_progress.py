"""The progress bar: an ETA on a terminal, nothing in a pipe or a log."""

from __future__ import annotations

import io

import pytest

from matprobe.report import progress as progress_mod
from matprobe.report.progress import (
    NoProgress,
    PairProgress,
    TerminalProgress,
    progress_bar,
    run_progress,
)
from matprobe.run.runner import Progress
from stored_runs import HOSTILE

tqdm = pytest.importorskip("tqdm", reason="the bar is tqdm's (in the gpu extra)")


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_no_bar_where_nobody_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(progress_bar(io.StringIO()), NoProgress)  # a pipe, a file, a log
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(progress_bar(Terminal()), NoProgress)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(progress_mod, "_tqdm_class", lambda: None)  # tqdm not installed
    assert isinstance(progress_bar(Terminal()), NoProgress)


def test_the_bar_counts_to_the_end_with_an_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm")
    assert isinstance(progress_bar(Terminal()), TerminalProgress)
    stream = Terminal()
    bar = TerminalProgress(stream, tqdm.tqdm, min_interval_s=0)  # every step drawn
    bar.start(3)
    bar.working_on("spec 1")
    for label in ("a", "b", HOSTILE):
        bar.advance(label)
    shown = stream.getvalue()
    bar.close()
    assert "3/3" in shown and "<00:00" in shown  # done/total and the time left
    assert "\x1b[2J" not in shown and "\\x1b[2J" in shown  # a name cannot clear the screen


def test_the_no_op_bar_says_nothing() -> None:
    bar = NoProgress()
    bar.start(2)
    bar.working_on("x")
    bar.advance("x")
    bar.close()


def test_the_run_loop_gets_a_bar_on_a_terminal_and_lines_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    plain = run_progress(4, io.StringIO())
    assert type(plain) is Progress  # the loop's own "N/M pairs done" lines for logs
    stream = Terminal()
    live = run_progress(4, stream)
    assert isinstance(live, PairProgress)
    for _ in range(4):
        live.advance()
    live.close()
    assert live.done == 4 and "0/4" in stream.getvalue()  # drawn at the start


def test_a_terminal_without_a_bar_gets_the_plain_lines_not_a_second_display(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One live display (tqdm's bar): a dumb terminal gets the log's lines, never a
    line redrawn with carriage returns."""
    monkeypatch.setenv("TERM", "dumb")
    stream = Terminal()
    progress = run_progress(3, stream)
    assert type(progress) is Progress
    for _ in range(3):
        progress.show(None, None)  # type: ignore[arg-type]  # nothing drawn for a pair
        progress.advance()
    progress.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines[-1].startswith("matprobe: 3/3 pairs done")
