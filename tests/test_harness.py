"""The harness on the CPU: validation against cheaters, planning, caching and
invalidation, worker isolation, interruption, reports."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

import fake_variants  # noqa: E402
from conftest import CPU, FAST  # noqa: E402
from matprobe.measure import fingerprint  # noqa: E402
from matprobe.measure.inputs import fresh_copy, make_inputs, shapes  # noqa: E402
from matprobe.measure.pair import PairContext, classify, measure_pair_safely  # noqa: E402
from matprobe.measure.references import reference, seeded_case  # noqa: E402
from matprobe.measure.results import ErrorKind, Status  # noqa: E402
from matprobe.measure.timing import TimingPolicy  # noqa: E402
from matprobe.measure.validate import compare, spec_tolerance, tolerance  # noqa: E402
from matprobe.measure.variants import Variant  # noqa: E402
from matprobe.report.build import build_report  # noqa: E402
from matprobe.report.json_csv import to_csv, to_json  # noqa: E402
from matprobe.report.markdown import render_markdown  # noqa: E402
from matprobe.report.text import render_terminal  # noqa: E402
from matprobe.run.runner import (  # noqa: E402
    ERRORED,
    NEW,
    POLICY_CHANGED,
    SOURCE_CHANGED,
    PairState,
    execute,
    make_plan,
)
from matprobe.run.store import ResultStore  # noqa: E402
from matprobe.run.task import Task  # noqa: E402
from matprobe.run.worker import run_tasks  # noqa: E402
from matprobe.spec import BackendTiming, MatmulSpec, Provenance  # noqa: E402
from matprobe.stats import Stats  # noqa: E402

FACTORY = "fake_variants:registry"
REGISTRY = fake_variants.registry()


def spec_of(**fields: Any) -> MatmulSpec:
    base: dict[str, Any] = {
        "op": "matmul",
        "batch": 1,
        "m": 1,
        "n": 37,
        "k": 29,
        "tA": False,
        "tB": True,
        "dtype": "f32",
    }
    base.update(fields)
    return MatmulSpec(**base)


def variant(name: str, **params: Any) -> Variant:
    family = REGISTRY.family(name)
    if not params:
        return family.variants()[0]
    return Variant(family, tuple((k, params[k]) for k in family.grid))


def measure(spec: MatmulSpec, v: Variant, policy: TimingPolicy = FAST) -> Any:
    return measure_pair_safely(spec, v, PairContext(CPU, policy))


# ---- inputs and validation --------------------------------------------------------


def SPEC_IDS(s: MatmulSpec) -> str:  # noqa: N802 - reads as a constant in decorators
    return f"{s.kind}-{s.dtype}-{s.batch}x{s.m}x{s.n}x{s.k}"


SPECS = [
    spec_of(),
    spec_of(m=3, n=5, k=123, tA=True, tB=False, dtype="f16"),
    spec_of(op="matmul_bias_add", n=151, k=7, dtype="bf16"),
    spec_of(
        op="matmul_alpha_beta",
        batch=3,
        m=2,
        n=11,
        k=64,
        alpha=0.125,
        beta=0.5,
        accumulate=True,
        strided_batch=True,
    ),
    spec_of(op="matmul_alpha_beta", batch=14, n=64, k=1, tB=False, alpha=1.0, beta=0.0),
]


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_inputs_layouts_and_scale(spec: MatmulSpec) -> None:
    inputs = make_inputs(spec, 7)
    dims = shapes(spec)
    assert tuple(inputs.a.shape) == dims["a"] and tuple(inputs.b.shape) == dims["b"]
    assert (inputs.bias is not None) == spec.has_bias
    assert (inputs.c0 is not None) == spec.reads_c0
    ref = reference(inputs)
    assert ref.shape == dims["out"] and ref.dtype == torch.float64
    # Sums stay O(1) whatever K is, and no input is exactly zero.
    assert float(ref.abs().max()) < 5.0
    assert all(int((t == 0).sum()) == 0 for t in inputs.tensors())
    # Same seed, same values; another seed, other values.
    assert torch.equal(make_inputs(spec, 7).b, inputs.b)
    assert not torch.equal(make_inputs(spec, 8).b, inputs.b)


@pytest.mark.parametrize("spec", SPECS[:3], ids=SPEC_IDS)
def test_seeded_cases_are_computed_once_and_never_written_through(
    spec: MatmulSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matprobe.measure import references as references_module

    case = seeded_case(spec, 11)
    fresh = make_inputs(spec, 11)
    assert torch.equal(case.inputs.a, fresh.a) and torch.equal(case.inputs.b, fresh.b)
    assert torch.equal(case.operands.answer(fresh.a_mk().double()), reference(fresh))
    assert seeded_case(spec, 11) is case  # reused, not recomputed
    copy = fresh_copy(case.inputs, "cpu")
    assert copy.a.data_ptr() != case.inputs.a.data_ptr()
    copy.a.fill_(3.0)
    copy.b.fill_(3.0)
    assert torch.equal(case.inputs.a, fresh.a) and torch.equal(case.inputs.b, fresh.b)
    # A cache bounded in bytes: past the budget the oldest cases are dropped (the
    # newest always stays), and a dropped case is recomputed equal.
    one_case = case.inputs.nbytes
    monkeypatch.setattr(references_module, "CASE_CACHE_BYTES", 3 * one_case)
    for seed in range(100, 104):
        seeded_case(spec, seed)
    assert len(references_module._cases) == 3
    again = seeded_case(spec, 11)
    assert again is not case and torch.equal(again.inputs.b, case.inputs.b)
    monkeypatch.setattr(references_module, "CASE_CACHE_BYTES", 0)
    assert seeded_case(spec, 12) is not None
    assert list(references_module._cases) == [(spec.key(), 12, "cpu")]


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@pytest.mark.parametrize("name", ["fake.exact", "fake.m1_only"])
def test_correct_variants_pass_and_are_timed(spec: MatmulSpec, name: str) -> None:
    v = variant(name)
    reason = v.unsupported_reason(spec, CPU)
    if reason is not None:
        assert name == "fake.m1_only" and (spec.m != 1 or spec.kind != "matmul")
        return
    result = measure(spec, v)
    assert result.status is Status.PASS, result.reason
    # three trials, or as many as judge 32 outputs (a single output: 32 trials)
    assert result.metrics is not None
    assert result.metrics.trials == max(3, math.ceil(32 / math.prod(shapes(spec)["out"])))
    assert result.metrics.norm_rel <= result.metrics.tol_norm
    assert result.clocks.device is not None and result.clocks.device.n >= 3
    assert result.clocks.host is not None


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("cheat.zeros", "norm-wise error"),
        ("cheat.half", "error"),  # the unwritten half keeps its fresh prefill
        ("cheat.previous", "trial 2/3"),
        ("cheat.first_seed", "trial 2/3"),
        ("cheat.one_element", "error"),
        ("cheat.sloppy", "norm-wise error"),  # 1e-3 relative: fine for bf16, not for f32
        ("cheat.scribble", "trial 1/3"),  # graded against the inputs it was given
    ],
)
@pytest.mark.parametrize(
    "spec",
    [spec_of(n=300, k=96), spec_of(op="matmul_alpha_beta", batch=2, n=150, k=33, alpha=0.125)],
)
def test_every_cheater_fails_loudly(name: str, needle: str, spec: MatmulSpec) -> None:
    result = measure(spec, variant(name))
    assert result.status is Status.FAIL
    assert needle in result.reason
    assert result.clocks.device is None  # a wrong kernel is never timed
    assert result.metrics is not None


def test_one_bad_element_is_caught_where_the_norm_misses_it() -> None:
    spec = spec_of(n=40000, k=16, dtype="bf16")
    result = measure(spec, variant("cheat.one_element"))
    assert result.status is Status.FAIL
    assert result.reason.startswith("trial 1/3: element ")
    assert result.metrics is not None and result.metrics.norm_rel < result.metrics.tol_norm


def test_sloppy_is_within_bf16_tolerance() -> None:
    result = measure(spec_of(n=300, k=96, dtype="bf16"), variant("cheat.sloppy"))
    assert result.status is Status.PASS


@pytest.mark.parametrize(("dtype", "k"), [("f32", 1), ("f16", 896), ("bf16", 4864)])
def test_tolerance_grows_only_by_the_fp32_accumulation_term(dtype: str, k: int) -> None:
    small, small_rel = tolerance(dtype, k)
    large, large_rel = tolerance(dtype, 4 * k)
    assert small < large <= 2 * small and small_rel < large_rel
    if dtype != "f32":  # half-precision bounds: the output rounding, not √K
        assert large < 1.02 * small and large_rel < 1.02 * small_rel


@pytest.mark.parametrize("dtype", ["f16", "bf16", "q8_0"])
def test_the_norm_wise_bound_reaches_the_per_element_one_for_a_single_output(dtype: str) -> None:
    """A single output is its own norm: judged by the per-element bound there, and by
    the plain norm-wise bound (within 3 %) over a thousand outputs or more. Between,
    the bound never loosens as outputs are added."""
    bounds = [spec_tolerance(spec_of(n=n, k=96, dtype=dtype)) for n in (1, 2, 7, 64, 1000, 151936)]
    norm, element = tolerance("f16" if dtype == "q8_0" else dtype, 96)
    assert bounds[0] == (element, element)
    assert all(a[0] > b[0] for a, b in itertools.pairwise(bounds))
    assert bounds[-2][0] == pytest.approx(norm + (element - norm) / 1000**0.5)
    assert norm < bounds[-1][0] < 1.01 * norm
    assert all(b[1] == element for b in bounds)


@pytest.mark.parametrize("n", [1, 2, 7])
@pytest.mark.parametrize("cheat", ["cheat.half_running_sum", "cheat.drop_k_tail"])
def test_arithmetic_cheaters_still_fail_on_a_few_outputs(cheat: str, n: int) -> None:
    """The wider norm-wise bound over few outputs lets through nothing the
    per-element bound does not: an fp16 running sum over 38 K tiles, or a dropped
    K tail, fails on one output as on thousands."""
    result = measure(spec_of(n=n, k=4864, dtype="f16"), variant(cheat))
    assert result.status is Status.FAIL, (cheat, n, result.metrics)


def test_relative_error_uses_a_small_floor_not_one() -> None:
    ref = torch.tensor([[[1e-3, 2e-3, 1.0]]], dtype=torch.float64)
    out = ref.clone()
    out[0, 0, 0] = 2e-3  # 100 % off on a small element
    result = compare(out, ref)
    # With a floor of 1 this would read 1e-3; a floor of 1 % of the RMS keeps it large.
    assert result.max_rel > 0.1
    assert result.worst_index == (0, 0, 0)


def test_nan_in_output_is_counted() -> None:
    ref = torch.ones((1, 1, 4), dtype=torch.float64)
    out = ref.clone()
    out[0, 0, 2] = math.nan
    result = compare(out, ref)
    assert result.nonfinite == 1 and result.failure(1.0, 1.0) is not None


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (fake_variants.CompilationError("x"), ErrorKind.COMPILE),
        (fake_variants.OutOfMemoryError("CUDA out of memory"), ErrorKind.OOM),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), ErrorKind.CRASH),
        (
            RuntimeError(
                "out of resource: shared memory, Required: 262144, Hardware limit: 232448"
            ),
            ErrorKind.LAUNCH,
        ),
        (ValueError("bad"), ErrorKind.EXCEPTION),
    ],
)
def test_error_classification(exc: Exception, kind: ErrorKind) -> None:
    assert classify(exc)[0] is kind


# ---- planning, caching, invalidation -------------------------------------------------


def test_plan_states_and_reasons(tmp_path: Path) -> None:
    specs = [
        spec_of(),
        spec_of(m=4),
        spec_of(dtype="q8_0"),
        spec_of(n=None, n0=3, n1=4, tA=None, tB=None),
    ]
    variants = [variant("fake.exact"), variant("fake.m1_only"), variant("fake.gpu_only")]
    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan(specs, variants, CPU, FAST, store)
    reasons = {(p.spec.key(), p.variant.id): p.reason for p in plan.of(PairState.UNSUPPORTED)}
    assert reasons[(specs[1].key(), "fake.m1_only/default")] == "needs m=1"
    assert "not cpu" in reasons[(specs[0].key(), "fake.gpu_only/default")]
    assert "dtype q8_0" in reasons[(specs[2].key(), "fake.exact/default")]
    assert "layout" in reasons[(specs[3].key(), "fake.exact/default")]
    assert len(plan.of(PairState.RUN)) == 3  # exact ×2, m1_only on spec 0
    assert "3 to run" in plan.summary() and "9 unsupported" in plan.summary()


def _run(
    store: ResultStore,
    specs: list[MatmulSpec],
    variants: list[Variant],
    policy: TimingPolicy = FAST,
    force: bool = False,
) -> Any:
    plan = make_plan(specs, variants, CPU, policy, store, force=force)
    run_id = store.start_run("test", {})
    outcome = execute(plan, store, CPU, policy, run_id=run_id, factory=FACTORY, timeout_s=60)
    store.finish_run(run_id, "done")
    return plan, outcome


def test_cache_reuse_and_invalidation(tmp_path: Path) -> None:
    spec = spec_of(op="matmul_alpha_beta", alpha=0.125)
    exact = variant("fake.exact")
    with ResultStore(tmp_path / "s.db") as store:
        plan, outcome = _run(store, [spec], [exact])
        assert outcome.fresh == 1
        plan, outcome = _run(store, [spec], [exact])
        assert [p.state for p in plan.pairs] == [PairState.CACHED] and outcome.fresh == 0
        # alpha, dtype, timing policy, forced: each re-runs the pair
        for changed, policy, force in [
            (spec_of(op="matmul_alpha_beta", alpha=0.25), FAST, False),
            (spec_of(op="matmul_alpha_beta", alpha=0.125, dtype="f16"), FAST, False),
            (
                spec,
                TimingPolicy(min_samples=4, max_samples=5, budget_s=0.01, host_samples=3),
                False,
            ),
            (spec, FAST, True),
        ]:
            plan = make_plan([changed], [exact], CPU, policy, store, force=force)
            assert plan.pairs[0].state is PairState.RUN, (changed.key(), policy)
        # A changed kernel source changes the fingerprint: only its pairs re-run.
        edited = fake_variants.variant_family(
            name="fake.exact", ops=fake_variants.ALL_OPS, sources=("# edited",)
        )(fake_variants.fake_exact.build)
        plan = make_plan([spec], [Variant(edited), exact], CPU, FAST, store)
        assert [p.state for p in plan.pairs] == [PairState.RUN, PairState.CACHED]


def test_failures_are_cached_errors_are_retried(tmp_path: Path) -> None:
    spec = spec_of()
    with ResultStore(tmp_path / "s.db") as store:
        _run(store, [spec], [variant("cheat.zeros"), variant("fake.broken", fault="raise")])
        plan = make_plan(
            [spec],
            [variant("cheat.zeros"), variant("fake.broken", fault="raise")],
            CPU,
            FAST,
            store,
        )
        assert [p.state for p in plan.pairs] == [PairState.CACHED, PairState.RUN]


def test_a_newer_harness_or_kernel_reruns_cached_pairs_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_of()
    variants = [
        variant("fake.exact"),
        variant("cheat.zeros"),
        variant("fake.broken", fault="raise"),
    ]
    with ResultStore(tmp_path / "s.db") as store:
        plan, _ = _run(store, [spec], variants)
        assert [p.reason for p in plan.pairs] == [NEW, NEW, NEW]
        plan = make_plan([spec], variants, CPU, FAST, store)
        assert [(p.state, p.reason) for p in plan.pairs] == [
            (PairState.CACHED, ""),
            (PairState.CACHED, ""),
            (PairState.RUN, ERRORED),
        ]
        assert plan.summary().startswith(
            "3 pairs: 1 to run (1 re-run: earlier result was an error), 2 cached"
        )
        # A newer harness (its validation edited) must not serve the older verdicts.
        newer = tmp_path / "measure"
        newer.mkdir()
        for file in fingerprint.measurement_sources().values():
            shutil.copy(file, newer / file.name)
        with (newer / "validate.py").open("a", encoding="utf-8") as f:
            f.write("\nSTRICTER = True\n")
        monkeypatch.setattr(fingerprint, "MEASURE_DIR", newer)
        fingerprint.measurement_fingerprint.cache_clear()
        try:
            plan = make_plan([spec], variants, CPU, FAST, store)
        finally:
            monkeypatch.undo()
            fingerprint.measurement_fingerprint.cache_clear()
        assert [(p.state, p.reason) for p in plan.pairs] == [(PairState.RUN, POLICY_CHANGED)] * 3
        assert "3 to run (3 harness or timing policy changed), 0 cached" in plan.summary()
        # An edited kernel: only its pair, and the plan says which change it was.
        edited = fake_variants.variant_family(
            name="fake.exact", ops=fake_variants.ALL_OPS, sources=("# edited",)
        )(fake_variants.fake_exact.build)
        plan = make_plan([spec], [Variant(edited), variants[1]], CPU, FAST, store)
        assert [(p.state, p.reason) for p in plan.pairs] == [
            (PairState.RUN, SOURCE_CHANGED),
            (PairState.CACHED, ""),
        ]


# ---- worker isolation -------------------------------------------------------------------


def test_crashes_hangs_and_errors_cost_only_their_rows(tmp_path: Path) -> None:
    spec = spec_of()
    flaky = [variant("fake.flaky", mode=m) for m in ("ok", "segv", "ok", "hang", "exit")]
    flaky[2] = Variant(flaky[0].family, (("mode", "ok"),))
    broken = [variant("fake.broken", fault=f) for f in ("compile", "oom", "raise")]

    def in_workers(variants: list[Variant], timeout_s: float) -> dict[int, Any]:
        """Each variant's result on ``spec`` from worker processes, by its index."""
        results: dict[int, Any] = {}
        run_tasks(
            [Task(i, spec, v) for i, v in enumerate(variants)],
            factory=FACTORY,
            device=CPU,
            policy=FAST,
            run_id=None,
            timeout_s=timeout_s,
            on_start=lambda t: None,
            on_result=lambda t, r: results.__setitem__(t.index, r),
        )
        return results

    results = in_workers(flaky, timeout_s=5)
    assert results[0].status is Status.PASS
    assert results[1].status is Status.ERROR and results[1].error_kind is ErrorKind.CRASH
    assert results[2].status is Status.PASS  # a fresh worker carried on
    assert results[3].error_kind is ErrorKind.TIMEOUT
    assert results[4].error_kind is ErrorKind.CRASH and "exit code 3" in results[4].reason
    results = in_workers(broken, timeout_s=30)
    kinds = [results[i].error_kind for i in range(3)]
    assert kinds == [ErrorKind.COMPILE, ErrorKind.OOM, ErrorKind.EXCEPTION]
    assert "out of bounds" in results[2].reason


def test_interrupt_keeps_finished_rows(tmp_path: Path) -> None:
    specs = [spec_of(n=n) for n in (5, 6, 7)]
    exact = variant("fake.exact")

    def interrupted_runner(tasks: list[Task], **kw: Any) -> None:
        first = tasks[0]
        kw["on_result"](first, measure(first.spec, first.variant))
        raise KeyboardInterrupt

    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan(specs, [exact], CPU, FAST, store)
        outcome = execute(
            plan, store, CPU, FAST, run_id=store.start_run("t", {}), runner=interrupted_runner
        )
        assert outcome.interrupted and outcome.fresh == 1
        assert len(store.results()) == 1
        again = make_plan(specs, [exact], CPU, FAST, store)
        assert [p.state for p in again.pairs] == [PairState.CACHED, PairState.RUN, PairState.RUN]


def test_two_runs_on_one_store_share_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs started together on one store, with the same plan: each pair is
    measured once — by whichever run claimed its chunk — and both runs report every pair."""
    import threading

    from matprobe.run import runner as runner_mod

    monkeypatch.setattr(runner_mod, "SOLO_CLAIM_CHUNK", 2)
    specs = [spec_of(n=n) for n in (5, 6, 7, 8, 9, 10)]
    exact = variant("fake.exact")
    measured: list[tuple[int, str]] = []
    lock = threading.Lock()
    both_planned = threading.Barrier(2)

    def slow_runner(tasks: list[Task], **kw: Any) -> None:
        for task in tasks:
            kw["on_start"](task)
            result = measure(task.spec, task.variant)
            with lock:
                measured.append((kw["run_id"], task.spec.key()))
            time.sleep(0.05)
            kw["on_result"](task, result)

    outcomes: list[Any] = []

    def one_run() -> None:
        with ResultStore(tmp_path / "s.db") as store:
            plan = make_plan(specs, [exact], CPU, FAST, store)
            run_id = store.start_run("t", {})
            both_planned.wait()  # both plans see every pair to run
            outcomes.append(execute(plan, store, CPU, FAST, run_id=run_id, runner=slow_runner))
            store.finish_run(run_id, "done")

    threads = [threading.Thread(target=one_run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == 2
    assert sorted(key for _, key in measured) == sorted(s.key() for s in specs)  # once each
    for outcome in outcomes:
        assert len(outcome.results) == len(specs)
        assert outcome.fresh + outcome.shared == len(specs)
    assert {run for run, _ in measured} == {o.run_id for o in outcomes}  # both did some


def test_a_pair_another_run_measured_and_released_is_taken_not_measured_again(
    tmp_path: Path,
) -> None:
    """Run B planned a pair; run A measured it, stored it and ended (its claims void)
    before B got to it: B's claim succeeds, and B takes A's row instead of measuring
    the pair a second time (found on CI: two runs on one store measured a pair twice)."""
    from matprobe.run.work import WorkQueue

    pair_spec = spec_of(n=9)
    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan([pair_spec], [variant("fake.exact")], CPU, FAST, store)
        (pair,) = plan.pairs
        assert pair.key is not None
        earlier = store.get_many([pair.key])  # B's view when it planned: nothing
        first = store.start_run("A", {})
        store.put(replace(measure(pair_spec, pair.variant), run_id=first))
        store.finish_run(first, "done")
        shared: list[tuple[int, Any]] = []
        second = store.start_run("B", {})
        work = WorkQueue(
            [[(0, pair.key, pair_spec.key())]],
            store,
            second,
            lambda indices: (
                [[Task(i, pair_spec, pair.variant) for i in indices]] if indices else []
            ),
            lambda index, result: shared.append((index, result)),
            earlier,
        )
        assert work.take() is None  # nothing left to measure
        assert [(i, r.run_id) for i, r in shared] == [(0, first)]


def test_a_claim_of_a_run_that_ended_is_void(tmp_path: Path) -> None:
    """A run that stopped (or died) without measuring what it claimed does not
    block the next one: its claims are cleared and the pairs are taken over."""
    specs = [spec_of(n=n) for n in (5, 6)]
    exact = variant("fake.exact")
    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan(specs, [exact], CPU, FAST, store)
        keys = [p.key for p in plan.pairs if p.key is not None]
        first = store.start_run("first", {})
        assert store.claim(keys, first) == set(keys)
        second = store.start_run("second", {})
        assert store.claim(keys, second) == set()  # held by a live run
        store.finish_run(first, "interrupted")
        assert store.claim(keys, second) == set(keys)


# ---- reports --------------------------------------------------------------------------


def _profiled(spec: MatmulSpec, count: int, avg_ms: float) -> MatmulSpec:
    stats = Stats(count, count * avg_ms, avg_ms, avg_ms, avg_ms, avg_ms, avg_ms)
    return spec.with_provenance(Provenance((BackendTiming("mps", stats),), "test"))


def test_report_ranks_only_valid_results(tmp_path: Path) -> None:
    spec = _profiled(spec_of(n=200, k=64), count=100, avg_ms=0.3)
    variants = [
        variant("fake.exact"),
        variant("cheat.zeros"),
        variant("fake.broken", fault="raise"),
        variant("fake.gpu_only"),
    ]
    with ResultStore(tmp_path / "s.db") as store:
        plan, outcome = _run(store, [spec], variants)
    report = build_report(
        plan, outcome, baselines={"matmul": "fake.exact"}, device=CPU, policy=FAST, tokens=10
    )
    (section,) = report.sections
    statuses = [row.result.status for row in section.rows]
    assert statuses == [Status.PASS, Status.FAIL, Status.ERROR]
    # The baseline is compared against, never crowned: none of ours passed (the FAIL
    # and the ERROR are not ranked), so there is no best.
    assert section.best_id is None
    assert "baseline" in section.rows[0].tags and "best-device" not in section.rows[0].tags
    assert "FAIL" in section.rows[1].tags
    assert section.unsupported == (("fake.gpu_only/default", "runs on cuda, not cpu"),)
    text = render_terminal(report)
    assert "✗ cheat.zeros/default: FAIL" in text
    assert "unsupported (not failures): 1 pair — [u1]" in text  # cited; said once, below
    assert "  [u1] runs on cuda, not cpu" in text
    assert "unsupported (not failures): 1 × runs on cuda, not cpu" in render_terminal(report, None)
    markdown = render_markdown(report)
    assert markdown.startswith("# matprobe report") and "| variant |" in markdown
    data = json.loads(json.dumps(to_json(report)))
    samples = data["specs"][0]["results"][0]["clocks"]["device"]["samples"]
    assert len(samples) >= 3
    csv_text = to_csv(report)
    assert csv_text.splitlines()[0].startswith("spec_key,variant_id,status")
    assert "cheat.zeros/default,fail" in csv_text


def test_impact_uses_counts_and_tokens() -> None:
    from matprobe.report.model import Report, SpecSection

    spec = _profiled(spec_of(), count=240, avg_ms=0.2)
    section = SpecSection(spec, (), (), "base", "fast", baseline_us=10.0, best_us=6.0)
    report = Report([section], CPU, FAST, "", 1, 0.0, False, tokens=10)
    assert section.saving_us == pytest.approx(4.0)
    assert report.impact_ms() == pytest.approx(240 * 4.0 / 1000)
    assert "96.0 µs per token over 10 tokens" in render_terminal(report)


@pytest.mark.parametrize("seed_n", [1, 2])
def test_cancelling_sums_are_judged_on_the_term_scale(seed_n: int) -> None:
    """n = 1 with a bias: an output can cancel to ~0 while its terms are O(1); plain
    fp32 (torch's own matmul) must pass, and a wrong answer must still fail."""
    from matprobe.kernels.peers.torch_ref import torch_matmul

    spec = spec_of(op="matmul_bias_add", n=seed_n, k=300)
    assert measure(spec, torch_matmul.variants()[0]).status is Status.PASS
    assert measure(spec, variant("cheat.sloppy")).status is Status.FAIL
