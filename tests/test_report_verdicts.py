"""What a report concludes from hand-made results: peers never crowned, a figure above
the read ceiling flagged, interleaved ratios with their interval (and SAME within
noise), calls per token by attention site, and names from a profile escaped."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pytest

from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import Clocks, ClockStats, ErrorMetrics, PairResult, Ratio, Status
from matprobe.measure.timing import TimingPolicy
from matprobe.measure.variants import Variant, VariantFamily
from matprobe.report.build import build_report
from matprobe.report.json_csv import to_csv, to_json
from matprobe.report.markdown import render_markdown
from matprobe.report.model import Report
from matprobe.report.text import render_terminal
from matprobe.run.runner import PairState, Plan, PlannedPair, RunOutcome
from matprobe.safetext import md_safe, term_safe
from matprobe.spec import BackendTiming, MatmulSpec, Provenance
from matprobe.stats import Stats

CUDA = DeviceInfo(kind="cuda", name="test GPU", capability=(9, 0))
POLICY = TimingPolicy()
BASE, NUMPY, OURS, OURS2 = "torch.matmul", "numpy.matmul", "triton.ours", "triton.other"
PEERS = {BASE, NUMPY}  # as the registry flags them: the vendor library is a peer too
GEMV = "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16"


def profiled(key: str, count: int, backend: str = "mps") -> MatmulSpec:
    stats = Stats(count, count * 0.2, 0.2, 0.2, 0.2, 0.2, 0.2)
    return MatmulSpec.parse(key).with_provenance(
        Provenance((BackendTiming(backend, stats),), "test")
    )


def variant_of(family: str) -> Variant:
    def never(*_: Any) -> Any:
        raise AssertionError("reports never build kernels")

    return Variant(VariantFamily(family, frozenset({"matmul"}), frozenset({"cuda"}), never))


def result(
    spec: MatmulSpec,
    family: str,
    us: float,
    *,
    ratio: Ratio | None = None,
    status: Status = Status.PASS,
) -> PairResult:
    return PairResult(
        spec_key=spec.key(),
        variant_id=f"{family}/default",
        family=family,
        params={},
        fingerprint="fp",
        device="dev",
        policy="pol",
        status=status,
        reason="" if status is Status.PASS else "norm_rel 0.3 > tol",
        metrics=ErrorMetrics(1e-4, 1e-4, 1e-5, 0, 1e-3, 1e-2, 3),
        clocks=Clocks(device=ClockStats.from_samples([us] * 5), vs_baseline=ratio),
    )


def report_of(
    cases: Sequence[tuple[MatmulSpec, Sequence[PairResult]]],
    *,
    peers: Collection[str] = PEERS,
    peaks: Mapping[str, Any] | None = None,
    tokens: int | None = 10,
    device: DeviceInfo = CUDA,
    unjudged: Collection[tuple[str, str]] = (),
) -> Report:
    pairs, results = [], {}
    for spec, spec_results in cases:
        for r in spec_results:
            pairs.append(PlannedPair(spec, variant_of(r.family), PairState.RUN))
            results[(spec.key(), r.variant_id)] = r
    plan = Plan(pairs)
    outcome = RunOutcome(1, plan, results, not_judged_apart=set(unjudged))
    baselines = dict.fromkeys(("matmul", "matmul_bias_add", "matmul_alpha_beta"), BASE)
    return build_report(
        plan,
        outcome,
        baselines=baselines,
        device=device,
        policy=POLICY,
        peaks=peaks,
        tokens=tokens,
        peers=peers,
    )


def ratio(median: float, lo: float, hi: float, baseline_us: float = 10.0) -> Ratio:
    return Ratio(f"{BASE}/default", median, lo, hi, 40, baseline_us)


def words(text: str) -> str:
    """``text`` with its line breaks and indents as single spaces: prose wrapped at
    100 columns reads the same."""
    return " ".join(text.split())


def summary_row(text: str, needle: str) -> str:
    """The summary's row for ``needle``: its line, and the cells it continues on the
    lines under it (a cell too wide for 100 columns breaks there), column by column."""
    lines = text[text.index("Summary") : text.index("Impact")].splitlines()
    first = next(i for i, line in enumerate(lines) if needle in line)
    own = [lines[first]]
    for line in lines[first + 1 :]:
        if not line.startswith("    "):
            break
        own.append(line)
    starts = [0, *(m.end() for m in re.finditer(r"\S  +(?=\S)", own[0]))]
    ends = [*starts[1:], None]
    cells = [[line[a:b].strip() for line in own] for a, b in zip(starts, ends, strict=True)]
    return "  ".join(" ".join(piece for piece in cell if piece) for cell in cells)


# ---- peers -------------------------------------------------------------------------


def test_a_faster_peer_is_shown_but_never_crowned() -> None:
    spec = profiled(GEMV, count=240)
    report = report_of(
        [(spec, [result(spec, BASE, 10.0), result(spec, NUMPY, 5.0), result(spec, OURS, 8.0)])]
    )
    (section,) = report.sections
    assert section.best_id == f"{OURS}/default" and section.best_us == 8.0
    assert (section.best_peer_id, section.best_peer_us) == (f"{NUMPY}/default", 5.0)
    tags = {row.result.family: row.tags for row in section.rows}
    assert "peer" in tags[NUMPY] and "best-device" not in tags[NUMPY]
    assert "baseline" in tags[BASE] and "peer" in tags[BASE] and "best-device" not in tags[BASE]
    assert "best-device" in tags[OURS]
    assert report.impact_ms() == pytest.approx(240 * 2.0 / 1000)  # ours vs baseline only
    text = render_terminal(report, None)  # every column (100 columns leave peer µs out)
    assert "best peer" in text and "peer µs" in text
    assert f"{NUMPY}/default  5.00" in summary_row(text, "matmul 1×896×896")
    data = to_json(report)
    flags = {r["family"]: r["peer"] for r in data["specs"][0]["results"]}
    assert flags == {BASE: True, NUMPY: True, OURS: False}
    assert data["specs"][0]["best_peer"] == f"{NUMPY}/default"


def test_with_only_peers_and_the_baseline_nothing_is_crowned_or_saved() -> None:
    """The CPU run that crowned numpy.matmul and printed '5874.9 ms saved'."""
    spec = profiled(GEMV, count=2280)
    report = report_of([(spec, [result(spec, BASE, 900.0), result(spec, NUMPY, 12.0)])])
    (section,) = report.sections
    assert section.best_id is None and section.saving_us is None
    assert report.impact_ms() == 0.0
    text = render_terminal(report)
    assert "best-device" not in text and "no spec judged, so no saving is claimed" in text
    assert "not judged on 1" in text


def test_the_baseline_is_not_ours_even_when_not_a_peer() -> None:
    spec = profiled(GEMV, count=10)
    report = report_of([(spec, [result(spec, BASE, 3.0), result(spec, OURS, 4.0)])], peers=())
    (section,) = report.sections
    assert section.best_id == f"{OURS}/default"
    assert section.saving_us == pytest.approx(-1.0)  # slower: shown, never counted
    assert report.impact_ms() == 0.0
    assert "the baseline is at least as fast on 1" in words(render_terminal(report))


@pytest.mark.parametrize("whose", [OURS2, BASE])
def test_a_row_no_witness_judged_is_shown_but_neither_crowned_nor_compared_with(
    whose: str,
) -> None:
    """On a Ray cluster a plugin's row stands on its own worker's word: a forged
    2 µs is shown, tagged, and takes neither the crown from an honest row nor the
    baseline's place (whose figure every ratio would be to)."""
    spec = profiled(GEMV, count=24)
    rows = [result(spec, BASE, 10.0), result(spec, OURS, 8.0), result(spec, OURS2, 2.0)]
    if whose == BASE:
        rows[0] = result(spec, BASE, 2.0)
    report = report_of([(spec, rows)], unjudged={(spec.key(), f"{whose}/default")})
    (section,) = report.sections
    row = next(r for r in section.rows if r.result.family == whose)
    assert "not-judged-apart" in row.tags and not row.ranked and "best-device" not in row.tags
    assert section.best_id == f"{OURS2 if whose == BASE else OURS}/default"
    if whose == BASE:
        assert section.baseline_us is None and section.saving_us is None
    else:
        assert section.baseline_us == 10.0
    assert "not-judged-apart" in render_terminal(report, None)


# ---- the read ceiling ----------------------------------------------------------------


def test_a_row_above_the_read_ceiling_says_so_instead_of_a_percentage() -> None:
    spec = profiled(GEMV, count=10)  # 1.609 MB a call
    fast, slow = result(spec, OURS, 0.5), result(spec, OURS2, 1.0)  # 3218 and 1609 GB/s
    peaks = {
        "read_gbps": 3000.0,
        "copy_gbps": 2900.0,
        "read_config": "4 programs/SM",
        "size_bytes": float(2**30),
    }
    report = report_of([(spec, [result(spec, BASE, 2.0), fast, slow])], peaks=peaks)
    rows = {row.result.family: row for row in report.sections[0].rows}
    assert rows[OURS].exceeds_read_ceiling and not rows[OURS2].exceeds_read_ceiling
    (note,) = [n for n in report.notes if "ceiling" in n]
    assert f"{OURS}/default" in note and "3218 GB/s" in note and "3000 GB/s" in note
    assert OURS2 not in note and "suspect" in note
    text = render_terminal(report)
    assert ">100%!" in text and "107%" not in text and "54%" in text
    assert words(note) in words(text)  # wrapped at 100 columns
    assert "&gt;100%!" in render_markdown(report) and "107%" not in render_markdown(report)
    data = json.loads(json.dumps(to_json(report)))
    flags = {r["family"]: r["exceeds_read_ceiling"] for r in data["specs"][0]["results"]}
    assert flags == {BASE: False, OURS: True, OURS2: False}
    assert note in data["notes"]
    assert "measured peaks (this run)" in text and "4 programs/SM" in text


def test_no_ceiling_note_when_every_row_is_under_it() -> None:
    spec = profiled(GEMV, count=10)
    report = report_of(
        [(spec, [result(spec, BASE, 2.0), result(spec, OURS, 1.0)])],
        peaks={"read_gbps": 3000.0, "copy_gbps": 2900.0},
    )
    assert not [n for n in report.notes if "ceiling" in n]
    assert ">100%!" not in render_terminal(report)


# ---- interleaved ratios ------------------------------------------------------------------


def test_the_interleaved_ratio_gives_the_cells_and_the_saving() -> None:
    spec = profiled(GEMV, count=240)
    ours = result(spec, OURS, 7.5, ratio=ratio(0.79, 0.78, 0.80, baseline_us=10.0))
    report = report_of([(spec, [result(spec, BASE, 9.0), ours])])
    (section,) = report.sections
    assert section.best_ratio == ours.clocks.vs_baseline and section.interleaved
    # the saving is the interleaved one (10 − 10 × 0.79), not 9.0 − 7.5 from the medians
    assert section.saving_us == pytest.approx(2.1)
    assert report.impact_ms() == pytest.approx(240 * 2.1 / 1000)
    text = render_terminal(report)
    assert "0.79× [0.78–0.80]" in text
    assert "1.27× [1.25–1.28]" in summary_row(text, "matmul 1×896×896")
    assert "not interleaved" not in text
    data = to_json(report)["specs"][0]
    assert data["best_ratio"]["median"] == 0.79 and data["interleaved"] is True
    (mine,) = [r for r in data["results"] if r["family"] == OURS]
    assert mine["vs_baseline_interleaved"]["lo"] == 0.78
    assert "0.79" in to_csv(report).splitlines()[-1] or "0.79" in to_csv(report)


def test_an_interval_holding_one_is_same_within_noise_and_saves_nothing() -> None:
    spec = profiled(GEMV, count=240)
    ours = result(spec, OURS, 9.0, ratio=ratio(0.99, 0.97, 1.02))
    report = report_of([(spec, [result(spec, BASE, 10.0), ours])])
    (section,) = report.sections
    assert section.same_within_noise and section.saving_us == 0.0
    assert report.impact_ms() == 0.0
    text = render_terminal(report)
    # the speed-up column's figure (baseline ÷ best), as in every other row
    assert "SAME within noise (1.01× [0.98–1.03])" in summary_row(text, "matmul 1×896×896")
    assert "SAME within noise on 1" in text
    assert to_json(report)["specs"][0]["verdict"] == "same"


def test_without_a_ratio_the_separate_medians_are_used_and_marked() -> None:
    spec = profiled(GEMV, count=240)
    report = report_of([(spec, [result(spec, BASE, 10.0), result(spec, OURS, 8.0)])])
    (section,) = report.sections
    assert section.best_ratio is None and section.saving_us == pytest.approx(2.0)
    text = render_terminal(report)
    assert "1.25× (not interleaved)" in summary_row(text, "matmul 1×896×896")
    assert "2.00 (not interleaved)" in text  # the impact table's saving per call


# ---- calls per token ------------------------------------------------------------------------


def test_attention_calls_per_token_come_from_its_sites() -> None:
    """Two Q·Kᵀ shapes (context 50 and 51) of 24 calls each are one site: 24 calls
    a token, 12 a spec — not 24 ÷ 10 tokens."""
    weights = profiled(GEMV, count=240)
    qk = [
        profiled(
            f"op=matmul_alpha_beta | batch=14 | m=1 | n={n} | k=64 | tA=0 | tB=1 | "
            "alpha=0.1250 | dtype=f16",
            count=24,
        )
        for n in (50, 51)
    ]
    cases = [(s, [result(s, BASE, 3.0), result(s, OURS, 2.0)]) for s in [weights, *qk]]
    report = report_of(cases, tokens=10)
    per_token = {s.spec.n: report.calls_per_token(s) for s in report.sections}
    assert per_token == {896: 24.0, 50: 12.0, 51: 12.0}
    assert report.impact_us_per_token() == pytest.approx(24 * 1.0 + 12 + 12)
    assert report.impact_ms() == pytest.approx((240 + 24 + 24) * 1.0 / 1000)  # per run
    text = render_terminal(report)
    assert "= 48.0 µs per token over 10 tokens" in text
    assert "calls per token: other specs count ÷ 10 tokens; 1 attention site" in text
    assert "24 calls in the profile (12 per token)" in text
    assert to_json(report)["per_token_basis"].startswith("calls per token")


# ---- hostile names ----------------------------------------------------------------------------


HOSTILE = "\x1b[2J`<b>|\nINJECTED"


def test_escape_helpers() -> None:
    assert term_safe("a\x1b[2Jb\nc\x9b") == "a\\x1b[2Jb\\nc\\x9b"
    assert md_safe("a|b`c<b>&\nd[x](y)\\") == "a\\|b\\`c&lt;b&gt;&amp; d\\[x\\](y)\\\\"


def test_names_from_a_profile_are_escaped_in_text_and_markdown() -> None:
    # A spec key cannot hold '|', whitespace or '=', but ESC, '`' and '<' pass its parser.
    key = GEMV + " | tag=\x1b[2J`<b>"
    spec = profiled(key, count=10, backend=HOSTILE)
    evil = "evil" + HOSTILE  # a variant family named by whoever wrote a plug-in
    report = report_of(
        [
            (
                spec,
                [
                    result(spec, BASE, 2.0),
                    result(spec, evil, 1.0),
                    result(spec, OURS, 3.0, status=Status.FAIL),
                ],
            )
        ]
    )
    text, markdown = render_terminal(report), render_markdown(report)
    assert "<b>" not in markdown  # (harmless on a terminal)
    for out in (text, markdown):
        assert "\x1b" not in out
        for line in out.splitlines():  # a newline in a name never starts a line
            assert not line.lstrip("|- ").startswith("INJECTED"), line
    assert "\\x1b[2J`<b>|\\nINJECTED" in text  # visible, inert
    assert "&lt;b&gt;" in markdown and "\\`" in markdown
    tables = [line for line in markdown.splitlines() if line.startswith("|")]
    header = len(re.findall(r"(?<!\\)\|", tables[0]))
    assert all(len(re.findall(r"(?<!\\)\|", line)) == header for line in tables[:5])
    assert json.loads(json.dumps(to_json(report)))["specs"][0]["spec"]["key"] == key


# ---- noise -----------------------------------------------------------------------------


def test_a_winner_with_a_huge_spread_is_called_noisy() -> None:
    """A shared CPU's wall clock (p10–p90 168–11966 µs around ~300): the speed-up is
    printed with a NOISY warning and the row is tagged, never a bare confident ratio."""
    spec = profiled(GEMV, 24)
    wild = dataclasses.replace(
        result(spec, OURS, 300.0, ratio=ratio(0.79, 0.7, 0.9, 380.0)),
        clocks=Clocks(
            device=ClockStats.from_samples([168.0, 250.0, 300.0, 320.0, 11966.0] * 4),
            vs_baseline=ratio(0.79, 0.7, 0.9, 380.0),
        ),
    )
    steady = result(spec, BASE, 380.0)
    report = report_of([(spec, [steady, wild])])
    (section,) = report.sections
    tags = {row.result.family: row.tags for row in section.rows}
    assert "noisy" in tags[OURS] and "noisy" not in tags[BASE]
    line = summary_row(render_terminal(report), "matmul 1×896×896")
    assert "1.27× [1.11–1.43] NOISY: spread > 50% of the median" in words(line)


# ---- clocks that disagree, and the baseline a ratio was taken against ----------------------

CPU = DeviceInfo(kind="cpu", name="test CPU")


def clocked(
    spec: MatmulSpec, family: str, device_us: float, hot_us: float, host_us: float, **kw: Any
) -> PairResult:
    r = result(spec, family, device_us, **kw)
    clocks = dataclasses.replace(
        r.clocks,
        hot=ClockStats.from_samples([hot_us] * 5),
        host=ClockStats.from_samples([host_us] * 5),
    )
    return dataclasses.replace(r, clocks=clocks)


@pytest.mark.parametrize(
    ("device_us", "disagree"),
    [(112_000.0, True), (250.0, True), (190.0, False), (60.0, False), (25.0, True)],
)
def test_on_the_cpu_a_row_whose_clocks_disagree_is_tagged_and_never_crowned(
    device_us: float, disagree: bool
) -> None:
    """The 14×52×64 batched matmul at 112 000 µs beside hot and host clocks of 60
    and 96 µs: on the CPU the three clocks time the same call."""
    spec = profiled(GEMV, count=24)
    rows = [clocked(spec, BASE, 150.0, 140.0, 160.0), clocked(spec, OURS, device_us, 60.0, 96.0)]
    (section,) = report_of([(spec, rows)], device=CPU).sections
    ours = next(r for r in section.rows if r.result.family == OURS)
    assert ("clocks-disagree" in ours.tags) is disagree
    assert (section.best_id is None) is disagree
    # On a GPU the hot clock reads L2 and the host clock pays the launch: never compared.
    (gpu,) = report_of([(spec, rows)]).sections
    assert gpu.best_id == f"{OURS}/default"


def test_a_baseline_whose_clocks_disagree_is_no_figure_to_compare_with() -> None:
    spec = profiled(GEMV, count=24)
    rows = [clocked(spec, BASE, 9000.0, 140.0, 160.0), clocked(spec, OURS, 100.0, 90.0, 110.0)]
    report = report_of([(spec, rows)], device=CPU)
    (section,) = report.sections
    assert section.baseline_us is None and section.saving_us is None
    assert report.impact_ms() == 0.0


def test_a_ratio_to_a_baseline_that_ran_apart_from_its_row_says_so() -> None:
    """'vs base 2.14×' beside medians of 166 and 126 µs: the ratio is to the baseline
    timed in the pair's own rounds (78 µs there), and the row now says it."""
    spec = profiled(GEMV, count=24)
    odd = ratio(2.14, 2.1, 2.2, baseline_us=77.6)
    rows = [result(spec, BASE, 126.0), result(spec, OURS, 166.0, ratio=odd)]
    report = report_of([(spec, rows)])
    assert "[pair-base 77.6 µs]" in render_terminal(report, None)
    text = render_terminal(report)  # 100 columns: a line under the table
    assert (
        f"{OURS}/default: its vs base is to the baseline timed in its own rounds, 77.6 µs" in text
    )
    close = ratio(1.3, 1.29, 1.31, baseline_us=120.0)
    rows = [result(spec, BASE, 126.0), result(spec, OURS, 166.0, ratio=close)]
    assert "pair-base" not in render_terminal(report_of([(spec, rows)]))
