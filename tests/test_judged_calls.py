"""Every timed call is a judged call (issue 20), on the CPU.

A kernel could win without doing the work when the calls the harness judged could
be told apart from the calls it timed (NaN-poisoned outputs, its callers), or when
problems repeated (fixed seeds, a producer rewriting the same ``x``). Now every
call looks alike — a fresh ``x``, an output prefilled with fresh finite values —
and every call of every timed replay is judged against float64. Each cheater here
passed on main before (f5ced8b); the GPU forms are in test_gpu.py.
"""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

import fake_variants  # noqa: E402
from conftest import CPU, FAST  # noqa: E402
from matprobe.measure import seeds  # noqa: E402
from matprobe.measure.device import DeviceInfo  # noqa: E402
from matprobe.measure.inputs import MatmulInputs  # noqa: E402
from matprobe.measure.pair import PairContext, measure_pair_safely  # noqa: E402
from matprobe.measure.results import Status  # noqa: E402
from matprobe.measure.timing import TimingPolicy  # noqa: E402
from matprobe.measure.variants import Variant, variant_family  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402

REGISTRY = fake_variants.registry()

SPECS = [
    "op=matmul | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=1",
    "op=matmul_bias_add | batch=1 | m=1 | n=7 | k=33 | tA=0 | tB=0",
    "op=matmul_alpha_beta | batch=3 | m=1 | n=17 | k=9 | tA=0 | tB=0 | alpha=0.125",
]


def spec(key: str, dtype: str = "f16") -> MatmulSpec:
    return MatmulSpec.parse(key).with_dtype(dtype)


def measure(
    s: MatmulSpec, name: str, policy: TimingPolicy = FAST, baseline: str | None = None
) -> Any:
    variant = REGISTRY.family(name).variants()[0]
    base = REGISTRY.family(baseline).variants()[0] if baseline else None
    return measure_pair_safely(s, variant, PairContext(CPU, policy), base)


# ---- one kind of call: nothing tells a judged call from a timed one ------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("key", SPECS)
@pytest.mark.parametrize("name", ["cheat.nan_aware", "cheat.judged_only", "cheat.precompute"])
def test_a_kernel_that_works_only_when_judged_fails(name: str, key: str, dtype: str) -> None:
    result = measure(spec(key, dtype), name)
    assert result.status is Status.FAIL, result.reason
    assert not result.ranked


def test_the_judged_only_kernel_passes_validation_and_fails_in_the_timed_calls() -> None:
    """The cheater that reads its callers passes every validation trial: what fails it
    is that the calls it skipped, the timed ones, are judged too."""
    result = measure(spec(SPECS[0], "f32"), "cheat.judged_only")
    assert result.reason.startswith("timed replay 1: call 1/"), result.reason
    assert result.metrics is not None and result.metrics.max_rel < 1e-6  # validation passed


def test_a_builder_that_precomputes_the_validation_answers_gains_nothing() -> None:
    """The most a kernel in the harness's process can know — the run's seed and the
    counter of fresh seeds — lets its builder answer every validation trial without
    arithmetic; the timed calls' ``x`` come from the device's generator, new on every
    replay, and their outputs are judged."""
    result = measure(spec(SPECS[0], "f32"), "cheat.precompute")
    assert result.metrics is not None and result.metrics.max_rel < 1e-6  # precomputed answers
    assert result.status is Status.FAIL and result.reason.startswith("timed replay")


def test_outputs_are_prefilled_with_fresh_finite_values_before_every_call() -> None:
    """What a kernel finds in its output: finite values, never the same twice —
    in validation, in the timed replays and in the hot and host clocks alike."""
    found: list[torch.Tensor] = []

    @variant_family(name="witness.out", ops=("matmul",), devices=("cpu",))
    def witness(s: MatmulSpec, params: Any, device: DeviceInfo) -> Any:
        def run(inputs: MatmulInputs, out: Any) -> None:
            found.append(out.detach().clone())
            out.copy_(fake_variants.exact(inputs))

        return run

    result = measure_pair_safely(spec(SPECS[0]), Variant(witness, ()), PairContext(CPU, FAST))
    assert result.status is Status.PASS, result.reason
    assert len(found) > 10
    assert all(bool(torch.isfinite(f).all()) for f in found)
    distinct = {f.numpy().tobytes() for f in found}
    assert len(distinct) == len(found)


# ---- fresh problems: no call meets a problem an earlier call had -------------------------


def _x_witness(seen: list[bytes], early: bool = False) -> Variant:
    """A correct kernel that notes every ``x`` it is given; ``early``: it declares
    early launch (so the dependent chain runs on the CPU too)."""

    @variant_family(
        name="witness.x",
        ops=("matmul", "matmul_bias_add", "matmul_alpha_beta"),
        grid={"pdl": (1,)} if early else {},
    )
    def witness(s: MatmulSpec, params: Any, device: DeviceInfo) -> Any:
        def run(inputs: MatmulInputs, out: Any) -> None:
            seen.append(inputs.a.detach().float().numpy().tobytes())
            out.copy_(fake_variants.exact(inputs))

        return run

    return witness.variants()[0]


@pytest.mark.parametrize(
    ("key", "early"),
    # (a batched spec cannot be chained: an early launcher fails there, untested)
    [*((key, False) for key in SPECS), *((key, True) for key in SPECS[:2])],
)
def test_every_call_of_a_process_sees_an_x_no_earlier_call_saw(key: str, early: bool) -> None:
    """Validation trials, timed replays, the replay check, the hot and host clocks and
    (for a kernel that launches early) the dependent chain, its recording's own
    passes included — over three pairs of one spec in one process: every call's
    ``x`` is new."""
    seen: list[bytes] = []
    for _ in range(3):
        result = measure_pair_safely(spec(key), _x_witness(seen, early), PairContext(CPU, FAST))
        assert result.status is Status.PASS, result.reason
    assert len(seen) > 30
    assert len(set(seen)) == len(seen)


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [
        ((5, 3, 2, 4, 7), (3, 2, 7, 6)),
        ((24, 1, 1, 9), (1, 9, 13)),
        ((2, 1, 14, 1, 64), (1, 14, 64, 5)),
    ],
)
def test_many_problems_on_the_same_weights_are_answered_as_one_product(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...]
) -> None:
    """The answers to a replay's calls (one more leading axis than the weights) equal
    the broadcast product, computed without copying the weights once a call."""
    from matprobe.measure.references import _matmul

    x = torch.randn(x_shape, dtype=torch.float64)
    w = torch.randn(w_shape, dtype=torch.float64)
    assert torch.allclose(_matmul(x, w), x @ w, rtol=1e-12, atol=1e-12)


def test_every_variant_gets_the_chain_on_a_card_that_can_launch_early() -> None:
    """A kernel's parameters saying nothing about early launch prove nothing: on a
    Hopper card every variant runs the dependent chain where the spec can be chained;
    one that declares early launch runs it everywhere (and fails where it cannot)."""
    from matprobe.measure.checks import runs_chain

    hopper = DeviceInfo(kind="cuda", name="H100", capability=(9, 0))
    ampere = DeviceInfo(kind="cuda", name="A100", capability=(8, 0))
    gemv, batched = spec(SPECS[0]), spec(SPECS[2])
    assert runs_chain(gemv, hopper, declared=False)
    assert not runs_chain(batched, hopper, declared=False)  # batch 3: no chain to build
    assert runs_chain(batched, hopper, declared=True)
    assert not runs_chain(gemv, ampere, declared=False) and not runs_chain(gemv, CPU, False)
    assert runs_chain(gemv, CPU, declared=True)


def test_a_kernel_that_memoises_by_a_few_values_never_meets_an_old_problem() -> None:
    """Honest on a miss, instant on a hit: it passes — it did the work — and it never
    hit, so it never won by memory."""
    fake_variants.MEMO_HITS[0] = 0
    for key in SPECS:
        result = measure(spec(key), "cheat.memo_values")
        assert result.status is Status.PASS, result.reason
    assert fake_variants.MEMO_HITS[0] == 0


def test_a_row_says_how_many_timed_outputs_were_judged() -> None:
    result = measure(spec(SPECS[0], "f32"), "fake.exact", baseline="fake.exact_pdl")
    assert result.status is Status.PASS, result.reason
    clocks = result.clocks
    assert clocks.device is not None and clocks.hot is not None and clocks.host is not None
    # one output a call: every device-clock replay (calls per sample each), every hot
    # replay, every host call
    timed = (
        clocks.device.n * clocks.device.calls_per_sample
        + clocks.hot.n * clocks.hot.calls_per_sample
        + clocks.host.n
    )
    assert clocks.judged == timed
    assert type(result).from_dict(result.to_dict()).clocks.judged == timed


# ---- the timed replays' outputs, kept and judged after the rounds -------------------------


def _replays(
    key: str, replays: int, wrong: tuple[int, int] | None = None, guard_in: int | None = None
) -> str | None:
    """``replays`` timed replays of an exact kernel on a bench of 2 sets × 3 calls,
    each kept by a :class:`TimedJudge` as the rounds keep it; the kernel is wrong on
    call ``wrong[1]`` of replay ``wrong[0]`` (0-based), or writes the guard after its
    output in replay ``guard_in``. What the judge says after the rounds."""
    from matprobe.measure.bench import TimedJudge, make_bench
    from matprobe.measure.inputs import make_input_sets

    s = spec(key, "f32")
    sets = make_input_sets(s, 1234, 2, "cpu")
    bench = make_bench(s, sets, 6)
    outputs = bench.outputs()
    judge = TimedJudge(bench, outputs, None)
    for replay in range(replays):
        bench.fresh_step(outputs)()  # fresh x and outputs, as every recording starts
        for call, out in enumerate(outputs.views):
            bench.producer_step(call)()
            out.copy_(fake_variants.exact(sets[call % 2]))
            if (replay, call) == wrong:
                out.view(-1)[-1] += 1.0
        if replay == guard_in:
            end = outputs.views[-1].reshape(-1)
            outputs.buffer[outputs.buffer.numel() - outputs.guard] = end[0]
        judge.keep()
    return judge.problem()


@pytest.mark.parametrize("kept_bytes", [1, 3000, 1 << 26])  # every replay, every few, none
@pytest.mark.parametrize("key", SPECS)
def test_every_timed_replay_kept_is_judged_and_named(
    key: str, kept_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept outputs are judged after the rounds (or, past the byte cap, in batches
    between replays): one wrong element in one call of one late replay fails, and
    the message names that replay and call whichever batch held it."""
    from matprobe.measure import bench

    monkeypatch.setattr(bench, "KEPT_BYTES", kept_bytes)
    assert _replays(key, 9) is None
    for replay, call in ((0, 0), (4, 5), (8, 3)):
        found = _replays(key, 9, wrong=(replay, call))
        assert found is not None and found.startswith(
            f"timed replay {replay + 1}: call {call + 1}/6:"
        )


class _ForgetfulJudge:
    """A judge whose verdicts cover one replay fewer than were kept — as one a
    kernel emptied (``gc``) would: every verdict it holds passes."""

    def __init__(self, calls: int) -> None:
        self.calls, self.kept = calls, 0

    def keep(self) -> None:
        self.kept += 1

    def problem(self) -> str | None:
        return None

    def judged(self) -> int:
        return (self.kept - 1) * self.calls


def test_rounds_fail_when_the_verdicts_cover_fewer_outputs_than_were_timed() -> None:
    """The rounds count the replays they kept themselves; a verdict needs all of
    them judged, whatever the judge's own bookkeeping says."""
    from matprobe.measure.sampling import Contender, CpuRecorder, interleave
    from matprobe.measure.timing import TimingPolicy

    recorder = CpuRecorder()
    calls = 3

    def nothing() -> None:
        return None

    candidate = Contender("candidate", lambda inputs, out: None, None)
    candidate.recording = recorder.record([nothing] * calls, 1)
    candidate.judge = lambda: _ForgetfulJudge(calls)
    producer = recorder.record([nothing], 1)
    policy = TimingPolicy(min_samples=4, max_samples=4, budget_s=1.0)
    rounds = interleave(recorder, producer, candidate, None, calls, policy)
    assert rounds.problem == "9 of 12 timed outputs judged (a verdict needs every one)"
    assert rounds.judged == 9


def test_a_guard_written_in_one_timed_replay_is_seen_after_the_rounds() -> None:
    found = _replays(SPECS[0], 7, guard_in=3)
    assert found is not None and "wrote outside its output" in found, found


# ---- the run's seed: from the OS, stored, replayable --------------------------------------


def test_runs_take_their_seed_from_the_operating_system() -> None:
    assert len({seeds.new_run_seed() for _ in range(8)}) == 8
    assert all(0 <= s < 1 << seeds.SEED_BITS for s in (seeds.new_run_seed() for _ in range(8)))


def test_a_seed_replays_a_pair_exactly_and_another_seed_does_not() -> None:
    """Call for call: the same seed gives the same calls the same values. The stop
    rule reads the clock, so the rounds are pinned here: a replay that times more
    or fewer rounds (CI's first run did) differs from the first round it adds."""
    from matprobe.measure import bench, references

    def xs(seed: int) -> list[bytes]:
        # As a new process starts a run: whatever it drew or kept before is gone.
        seeds.restart(seed + 1)
        bench._benches.clear()
        references._cases.clear()
        seen: list[bytes] = []
        policy = replace(FAST, seed=seed, min_samples=4, max_samples=4)
        result = measure_pair_safely(spec(SPECS[1]), _x_witness(seen), PairContext(CPU, policy))
        assert result.status is Status.PASS, result.reason
        return seen

    first, again, other = xs(11), xs(11), xs(12)
    assert first == again
    assert not set(first) & set(other)


def test_the_seed_is_not_part_of_the_policy_fingerprint() -> None:
    """Results measured under one seed are the same verdicts under another: the cache
    keeps them (a new seed per run would otherwise measure everything again)."""
    assert (
        replace(FAST, seed=1).fingerprint == replace(FAST, seed=2).fingerprint == FAST.fingerprint
    )


@pytest.mark.parametrize("bad", ["-1", "9223372036854775808", "x"])
def test_a_bad_seed_is_refused_with_its_range(bad: str) -> None:
    import argparse

    from matprobe.cli.args import seed

    with pytest.raises(argparse.ArgumentTypeError, match=r"whole number|2\^63"):
        seed(bad)


# ---- writes outside the output, at any distance ----------------------------------------------


@pytest.mark.parametrize("key", SPECS)
def test_a_kernel_that_writes_into_its_weights_fails(key: str) -> None:
    """Its answers match what it found, call by call; the checksums of every input
    set's weights, bias and C₀ (taken as drawn, checked after the rounds and after
    the clocks) do not."""
    result = measure(spec(key, "f32"), "cheat.weight_scribbler")
    assert result.status is Status.FAIL, result.reason
    assert "wrote outside its output: into input set" in result.reason
    assert result.metrics is not None and result.metrics.max_rel < 1e-6  # validation passed


@pytest.mark.parametrize(
    "key",
    [  # shapes of their own: judges of other tests' pairs may still be alive
        "op=matmul | batch=1 | m=1 | n=29 | k=23 | tA=0 | tB=1",
        "op=matmul_bias_add | batch=1 | m=1 | n=31 | k=19 | tA=0 | tB=0",
    ],
)
def test_a_kernel_that_thins_the_judges_weights_fails(key: str) -> None:
    """Honest while validated; then, finding the timed calls' float64 operands, it
    zeroes all but one of the K terms in place and computes that one: the replays
    judged after that agreed with it (it PASSed, on main). The operands' checksums,
    taken when converted and looked at after the rounds and the clocks, do not."""
    gc.collect()
    result = measure(spec(key, "f32"), "cheat.judge_thinner")
    assert result.status is Status.FAIL, result.reason
    assert "into the float64 weights, bias or C₀ its outputs are judged against" in result.reason


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16", "int8"])
def test_bit_sums_are_each_tensors_own_and_see_one_changed_bit(dtype: str) -> None:
    import torch

    from matprobe.measure.outputs import bit_sums

    kind = getattr(torch, dtype)
    tensors = [torch.arange(n * 3, dtype=torch.int64).to(kind).reshape(n, 3) for n in (5, 7)]
    before = bit_sums(tensors)
    flat = tensors[1].reshape(-1).view({1: torch.int8, 2: torch.int16, 8: torch.int64}[
        tensors[1].element_size()])  # fmt: skip
    flat[4] ^= 1  # one bit of one element
    after = bit_sums(tensors)
    assert after[0] == before[0] and after[1] != before[1]


def test_checksums_see_a_swap_that_a_plain_sum_would_not() -> None:
    from matprobe.measure.outputs import checksums

    t = torch.arange(12, dtype=torch.float16)
    before = checksums([t])
    t[[2, 7]] = t[[7, 2]]
    assert not torch.equal(checksums([t]), before)


@pytest.mark.parametrize("batch", [7, 1000, 1 << 24])  # slices of one tensor, few, all at once
def test_checksums_batched_are_each_tensors_own_and_see_one_changed_bit(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tensors of one size are summed stacked, a large one a slice at a time: each
    checksum is still that tensor's own (the per-tensor formula), whatever its
    neighbours, and one flipped bit in one of many like-sized sets changes its own
    checksum only."""
    from matprobe.measure import outputs

    monkeypatch.setattr(outputs, "CHECKSUM_BATCH", batch)
    gen = torch.Generator().manual_seed(5)
    sets = [torch.rand(3, 5, 7, generator=gen).half() for _ in range(40)]
    odd = [torch.rand(2, 3, generator=gen), torch.rand(4, 9, generator=gen).bfloat16().t()]
    tensors = sets[:20] + odd + sets[20:]
    ints = {2: torch.int16, 4: torch.int32}

    def own(t: Any) -> Any:
        bits = t.reshape(-1).view(ints[t.element_size()]).to(torch.int64)
        return (bits * (torch.arange(bits.numel()) % 65521 + 1)).sum()

    before = outputs.checksums(tensors)
    assert torch.equal(before, torch.stack([own(t) for t in tensors]))
    sets[33].view(torch.int16).view(-1)[50] ^= 1
    changed = (outputs.checksums(tensors) != before).nonzero().flatten().tolist()
    assert changed == [next(i for i, t in enumerate(tensors) if t is sets[33])]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_checksums_of_a_tensor_longer_than_a_batch_are_its_own_and_see_a_swap(
    dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An LM head is summed a slice at a time, each slice taking the weights made once
    (slices start at whole moduli): the sum is still the per-tensor formula, a swap
    between two slices is seen, and so is one flipped bit in the last, short slice."""
    from matprobe.measure import outputs

    monkeypatch.setattr(outputs, "CHECKSUM_BATCH", outputs.CHECKSUM_MODULUS)
    n = 3 * outputs.CHECKSUM_MODULUS + 5
    t = torch.rand(n, generator=torch.Generator().manual_seed(3)).to(getattr(torch, dtype))
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    bits = t.view(ints).to(torch.int64)
    own = (bits * (torch.arange(n) % outputs.CHECKSUM_MODULUS + 1)).sum()
    before = outputs.checksums([t])
    assert torch.equal(before, own.reshape(1))
    t[[10, n - 20]] = t[[n - 20, 10]]
    swapped = outputs.checksums([t])
    assert not torch.equal(swapped, before)
    t.view(ints)[n - 1] ^= 1
    assert not torch.equal(outputs.checksums([t]), swapped)


# ---- fingerprints of the code that ran, not of what a family says about itself ---------------


def _hidden_family(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Variant, Any]:
    """A family whose builder names another module as its own and keeps its arithmetic
    in a module imported by a computed name — neither visible to a parse of its source."""
    import sys

    monkeypatch.delitem(sys.modules, "hidden_arithmetic", raising=False)  # another test's
    helper = tmp_path / "hidden_arithmetic.py"
    helper.write_text(
        "def run(inputs, out):\n"
        "    import fake_variants\n"
        "    out.copy_(fake_variants.exact(inputs))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    def build(s: MatmulSpec, params: Any, device: DeviceInfo) -> Any:
        import importlib

        return importlib.import_module("hidden_" + "arithmetic").run

    build.__module__ = "matprobe.kernels.peers.torch_ref"  # says it is shipped code
    family = variant_family(name="cheat.hidden_module", ops=("matmul",))(build)
    return family.variants()[0], helper


def test_a_result_records_the_files_its_process_ran(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    variant, helper = _hidden_family(tmp_path, monkeypatch)
    result = measure_pair_safely(spec(SPECS[0]), variant, PairContext(CPU, FAST))
    assert result.status is Status.PASS, result.reason
    assert str(helper.resolve()) in result.sources
    assert not any("site-packages" in p or "/matprobe/" in p for p in result.sources)
    assert type(result).from_dict(result.to_dict()).sources == result.sources


def test_an_edit_to_a_module_it_ran_makes_the_cached_result_stale(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family whose kernel, kept where its fingerprint cannot see, is edited to write
    zeros keeps no cached PASS: the plan measures it again, and no table exports it."""
    from matprobe.measure.fingerprint import changed_sources
    from matprobe.run.runner import LOADED_CHANGED, PairState, make_plan
    from matprobe.run.store import ResultStore

    variant, helper = _hidden_family(tmp_path, monkeypatch)
    s = spec(SPECS[0])
    result = measure_pair_safely(s, variant, PairContext(CPU, FAST))
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.put(result)
        (pair,) = make_plan([s], [variant], CPU, FAST, store).pairs
        assert pair.state is PairState.CACHED
        helper.write_text("def run(inputs, out):\n    out.zero_()\n")
        assert changed_sources(dict(result.sources)) == [str(helper.resolve())]
        (pair,) = make_plan([s], [variant], CPU, FAST, store).pairs
        assert pair.state is PairState.RUN and pair.reason == LOADED_CHANGED


def test_a_result_records_the_versions_of_the_packages_its_process_imported() -> None:
    """The installed distributions a process imported from count as what ran: a
    result measured under another version of one of them is stale."""
    from matprobe.measure.fingerprint import DIST_PREFIX, changed_sources, loaded_sources

    recorded = loaded_sources()
    assert DIST_PREFIX + "torch" in recorded and DIST_PREFIX + "numpy" in recorded
    assert changed_sources(recorded) == []
    older = {**recorded, DIST_PREFIX + "torch": "0.0.1"}
    assert changed_sources(older) == [DIST_PREFIX + "torch"]
    assert changed_sources({DIST_PREFIX + "no-such-distribution": "1.0"}) != []
