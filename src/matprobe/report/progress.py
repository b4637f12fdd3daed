"""A progress bar with an ETA for long work (``run``, ``token``), on stderr.

Only on a terminal: a bar drawn into a log or a pipe is noise (tqdm's carriage
returns), so :func:`progress_bar` gives :class:`NoProgress` — which does
nothing — when the stream is not a TTY, when ``TERM=dumb``, or when tqdm (in
the ``gpu`` extra with the harness) is not installed. Labels are names from a
profile or a manifest: they are shown through :func:`~matprobe.safetext.term_safe`,
so an ESC in a name cannot drive the terminal.

:class:`PairProgress` adapts a bar to the run loop's
:class:`~matprobe.run.runner.Progress` (``show`` a pair starting, ``advance``
when it ends); :func:`run_progress` picks it on a terminal and keeps the loop's
plain "N/M pairs done" lines elsewhere (logs, CI).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Protocol, TextIO

from matprobe.measure.variants import Variant
from matprobe.run.runner import Progress
from matprobe.safetext import term_safe
from matprobe.spec import MatmulSpec

#: Longest label shown beside the bar (a terminal line has room for little else).
LABEL_CHARS = 60


class ProgressBar(Protocol):
    def start(self, total: int) -> None: ...

    def working_on(self, label: str) -> None:
        """Show what is running now (the step that the next :meth:`advance` ends)."""

    def advance(self, label: str = "") -> None:
        """One step done; ``label`` names it (or what runs next)."""

    def close(self) -> None: ...


class NoProgress:
    """The progress bar where none is wanted: every call does nothing."""

    def start(self, total: int) -> None:
        return None

    def working_on(self, label: str) -> None:
        return None

    def advance(self, label: str = "") -> None:
        return None

    def close(self) -> None:
        return None


def _short(label: str) -> str:
    label = term_safe(label)
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


class TerminalProgress:
    """tqdm's bar: done/total, elapsed, ETA and rate, and the current label."""

    def __init__(
        self, stream: TextIO, tqdm: Any, unit: str = "pair", min_interval_s: float = 0.1
    ) -> None:
        self._stream = stream
        self._tqdm = tqdm
        self._unit = unit
        self._min_interval_s = min_interval_s  # redraws at most this often
        self._bar: Any = None

    def start(self, total: int) -> None:
        self.close()
        self._bar = self._tqdm(
            total=total,
            file=self._stream,
            unit=self._unit,
            dynamic_ncols=True,
            # Steps differ a lot (an interpreted family vs a cached baseline): a
            # slowly moving average gives a steadier ETA than the last step's rate.
            smoothing=0.05,
            mininterval=self._min_interval_s,
            leave=False,  # the finished bar makes way for the report
        )

    def working_on(self, label: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(_short(label), refresh=True)

    def advance(self, label: str = "") -> None:
        if self._bar is None:
            return
        if label:
            self._bar.set_postfix_str(_short(label), refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _tqdm_class() -> Any:
    try:
        return importlib.import_module("tqdm").tqdm
    except ImportError:
        return None


def progress_bar(stream: TextIO | None = None, *, unit: str = "pair") -> ProgressBar:
    """A bar on ``stream`` (default stderr) when it is a terminal, else :class:`NoProgress`."""
    stream = stream if stream is not None else sys.stderr
    tqdm = _tqdm_class()
    if tqdm is None or os.environ.get("TERM") == "dumb" or not _isatty(stream):
        return NoProgress()
    return TerminalProgress(stream, tqdm, unit)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def pair_label(spec: MatmulSpec, variant: Variant) -> str:
    return f"{spec.kind} b={spec.batch} n={spec.n_total} k={spec.k} {variant.id}"


class PairProgress(Progress):
    """The run loop's :class:`~matprobe.run.runner.Progress` drawn as a bar."""

    def __init__(self, total: int, bar: ProgressBar, stream: TextIO | None = None) -> None:
        super().__init__(total, stream)
        self._bar = bar
        self._bar.start(total)

    def show(self, spec: MatmulSpec, variant: Variant) -> None:
        self._bar.working_on(pair_label(spec, variant))

    def advance(self) -> None:
        self.done += 1
        self._bar.advance()

    def close(self) -> None:
        self._bar.close()


def run_progress(total: int, stream: TextIO | None = None) -> Progress:
    """What the run loop reports progress to: a bar with an ETA on a terminal; the
    loop's plain "N/M pairs done, ETA" lines at each tenth otherwise (logs, CI)."""
    bar = progress_bar(stream)
    if isinstance(bar, NoProgress):
        return Progress(total, stream)
    return PairProgress(total, bar, stream)
