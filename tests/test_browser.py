"""The HTML report in a real browser: Debian's Chromium, headless, driven by Playwright.

A store is built here (hand-made results whose device, backend, variant, source
and reasons carry ``<script>alert(1)</script>``, a backtick and an ESC), and
``matprobe report --out`` writes its page; the browser then opens it with every
request routed: the page must load with no console error and no request but the
file itself, show a plot for every spec, and show each hostile name as text
while running nothing (no dialog, no script element of its own).

No browser is downloaded (none can be): Playwright drives the system's
Chromium (``executable_path``). Where Chromium or Playwright is missing the
test skips with the reason — except under CI, where ``.ci/run`` installs both
and a skip would hide that the browser test did not run, so it fails.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from matprobe.cli import main
from stored_runs import HOSTILE_SHOWN, PLUGIN, store_run

#: Debian's binary first: /usr/bin/chromium is a shell wrapper around it.
CHROMIUM = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser")
SPECS = 3  # in stored_runs.STANDARD
PLUGIN_SHOWN = PLUGIN.replace("\x1b", "\\x1b")


def chromium() -> str | None:
    for candidate in (os.environ.get("MATPROBE_CHROMIUM", ""), *CHROMIUM):
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "playwright is not installed (pip install -e '.[dev]')"
    else:
        executable = chromium()
        missing = "" if executable else "no chromium found (apt-get install chromium)"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test cannot run in CI: {missing}")
        pytest.skip(missing)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.html as ``matprobe report --out`` writes it."""
    folder = tmp_path_factory.mktemp("browser")
    db = folder / "r.sqlite"
    store_run(db)
    code = main(["report", "1", "--store", str(db), "--out", str(folder)], out=io.StringIO())
    assert code == 0
    return folder / "report.html"


def visit(browser: Any, page_file: Path) -> tuple[Any, list[str]]:
    """The page loaded, and every problem seen: console errors and warnings, page
    errors, dialogs (an alert() that ran) and requests for anything but the file."""
    url = page_file.resolve().as_uri()
    problems: list[str] = []
    context = browser.new_context()

    def only_the_file(route: Any) -> None:
        if route.request.url == url:
            route.continue_()
        else:
            problems.append(f"request: {route.request.url}")
            route.abort()

    context.route("**/*", only_the_file)
    page = context.new_page()
    page.on("request", lambda r: r.url != url and problems.append(f"request: {r.url}"))
    page.on(
        "console",
        lambda m: m.type in ("error", "warning") and problems.append(f"console: {m.text}"),
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def dialog(d: Any) -> None:
        problems.append(f"dialog: {d.message}")
        d.dismiss()

    page.on("dialog", dialog)
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    return page, problems


def test_the_report_in_a_browser(browser: Any, page_file: Path) -> None:
    page, problems = visit(browser, page_file)
    # a plot for every spec, with a point per validated variant
    assert page.locator("section.spec").count() == SPECS
    figures = page.locator("section.spec figure.plot")
    assert figures.count() == SPECS
    for i in range(SPECS):
        assert figures.nth(i).locator("svg circle").count() >= 2, f"spec {i} has no variant"
    # hostile names are text: in the title and the table …
    assert HOSTILE_SHOWN in page.locator("h1").inner_text()
    cells = page.locator("section.spec td").all_text_contents()
    assert PLUGIN_SHOWN in cells
    # … and ran nothing: the page has no script
    assert page.locator("script").count() == 0
    page.context.close()
    assert problems == []
