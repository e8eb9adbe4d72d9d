"""What analysts and data engineers see, in a real browser: headless Chromium (Debian's
/usr/bin/chromium, driven by Playwright) over the session's webserver and demo ingest
(tests/e2e/conftest.py). The asset catalog lists every asset with its description; the
transactions page shows its columns' descriptions and passed checks; a balances
materialization shows the record's daily balance chart; `ledgerlake report` opens as one
page with a chart per account. Screenshots land in the session's temporary folder (the path
is printed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from assets.catalog import lake_descriptions
from tests.conftest import chromium
from tests.e2e.conftest import dagster_page

CHROMIUM = chromium()  # fails the module without a browser to drive

from playwright.sync_api import Page  # noqa: E402

pytestmark = pytest.mark.slow  # the demo and the webserver (shared), then a browser: ~30 s


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ui-screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def page(webserver) -> Page:
    """One browser page for the module; Dagster's first-visit dialog dismissed once."""
    with dagster_page(webserver.url) as page:
        yield page


def test_the_catalog_lists_every_asset_with_its_description(page, webserver, shots):
    from pipeline.definitions import defs

    missing = []
    by_folder: dict[str, list] = {}  # the catalog lists a key's prefix as a folder
    for node in defs.resolve_asset_graph().asset_nodes:
        by_folder.setdefault("/".join(node.key.path[:-1]), []).append(node)
    for folder, nodes in sorted(by_folder.items()):
        page.goto(f"{webserver.url}/assets/{folder}")
        for node in nodes:  # the description's first words: the list may clip a long one
            page.get_by_text(node.description[:40]).first.wait_for()
        text = page.inner_text("body")
        missing += [n.key.to_user_string() for n in nodes
                    if n.key.path[-1] not in text or n.description[:40] not in text]
        page.screenshot(path=str(shots / f"catalog{folder and '-'}{folder}.png"))
    assert "warehouse" in by_folder and missing == [], missing
    # filtered the way Dagster users do: the pii tag finds identity alone
    page.goto(f"{webserver.url}/assets?asset-selection=tag%3Apii")
    page.get_by_text("Who the record's customer is").first.wait_for()
    assert page.get_by_text("Every transaction of the record").count() == 0


def test_transactions_shows_column_descriptions_and_passed_checks(page, webserver, shots):
    page.goto(f"{webserver.url}/assets/transactions")
    told = lake_descriptions("transactions")
    page.get_by_text(told["amount"]).first.wait_for()
    text = page.inner_text("body")
    # the UI renders a description's Markdown: `code` shows without its backticks
    assert [c for c, d in told.items() if d.replace("`", "") not in text] == []
    page.screenshot(path=str(shots / "transactions.png"), full_page=True)
    page.goto(f"{webserver.url}/assets/transactions?view=checks")
    for check in ("running_balance_reconciles", "connected_records_fresh"):
        page.get_by_text(check, exact=True).first.wait_for()
    page.get_by_text("Passed", exact=True).first.wait_for()  # the selected check's result
    listed = page.inner_text("body")
    assert listed.count("Succeeded") >= 2 and "Failed" not in listed
    page.screenshot(path=str(shots / "transactions-checks.png"))


def test_identity_shows_each_column_class_and_no_personal_value(page, webserver, shots):
    """Issue 20: the classification in the column table; a batch's materialization tells its
    counts and where each record's landing is, never a person's values."""
    page.goto(f"{webserver.url}/assets/identity")
    page.get_by_text(lake_descriptions("identity")["bvn_hash"]).first.wait_for()
    text = page.inner_text("body")
    page.screenshot(path=str(shots / "identity.png"), full_page=True)
    for cls in ("public", "personal", "sensitive"):  # a tag on each column
        assert f"class: {cls}" in text, cls
    page.goto(f"{webserver.url}/assets/identity?view=events")
    page.get_by_text("each_record", exact=True).first.wait_for()
    page.get_by_text("published", exact=True).first.wait_for()
    shown = page.inner_text("body")
    page.screenshot(path=str(shots / "identity-events.png"), full_page=True)
    assert "select * from landings where run_id" in shown
    assert not re.search(r"(?<!\d)22\d{9}(?!\d)", shown)  # never a sandbox BVN (22 + 9 digits)
    assert "sealed" not in shown and "preview" not in shown


def test_a_balances_materialization_shows_the_chart(page, webserver, shots):
    page.goto(f"{webserver.url}/assets/balances")
    row = page.locator("tr", has_text="daily_balance")
    row.get_by_text("Show Markdown").click()
    image = page.locator("img[src^='data:image/png']").first
    image.wait_for()
    width, height, loaded = image.evaluate("i => [i.naturalWidth, i.naturalHeight, i.complete]")
    assert loaded and (width, height) == (640, 208)
    page.screenshot(path=str(shots / "balances-chart.png"))
    page.keyboard.press("Escape")


def test_the_report_opens_whole_with_a_chart_per_account(page, demo, shots):
    with duckdb.connect(str(demo.home / "warehouse.duckdb"), read_only=True) as con:
        record, accounts = con.execute(
            "select record_id, count(*) from accounts group by 1 order by 2 desc, 1 limit 1"
        ).fetchone()
    out = shots / "report.html"
    made = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", record,
                           "--output", str(out)], env=demo.env, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    asked = []  # anything the page would fetch: a self-contained page asks for nothing
    # a page of its own: the shared one may still be polling the Dagster UI it showed last
    report = page.context.new_page()
    report.route("**/*", lambda route: (asked.append(route.request.url), route.continue_()))
    try:
        report.goto(out.as_uri())
        # a desktop's width, then a phone's: the page never scrolls sideways, nor does any of
        # its tables, and the charts shown are drawn for the width (their text at least at
        # the size it was drawn, not a wide chart shrunk to 5 px letters)
        for width, name in ((1280, "report.png"), (390, "report-phone.png")):
            report.set_viewport_size({"width": width, "height": 844})
            charts = report.locator("figure.chart svg:visible")
            assert charts.count() == accounts > 1
            assert all(charts.nth(i).bounding_box()["height"] > 100 for i in range(accounts))
            page_width, view_width, tables, scale = report.evaluate("""() => [
                document.documentElement.scrollWidth, document.documentElement.clientWidth,
                Array.from(document.querySelectorAll("div.table"))
                     .map(t => t.scrollWidth - t.clientWidth),
                Math.min(...Array.from(document.querySelectorAll("figure svg"))
                     .filter(s => s.getClientRects().length)
                     .map(s => s.getBoundingClientRect().width / s.viewBox.baseVal.width))]""")
            assert page_width <= view_width, (width, page_width, view_width)
            assert tables and max(tables) <= 0, (width, tables)
            assert scale >= 1, (width, scale)
            checks = report.locator("table", has_text="running_balance_reconciles")
            assert "passed" in checks.inner_text() and "failed" not in checks.inner_text()
            report.screenshot(path=str(shots / name), full_page=True)
    finally:
        report.close()
    assert asked == [out.as_uri()], asked
