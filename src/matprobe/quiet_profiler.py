"""PyTorch's profiler without its start and stop lines on stderr.

Kineto, the profiler's C++ side, writes ``USDT:… profiler_start`` and
``STAGE:… Completed Stage: Warm Up`` lines straight to file descriptor 2 each
time a profile starts and stops — at no log level that ``KINETO_LOG_LEVEL``
turns off. ``token`` and the kernel clock profile often, so those lines buried
their own messages. :func:`quiet_profile` points descriptor 2 at a temporary
file while the profiler starts and stops, and writes back every line it caught
but Kineto's own (a warning raised meanwhile still reaches the terminal, after).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

#: What Kineto writes when a profile starts and stops (date, pid:tid, file:line).
KINETO_LINE = re.compile(rb"^(USDT|STAGE):\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] ")


@contextlib.contextmanager
def quiet_profile(activities: Sequence[Any]) -> Iterator[Any]:
    """``torch.profiler.profile(activities=…)``, Kineto's lines left out of stderr."""
    from torch.profiler import profile

    with _stderr_without(KINETO_LINE), profile(activities=list(activities)) as prof:
        yield prof


@contextlib.contextmanager
def _stderr_without(pattern: re.Pattern[bytes]) -> Iterator[None]:
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 to redirect (an embedding host): say nothing
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().splitlines(True) if not pattern.match(line)]
            if kept:
                sys.stderr.write(b"".join(kept).decode(errors="replace"))
                sys.stderr.flush()
