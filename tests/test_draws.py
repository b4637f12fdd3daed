"""Seeded draws are a function of (seed, stream, index) alone: the same numbers from
numpy on the CPU and from torch (what a GPU runs), in any chunking, never zero,
uniform in (−1, 1); and the inputs built from them are the same on every device."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from matprobe.measure import draws  # noqa: E402
from matprobe.measure.inputs import make_inputs  # noqa: E402
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
    key = draws.stream_key(5, 2)
    across = draws.uniform_torch(1000, key, 2**32 - 500).numpy()  # the high word changes
    monkeypatch.setattr(draws, "CHUNK", 100)
    monkeypatch.setattr(draws, "CPU_CHUNK", 77)
    assert torch.equal(draws.uniform((37, 61), 5, 2), whole)
    assert torch.equal(draws.uniform((37 * 61,), 5, 2), whole.reshape(-1))
    assert np.array_equal(draws.uniform_numpy(1000, key, 2**32 - 500), across)


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


# ---- timing's many sets: drawn together, stored apart, refilled and referenced at once ----

SET_SPECS = [
    "op=matmul | batch=1 | m=1 | n=37 | k=29 | tA=0 | tB=1 | dtype=f16",
    "op=matmul_bias_add | batch=1 | m=3 | n=151 | k=7 | tA=1 | tB=0 | dtype=bf16",
    "op=matmul_alpha_beta | batch=3 | m=2 | n=11 | k=64 | tA=0 | tB=0 | alpha=0.125 | beta=0.5 | "
    "accumulate=1 | dtype=f32",
    "op=matmul_bias_add | batch=1 | m=1 | n=40 | k=64 | tA=0 | tB=1 | dtype=q8_0",
    "op=matmul_swiglu | batch=1 | m=1 | n=? | k=96 | tA=0 | tB=1 | n0=5 | n1=5 | dtype=f16",
]


@pytest.mark.parametrize("key", SET_SPECS)
def test_timing_sets_have_storage_of_their_own_and_the_spec_s_layout(key: str) -> None:
    from matprobe.measure.inputs import make_input_sets

    spec = MatmulSpec.parse(key)
    one = make_inputs(spec, 1)
    sets = make_input_sets(spec, 5, 7, "cpu")
    assert len(sets) == 7 and make_input_sets(spec, 5, 0, "cpu") == []
    for inputs in sets:
        assert [(t.shape, t.dtype) for t in inputs.tensors()] == [
            (t.shape, t.dtype) for t in one.tensors()
        ]
        assert all(t.is_contiguous() for t in inputs.tensors())
    starts = sorted(t.data_ptr() for inputs in sets for t in inputs.tensors())
    assert len(set(starts)) == len(starts)  # no set shares (or views) another's storage
    assert not torch.equal(sets[0].a, sets[1].a) and not torch.equal(sets[0].b, sets[1].b)
    if spec.dtype != "q8_0":
        assert float(sets[3].b.abs().max()) <= 1.0 / (spec.k or 1) ** 0.5 * 1.001


@pytest.mark.parametrize("key", SET_SPECS)
def test_refilled_sets_keep_their_storage_and_change_every_tensor(key: str) -> None:
    from matprobe.measure.inputs import make_input_sets, refill_sets

    spec = MatmulSpec.parse(key)
    sets = make_input_sets(spec, 5, 3, "cpu")
    before = [[(t.data_ptr(), t.clone()) for t in inputs.tensors()] for inputs in sets]
    refill_sets(sets, spec, 77)
    for inputs, old in zip(sets, before, strict=True):
        for t, (pointer, values) in zip(inputs.tensors(), old, strict=True):
            assert t.data_ptr() == pointer and not torch.equal(t, values)


@pytest.mark.parametrize("key", SET_SPECS)
def test_references_of_many_sets_at_once_are_each_set_s_own(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stacked (and cut into chunks: here two sets a chunk) as computed one by one;
    the bias broadcast per set, never across sets."""
    from matprobe.measure import inputs as inputs_module
    from matprobe.measure import references

    spec = MatmulSpec.parse(key)
    sets = inputs_module.make_input_sets(spec, 9, 5, "cpu")
    monkeypatch.setattr(references, "REFERENCE_CHUNK_BYTES", 2 * sets[0].b.numel() * 8)
    together = references.references(sets, "cpu")
    assert len(together) == 5
    for inputs, (ref, scale) in zip(sets, together, strict=True):
        assert torch.allclose(ref, references.reference(inputs), rtol=1e-12, atol=1e-15)
        assert torch.allclose(scale, references.reference_scale(inputs), rtol=1e-12, atol=1e-15)
