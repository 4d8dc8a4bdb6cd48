"""The HTML report fits a laptop screen: at a 1400 px wide viewport nothing widens the page
past it; a table wider than the text column scrolls inside it (CSS only: the page stays one
self-contained file). Checked in a real headless Chromium (tests/browser.py)."""

from __future__ import annotations

import pytest
from browser import Chromium, find_chromium, wait_for

CHROMIUM = find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (scripts/test.sh installs it when run as root)")
def test_report_fits_1400px(tmp_path, example_report):
    out = example_report  # gmpanalysis report of the example runs: the widest summary table shipped
    html = out.read_text()
    assert "<script" not in html and "<link" not in html
    browser = Chromium(CHROMIUM, tmp_path / "profile", width=1400, height=900)
    try:
        browser.open_page()
        browser.navigate(out.as_uri())
        wait_for(lambda: browser.evaluate("document.readyState") == "complete", 60, "the report to load",
                 alive=browser.alive)  # fmt: skip
        got = browser.evaluate(
            """(() => {
                const t = document.querySelector('table');
                return {page: document.documentElement.scrollWidth, view: window.innerWidth,
                        table: t.getBoundingClientRect().right, tableScroll: t.scrollWidth, tableBox: t.clientWidth};
            })()"""
        )
    finally:
        browser.close()
    assert got["view"] == 1400
    assert got["page"] <= 1400, got
    assert got["table"] <= 1400, got
    # the summary is wider than the column here: it scrolls inside its own box
    assert got["tableScroll"] >= got["tableBox"], got
