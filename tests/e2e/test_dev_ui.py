"""What a data engineer sees over `ledgerlake dev` (what `make dev` runs), in headless Chromium:
the stack's own sensors land two new customers' records and build the views, then each page
is screenshot and its state asserted through the webserver's GraphQL, the queries the UI
sends: the checks of the batch's materialization, the freshness check, a run's balance chart,
the payments asset landed empty, a view's lineage. The screenshots land in
LEDGERLAKE_SCREENSHOTS when set (`make screenshots`: docs/screenshots, which the README
shows), else in the test's temporary folder."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import chromium
from tests.e2e.conftest import dagster_page, demo_env
from tests.e2e.test_webserver import STATES
from tests.postgres import free_port

CHROMIUM = chromium()  # fails the module without a browser to drive

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ASSETS = """
{
  assetNodes {
    assetKey { path }
    dependencyKeys { path }
    assetMaterializations(limit: 1) {
      metadataEntries { label ... on MarkdownMetadataEntry { mdStr }
                        ... on IntMetadataEntry { intValue } }
    }
  }
}
"""
LAUNCH = """
mutation($job: String!) {
  launchRun(executionParams: {selector: {repositoryLocationName: "pipeline.definitions",
    repositoryName: "__repository__", jobName: $job}, runConfigData: {}}) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  }
}
"""


def ask(url: str, query: str, **variables) -> dict:
    body = httpx.post(f"{url}/graphql", json={"query": query, "variables": variables},
                      timeout=60).json()
    assert "errors" not in body, body
    return body["data"]


def nodes(url: str, query: str) -> dict[str, dict]:
    return {"/".join(n["assetKey"]["path"]): n for n in ask(url, query)["assetNodes"]}


def metadata(node: dict) -> dict:
    (last,) = node["assetMaterializations"] or [{"metadataEntries": []}]
    return {e["label"]: e.get("mdStr", e.get("intValue")) for e in last["metadataEntries"]}


def checks(url: str) -> dict[tuple[str, str], dict | None]:
    return {(asset, c["name"]): c["executionForLatestMaterialization"]
            for asset, n in nodes(url, STATES).items()
            for c in (n["assetChecksOrError"] or {}).get("checks", [])}


def wait(what: str, ready, log: Path, proc: subprocess.Popen, limit_s: float = 420):
    deadline = time.monotonic() + limit_s
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if got := ready():
                return got
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{what}: not after {limit_s} s\n" + \
            log.read_text()[-3000:]
        time.sleep(2)


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    """`ledgerlake dev --customers 2` in its own home, until its records and views landed."""
    home = tmp_path_factory.mktemp("dev-ui")
    port, log = free_port(), home / "dev.log"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "dev", "--port", str(port),
                             "--customers", "2"], env=demo_env(home / "data"), cwd=home,
                            stdin=subprocess.DEVNULL, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait("the UI", lambda: httpx.get(f"{url}/server_info", timeout=5).is_success, log, proc)
        # the daemon's sensors: the records land, then the views are built over them
        def landed() -> bool:
            got = nodes(url, ASSETS)
            return bool(got["payments"]["assetMaterializations"]) and "](data:image" in (
                metadata(got["warehouse/daily_balances"]).get("summary") or "")

        wait("the records and views", landed, log, proc)
        # the hourly freshness run, launched as the UI's "Materialize" does
        launched = ask(url, LAUNCH, job="freshness_job")["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        wait("the freshness verdicts", lambda: all(
            (e or {}).get("status") == "SUCCEEDED" for (a, c), e in checks(url).items()
            if c == "connected_records_fresh"), log, proc)
        yield url, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def page(dev):
    with dagster_page(dev[0], height=900) as page:
        yield page


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("LEDGERLAKE_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.mark.parametrize("asset, check, shot", [
    ("transactions", "running_balance_reconciles", "ui-checks.png"),
    ("balances", "connected_records_fresh", "ui-freshness.png")])
def test_each_check_shows_the_verdict_on_what_it_judged(dev, page, shots, asset, check, shot):
    """Passed, tied to the materialization it judged: never Skipped (freshness, over a run
    of other records), never missing its target (a verdict logged without its data)."""
    url, _ = dev
    got = checks(url)
    for key in (("accounts", "account_has_record"), (asset, check)):
        assert got[key]["status"] == "SUCCEEDED" and got[key]["evaluation"]["success"], key
        assert got[key]["evaluation"]["targetMaterialization"], key
    page.goto(f"{url}/assets/{asset}?view=checks")
    page.get_by_text(check, exact=True).first.click()
    page.get_by_text("Passed", exact=True).first.wait_for()
    shown = page.inner_text("body")
    assert "Skipped" not in shown and "did not yield" not in shown
    page.screenshot(path=str(shots / shot))


def test_a_run_of_two_records_shows_each_ones_chart(dev, page, shots):
    url, _ = dev
    chart = metadata(nodes(url, ASSETS)["balances"])["daily_balance"]
    assert chart.count("](data:image/png;base64,") == 2, chart[:300]
    page.goto(f"{url}/assets/balances")
    page.locator("tr", has_text="daily_balance").get_by_text("Show Markdown").click()
    image = page.locator("img[src^='data:image/png']").first
    image.wait_for()
    assert image.evaluate("i => i.complete && i.naturalWidth > 100")
    page.screenshot(path=str(shots / "ui-balance-chart.png"))
    page.keyboard.press("Escape")


def test_payments_landed_empty_not_missing(dev, page, shots):
    url, _ = dev
    told = metadata(nodes(url, ASSETS)["payments"])
    assert told["dagster/row_count"] == 0 and told["published"] == 2
    page.goto(f"{url}/assets/payments")
    page.get_by_text("published", exact=True).first.wait_for()
    page.screenshot(path=str(shots / "ui-payments.png"))


def test_a_view_is_an_asset_with_its_lineage(dev, page, shots):
    url, _ = dev
    assets = nodes(url, ASSETS)
    view = assets["warehouse/daily_balances"]
    # the view reads the lake table the warehouse build derives from the products' tables
    assert {"/".join(k["path"]) for k in view["dependencyKeys"]} == {"daily_balances"}
    table = assets["daily_balances"]
    assert {"/".join(k["path"]) for k in table["dependencyKeys"]} == {"balances", "transactions"}
    assert "](data:image/png;base64," in metadata(view)["summary"]
    page.goto(f"{url}/assets/daily_balances?view=lineage")
    page.get_by_text("transactions", exact=True).first.wait_for()
    page.get_by_text("balances", exact=True).first.wait_for()
    page.wait_for_function("() => !document.body.innerText.includes('Loading')")
    page.screenshot(path=str(shots / "ui-view-lineage.png"))



# -- a data engineer's day: launch by hand, find a record, read true counts, link a bank ------

RUN = """
query($id: ID!) {
  runOrError(runId: $id) {
    ... on Run { status tags { key value }
                 eventConnection(afterCursor: null) { events { __typename
                   ... on MessageEvent { message }
                   ... on ExecutionStepFailureEvent { error { message } } } } }
  }
}
"""
RUNS = """
query($tags: [ExecutionTag!]) {
  runsOrError(filter: {tags: $tags}) { ... on Runs { results { runId } } }
}
"""
DRY_RUN = """
mutation($selector: ScheduleSelector!, $at: Float) {
  scheduleDryRun(selectorData: $selector, timestamp: $at) {
    ... on DryRunInstigationTick { evaluationResult {
      runRequests { runConfigYaml tags { key value } } error { message } } }
    ... on PythonError { message }
  }
}
"""
LAUNCH_AS_UI = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
REPO = {"repositoryLocationName": "pipeline.definitions", "repositoryName": "__repository__"}


def until(what: str, ready, log: Path, limit_s: float = 420):
    """`ready()`'s first true answer, polled every 2 s (the dev stack's log if it never is)."""
    deadline = time.monotonic() + limit_s
    while not (got := ready()):
        assert time.monotonic() < deadline, f"{what}: not after {limit_s} s\n" + \
            log.read_text()[-3000:]
        time.sleep(2)
    return got


def cli(dev, *args: str) -> subprocess.CompletedProcess:
    """A ledgerlake command beside the dev stack, over its data folder."""
    _, log = dev
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True,
                          text=True, env=demo_env(log.parent / "data"), cwd=log.parent,
                          timeout=300, check=False)


def sql(dev, query: str) -> list[dict]:
    out = cli(dev, "sql", query, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def finished(dev, run_id: str) -> dict:
    url, log = dev
    return until(f"run {run_id}", lambda: (r := ask(url, RUN, id=run_id)["runOrError"])
                 and r["status"] in ("SUCCESS", "FAILURE", "CANCELED") and r, log)


def tags_of(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["tags"]}


def test_a_launch_with_the_default_config_refuses_and_says_how(dev, page, shots):
    """The Launchpad opens refresh_job with no records: it cannot be launched (its records
    are required), says which entry is missing, and no run is made; the checks keep their
    verdicts. Records given as an empty list: the run fails at once, saying how to name them."""
    url, _ = dev
    before = checks(url)[("transactions", "running_balance_reconciles")]
    page.goto(f"{url}/locations/__repository__@pipeline.definitions/jobs/refresh_job/playground")
    page.get_by_text("Missing required config entry").first.wait_for()
    assert page.get_by_role("button", name="Launch Run").is_disabled()
    page.screenshot(path=str(shots / "ui-launch-without-records.png"))
    runs = len(ask(url, RUNS, tags=[])["runsOrError"]["results"])
    refused = ask(url, LAUNCH_AS_UI, params={
        "selector": {**REPO, "jobName": "refresh_job"}, "mode": "default",
        "runConfigData": {}})["launchRun"]
    assert refused["__typename"] == "RunConfigValidationInvalid", refused
    assert "resources" in refused["errors"][0]["message"]
    assert len(ask(url, RUNS, tags=[])["runsOrError"]["results"]) == runs  # no run made
    empty = ask(url, LAUNCH_AS_UI, params={
        "selector": {**REPO, "jobName": "refresh_job"}, "mode": "default",
        "runConfigData": {"resources": {"batch": {"config": {"records": []}}}}})["launchRun"]
    assert empty["__typename"] == "LaunchRunSuccess", empty
    run = finished(dev, empty["run"]["runId"])
    assert run["status"] == "FAILURE"
    assert tags_of(run)["ledgerlake/launched"] == "manual"
    said = " ".join((e.get("message") or "") + ((e.get("error") or {}).get("message") or "")
                    for e in run["eventConnection"]["events"])
    assert "names no record" in said and "records: [1, 2]" in said and "Launch all" in said
    assert "expected outputs" not in said and before["status"] == "SUCCEEDED"


def test_a_record_is_found_from_the_ui(dev, page, shots):
    """`ledgerlake status` names a record's number and last landing; the Runs page, filtered
    by the record's tag, lists that run; the asset's page says how."""
    url, _ = dev
    out = cli(dev, "status", "--json")
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)[0]
    number, landed = row["number"], row["landings"]["transactions"]["run_id"]
    told = cli(dev, "status", f"#{number}")
    assert f"record {row['record']}: connected (number #{number})" in told.stdout
    assert "  checks: " in told.stdout
    tag = {"key": f"ledgerlake/record-{number}", "value": "carried"}
    found = [r["runId"] for r in ask(url, RUNS, tags=[tag])["runsOrError"]["results"]]
    assert landed in found
    page.goto(f"{url}/runs?q%5B0%5D=tag%3Aledgerlake%2Frecord-{number}%3Dcarried")
    page.get_by_text(landed[:8]).first.wait_for()
    page.screenshot(path=str(shots / "ui-runs-of-a-record.png"))
    page.goto(f"{url}/assets/transactions")
    page.get_by_text("ledgerlake/record-N", exact=False).first.wait_for()


def test_the_row_count_is_the_tables(dev):
    """The asset's Row count (dagster/row_count) is its table's rows, as SQL counts them."""
    url, _ = dev
    told = metadata(nodes(url, ASSETS)["transactions"])
    (counted,) = sql(dev, "select count(*) as n from transactions")
    assert told["dagster/row_count"] == counted["n"] > 0


def test_a_run_from_the_schedules_preview_is_manual(dev):
    """daily_refresh's tick previewed, then launched from the preview (as its Launch all
    does: the request's tags and config): the run is tagged manual, and so are the balance
    snapshots it took."""
    url, _ = dev
    selector = {**REPO, "scheduleName": "daily_refresh"}
    tick = ask(url, DRY_RUN, selector=selector, at=time.time())["scheduleDryRun"]
    (request,) = tick["evaluationResult"]["runRequests"]
    assert {"key": "dagster/schedule_name", "value": "daily_refresh"} in request["tags"]
    launched = ask(url, LAUNCH_AS_UI, params={
        "selector": {**REPO, "jobName": "refresh_job"}, "mode": "default",
        "runConfigData": request["runConfigYaml"],
        "executionMetadata": {"tags": request["tags"]}})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    run = finished(dev, run_id)
    assert run["status"] == "SUCCESS"
    assert tags_of(run)["ledgerlake/launched"] == "manual"
    # the views follow the lake within a tick of their sensor
    query = ("select source, count(*) as n from balance_history "
             "where source in ('manual', 'schedule') group by 1")
    sources = until("the manual snapshots in the views", lambda: sql(dev, query), dev[1])
    assert [r["source"] for r in sources] == ["manual"], sources


def test_an_account_number_links_from_the_connect_page_to_the_lake(dev, page, shots):
    """The connect page `ledgerlake dev` prints: an account-number login, its two deposits
    confirmed on the page, and the record lands, told by `ledgerlake status` and SQL."""
    _, log = dev
    (demo_url,) = re.findall(r"^connect\s+(\S+)", log.read_text(), re.M)
    page.goto(demo_url)
    page.click("#open-iframe")
    f = page.frame_locator("#ledgerlake-connect-frame")
    f.locator("#bank-search").fill("wema")
    f.locator("button.bank:visible").first.click()
    f.locator("input[name=login_type][value=account_number]").check()
    f.locator("#account-number").fill("0123456789")
    f.locator("#login-submit").click()
    f.locator("#consent").check()
    f.locator("#accounts-submit").click()
    f.locator("#deposit-1").fill("0.01")
    f.locator("#deposit-2").fill("0.02")
    f.locator("#verify-submit").click()
    f.locator("#success-verified").wait_for()
    page.screenshot(path=str(shots / "connect-deposits-confirmed.png"))
    record = f.locator("#success-record").inner_text()

    def landed():
        out = cli(dev, "status", record, "--json")
        return out.returncode == 0 and json.loads(out.stdout)[0]["products"]["accounts"] \
            == "landed"

    until(f"record {record} in the lake", landed, log)
    query = f"select count(*) as n from accounts where record_id = '{record}'"
    assert until("its account in the views", lambda: sql(dev, query)[0]["n"], log) == 1
