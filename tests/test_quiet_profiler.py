"""Kineto's ``USDT:… profiler_start`` lines left ``token``'s stderr; everything
else written meanwhile still reaches it."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="the profiler is PyTorch's")

from matprobe.quiet_profiler import quiet_profile  # noqa: E402


def test_kineto_lines_are_left_out_and_the_rest_kept(capfd: pytest.CaptureFixture[str]) -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):
        torch.ones(3).add_(1)
    loud = capfd.readouterr().err
    if "profiler_start" not in loud:
        pytest.skip("this PyTorch's profiler writes no start line to stderr")
    with quiet_profile([ProfilerActivity.CPU]) as prof:
        torch.ones(3).add_(1)
        os.write(2, b"a line of the process's own\n")
        print("and one through sys.stderr", file=sys.stderr)
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "USDT" not in err and "STAGE" not in err
    assert "a line of the process's own\n" in err and "and one through sys.stderr\n" in err
    assert any("add" in e.name for e in prof.events())  # it still profiles


def test_an_error_inside_still_restores_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    from torch.profiler import ProfilerActivity

    with pytest.raises(ValueError), quiet_profile([ProfilerActivity.CPU]):
        os.write(2, b"said before the error\n")
        raise ValueError("inside")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert "said before the error\n" in err and err.endswith("after\n")
