"""A process's ``/proc/PID/stat`` fields after its name (Linux), for the tests that
follow processes the harness starts: ``[state, ppid, pgrp, …]``."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str]:
    """The fields after ``(comm)``: the name may hold spaces and parentheses, so it
    is cut at the last ``)``. FileNotFoundError when the process is gone."""
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return stat.rsplit(")", 1)[1].split()
