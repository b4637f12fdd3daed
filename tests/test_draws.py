"""Seeded draws are a function of (seed, stream, index) alone: the same numbers from
numpy on the CPU and from torch (what a GPU runs), in any chunking, never zero,
uniform in (−1, 1); and the inputs built from them are the same on every device."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from matprobe.harness import draws  # noqa: E402
from matprobe.harness.inputs import make_inputs  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402

CUDA = torch.cuda.is_available()


@pytest.mark.parametrize("start", [0, 1, 4095, 2**32 - 3, 3 * 2**32 + 11])
@pytest.mark.parametrize(("seed", "stream"), [(0, 1), (7, 2), (2**31 + 5, 4), (2**40 + 1, 3)])
def test_numpy_and_torch_draw_the_same_bits(start: int, seed: int, stream: int) -> None:
    """Across the 2³² boundary of the index too (the high word enters the hash)."""
    key = draws.stream_key(seed, stream)
    cpu = draws.uniform_numpy(1000, key, start)
    gpu_form = draws.uniform_torch(1000, key, start).numpy()
    assert cpu.dtype == gpu_form.dtype == np.float32
    assert np.array_equal(cpu, gpu_form)


def test_a_draw_does_not_depend_on_how_it_is_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = draws.uniform((37, 61), 5, 2)
    monkeypatch.setattr(draws, "CHUNK", 100)
    assert torch.equal(draws.uniform((37, 61), 5, 2), whole)
    assert torch.equal(draws.uniform((37 * 61,), 5, 2), whole.reshape(-1))


def test_draws_are_uniform_in_the_open_interval_and_never_zero() -> None:
    values = draws.uniform((1 << 20,), 3, 1)
    assert values.dtype == torch.float32
    assert float(values.min()) > -1.0 and float(values.max()) < 1.0
    assert int((values == 0).sum()) == 0
    # Odd multiples of 2⁻²³: never zero, whatever the bits.
    assert bool(((values.double() + 1) * 2**23 % 2 == 1).all())
    assert abs(float(values.mean())) < 3e-3 and abs(float(values.std()) - 3**-0.5) < 3e-3
    counts = torch.histc(values, bins=16, min=-1, max=1)
    assert float(counts.min()) > 0.97 * float(counts.max())


def test_seeds_and_streams_give_unrelated_values() -> None:
    base = draws.uniform((4096,), 1, 1)
    for seed, stream in [(2, 1), (1, 2), (2**32 + 1, 1)]:
        other = draws.uniform((4096,), seed, stream)
        assert not torch.equal(other, base)
        assert abs(float(torch.corrcoef(torch.stack([base, other]))[0, 1])) < 0.06


def test_the_scalar_and_vectorized_hashes_agree() -> None:
    x = np.array([0, 1, 2, 12345, 2**31, 2**32 - 1], dtype=np.uint32)
    expected = [draws.hash32(int(v)) for v in x]
    assert [int(v) for v in draws._hash_numpy(x.copy())] == expected
    assert draws._mix_torch(torch.tensor(x.astype(np.int64))).tolist() == expected
    assert len(set(expected)) == len(expected) and expected[0] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "q8_0"])
def test_inputs_are_the_same_on_a_gpu_as_on_the_cpu(dtype: str) -> None:
    spec = MatmulSpec.parse(
        f"op=matmul_bias_add | batch=1 | m=3 | n=1000 | k=4096 | tA=0 | tB=1 | dtype={dtype}"
    )
    cpu, gpu = make_inputs(spec, 17, "cpu"), make_inputs(spec, 17, "cuda")
    for mine, theirs in zip(cpu.tensors(), gpu.tensors(), strict=True):
        assert theirs.device.type == "cuda"
        assert torch.equal(mine, theirs.cpu())
