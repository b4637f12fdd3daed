"""The HTML report: one self-contained page, a plot per spec, every name escaped.

Read as markup here (what the file holds); tests/test_browser.py opens it in
a real browser."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from matprobe.report.compare import compare_reports
from matprobe.report.html import render_compare_html, render_html
from matprobe.report.model import Report
from matprobe.report.svg_plot import Axis, TimedRow, esc, timing_chart
from stored_runs import (
    CRASHING,
    FAILING,
    HOSTILE,
    HOSTILE_SHOWN,
    OURS,
    STANDARD,
    RunPlan,
    store_run,
)

ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return store_run(tmp_path_factory.mktemp("html") / "r.sqlite")


def policy(page: str) -> str:
    """The page's Content-Security-Policy."""
    found = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert found is not None
    return html.unescape(found.group(1))


def test_a_plot_for_every_spec(report: Report) -> None:
    page = render_html(report)
    figures = re.findall(r'<figure class="plot">(<svg.*?</svg>)</figure>', page, re.DOTALL)
    assert len(figures) == len(report.sections) == 3
    for figure, section in zip(figures, report.sections, strict=True):
        timed = [row for row in section.rows if row.timed]
        assert figure.count("<circle") == len(timed)  # a dot per validated variant
        assert "baseline " in figure and "production (mps" in figure  # both reference lines
        assert figure.count('class="bar"') + figure.count('class="bar over"') == len(timed)


def test_the_page_has_what_the_text_report_has(report: Report) -> None:
    page = render_html(report)
    for heading in ("Summary", "Impact per token"):
        assert f"<h2>{heading}</h2>" in page
    assert "saved µs/token" in page and "calls per token" in page  # the token table
    assert "timing policy " + report.policy.fingerprint in page
    assert "torch 2.13.0, triton 3.6.0" in page and "streaming read 3000 GB/s" in page
    # FAIL and ERROR rows, with their reasons, and the unsupported pairs apart
    assert page.count('<tr class="fail">') == 1 and page.count('<tr class="error">') == 1
    for variant in (FAILING, CRASHING):
        assert f"✗ {variant}: " in page
    assert "trial 2/3: norm-wise error 0.3" in page
    assert page.count("unsupported pairs (not failures)") == 3


def test_no_name_reaches_the_markup(report: Report) -> None:
    """Device, backend, variant, source and reason all carry <script>, a backtick and
    an ESC: each appears escaped, none raw, and ESC is spelled out as on a terminal."""
    page = render_html(report)
    assert "alert(1)</script>" not in page
    assert "\x1b" not in page
    assert ESCAPED in page and "\\x1b[2J" in page
    assert "<script" not in page  # the page has no script at all


def test_the_svg_page_is_small_and_loads_nothing(report: Report) -> None:
    page = render_html(report)
    assert len(page.encode()) < 60_000
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:)?//""", page)
    assert "default-src 'none'" in policy(page) and "script-src 'none'" in policy(page)


def test_every_mark_of_a_plot_carries_its_figures_as_a_tooltip(report: Report) -> None:
    """The one plot path is SVG: each variant's dot and bar say their figures on
    hover (an SVG <title>), so nothing the dropped interactive charts showed is lost."""
    page = render_html(report)
    figure = re.search(r'<figure class="plot">(<svg.*?</svg>)</figure>', page, re.DOTALL)
    assert figure is not None
    tips = re.findall(r"<title>(.*?)</title>", figure.group(1))
    timed = [row for row in report.sections[0].rows if row.timed]
    assert len(tips) > len(timed)  # the chart's own title, then a tip per mark
    for row in timed:
        shown = esc(row.result.variant_id)
        assert any(shown in tip and "µs" in tip for tip in tips), row.result.variant_id


def test_a_spec_with_nothing_timed_still_gets_a_plot() -> None:
    chart = timing_chart("t", [], baseline_us=None, production_us=None, read_ceiling=False)
    assert chart.startswith("<svg") and "no validated, timed variant" in chart


def test_faster_than_the_read_ceiling_is_flagged() -> None:
    row = TimedRow("k", 1.0, 0.9, 1.1, 10, "ours", pct_read=130.0)
    chart = timing_chart("t", [row], baseline_us=None, production_us=None, read_ceiling=True)
    assert 'class="bar over"' in chart and "&gt;100%!" in chart


def test_axes() -> None:
    wide = Axis.fit([5.0, 239.0], 0, 100)
    assert wide.log and wide.ticks()[:3] == [5.0, 10.0, 20.0]
    assert wide.x(5.0) < wide.x(10.0) < wide.x(239.0) <= 100
    narrow = Axis.fit([5.1, 5.4], 0, 100)
    assert not narrow.log and all(5.0 <= t <= 5.5 for t in narrow.ticks())


def test_the_comparison_page(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    a = store_run(db, RunPlan(STANDARD.medians, seed=1))
    b = store_run(db, RunPlan(STANDARD.medians, seed=2, scale={OURS: 1.1}))
    comparison = compare_reports(a, b, a_name=f"run 1 {HOSTILE}", b_name="run 2")
    page = render_compare_html(comparison)
    assert "<script" not in page and ESCAPED in page and "\x1b" not in page
    assert page.count('<figure class="plot"><svg') == 3
    assert page.count('class="v-SLOWER"') == 3  # ours, 10 % slower on every spec
    with_section = render_html(b, comparison=comparison)
    assert '<section id="compare">' in with_section and HOSTILE_SHOWN.split("`")[1] in page
