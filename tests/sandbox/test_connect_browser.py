"""The connect page in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright, no browser download) opens the demo host page, which embeds the page with
connect.js, and a user clicks (or types) through it. What the host's callbacks receive is
read back from the host page. A screenshot of each step lands in the test's tmp_path."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pipeline.demo import wait_for_events
from pipeline.local import tick

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
if not CHROMIUM:
    pytest.skip("SKIPPED: no chromium to drive (apt-get install -y chromium, or `make test`, "
                "which installs it)", allow_module_level=True)

from playwright.sync_api import Page, sync_playwright  # noqa: E402

pytestmark = pytest.mark.slow  # a browser and a sandbox: tens of seconds for the module
_users = itertools.count()


@pytest.fixture(scope="module")
def box(shared_sandbox):
    return shared_sandbox  # this module's own sandbox (conftest)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser) -> Page:
    ctx = browser.new_context(viewport={"width": 900, "height": 760})
    p = ctx.new_page()
    p.dialogs = []
    p.on("dialog", lambda d: (p.dialogs.append(d.message), d.dismiss()))
    try:
        yield p
    finally:
        ctx.close()


def settings(box, env: str = "sandbox", **body) -> dict:
    with box.api(env) as api:
        resp = api.post("settings/connect", json=body)
        assert resp.status_code == 200, resp.text
        return resp.json()["data"]


def banks(box) -> dict:
    with box.api() as api:
        return {b["slug"]: b for b in api.get("banks/list").json()["data"]["banks"]}


class Flow:
    """The demo host page with the connect page open in its iframe."""

    def __init__(self, page: Page, box, shots: Path, env: str = "sandbox", **query) -> None:
        self.page, self.box, self.shots, self.n = page, box, shots, 0
        conf = settings(box, env)
        params = {"key": conf["public_key"], **{k: str(v) for k, v in query.items()}}
        page.goto(conf["demo_url"].split("?")[0] + "?" + httpx.QueryParams(params).__str__())
        page.click("#open-iframe")
        self.frame = page.frame_locator("#ledgerlake-connect-frame")

    def shot(self, name: str) -> None:
        self.shots.mkdir(parents=True, exist_ok=True)
        self.n += 1
        self.page.screenshot(path=str(self.shots / f"{self.n:02d}-{name}.png"))

    def bank(self, query: str) -> None:
        f = self.frame
        f.locator("#step-bank").wait_for()
        self.shot("banks")
        f.locator("#bank-search").fill(query)
        f.locator("button.bank:visible").first.click()
        f.locator("#step-login").wait_for()

    def login(self, login_type: str = "bank", account_type: str | None = None,
              **fields) -> None:
        f = self.frame
        f.locator(f"input[name=login_type][value={login_type}]").check()
        if account_type:
            f.locator(f"input[name=account_type][value={account_type}]").check()
        for field, value in fields.items():
            f.locator(f".method[data-method={login_type}] input[name={field}]").fill(value)
        self.shot("login")
        f.locator("#login-submit").click()

    def mfa(self, answer: str) -> None:
        f = self.frame
        f.locator("#step-mfa").wait_for()
        self.shot("security-step")
        f.locator("#mfa-answer").fill(answer)
        f.locator("#mfa-submit").click()

    def accounts(self, picks=(0,)) -> None:
        f = self.frame
        f.locator("#step-accounts").wait_for()
        boxes = f.locator("input[name=account]")
        for i in range(boxes.count()):
            boxes.nth(i).set_checked(i in picks)
        f.locator("#consent").check()
        self.shot("accounts-and-consent")
        f.locator("#accounts-submit").click()

    def log(self, kind: str) -> dict:
        """The first value the host's callback of `kind` got, once it has come."""
        # functions, not expressions: the page's CSP forbids evaluating strings
        self.page.wait_for_function("k => window.connectLog.some(x => x.kind === k)",
                                    arg=kind, timeout=20_000)
        value = self.page.evaluate("k => window.connectLog.find(x => x.kind === k).value",
                                   kind)
        self.shot(kind)
        return value

    def success(self) -> dict:
        self.frame.locator("#step-success").wait_for()
        return self.log("success")


def someone() -> str:
    return f"browser_user_{next(_users)}"


def transactions_ready(box, record: str) -> bool:
    for _ in range(100):
        with box.api() as api:
            if api.post("transactions/get", json={"record": record}).status_code == 200:
                return True
        time.sleep(0.1)
    return False


# -- the happy paths ------------------------------------------------------------------------

def test_a_user_links_two_accounts_through_the_security_question(page, box, tmp_path):
    flow = Flow(page, box, tmp_path / "screens")
    flow.bank("guaranty")
    flow.login(username=someone(), password="pass_good")
    flow.mfa("Greenfield Primary")
    flow.accounts(picks=(0, 2))
    done = flow.success()
    assert done["bank"]["slug"] == "gtbank" and len(done["accounts"]) == 2
    assert {"record", "public_token", "customer", "accounts", "callbacks"} <= set(done)
    events = [x["value"]["name"] for x in page.evaluate("window.connectLog")
              if x["kind"] == "event"]
    assert events[:2] == ["OPENED", "INSTITUTION_SELECTED"] and "ACCOUNT_LINKED" in events
    assert transactions_ready(box, done["record"])
    assert len(list((tmp_path / "screens").glob("*.png"))) >= 5


@pytest.mark.parametrize(("search", "login_type", "fields"), [
    ("access", "bank", {"password": "pass_good"}),
    ("kuda", "mobile", {"pin": "1234"}),
    ("united", "bvn", {"bvn": "22012345678"}),
    ("wema", "account_number", {"account_number": "0123456789"}),
])
def test_each_login_method(page, box, tmp_path, search, login_type, fields):
    flow = Flow(page, box, tmp_path / "screens")
    flow.bank(search)
    if "password" in fields or "pin" in fields:
        fields = {"username": someone(), **fields}
    flow.login(login_type, **fields)
    flow.accounts()
    done = flow.success()
    assert done["login_type"] == login_type
    assert done["verified"] is (login_type != "account_number")
    if done["verified"]:
        assert transactions_ready(box, done["record"])


def test_business_accounts(page, box, tmp_path):
    flow = Flow(page, box, tmp_path / "screens")
    flow.bank("stanbic")
    flow.login("bank", account_type="business", username=someone(), password="pass_good")
    flow.accounts(picks=(0, 1))
    done = flow.success()
    assert done["account_type"] == "business" and len(done["accounts"]) == 2


def test_a_returning_user_goes_straight_to_the_accounts(page, box, tmp_path):
    made = box.customer(name="<script>alert('x')</script> Ade", accounts=2)
    flow = Flow(page, box, tmp_path / "screens", customer=made["customer"], returning=1)
    f = flow.frame
    f.locator("#step-accounts").wait_for()
    assert "<script>alert('x')</script> Ade" in f.locator("#returning-note").inner_text()
    assert f.locator("input[name=account]").count() == 2
    flow.accounts(picks=(0, 1))
    done = flow.success()
    assert done["record"] == made["record"] and done["returning"] is True
    assert sorted(a["_id"] for a in done["accounts"]) == sorted(made["accounts"])
    assert page.dialogs == []  # the name was shown as text, never run


def test_the_popup_mode(page, box, tmp_path):
    conf = settings(box)
    page.goto(conf["demo_url"])
    with page.expect_popup() as opened:
        page.click("#open-popup")
    popup = opened.value
    popup.locator("#bank-search").fill("access")
    popup.locator("button.bank:visible").first.click()
    popup.locator("#bank-username").fill(someone())
    popup.locator("#bank-password").fill("pass_good")
    popup.locator("#login-submit").click()
    popup.locator("#consent").check()
    popup.locator("#accounts-submit").click()
    popup.locator("#step-success").wait_for()
    popup.screenshot(path=str(tmp_path / "popup-success.png"))
    page.wait_for_function("() => window.connectLog.some(x => x.kind === 'success')")
    done = page.evaluate("() => window.connectLog.find(x => x.kind === 'success').value")
    assert done["bank"]["slug"] == "access-bank"


def test_a_bank_that_is_down_cannot_be_chosen(page, box, tmp_path):
    bank = banks(box)["zenith-bank"]["_id"]
    box.control("banks/status", bank=bank, status="down")
    try:
        flow = Flow(page, box, tmp_path / "screens")
        f = flow.frame
        f.locator("#step-bank").wait_for()
        f.locator("#bank-search").fill("zenith")
        button = f.locator("button.bank:visible")
        assert button.count() == 1 and button.is_disabled()
        assert "Down" in button.inner_text()
        flow.shot("bank-down")
        f.locator("#bank-search").fill("no such bank")
        assert f.locator("#bank-empty").is_visible()
    finally:
        box.control("banks/status", bank=bank, status="healthy")


def test_keyboard_only(page, box, tmp_path):
    flow = Flow(page, box, tmp_path / "screens")
    f, kb = flow.frame, page.keyboard
    f.locator("#step-bank").wait_for()
    kb.type("access")  # the search field has the focus when the step shows
    kb.press("Tab")
    kb.press("Enter")  # the one bank left
    f.locator("#step-login").wait_for()
    f.locator("#login-methods input:checked").focus()
    kb.press("Tab")  # account type (personal, checked)
    kb.press("Tab")  # username
    kb.type(someone())
    kb.press("Tab")
    kb.type("pass_good")
    kb.press("Enter")
    f.locator("#step-accounts").wait_for()
    f.locator("#consent").focus()
    kb.press("Space")
    kb.press("Tab")
    kb.press("Enter")
    assert flow.success()["bank"]["slug"] == "access-bank"
    kb.press("Escape")  # the host hears onClose and takes the frame away
    flow.log("close")
    assert page.locator("#ledgerlake-connect-frame").count() == 0


def test_a_bank_linked_in_the_browser_lands_in_the_lake(page, sandbox, receiver, tmp_path,
                                                         monkeypatch):
    """From the user's first click to rows in the warehouse, as a data engineer would see it:
    the page, the callbacks, the receiver, the sensor, the assets, `ledgerlake sql`."""
    home = tmp_path / "home"
    for name, value in (("LEDGERLAKE_HOME", str(home)), ("LEDGERLAKE_INBOX", str(receiver.inbox)),
                        ("LEDGERLAKE_API_URL", sandbox.url), ("LEDGERLAKE_ENVIRONMENT", "sandbox"),
                        ("LEDGERLAKE_SECRET_KEY", sandbox.sandbox_key)):
        monkeypatch.setenv(name, value)
    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()
    flow = Flow(page, sandbox, tmp_path / "screens", products="accounts,balance,transactions")
    flow.bank("access")
    flow.login(username=someone(), password="pass_good")
    flow.accounts(picks=(0, 1))
    done = flow.success()
    # AUTH, ACCOUNTS, a BALANCE per account, TRANSACTIONS
    assert wait_for_events(receiver.inbox, 5, timeout_s=60) == 5

    for name in [m for m in sys.modules if m.startswith("pipeline.definitions")]:
        del sys.modules[name]  # definitions read their settings at import: this test's
    from dagster import DagsterInstance

    from pipeline.definitions import defs
    with DagsterInstance.ephemeral() as instance:
        runs = tick(defs, instance)
        assert runs and all(instance.get_run_by_id(r).is_success for r in runs)
        assert instance.get_dynamic_partitions("records") == [done["record"]]
        assert defs.resolve_job_def("warehouse_job").execute_in_process(
            instance=instance).success
    query = ("select count(*) as lines, count(distinct account_id) as accounts "
             f"from transactions where record_id = '{done['record']}'")
    answer = subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", query,
                             "--format", "json"], capture_output=True, text=True, check=True,
                            env={**os.environ})
    row = json.loads(answer.stdout)[0]
    assert row["lines"] > 0 and row["accounts"] == 2


# -- the 14 widget errors reach onError -------------------------------------------------------

def _wrong(password):
    def run(flow):
        flow.bank("access")
        flow.login(username=someone(), password=password)
    return run


def _mfa(search, answer):
    def run(flow):
        flow.bank(search)
        flow.login(username=someone(), password="pass_good")
        flow.mfa(answer)
    return run


def _finish(flow):
    flow.bank("access")
    flow.login(username=someone(), password="pass_good")
    flow.accounts()


def _idle(flow):
    flow.frame.locator("#step-bank").wait_for()
    flow.box.control("clock/advance", seconds=601)
    _wrong("pass_good")(flow)


def _nothing(flow):
    pass


ERRORS = {  # code: (settings or a bank status to set first, query, what the user does)
    1000: ({}, {}, _wrong("not-my-password")),
    1002: ({}, {}, _wrong("error_1002")),
    1003: ({}, {}, _wrong("error_1003")),
    1004: ({"plan": "none"}, {}, _nothing),
    1005: ({"wallet": 0}, {}, _finish),
    1006: ({}, {"key": "pk_test_not_a_key"}, _nothing),
    1007: ({"plan": "expired"}, {}, _nothing),
    1008: ({"bank_status": "not_responding"}, {}, _wrong("pass_good")),
    1009: ({}, {}, lambda flow: (flow.bank("united"), flow.login("bvn", bvn="11111111111"))),
    1010: ({}, {}, _mfa("zenith", "000000")),
    1011: ({}, {}, _mfa("guaranty", "error_1011")),
    1012: ({}, {}, _idle),
    1013: ({}, {"payment_amount": 10**12}, _finish),
    1026: ({"env": "production"}, {}, _nothing),
}


@pytest.mark.parametrize("code", sorted(ERRORS))
def test_each_widget_error_reaches_on_error(page, box, tmp_path, code):
    setup, query, act = ERRORS[code]
    setup = dict(setup)
    env = setup.pop("env", "sandbox")
    status = setup.pop("bank_status", None)
    before = settings(box)
    access = banks(box)["access-bank"]["_id"]
    if status:
        box.control("banks/status", bank=access, status=status)
    if setup:
        settings(box, **setup)
    try:
        flow = Flow(page, box, tmp_path / "screens", env=env, **query)
        act(flow)
        error = flow.log("error")
        assert set(error) == {"type", "status", "code", "method", "message"}
        assert (error["type"], error["status"], error["code"]) == ("error", False, code)
        assert error["message"] and error["method"]
        assert flow.frame.locator("#step-error, .message:visible").first.inner_text()
    finally:
        settings(box, plan=before["plan"], wallet=before["wallet"])
        if status:
            box.control("banks/status", bank=access, status="healthy")
