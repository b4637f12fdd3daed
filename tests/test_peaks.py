"""The streaming-read ceiling kernel on the CPU, in the Triton interpreter: it must
read every element exactly once (a kernel that skips data would report a ceiling
no real kernel reaches), and the sweep's plumbing must stay GPU-free on import.

The kernel's tests are marked ``interpreter`` (conftest sets the switch where no GPU
is, before any module imports triton): setting it here, at import, would turn every
later-defined kernel of a GPU session into an interpreted one."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the read kernel's tests need torch")
pytest.importorskip("triton", reason="the read kernel runs in triton's interpreter")

from matprobe.measure.peaks import (  # noqa: E402
    GIB,
    READ_CONFIGS,
    calls_per_sample,
    grid_size,
    read_sizes,
    stream_read,
)

DTYPES = {"f16": torch.float16, "f32": torch.float32}


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("n", [1, 1000, 12345])
@pytest.mark.parametrize(("programs", "block"), [(1, 64), (3, 128), (5, 4096)])
def test_the_partials_sum_to_the_whole_buffer(
    dtype: str, n: int, programs: int, block: int
) -> None:
    # Positive values: a skipped or doubled element moves the sum by ≥ 0.5.
    x = (torch.rand(n, generator=torch.Generator().manual_seed(n)) + 0.5).to(DTYPES[dtype])
    partials = stream_read(x, programs, block)
    assert partials.shape == (programs,) and partials.dtype == torch.float32
    want = x.double().sum().item()
    assert partials.double().sum().item() == pytest.approx(want, rel=1e-5)


@pytest.mark.interpreter
def test_each_program_reads_its_own_strided_blocks_and_the_tail_once() -> None:
    """Block b belongs to program b mod G; the ragged tail to program 0 only."""
    block, programs = 64, 3
    x = torch.zeros(5 * block + 7)
    for b in range(5):
        x[b * block : (b + 1) * block] = float(10**b)
    x[5 * block :] = 0.5
    partials = stream_read(x, programs, block).tolist()
    per = [float(block * sum(10**b for b in range(p, 5, programs))) for p in range(programs)]
    per[0] += 7 * 0.5
    assert partials == pytest.approx(per)


@pytest.mark.interpreter
def test_operands_it_cannot_read_are_rejected() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        stream_read(torch.ones(8, 8).t(), 1, 64)
    with pytest.raises(ValueError, match="power of two"):
        stream_read(torch.ones(10), 1, 100)


def test_sizes_stay_above_l2_and_at_most_the_cap() -> None:
    l2 = 50 * 2**20
    assert read_sizes(l2) == [4 * l2, 8 * l2, GIB]
    assert read_sizes(200 * 2**20) == [800 * 2**20, GIB]  # 8× L2 capped to 1 GiB
    assert all(size > l2 for size in read_sizes(l2, max_bytes=GIB))
    assert read_sizes(0)[0] > 0  # an unknown L2 falls back to a default


def test_sweep_covers_every_sm_and_several_programs_each() -> None:
    assert grid_size(132, 4) == 528 and grid_size(0, 4) == 1
    assert {c.per_sm for c in READ_CONFIGS} >= {2, 4}
    assert all(4096 <= c.block <= 16384 and c.block & (c.block - 1) == 0 for c in READ_CONFIGS)


def test_each_timed_replay_reads_at_least_a_gib_in_several_launches() -> None:
    assert calls_per_sample(GIB) == 4
    assert calls_per_sample(200 * 2**20) == 6


def test_importing_the_module_imports_neither_torch_nor_triton() -> None:
    code = (
        "import sys, matprobe.measure.peaks; "
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
