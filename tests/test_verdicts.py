"""Verdicts an engine can be built on: every way a kernel could pass or win without
earning it, tried on the CPU (the same checks run on the GPU in test_gpu.py).

Each cheater here passed the harness before these checks existed: memoising by
input pointer, working on some calls only, writing past its output, reading x
before the kernel that writes it has finished, an fp16 running sum across K
tiles, a dropped K tail.
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

import fake_variants  # noqa: E402
from conftest import CPU, FAST  # noqa: E402
from matprobe.measure.device import DeviceInfo  # noqa: E402
from matprobe.measure.outputs import GuardedOutputs  # noqa: E402
from matprobe.measure.pair import (  # noqa: E402
    GuardBreachError,
    PairContext,
    measure_pair_safely,
    validate_pair,
)
from matprobe.measure.results import Status  # noqa: E402
from matprobe.measure.timing import TimingPolicy  # noqa: E402
from matprobe.measure.validate import UNIT_ROUNDOFF, tolerance  # noqa: E402
from matprobe.measure.variants import Variant  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.stats import median_ci  # noqa: E402

REGISTRY = fake_variants.registry()

#: The Qwen2.5-0.5B decode GEMVs (DESIGN.md §2) and an awkward one.
GATE_UP = "op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1"
DOWN = "op=matmul | batch=1 | m=1 | n=896 | k=4864 | tA=0 | tB=1"
O_PROJ = "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1"
QKV = "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0"
AWKWARD = "op=matmul | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=1"


def spec(key: str, dtype: str = "f16") -> MatmulSpec:
    return MatmulSpec.parse(key).with_dtype(dtype)


def variant(name: str) -> Variant:
    return REGISTRY.family(name).variants()[0]


def measure(s: MatmulSpec, name: str, baseline: str | None = None) -> Any:
    base = variant(baseline) if baseline else None
    return measure_pair_safely(s, variant(name), PairContext(CPU, FAST), base)


# ---- finding 1: the device clock holds after a different kernel, not after itself -----------


def test_self_overlap_is_not_credited() -> None:
    """A kernel that is fast only back to back with itself (PDL overlapping its own
    previous call) is timed after a producer that writes its x: its figure is the
    slow one a decode token sees."""
    result = measure(spec(AWKWARD, "f32"), "fake.self_overlap")
    assert result.status is Status.PASS, result.reason
    assert result.clocks.device is not None
    assert result.clocks.device.median_us > 2500  # 3 ms a call, not the 0.3 ms overlap


class CarryOverRecorder:
    """A card on which a replay runs slower after another recording's, for all of
    its calls (an H100: cuBLAS's attention bmm 3.67 µs a call after the producer,
    4.23 after the Triton candidate; the producer 1.38 after itself, 1.82 after a
    candidate). Recordings are names; times are per call."""

    COST: ClassVar = {"P": 1.4, "C": 3.7, "B": 3.7}
    AFTER: ClassVar = {("C", "B"): 0.56, ("C", "P"): 0.44, ("B", "P"): 0.17}

    def __init__(self) -> None:
        self.last: str | None = None

    def record(self, steps: Any, warmup: int) -> Any:
        return None

    def replay(self, recording: str) -> None:
        self.last = recording

    def time_us(self, recording: str) -> float:
        extra = self.AFTER.get((self.last or recording, recording), 0.0)
        self.last = recording
        return self.COST[recording] + extra

    def sync(self) -> None:
        return None


def test_a_replay_is_not_timed_in_the_wake_of_another() -> None:
    """Candidate and baseline equally fast: the ratio is 1.00 in every round, whatever
    the previous replay left behind (timed after the rotating order's neighbour,
    the rounds said 0.76 or 1.00 by their order)."""
    from matprobe.measure.sampling import Contender, interleave

    policy = TimingPolicy(min_samples=9, max_samples=9)
    candidate = Contender("C", lambda i, o: None, None, recording="C")
    baseline = Contender("B", lambda i, o: None, None, recording="B")
    rounds = interleave(CarryOverRecorder(), "P", candidate, baseline, 1, policy)
    assert rounds.ratio == (1.0, 1.0, 1.0)
    assert rounds.candidate.median_us == pytest.approx(3.7 - 1.4)


# ---- finding 2: every timed call is checked, on refilled inputs ---------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize(
    "key",
    [AWKWARD, "op=matmul_alpha_beta | batch=3 | m=1 | n=17 | k=9 | tA=0 | tB=0 | alpha=0.125"],
)
def test_memoising_by_input_pointer_fails_on_refilled_inputs(key: str, dtype: str) -> None:
    result = measure(spec(key, dtype), "cheat.memo_pointer")
    assert result.status is Status.FAIL
    assert "timed replay" in result.reason or "trial" in result.reason
    assert not result.ranked


def test_each_candidate_of_a_spec_is_timed_on_values_no_earlier_one_saw() -> None:
    """A spec's candidates share its timing bench (input sets, producer and baseline
    recordings) — the same buffers, but drawn afresh for each candidate and refilled
    for its replay check with values no earlier draw had: a kernel that memoised
    answers by pointer, or baked them into its recording, finds no old problem."""
    from matprobe.measure.inputs import MatmulInputs
    from matprobe.measure.validate import judged_trials
    from matprobe.measure.variants import variant_family

    seen: list[tuple[int, float]] = []

    @variant_family(name="witness", ops=("matmul",), devices=("cpu",))
    def witness(s: MatmulSpec, params: Any, device: DeviceInfo) -> Any:
        def run(inputs: MatmulInputs, out: Any) -> None:
            seen.append((inputs.a.data_ptr(), float(inputs.a.double().sum())))
            out.copy_(fake_variants.exact(inputs))

        return run

    awkward = spec(AWKWARD)
    timed: list[list[tuple[int, float]]] = []
    for _ in range(3):
        seen.clear()
        result = measure_pair_safely(awkward, Variant(witness, ()), PairContext(CPU, FAST))
        assert result.status is Status.PASS, result.reason
        timed.append(seen[judged_trials(awkward, FAST.trials) :])  # after validation
    for earlier, later in [(0, 1), (0, 2), (1, 2)]:
        assert {ptr for ptr, _ in timed[earlier]} & {ptr for ptr, _ in timed[later]}
        assert not {v for _, v in timed[earlier]} & {v for _, v in timed[later]}


def test_memoising_candidates_one_after_another_all_fail() -> None:
    """Three memoising candidates of one spec in one process (one bench): each fails
    (in validation when the allocator hands a trial its predecessor's buffers)."""
    for _ in range(3):
        result = measure(spec(AWKWARD), "cheat.memo_pointer")
        assert result.status is Status.FAIL
        assert "timed replay" in result.reason or "trial" in result.reason


def test_working_on_some_calls_only_fails_call_by_call() -> None:
    result = measure(spec(AWKWARD, "f32"), "cheat.some_calls")
    assert result.status is Status.FAIL
    assert result.reason.startswith("timed replay") and "error" in result.reason


def test_honest_kernel_passes_every_check_and_is_timed() -> None:
    result = measure(spec(AWKWARD, "f32"), "fake.exact")
    assert result.status is Status.PASS, result.reason
    assert result.clocks.device is not None and result.clocks.device.n >= 3


# ---- finding 3: kernels that launch early are checked in a dependent chain -----------------


def test_reading_x_before_the_producer_finished_fails_the_chain() -> None:
    result = measure(spec(AWKWARD, "f32"), "cheat.pdl_early_x")
    assert result.status is Status.FAIL
    assert result.reason.startswith("dependent chain"), result.reason


@pytest.mark.parametrize("key", [AWKWARD, DOWN.replace("4864", "200"), QKV.replace("896", "64")])
def test_honest_early_launcher_passes_the_chain(key: str) -> None:
    result = measure(spec(key, "f16"), "fake.exact_pdl")
    assert result.status is Status.PASS, result.reason


# ---- finding 4: tolerances an honest fp32-accumulating kernel meets and nothing looser ----


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("key", [GATE_UP, DOWN, O_PROJ, QKV])
def test_half_precision_running_sum_across_k_tiles_fails(key: str, dtype: str) -> None:
    s = spec(key, dtype)
    checked = validate_pair(s, variant("cheat.half_running_sum").build(s, CPU), CPU, 3)
    assert not checked.passed
    honest = validate_pair(s, variant("fake.exact").build(s, CPU), CPU, 3)
    assert honest.passed, honest.failure


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_dropping_the_last_three_k_columns_fails(dtype: str) -> None:
    s = spec(DOWN, dtype)
    checked = validate_pair(s, variant("cheat.drop_k_tail").build(s, CPU), CPU, 3)
    assert not checked.passed, checked.metrics


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("key", [GATE_UP, DOWN, O_PROJ, QKV])
def test_torch_baseline_passes_with_a_margin(key: str, dtype: str) -> None:
    """No false FAIL: torch's own matmul on the CPU (fp32 accumulation) is well
    inside both bounds on every Qwen2.5 GEMV shape."""
    from matprobe.kernels.peers.torch_ref import torch_matmul

    s = spec(key, dtype)
    if torch_matmul.variants()[0].unsupported_reason(s, CPU):
        pytest.skip("too large for the CPU in half precision")
    checked = validate_pair(s, torch_matmul.variants()[0].build(s, CPU), CPU, 3)
    assert checked.passed, checked.failure
    assert checked.metrics.norm_rel < 0.75 * checked.metrics.tol_norm


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_bounds_are_a_few_roundings(dtype: str) -> None:
    u = UNIT_ROUNDOFF[dtype]
    norm, element = tolerance(dtype, 4864)
    assert u <= norm < 1.05 * u
    assert 2 * u <= element < 2.1 * u
    assert tolerance(dtype, 4864, addends=1)[1] > element  # one more rounding per addend


# ---- finding 5: writes outside the output ---------------------------------------------------


@pytest.mark.parametrize("n", [53, 1, 127])
def test_writing_past_the_output_fails(n: int) -> None:
    s = spec(AWKWARD.replace("n=53", f"n={n}"), "f32")
    result = measure(s, "cheat.out_of_bounds")
    assert result.status is Status.FAIL
    assert "wrote outside its output" in result.reason


def test_guards_sit_on_both_sides_of_every_output() -> None:
    s = spec(AWKWARD, "f16")
    outputs = GuardedOutputs(s, "cpu", 3)
    assert outputs.breach() is None
    for view in outputs.views:
        view.fill_(1.0)  # writing inside is fine
    assert outputs.breach() is None
    base = outputs.views[1]
    torch.as_strided(base, (1,), (1,), base.storage_offset() - 1).fill_(0.0)
    assert "between outputs 0 and 1" in (outputs.breach() or "")


def test_a_guard_breach_in_validation_raises() -> None:
    s = spec(AWKWARD, "f32")
    with pytest.raises(GuardBreachError, match="trial 1/3"):
        validate_pair(s, variant("cheat.out_of_bounds").build(s, CPU), CPU, 3)


# ---- finding 8: candidate and baseline interleaved, a ratio with its interval ---------------


def test_candidate_is_timed_interleaved_with_the_baseline() -> None:
    s = spec(AWKWARD, "f32")
    result = measure(s, "fake.slow", baseline="fake.exact")
    assert result.status is Status.PASS, result.reason
    ratio = result.clocks.vs_baseline
    assert ratio is not None and ratio.baseline_id == "fake.exact/default"
    assert ratio.lo <= ratio.median <= ratio.hi
    assert ratio.n == result.clocks.device.n and len(ratio.samples) == ratio.n
    assert ratio.lo > 1.0  # 2 ms of sleep a call is slower than the exact kernel
    assert not ratio.below(1.0)


def test_the_baseline_itself_gets_no_ratio() -> None:
    result = measure(spec(AWKWARD, "f32"), "fake.exact", baseline="fake.exact")
    assert result.status is Status.PASS and result.clocks.vs_baseline is None


@pytest.mark.parametrize("n", [6, 15, 40, 200])
def test_median_interval_covers_the_median(n: int) -> None:
    values = [float(v) for v in range(n)]
    median, lo, hi = median_ci(values)
    assert lo <= median <= hi
    assert lo > 0 or n < 10  # a real interval, not the whole range, once n allows


def test_the_interpreter_truncates_to_bf16_so_its_bound_doubles() -> None:
    """Triton's interpreter casts fp32 → bf16 by dropping bits (up to one ulp, 2u):
    interpreted bf16 kernels get the doubled rounding bound, GPU ones never. If a
    Triton release rounds to nearest, this fails: drop the allowance then."""
    import subprocess
    import sys

    pytest.importorskip("triton", reason="needs triton")
    code = """
import torch, triton, triton.language as tl
@triton.jit
def cast(x_ptr, y_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(y_ptr + o, tl.load(x_ptr + o).to(tl.bfloat16))
x = torch.randn(1024, generator=torch.Generator().manual_seed(0))
y = torch.empty(1024, dtype=torch.bfloat16)
cast[(1,)](x, y, N=1024)
print(int((y != x.to(torch.bfloat16)).sum()), int((y.double().abs() > x.double().abs()).sum()))
"""
    env = {**__import__("os").environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    ).stdout.split()
    differs, rounded_up = int(out[0]), int(out[1])
    assert differs > 100 and rounded_up == 0  # toward zero, never away from it
    from matprobe.measure.validate import spec_tolerance

    s = spec(DOWN, "bf16")
    assert spec_tolerance(s, interpreted=True)[0] == pytest.approx(
        2 * spec_tolerance(s)[0], rel=0.01
    )
    assert spec_tolerance(spec(DOWN, "f16"), interpreted=True) == spec_tolerance(spec(DOWN))


# ---- a failure's figure and bound, printed apart (issue 21) ---------------------------------

#: (figure, bound, as printed): issue 21's LM head printed "1.50e-03 relative > 1.5e-03"
FIGURES_AND_BOUNDS = [
    (1.4996e-3, 0.0014791170402022322, ("1.50e-03", "1.48e-03")),
    (0.0014748141648371158, 0.0014702385466093945, ("1.475e-03", "1.470e-03")),  # was 1.47 > 1.5
    (1.5012e-3, 1.4998e-3, ("1.501e-03", "1.500e-03")),
    (math.nextafter(2.0**-10, 1.0), 2.0**-10, None),  # one ulp apart: every digit it takes
    (0.3, 4.9e-4, ("3.00e-01", "4.90e-04")),
    (math.inf, 9.8e-4, ("inf", "9.80e-04")),
]


@pytest.mark.parametrize("which", ["norm-wise", "element"])
@pytest.mark.parametrize(("figure", "bound", "printed"), FIGURES_AND_BOUNDS)
def test_a_failure_prints_its_figure_and_its_bound_apart(
    figure: float, bound: float, printed: tuple[str, str] | None, which: str
) -> None:
    from matprobe.measure.validate import Comparison

    norm, element = (figure, 0.0) if which == "norm-wise" else (0.0, figure)
    comparison = Comparison(
        max_abs=1.0, max_rel=element, norm_rel=norm, nonfinite=0, worst_index=(0, 0, 142520)
    )
    message = comparison.failure(bound, bound)
    assert message is not None and message.startswith(which.replace("element", "element ["))
    found = re.fullmatch(r".* (?:error|by) (\S+)(?: relative)? > (\S+)", message)
    assert found, message
    shown_figure, shown_bound = found.groups()
    assert float(shown_figure) > float(shown_bound), message  # the two numbers differ
    assert float(shown_bound) == pytest.approx(bound, rel=5e-3)
    if printed is not None:
        assert (shown_figure, shown_bound) == printed
    assert len(shown_bound.split("e")[0].replace(".", "")) >= 3  # never fewer than 3 digits
