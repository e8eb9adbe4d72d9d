"""The connect page in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright, no browser download) opens the demo host page, which embeds the page with
connect.js, and a user clicks (or types) through it. What the host's callbacks receive is
read back from the host page. A screenshot of each step lands in the test's tmp_path. Each
login method is followed on into the lake: the real receiver, the sensor and the assets land
the record, and `ledgerlake sql` counts its rows."""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from pipeline.local import QUIET, Server, drain
from resources.inbox import Inbox
from tests.conftest import Sandbox, chromium, start_sandbox

CHROMIUM = chromium()

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

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
        self.missing: list[str] = []  # what the pages asked for and got a 404 (a favicon)
        page.on("response", lambda r: self.missing.append(r.url) if r.status == 404 else None)
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
        # each account told apart by its number's last 4 digits, never the whole number
        offered = f.locator("label.account").all_inner_texts()
        assert all(re.search(r"••\d{4}:", t) and not re.search(r"\d{10}", t) for t in offered)
        assert len(set(offered)) == len(offered), offered
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

    def deposits(self, first: str, second: str) -> None:
        """The two micro-deposits typed on the success screen of an account-number link."""
        f = self.frame
        f.locator("#verify-form").wait_for()
        f.locator("#deposit-1").fill(first)
        f.locator("#deposit-2").fill(second)
        self.shot("deposits")
        f.locator("#verify-submit").click()

    def events(self) -> list[str]:
        return [x["value"]["name"] for x in self.page.evaluate("window.connectLog")
                if x["kind"] == "event"]


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


def sandbox_rows(box, table: str) -> int:
    """Rows of one of the sandbox's tables, read from its file."""
    db = sqlite3.connect(f"file:{box.data_dir / 'sandbox.sqlite3'}?mode=ro", uri=True)
    try:
        return db.execute(f"select count(*) from {table}").fetchone()[0]
    finally:
        db.close()


def test_bad_input_gets_a_clear_message_and_creates_nothing(page, box, tmp_path):
    """What a user can type (a script tag as a name, a 10 kB password) and what a tester can
    send from the page's own origin (an unknown bank id, a forged record in a callback query):
    each answered with a message naming what is wrong, nothing created, nothing run."""
    before = {t: sandbox_rows(box, t) for t in ("records", "customers", "accounts")}
    conf = settings(box)
    page.goto(conf["connect_url"])  # the page alone, as a tester opens it
    page.locator("#bank-search").fill("access")
    page.locator("button.bank:visible").first.click()
    message = page.locator("#login-message")
    for username, password, words in (
            ("<script>alert('x')</script>", "pass_good", "credentials.username"),
            (someone(), "p" * 10_240, "credentials.password must be a string of 1 to 200")):
        page.locator("#bank-username").fill(username)
        page.locator("#bank-password").fill(password)
        page.locator("#login-submit").click()
        expect(message).to_contain_text(words)
        assert page.locator("#step-login").is_visible()  # still here, free to correct it
    page.screenshot(path=str(tmp_path / "bad-input.png"))
    answers = page.evaluate("""async ([key, secret]) => {
        const post = (step, body) => fetch("connect/api/" + step, {method: "POST",
            headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
        const sess = (await (await post("session", {key})).json()).data.session;
        const bank = await post("login", {session: sess, bank: "0".repeat(24),
            login_type: "bank", credentials: {username: "ada", password: "pass_good"}});
        const forged = await fetch("callback?record=" + "f".repeat(24) + "&method=AUTH",
            {headers: {Authorization: "Bearer " + secret}});
        return [[bank.status, await bank.json()], [forged.status, await forged.json()]];
    }""", [conf["public_key"], box.sandbox_key])
    for (status, body), code, words in zip(answers, ("INVALID_BANK", "INVALID_FIELD"),
                                           ("bank does not exist", "record"), strict=True):
        assert (status, body["error_code"]) == (400, code)
        assert words in body["error_message"]
    assert page.dialogs == []  # the script tag was never run
    assert {t: sandbox_rows(box, t) for t in before} == before


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
    # and gives the focus back to the button that opened it
    assert page.evaluate("() => document.activeElement.id") == "open-iframe"


def test_a_bank_is_named_by_its_name(page, box, tmp_path):
    """A screen reader hears the bank's name, not the logo's letter before it."""
    flow = Flow(page, box, tmp_path / "screens")
    f = flow.frame
    f.locator("#step-bank").wait_for()
    assert f.get_by_role("button", name="Guaranty Trust Bank", exact=True).count() == 1
    assert f.get_by_role("button", name="G Guaranty Trust Bank").count() == 0


# -- from the user's first click to rows in the warehouse -------------------------------------
# One sandbox, the real receiver, the Definitions and one Dagster instance serve every test
# below: each links in the browser, waits for its record's callbacks in the receiver's inbox,
# lets the sensor run what they ask for (pipeline.local.drain, the daemon's work in process),
# rebuilds the warehouse and asks `ledgerlake sql`. The sandbox's clock is frozen, so a
# record's lines are the same when the pipeline pulls them and when the test counts them.

LAKE_PRODUCTS = "accounts,balance,transactions"


@dataclass
class Pipeline:
    box: Sandbox
    inbox: Path
    defs: object
    instance: object  # a DagsterInstance

    def callbacks(self, record: str, n: int) -> list[str]:
        """The methods of the record's callbacks in the inbox, once `n` have come."""
        methods: list[str] = []
        for _ in range(300):
            with Inbox(self.inbox, create=True) as inbox:
                methods = sorted(e.method for e in inbox.after(0, 100_000)
                                 if e.record == record)
            if len(methods) >= n:
                return methods
            time.sleep(0.1)
        return methods

    def land(self) -> list[str]:
        """What the sensor asks for, run to the end, then the warehouse; the runs' ids."""
        runs = drain(self.defs, self.instance)
        failed = [r for r in runs if not self.instance.get_run_by_id(r).is_success]
        assert not failed, f"runs failed: {failed}"
        assert self.defs.resolve_job_def("warehouse_job").execute_in_process(
            instance=self.instance, run_config=QUIET).success
        return runs

    def batched(self, runs: list[str]) -> set[str]:
        """The records these runs landed: each run's batch (its run config) names their
        numbers, which the inbox knows (a forgotten record's none)."""
        numbers = {n for run in runs for n in self.instance.get_run_by_id(run)
                   .run_config["resources"]["batch"]["config"]["records"]}
        with Inbox(self.inbox) as inbox:
            return set(inbox.ids_of(numbers).values())

    def known(self) -> int:
        """How many records the inbox has heard of."""
        with Inbox(self.inbox) as inbox:
            return len(inbox.records())

    def landings(self, record: str) -> dict[str, str]:
        """Each product's outcome as the record's last landing left it (the inbox's state)."""
        with Inbox(self.inbox) as inbox:
            return {s.product: s.outcome for s in inbox.landings([record])}

    def sql(self, query: str) -> list[dict]:
        """`ledgerlake sql QUERY --format json`, as an analyst runs it."""
        out = subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", query,
                              "--format", "json"], capture_output=True, text=True,
                             env={**os.environ}, check=False)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout, parse_float=Decimal)

    def source(self, record: str) -> dict:
        """What the service holds for the record: its accounts and its lines' count."""
        with self.box.api() as api:
            accounts = api.post("accounts/get", json={"record": record, "limit": 100})
            lines = api.post("transactions/get", json={"record": record, "limit": 1})
        assert accounts.status_code == 200 and lines.status_code == 200, lines.text
        return {"accounts": {a["_id"]: (a["name"], a["type"], a["nuban"])
                             for a in accounts.json()["data"]["accounts"]},
                "lines": lines.json()["data"]["pagination"]["totalDocs"]}

    def landed(self, record: str) -> dict:
        """What the warehouse holds for the record, in the same shape."""
        accounts = self.sql("select account_id, name, type, nuban, customer_id from accounts "
                            f"where record_id = '{record}'")
        lines = self.sql("select count(*) as n, count(distinct transaction_id) as ids, "
                         "count(distinct account_id) as accounts from transactions "
                         f"where record_id = '{record}'")[0]
        assert lines["n"] == lines["ids"]  # no line twice
        return {"accounts": {a["account_id"]: (a["name"], a["type"], a["nuban"])
                             for a in accounts},
                "lines": lines["n"], "customers": {a["customer_id"] for a in accounts},
                "rows": len(accounts), "line_accounts": lines["accounts"]}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("connect-lake")
    box = start_sandbox(root / "sandbox", "--freeze-clock")
    token = secrets.token_hex(16)
    receiver = Server("receiver", "--inbox", str(root / "inbox.sqlite3"),
                      env={"LEDGERLAKE_RECEIVER_TOKEN": token}, log_path=root / "receiver.log")
    try:
        receiver.start()
        with box.api() as api:
            api.post("settings/webhook", json={"url": f"{receiver.url}/callbacks/",
                                               "token": token}).raise_for_status()
        with pytest.MonkeyPatch.context() as env:
            for name, value in (("LEDGERLAKE_HOME", str(root / "home")),
                                ("LEDGERLAKE_INBOX", str(root / "inbox.sqlite3")),
                                ("LEDGERLAKE_API_URL", box.url),
                                ("LEDGERLAKE_ENVIRONMENT", "sandbox"),
                                ("LEDGERLAKE_SECRET_KEY", box.sandbox_key)):
                env.setenv(name, value)
            for name in [m for m in sys.modules if m.startswith("pipeline.definitions")]:
                del sys.modules[name]  # definitions read their settings at import: these
            from dagster import DagsterInstance

            from pipeline.definitions import defs
            with DagsterInstance.ephemeral() as instance:
                yield Pipeline(box, root / "inbox.sqlite3", defs, instance)
    finally:
        receiver.stop()
        box.server.stop()


def expected_callbacks(accounts: int) -> list[str]:
    return sorted(["AUTH", "ACCOUNTS", "TRANSACTIONS"] + ["BALANCE"] * accounts)


METHODS = {  # bank searched, login method, account type, what the user types, accounts ticked,
    # the answer to the bank's step after login (a security question, a token), if it has one
    "bank": ("access", "bank", "business", {"password": "pass_good"}, (0, 2), None),
    "mobile": ("kuda", "mobile", None, {"pin": "1234"}, (1,), None),  # personal only
    "bvn": ("united", "bvn", "personal", {"bvn": "22012345678"}, (0, 1), None),
    "account_number": ("wema", "account_number", "business", {"account_number": "0123456789"},
                       (2,), None),
    "security_question": ("guaranty", "bank", "personal", {"password": "pass_good"}, (1,),
                          "Corona School"),
    "token": ("zenith", "mobile", "business", {"pin": "1234"}, (0,), "123456"),
}


@pytest.mark.parametrize(("search", "login_type", "account_type", "fields", "picks", "mfa"),
                         list(METHODS.values()), ids=list(METHODS))
def test_each_login_method_lands_in_the_lake(page, pipeline, tmp_path, search, login_type,
                                             account_type, fields, picks, mfa):
    """Each method, personal and business, one account or several, with the bank's security
    question or token where it asks one: the record's accounts and every one of its lines
    reach the warehouse, as the service holds them."""
    flow = Flow(page, pipeline.box, tmp_path / "screens", products=LAKE_PRODUCTS)
    flow.bank(search)
    if login_type in ("bank", "mobile"):
        fields = {"username": someone(), **fields}
    flow.login(login_type, account_type=account_type, **fields)
    if mfa:
        flow.mfa(mfa)
    flow.accounts(picks=picks)
    done = flow.success()
    record, kind = done["record"], account_type or "personal"
    assert (done["login_type"], done["account_type"]) == (login_type, kind)
    assert len(done["accounts"]) == len(picks)
    if login_type == "account_number":  # nothing flows before the micro-deposits check out
        assert done["verified"] is False
        assert "two small deposits" in flow.frame.locator("#success-pending").inner_text()
        with pipeline.box.api() as api:
            item = api.post("item/get", json={"record": record}).json()["data"]["item"]
            assert item["last_webhook"] is None
        # the user reads the test amounts off the page and types them, either order
        f = flow.frame
        f.locator("#verify-hint summary").click()
        assert f.locator("#verify-hint-text").inner_text().startswith("0.01 and 0.02")
        flow.deposits("0.02", "0.01")
        expect(f.locator("#success-verified")).to_be_visible()
        assert "ACCOUNT_VERIFIED" in flow.events()
        assert f.locator("#success-done").evaluate("b => b === document.activeElement")
    assert pipeline.callbacks(record, len(picks) + 3) == expected_callbacks(len(picks))
    runs = pipeline.land()
    assert runs and record in pipeline.batched(runs)
    # its AUTH lands its payments too: none yet, landed empty
    assert pipeline.landings(record) == {p: "landed" for p in ("accounts", "balances",
                                                                "payments", "transactions")}
    source, landed = pipeline.source(record), pipeline.landed(record)
    assert landed["accounts"] == source["accounts"]
    assert set(landed["accounts"]) == {a["_id"] for a in done["accounts"]}
    assert landed["customers"] == {done["customer"]["_id"]}
    assert all(name.endswith("ENTERPRISES") == (kind == "business")
               for name, _, _ in landed["accounts"].values())
    assert landed["lines"] == source["lines"] > 0
    assert landed["line_accounts"] == len(picks)


def test_a_returning_user_lands_no_duplicate(page, browser, pipeline, tmp_path):
    """The same login again, and the same customer by id with the returning option, give back
    the record the lake already holds: no new callback, run, record or row. Another bank
    under the same customer is a new record whose data collate under that customer."""
    user = someone()
    flow = Flow(page, pipeline.box, tmp_path / "first", products=LAKE_PRODUCTS)
    flow.bank("united")
    flow.login(username=user, password="pass_good")
    flow.accounts(picks=(0, 1))
    first = flow.success()
    record, customer = first["record"], first["customer"]["_id"]
    assert pipeline.callbacks(record, 5) == expected_callbacks(2)
    pipeline.land()
    before = pipeline.landed(record), pipeline.known()
    with Inbox(pipeline.inbox) as inbox:
        events = inbox.count()

    again = [("same-login", {}), ("returning", {"customer": customer, "returning": 1})]
    for name, query in again:
        ctx = browser.new_context(viewport={"width": 900, "height": 760})
        try:
            flow = Flow(ctx.new_page(), pipeline.box, tmp_path / name, products=LAKE_PRODUCTS,
                        **query)
            if not query:
                flow.bank("united")
                flow.login(username=user, password="pass_good")
            flow.accounts(picks=(0, 1))
            done = flow.success()
        finally:
            ctx.close()
        assert (done["record"], done["returning"]) == (record, True)
        assert {a["_id"] for a in done["accounts"]} == {a["_id"] for a in first["accounts"]}
    with Inbox(pipeline.inbox) as inbox:
        assert inbox.count() == events
    assert pipeline.land() == []  # nothing new to run
    assert (pipeline.landed(record), pipeline.known()) == before

    ctx = browser.new_context(viewport={"width": 900, "height": 760})
    try:  # another bank, linked to the customer the application already knows
        flow = Flow(ctx.new_page(), pipeline.box, tmp_path / "other-bank",
                    products=LAKE_PRODUCTS, customer=customer)
        flow.bank("stanbic")
        flow.login(username=someone(), password="pass_good")
        flow.accounts(picks=(0,))
        other = flow.success()
    finally:
        ctx.close()
    assert other["record"] != record and other["customer"]["_id"] == customer
    assert pipeline.callbacks(other["record"], 4) == expected_callbacks(1)
    pipeline.land()
    rows = pipeline.sql("select record_id, count(*) as accounts, "
                        "count(distinct account_id) as ids from accounts "
                        f"where customer_id = '{customer}' group by record_id order by 1")
    assert {r["record_id"]: r["accounts"] for r in rows} == {record: 2, other["record"]: 1}
    assert all(r["accounts"] == r["ids"] for r in rows)
    assert pipeline.landed(record) == before[0]


def _account_number_link(page, pipeline, tmp_path, nuban: str) -> dict:
    flow = Flow(page, pipeline.box, tmp_path / "screens", products=LAKE_PRODUCTS)
    flow.bank("wema")
    flow.login("account_number", account_number=nuban)
    flow.accounts()
    done = flow.success()
    assert (done["verified"], done["returning"]) == (False, False)
    return done


def test_the_fourth_micro_deposit_attempt_locks_the_link(page, pipeline, tmp_path):
    """On the page: three wrong pairs are refused one by one, each saying how many tries are
    left; the fourth attempt, even a right one, finds the record locked for good: it never
    sends a callback, the lake never sees it, and the page sends the user to another bank."""
    nuban = f"1{next(_users) % 10**9:09d}"
    flow = Flow(page, pipeline.box, tmp_path / "screens", products=LAKE_PRODUCTS)
    flow.bank("wema")
    flow.login("account_number", account_number=nuban)
    flow.accounts()
    done = flow.success()
    assert (done["verified"], done["returning"]) == (False, False)
    record, f = done["record"], flow.frame
    message = f.locator("#verify-message")
    flow.deposits("0.01", "")  # half a pair costs no try
    expect(message).to_have_text("Enter both amounts.")
    for left in ("2 tries left", "1 try left", "No tries left"):
        flow.deposits("0.03", "0.04")
        expect(message).to_contain_text(left)
        expect(message).to_contain_text("do not match")
    flow.deposits("0.01", "0.02")
    f.locator("#step-locked").wait_for()
    expect(f.locator("#locked-message")).to_contain_text("another bank")
    assert f.locator("#locked-other").evaluate("b => b === document.activeElement")
    flow.shot("locked-after-deposits")
    with pipeline.box.api() as api:
        data = api.post("transactions/get", json={"record": record})
        assert data.json()["error_code"] == "TOO_MANY_VERIFICATION_ATTEMPTS"
        item = api.post("item/get", json={"record": record}).json()["data"]["item"]
        assert item["last_webhook"] is None and item["verified"] is False
    runs = pipeline.land()
    assert record not in pipeline.batched(runs) and pipeline.landings(record) == {}
    with Inbox(pipeline.inbox) as inbox:
        assert inbox.records([record]) == {}  # never a callback
    assert pipeline.sql(f"select count(*) as n from accounts where record_id = '{record}'") \
        == [{"n": 0}]
    # the same account at the same bank: refused on the page, with the spec's advice
    f.locator("#locked-other").click()
    f.locator("#step-bank").wait_for()
    flow.bank("wema")
    flow.login("account_number", account_number=nuban)
    expect(f.locator("#login-message")).to_contain_text("another bank")
    flow.shot("locked")
    # another bank links on the same page
    f.locator("#login-back").click()
    flow.bank("united")
    flow.login("account_number", account_number=nuban)
    f.locator("#step-accounts").wait_for()


def test_an_unverified_link_expires_after_seven_days(page, pipeline, tmp_path):
    """Left unverified for 7 days of the sandbox clock, the link's AUTH callback says
    VERIFICATION_EXPIRED; the pipeline records the failure and fetches nothing."""
    done = _account_number_link(page, pipeline, tmp_path, f"1{next(_users) % 10**9:09d}")
    record = done["record"]
    pipeline.box.control("clock/advance", seconds=7 * 86400 + 1)
    assert pipeline.callbacks(record, 1) == ["AUTH"]
    with Inbox(pipeline.inbox) as inbox:
        (auth,) = [e for e in inbox.after(0, 100_000) if e.record == record]
    assert (auth.code, auth.status) == ("VERIFICATION_EXPIRED", "is_failed")
    assert auth.body["error"]["error_code"] == "VERIFICATION_EXPIRED"
    runs = pipeline.land()  # the other records' periodic callbacks of those 7 days run too
    with Inbox(pipeline.inbox) as inbox:
        assert inbox.records([record])[record].products["AUTH"].code == "VERIFICATION_EXPIRED"
    assert record not in pipeline.batched(runs) and pipeline.landings(record) == {}
    status = pipeline.sql(f"select auth_code, accounts_code from records "
                          f"where record_id = '{record}'")
    assert status == [{"auth_code": "VERIFICATION_EXPIRED", "accounts_code": None}]
    with pipeline.box.api() as api:
        resp = api.post("sandbox/records/verify", json={"record": record,
                                                        "amounts": [0.01, 0.02]})
    assert resp.json()["error_code"] == "VERIFICATION_EXPIRED"


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
        if code in (1004, 1005, 1006, 1007, 1026):  # the app's problem, in a user's words
            shown = flow.frame.locator("#error-message").inner_text()
            assert "try again later" in shown and error["message"] not in shown, shown
        assert flow.missing == []  # no favicon or other file missing
    finally:
        settings(box, plan=before["plan"], wallet=before["wallet"])
        if status:
            box.control("banks/status", bank=access, status="healthy")
