"""`matprobe compare A B`: the ratio of device times with an interval from the raw
samples, and a verdict that calls a real 10 % change and never calls noise a change.

The statistics are checked where the truth is known (seeded draws from one
distribution, or from one 10 % slower), then end to end on stored runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import digest
from conftest import run_cli as matprobe
from matprobe.report.compare import (
    RatioEstimate,
    Thresholds,
    Verdict,
    compare_reports,
    judge,
    ratio_interval,
)
from stored_runs import BASELINE, BIAS, GEMV, NUMPY, OURS, STANDARD, RunPlan, store_run

T = Thresholds()


def draws(median: float, n: int, seed: int, noise: float) -> np.ndarray:
    return median * np.exp(np.random.default_rng(seed).normal(0.0, noise, n))


def verdict_of(a: np.ndarray, b: np.ndarray) -> Verdict:
    return judge(RatioEstimate.of(list(a), list(b), T), a.size, b.size, T)


# ---- the statistics -------------------------------------------------------------------


@pytest.mark.parametrize("noise", [0.01, 0.03, 0.05])
def test_a_ten_percent_slowdown_is_slower_and_a_speedup_faster(noise: float) -> None:
    for seed in range(30):
        a = draws(10.0, 20, seed, noise)
        slower = draws(11.0, 20, seed + 10_000, noise)
        faster = draws(10.0 / 1.1, 20, seed + 20_000, noise)
        assert verdict_of(a, slower) is Verdict.SLOWER, seed
        assert verdict_of(a, faster) is Verdict.FASTER, seed
        ratio, lo, hi = ratio_interval(a, slower)
        assert lo < 1.1 < hi and abs(ratio - 1.1) < 0.05


@pytest.mark.parametrize(
    ("noise", "n", "outliers"),
    [(0.01, 10, 0.0), (0.05, 20, 0.0), (0.3, 25, 0.0), (0.03, 30, 0.1)],
    ids=["quiet GPU", "noisy GPU", "CPU", "preempted rounds"],
)
def test_two_draws_of_one_distribution_are_not_called_a_change(
    noise: float, n: int, outliers: float
) -> None:
    """The false-positive rate over many seeds stays within 5 % (it is ~1 % at the 99 %
    interval); noise makes a pair SAME or UNSURE, not FASTER or SLOWER."""
    changes = 0
    trials = 400
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        a, b = (draws(10.0, n, seed * 2 + i, noise) for i in (0, 1))
        for sample in (a, b):  # a few rounds 3× slower, as a preempted round is
            sample[rng.random(n) < outliers] *= 3.0
        changes += verdict_of(a, b) in (Verdict.FASTER, Verdict.SLOWER)
    assert changes / trials <= 0.05


def test_the_interval_covers_the_true_ratio_as_often_as_it_claims() -> None:
    """At 95 %, the Mann–Whitney interval holds the true ratio (1.1) in ~95 % of draws:
    a wrong rank k would make it too narrow (more false calls) or too wide."""
    covered = 0
    for seed in range(400):
        a, b = draws(10.0, 15, seed, 0.04), draws(11.0, 25, seed + 999, 0.04)
        _, lo, hi = ratio_interval(a, b, confidence=0.95)
        covered += lo <= 1.1 <= hi
    assert 0.92 <= covered / 400 <= 0.985


def test_the_estimate_is_exact_where_the_answer_is() -> None:
    a = draws(10.0, 20, 1, 0.05)
    assert ratio_interval(a, a)[0] == pytest.approx(1.0)
    assert ratio_interval(a, 2 * a)[0] == pytest.approx(2.0)
    ratio, lo, hi = ratio_interval([5.0] * 10, [6.0] * 10)
    assert (ratio, lo, hi) == pytest.approx((1.2, 1.2, 1.2))


def test_non_positive_samples_are_not_times() -> None:
    assert ratio_interval([-1.0, 0.0, 10.0, 10.0], [20.0, 20.0])[0] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no positive samples"):
        ratio_interval([0.0, -2.0], [1.0])


def test_what_each_verdict_means() -> None:
    n = T.min_samples

    def verdict(ratio: float, lo: float, hi: float, same: tuple[float, float]) -> Verdict:
        return judge(RatioEstimate(ratio, lo, hi, *same), n, n, T)

    # too few samples: even a 2× difference is not called
    assert judge(RatioEstimate(2.0, 1.9, 2.1, 1.95, 2.05), n - 1, 50, T) is Verdict.UNSURE
    # a real but tiny change (interval excludes 1, estimate within the noise): SAME
    assert verdict(0.99, 0.985, 0.995, (0.987, 0.993)) is Verdict.SAME
    # holds 1, and the 90 % interval rules out any change beyond ±10 %: SAME
    assert verdict(1.0, 0.9, 1.1, (0.93, 1.07)) is Verdict.SAME
    # holds 1 but a 15 % change either way is plausible: UNSURE
    assert verdict(1.0, 0.8, 1.25, (0.85, 1.15)) is Verdict.UNSURE
    # excludes 1 and beyond the noise threshold: called, however wide
    assert verdict(0.7, 0.5, 0.9, (0.55, 0.85)) is Verdict.FASTER
    assert verdict(1.3, 1.1, 1.6, (1.15, 1.5)) is Verdict.SLOWER


# ---- stored runs ------------------------------------------------------------------


def test_a_run_compared_with_itself_is_same_for_every_pair(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db)
    code, text = matprobe("compare", "1", "1", "--store", str(db), "--format", "json")
    assert code == 0
    data = json.loads(text)
    verdicts = [p["verdict"] for p in data["pairs"]]
    assert len(verdicts) == 9  # every timed pair of the run
    assert verdicts.count("SAME") / len(verdicts) >= 0.95


def test_a_rerun_of_unchanged_code_is_same(tmp_path: Path) -> None:
    """A/A': the same kernels measured again (new draws) — no change is called."""
    db = tmp_path / "r.sqlite"
    first = store_run(db, RunPlan(STANDARD.medians, seed=1))
    second = store_run(db, RunPlan(STANDARD.medians, seed=2))
    c = compare_reports(first, second)
    verdicts = [p.verdict for p in c.pairs]
    assert Verdict.FASTER not in verdicts and Verdict.SLOWER not in verdicts
    assert verdicts.count(Verdict.SAME) / len(verdicts) >= 0.95


def test_compare_names_the_slowed_and_the_sped_up_variants(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db, RunPlan(STANDARD.medians, seed=1))
    store_run(db, RunPlan(STANDARD.medians, seed=2, scale={OURS: 1.1, NUMPY: 1 / 1.1}))
    code, text = matprobe("compare", "1", "2", "--store", str(db), "--format", "json")
    assert code == 0
    by_pair = {(p["spec_key"], p["variant_id"]): p for p in json.loads(text)["pairs"]}
    for spec in (GEMV, BIAS):
        assert by_pair[(spec, OURS)]["verdict"] == "SLOWER"
        assert by_pair[(spec, OURS)]["ratio"] == pytest.approx(1.1, abs=0.03)
        assert by_pair[(spec, NUMPY)]["verdict"] == "FASTER"
        assert by_pair[(spec, BASELINE)]["verdict"] == "SAME"
    code, text = matprobe("compare", "1", "2", "--store", str(db))
    line = next(x for x in text.splitlines() if OURS in x and "n=896" not in x)
    assert "SLOWER" in line and "1.1" in line


def test_a_device_wide_shift_is_named(tmp_path: Path) -> None:
    """Another card or clock moves every pair, the baseline too: the output says so, so
    that 'all SLOWER' is not read as every kernel having regressed."""
    db = tmp_path / "r.sqlite"
    store_run(db, RunPlan(STANDARD.medians, seed=1))
    everything = {v: 1.05 for medians in STANDARD.medians.values() for v in medians}
    store_run(db, RunPlan(STANDARD.medians, seed=2, scale=everything))
    code, text = matprobe("compare", "1", "2", "--store", str(db))
    assert code == 0
    shift = re.search(r"the baselines moved too: B ÷ A ([0-9.]+)× \(median over 3 specs\)", text)
    assert shift is not None and float(shift.group(1)) == pytest.approx(1.05, abs=0.015)
    code, text = matprobe("compare", "1", "1", "--store", str(db))
    assert "baselines moved" not in text


def test_every_output_form(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db, RunPlan(STANDARD.medians, seed=1))
    store_run(db, RunPlan(STANDARD.medians, seed=2, scale={OURS: 1.1}))
    code, md = matprobe("compare", "1", "2", "--store", str(db), "--format", "md")
    assert code == 0 and md.startswith("# matprobe compare") and "| SLOWER |" in md
    assert "<script>" not in md  # the hostile plugin name is escaped
    code, page = matprobe("compare", "1", "2", "--store", str(db), "--format", "html")
    assert code == 0 and page.startswith("<!DOCTYPE html>")
    assert page.count('<figure class="plot"><svg') == 3  # a ratio chart per spec
    assert "<script" not in page and "&lt;script&gt;" in page
    out = tmp_path / "cmp"
    code, _ = matprobe("compare", "1", "2", "--store", str(db), "--out", str(out))
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "compare.html",
        "compare.json",
        "compare.md",
        "compare.txt",
    ]


def test_runs_of_two_stores(tmp_path: Path) -> None:
    """STORE:RUN names a run of any store; a store alone means its latest run."""
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    store_run(a, RunPlan(STANDARD.medians, seed=1))
    store_run(b, RunPlan(STANDARD.medians, seed=2))
    store_run(b, RunPlan(STANDARD.medians, seed=3, scale={OURS: 1.1}))
    code, text = matprobe("compare", f"{a}:1", str(b), "--format", "json")
    assert code == 0
    data = json.loads(text)
    assert data["a"]["run_id"] == 1 and data["b"]["run_id"] == 2  # b's latest
    assert "SLOWER" in {p["verdict"] for p in data["pairs"]}


def test_a_pair_that_stopped_passing_is_listed_with_its_reason(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    store_run(db, RunPlan(STANDARD.medians, seed=1, failures=False))
    store_run(db, RunPlan(STANDARD.medians, seed=2, broken=frozenset({OURS})))
    code, text = matprobe("compare", "1", "2", "--store", str(db))
    assert code == 0
    table, changes = text.split("Status changed")
    changed = changes.strip().splitlines()[1:]
    assert len(changed) == 3  # one per spec
    assert all(f"{OURS}: PASS in A, FAIL in B — trial 2/3" in line for line in changed)
    assert OURS not in table.split("verdict")[-1]  # not compared: it has no time in B
    assert "2 only in B" in text  # the GEMV spec's FAIL and ERROR rows, new in run 2


def test_a_file_that_is_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    code, _ = matprobe("compare", str(text), str(text))
    assert code == 2
    assert "not a matprobe result store" in capsys.readouterr().err


def test_no_pair_in_common_is_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    store_run(a, RunPlan({GEMV: {OURS: 2.6}}, failures=False))
    store_run(b, RunPlan({BIAS: {OURS: 3.1}}, failures=False))
    code, out = matprobe("compare", str(a), str(b))
    err = capsys.readouterr().err
    assert code == 1 and out == ""
    assert "nothing to compare" in err and len(err.strip().splitlines()) == 1


def test_compare_never_writes_to_the_stores(tmp_path: Path) -> None:
    """The store's bytes stay as they were; SQLite may leave an empty -wal beside it
    (a read-only connection to a WAL database needs one), never a written frame."""
    db = tmp_path / "r.sqlite"
    store_run(db, RunPlan(STANDARD.medians, seed=1))
    store_run(db, RunPlan(STANDARD.medians, seed=2))
    before = digest(db)
    assert matprobe("compare", "1", "2", "--store", str(db))[0] == 0
    assert digest(db) == before
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
