"""The baseline timed beside a plugin's kernel, held to its own row of the same run
(``run/beside.py``). On c7320ff a plugin whose builder put a slower kernel into
the worker's cache of built baselines had an exact copy of the baseline ranked
0.55× of it: no binding changed, so the tamper snapshot saw nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

import fake_variants
from matprobe.kernels.peers.torch_ref import torch_matmul
from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import PairResult, Status
from matprobe.measure.timing import TimingPolicy
from matprobe.run.beside import (
    REFERENCE,
    SLOWER_LIMIT,
    hold_to_reference,
    with_reference_rows,
)
from matprobe.run.runner import PairState, Plan, PlannedPair, RunOutcome
from matprobe.run.store import ResultKey, ResultStore
from matprobe.spec import MatmulSpec
from stored_runs import passed

CUDA = DeviceInfo(kind="cuda", name="test GPU", capability=(9, 0))
CPU = DeviceInfo(kind="cpu", name="test CPU")
POLICY = TimingPolicy()
SPEC = MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=96 | k=72 | tA=0 | tB=1 | dtype=f16")
BASE = torch_matmul.variants()[0]
SHIPPED = fake_variants.fake_exact.variants()[0]
PLUGIN = dataclasses.replace(SHIPPED, family=dataclasses.replace(
    fake_variants.fake_exact, name="mine.exact", origin="my_kernels"
))  # fmt: skip
BASELINES = {"matmul": BASE}


def key(variant: object, device: DeviceInfo = CUDA) -> ResultKey:
    vid, fp = variant.id, variant.fingerprint  # type: ignore[attr-defined]
    return ResultKey(SPEC.key(), vid, fp, device.fingerprint, POLICY.fingerprint)


def planned(variant: object, state: PairState, device: DeviceInfo = CUDA) -> PlannedPair:
    return PlannedPair(SPEC, variant, state, key=key(variant, device))  # type: ignore[arg-type]


def row(variant: object, median_us: float, baseline_us: float | None = None) -> PairResult:
    """A PASS row timed at ``median_us``, its baseline beside it at ``baseline_us``."""
    vid = variant.id  # type: ignore[attr-defined]
    return passed(SPEC, vid, [median_us] * 5, run_id=1, baseline_us=baseline_us)


def test_a_plugin_candidate_on_a_card_has_its_baselines_own_row_measured_in_the_run() -> None:
    cached = Plan([planned(PLUGIN, PairState.RUN), planned(BASE, PairState.CACHED)])
    (_, base) = with_reference_rows(cached, BASELINES, CUDA).pairs
    assert base.state is PairState.RUN and base.reason == REFERENCE
    absent = with_reference_rows(Plan([planned(PLUGIN, PairState.RUN)]), BASELINES, CUDA)
    assert [(p.variant.id, p.state) for p in absent.pairs] == [
        (PLUGIN.id, PairState.RUN),
        (BASE.id, PairState.RUN),
    ]
    assert absent.pairs[1].key == key(BASE)
    # No plugin, or no card (the CPU's wall clock is too loose): the plan as it was.
    shipped = Plan([planned(SHIPPED, PairState.RUN), planned(BASE, PairState.CACHED)])
    assert with_reference_rows(shipped, BASELINES, CUDA) == shipped
    on_cpu = Plan([planned(PLUGIN, PairState.RUN, CPU), planned(BASE, PairState.CACHED, CPU)])
    assert with_reference_rows(on_cpu, BASELINES, CPU) == on_cpu


@pytest.mark.parametrize(
    ("slower", "flagged"),
    [(0.0, False), (SLOWER_LIMIT * 0.9, False), (SLOWER_LIMIT * 1.1, True), (0.8, True)],
)
def test_a_plugin_row_whose_baseline_ran_slower_beside_it_is_ranked_against_the_clean_figure(
    tmp_path: Path, slower: float, flagged: bool
) -> None:
    plan = Plan([planned(PLUGIN, PairState.RUN), planned(SHIPPED, PairState.RUN),
                 planned(BASE, PairState.RUN)])  # fmt: skip
    beside = 10.0 * (1 + slower)
    results = {
        (SPEC.key(), PLUGIN.id): row(PLUGIN, 9.0, beside),
        # a shipped family's worker never imported the plugin: not held to it, and
        # the baseline beside it is a clean figure too
        (SPEC.key(), SHIPPED.id): row(SHIPPED, 9.0, 10.0),
        (SPEC.key(), BASE.id): row(BASE, 10.0),
    }
    outcome = RunOutcome(run_id=1, plan=plan, results=dict(results))
    with ResultStore(tmp_path / "r.sqlite") as store:
        # The CPU's wall clock, shared with the host, is too loose for this check.
        assert hold_to_reference(outcome, BASELINES, store, CPU) == []
        assert hold_to_reference(outcome, BASELINES, store, CUDA) == (
            [PLUGIN.id] if flagged else []
        )
        stored = {r.variant_id: r for r in store.results()}
    mine = outcome.results[(SPEC.key(), PLUGIN.id)]
    assert outcome.results[(SPEC.key(), SHIPPED.id)].status is Status.PASS
    before = results[(SPEC.key(), PLUGIN.id)].clocks.vs_baseline
    assert mine.status is Status.PASS and before is not None
    ratio = mine.clocks.vs_baseline
    assert ratio is not None
    if flagged:
        # What slowed the baseline wins nothing: 9 µs against the clean 10 µs.
        assert ratio.baseline_us == 10.0 and ratio.median == pytest.approx(0.9)
        assert ratio.lo == pytest.approx(before.lo * (1 + slower))
        assert any(f"{slower:.1%} slower beside this kernel" in n for n in mine.clocks.notes)
        assert stored[PLUGIN.id] == mine
    else:
        assert ratio == before and not stored


@pytest.mark.parametrize(("clean_mode", "flagged"), [(10.0, True), (10.7, False)])
def test_the_reference_is_the_slowest_clean_figure_of_the_run(
    tmp_path: Path, clean_mode: float, flagged: bool
) -> None:
    """cuBLAS settles into one of two speeds per process on some shapes (an H200:
    an honest plugin's baseline 5.5 % slower beside it than in its own row). A
    shipped candidate's worker, which never imported the plugin, that saw the
    slower speed makes it the reference: the plugin's baseline, 11.2 µs beside it,
    is 12 % slower than the own row but 4.7 % slower than 10.7."""
    plan = Plan([planned(PLUGIN, PairState.RUN), planned(SHIPPED, PairState.RUN),
                 planned(BASE, PairState.RUN)])  # fmt: skip
    results = {
        (SPEC.key(), PLUGIN.id): row(PLUGIN, 9.0, 11.2),
        (SPEC.key(), SHIPPED.id): row(SHIPPED, 9.0, clean_mode),
        (SPEC.key(), BASE.id): row(BASE, 10.0),
    }
    outcome = RunOutcome(run_id=1, plan=plan, results=dict(results))
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert hold_to_reference(outcome, BASELINES, store, CUDA) == (
            [PLUGIN.id] if flagged else []
        )
    mine = outcome.results[(SPEC.key(), PLUGIN.id)]
    if flagged:
        note = mine.clocks.notes[-1]
        assert "(10.00 µs: its own row and beside 1 shipped candidates;" in note


def test_a_plugin_row_without_the_baselines_own_row_is_left_as_it_is(tmp_path: Path) -> None:
    """No own row (the baseline failed or was not run): nothing to hold to, and a
    shipped candidate's figure alone is no reference."""
    plan = Plan([planned(PLUGIN, PairState.RUN), planned(SHIPPED, PairState.RUN)])
    results = {
        (SPEC.key(), PLUGIN.id): row(PLUGIN, 9.0, 30.0),
        (SPEC.key(), SHIPPED.id): row(SHIPPED, 9.0, 10.0),
    }
    outcome = RunOutcome(run_id=1, plan=plan, results=dict(results))
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert hold_to_reference(outcome, BASELINES, store, CUDA) == []
