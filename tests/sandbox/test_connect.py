"""The connect page's API over real HTTP: each step, each of the spec's 14 widget errors, bad
input refused with nothing created, and a finished connection's callbacks reaching the
pipeline's receiver exactly as a record made by customers/create does."""

from __future__ import annotations

import itertools
import re
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import Sandbox

SPEC_METHODS = {1000: "Validation", 1002: "Transactions Fetch Error",
                1003: "Balance Fetch Error", 1004: "No Plan", 1005: "Wallet Insufficient Funds",
                1006: "Invalid API credentials",
                1007: "Plan expired, or Free Calls Exhausted", 1008: "Data Extraction",
                1009: "Validation", 1010: "Invalid Token", 1011: "Invalid Security Question",
                1012: "Processed Killed", 1013: "Insufficient Funds - Direct Debit",
                1026: "SLA Error"}
GOOD = {"username": "ada_l", "password": "pass_good"}
_users = itertools.count()


def someone() -> dict:
    """Credentials of a user the sandbox has not seen yet."""
    return {"username": f"user_{next(_users)}", "password": "pass_good"}


class Page:
    """The connect page's API of one environment, as the page's script calls it."""

    def __init__(self, box: Sandbox, env: str = "sandbox") -> None:
        self.box, self.env = box, env
        self.base = f"{box.url}{'/sandbox/v2/' if env == 'sandbox' else '/v2/'}connect"
        with box.api(env) as api:
            self.conf = api.post("settings/connect", json={}).json()["data"]
        self.key = self.conf["public_key"]
        with box.api(env) as api:
            self.banks = {b["slug"]: b for b in api.get("banks/list").json()["data"]["banks"]}

    def post(self, step: str, **body) -> httpx.Response:
        return httpx.post(f"{self.base}/api/{step}", json=body, timeout=30)

    def ok(self, step: str, **body) -> dict:
        resp = self.post(step, **body)
        assert resp.status_code == 200, resp.text
        return resp.json()["data"]

    def session(self, **body) -> dict:
        return self.ok("session", key=self.key, **body)

    def login(self, sess: dict, bank: str = "access-bank", login_type: str = "bank",
              credentials: dict | None = None, **body) -> httpx.Response:
        return self.post("login", session=sess["session"], bank=self.banks[bank]["_id"],
                         login_type=login_type, credentials=credentials or someone(), **body)

    def link(self, bank: str = "access-bank", accounts=(0,), login_type: str = "bank",
             credentials: dict | None = None, answer: str | None = None, **session) -> dict:
        """The whole page, one step after another; what onSuccess receives."""
        sess = self.session(**session)
        resp = self.login(sess, bank, login_type, credentials)
        assert resp.status_code == 200, resp.text
        if resp.json()["data"]["step"] == "mfa":
            self.ok("mfa", session=sess["session"], answer=answer or "123456")
        return self.ok("finish", session=sess["session"], accounts=list(accounts), consent=True)

    def settings(self, **body) -> dict:
        with self.box.api(self.env) as api:
            resp = api.post("settings/connect", json=body)
            assert resp.status_code == 200, resp.text
            return resp.json()["data"]


def widget_error(resp: httpx.Response, code: int) -> dict:
    assert resp.status_code == (401 if code == 1006 else 400), resp.text
    body = resp.json()
    assert set(body) == {"type", "status", "code", "method", "message"}, body
    assert body["type"] == "error" and body["status"] is False and body["code"] == code
    assert body["method"] == SPEC_METHODS[code]
    assert isinstance(body["message"], str) and body["message"]
    return body


def service_error(resp: httpx.Response, code: str, status: int = 400) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error_code"] == code, body
    return body


def count(box: Sandbox, table: str) -> int:
    db = sqlite3.connect(f"file:{box.data_dir / 'sandbox.sqlite3'}?mode=ro", uri=True)
    try:
        return db.execute(f"select count(*) from {table}").fetchone()[0]
    finally:
        db.close()


@pytest.fixture(scope="module")
def box(shared_sandbox):
    return shared_sandbox  # this module's own sandbox (conftest)


@pytest.fixture(scope="module")
def page(box) -> Page:
    return Page(box)


# -- the page and its settings ------------------------------------------------------------------

def test_settings_give_each_environment_its_public_key_and_page(box):
    sandbox, production = Page(box), Page(box, "production")
    assert sandbox.key.startswith("pk_test_") and production.key.startswith("pk_live_")
    assert sandbox.key != production.key and box.sandbox_key not in sandbox.key
    assert sandbox.conf["connect_url"] == f"{box.url}/sandbox/v2/connect?key={sandbox.key}"
    assert production.conf["connect_url"] == f"{box.url}/v2/connect?key={production.key}"
    assert sandbox.conf["agreement"] is True and production.conf["agreement"] is False
    with box.api() as api:
        for body, field in (({"plan": "gold"}, "plan"), ({"wallet": -1}, "wallet"),
                            ({"agreement": "yes"}, "agreement")):
            assert field in service_error(api.post("settings/connect", json=body),
                                          "INVALID_FIELD")["error_message"]
    with httpx.Client() as anon:  # the settings are the dashboard's: the secret key's
        service_error(anon.post(f"{box.url}/sandbox/v2/settings/connect", json={}),
                      "INVALID_API_KEYS", 401)


@pytest.mark.parametrize("env", ["sandbox", "production"])
def test_the_page_and_its_files_are_served_from_the_sandbox_alone(box, env):
    base = f"{box.url}{'/sandbox/v2/' if env == 'sandbox' else '/v2/'}connect"
    html = httpx.get(base)
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in html.headers["content-security-policy"]
    refs = re.findall(r'(?:src|href)="([^"]+)"', html.text)
    assert refs and all(not r.startswith(("http:", "https:", "//")) for r in refs)
    for name in ("connect.js", "page.js", "connect.css", "demo", "demo.js"):
        assert httpx.get(f"{base}/{name}").status_code == 200
    for name in ("app.py", "../app.py", "index.html/x", "api/session"):
        assert httpx.get(f"{base}/{name}").status_code == 404
    slash = httpx.get(f"{base}/?key=k")  # its files are linked relative to the bare path
    assert slash.status_code == 308 and slash.headers["location"].endswith("connect?key=k")
    static = Path(__file__).parents[2] / "sandbox" / "static" / "connect"
    for f in static.iterdir():  # nothing fetched from elsewhere
        text = f.read_text()
        assert not re.search(r"(src|href|url)\s*[=(]\s*[\"']?https?:", text), f.name


def test_the_session_lists_banks_with_what_each_offers(page):
    sess = page.session()
    banks = {b["slug"]: b for b in sess["banks"]}
    assert banks["kuda"]["login_types"] == ["mobile", "bvn", "account_number"]
    assert banks["kuda"]["account_types"] == ["personal"]
    assert banks["gtbank"]["mfa"] == "security_question" and banks["zenith-bank"]["mfa"] == "token"
    assert "bank" in sess["hint"] and sess["returning"] is None
    assert sess["products"][0] == "auth"


# -- linking --------------------------------------------------------------------------------

def test_a_linked_bank_is_a_record_whose_callbacks_reach_the_pipeline(box, page, receiver):
    with box.api() as api:
        assert api.post("settings/webhook", json={"url": receiver.callback_url,
                                                  "token": receiver.token}).status_code == 200
    done = page.link("gtbank", accounts=(0, 2), answer="Greenfield",
                     products="identity,accounts,balance,transactions")
    assert done["type"] == "success" and done["status"] is True and done["returning"] is False
    assert len(done["accounts"]) == 2 and done["bank"]["slug"] == "gtbank"
    assert all(re.fullmatch(r"\d{10}", a["nuban"]) for a in done["accounts"])
    assert set(done["callbacks"]) == {"AUTH", "IDENTITY", "ACCOUNTS", "BALANCE", "TRANSACTIONS"}
    made = box.control("customers/create", customers=[{
        "bank": page.banks["gtbank"]["_id"], "accounts": 2,
        "products": ["auth", "identity", "accounts", "balance", "transactions"]}])["customers"][0]
    with box.api() as api:
        rec = api.post("record/get", json={"record": done["record"]}).json()["data"]["record"]
        assert rec["customer"] == done["customer"]["_id"] and rec["verified"] is True
        token = api.post("token/exchange", json={"public_token": done["public_token"]})
        assert token.json()["data"]["record"] == done["record"]
    # the same callbacks, one BALANCE per account, as for the record the control made
    expected = sorted(["AUTH", "IDENTITY", "ACCOUNTS", "BALANCE", "BALANCE", "TRANSACTIONS"])
    for record in (done["record"], made["record"]):
        assert received(receiver.inbox, record, len(expected)) == expected
    with box.api() as api:
        txns = api.post("transactions/get", json={"record": done["record"]})
        assert txns.status_code == 200 and txns.json()["data"]["transaction"]


def received(inbox: Path, record: str, n: int) -> list[str]:
    """The methods of the record's callbacks in the receiver's inbox, once `n` have come."""
    methods: list[str] = []
    for _ in range(300):
        if inbox.exists():
            db = sqlite3.connect(f"file:{inbox}?mode=ro", uri=True)
            try:
                methods = sorted(m for (m,) in db.execute(
                    "select method from events where record = ?", (record,)))
            except sqlite3.OperationalError:  # the receiver is still creating its tables
                methods = []
            finally:
                db.close()
            if len(methods) >= n:
                return methods
        time.sleep(0.1)
    return methods


@pytest.mark.parametrize(("bank", "login_type", "credentials"), [
    ("access-bank", "bank", GOOD),
    ("kuda", "mobile", {"username": "08031234567", "pin": "1234"}),
    ("uba", "bvn", {"bvn": "22123456789"}),
])
def test_each_login_method_links(page, bank, login_type, credentials):
    done = page.link(bank, login_type=login_type, credentials=credentials)
    assert done["login_type"] == login_type and done["verified"] is True


def test_an_account_number_link_awaits_its_micro_deposits(box, page):
    done = page.link("wema-bank", login_type="account_number",
                     credentials={"account_number": "0123456789"})
    assert done["verified"] is False
    with box.api() as api:
        service_error(api.post("auth/get", json={"record": done["record"]}), "PRODUCT_NOT_READY")
        assert box.control("records/verify", record=done["record"],
                           amounts=[0.01, 0.02]) == {"verified": True}


def _unverified(page, nuban: str) -> tuple[str, dict]:
    """An account-number link finished on the page: its session (now at the deposits) and
    what onSuccess received."""
    sess = page.session()
    resp = page.login(sess, "wema-bank", "account_number", {"account_number": nuban})
    assert resp.status_code == 200, resp.text
    done = page.ok("finish", session=sess["session"], accounts=[0], consent=True)
    assert done["verified"] is False
    return sess["session"], done


def test_the_page_confirms_the_micro_deposits(box, page):
    """The page's own step: bad input is refused without costing a try, a wrong pair says how
    many are left, the right pair (as typed, either order) releases the record's callbacks."""
    sid, done = _unverified(page, "0123456780")
    for amounts in (["0.01"], ["0.01", "1e3"], ["0.01", "<b>"], [0.01, 0.02]):
        body = service_error(page.post("verify", session=sid, amounts=amounts), "INVALID_FIELD")
        assert "amounts" in body["error_message"]
    body = service_error(page.post("verify", session=sid, amounts=["0.10", "0.20"]),
                         "INCORRECT_DEPOSIT_AMOUNTS")
    assert body["attempts_left"] == 2 and "1 of 3" in body["error_message"]
    assert body["display_message"]  # the user's words
    assert page.ok("verify", session=sid, amounts=["0.02", " 0.01"]) == {
        "record": done["record"], "verified": True}
    with box.api() as api:
        assert api.post("item/get", json={"record": done["record"]}).json()[
            "data"]["item"]["verified"] is True
    service_error(page.post("verify", session=sid, amounts=["0.01", "0.02"]), "INVALID_FIELD")


def test_the_page_locks_a_link_after_three_wrong_pairs(box, page):
    """Three wrong pairs, each answered with the tries left; the fourth attempt, right or
    wrong, TOO_MANY_VERIFICATION_ATTEMPTS: the record is locked for good and the same session
    goes back to choosing a bank, where another bank links."""
    sid, done = _unverified(page, "0123456781")
    for left in (2, 1, 0):
        body = service_error(page.post("verify", session=sid, amounts=["1.00", "2.00"]),
                             "INCORRECT_DEPOSIT_AMOUNTS")
        assert body["attempts_left"] == left
    body = service_error(page.post("verify", session=sid, amounts=["0.01", "0.02"]),
                         "TOO_MANY_VERIFICATION_ATTEMPTS")
    assert "another bank" in body["display_message"]
    with box.api() as api:
        service_error(api.post("transactions/get", json={"record": done["record"]}),
                      "TOO_MANY_VERIFICATION_ATTEMPTS")
    again = page.login({"session": sid}, "wema-bank", "account_number",
                       {"account_number": "0123456781"})
    service_error(again, "TOO_MANY_VERIFICATION_ATTEMPTS")
    other = page.login({"session": sid}, "uba", "account_number",
                       {"account_number": "0123456781"})
    assert other.status_code == 200, other.text


def test_a_link_locked_by_its_micro_deposits_sends_the_user_to_another_bank(box, page):
    creds = {"account_number": "0987654321"}
    done = page.link("wema-bank", login_type="account_number", credentials=creds)
    for _ in range(3):
        with box.api() as api:
            service_error(api.post("sandbox/records/verify", json={
                "record": done["record"], "amounts": [0.1, 0.2]}), "INCORRECT_DEPOSIT_AMOUNTS")
    with box.api() as api:  # the fourth attempt finds it locked, right amounts or not
        service_error(api.post("sandbox/records/verify", json={
            "record": done["record"], "amounts": [0.01, 0.02]}), "TOO_MANY_VERIFICATION_ATTEMPTS")
    before = count(box, "records"), count(box, "accounts")
    body = service_error(page.login(page.session(), "wema-bank", "account_number", creds),
                         "TOO_MANY_VERIFICATION_ATTEMPTS")
    assert "another bank" in body["error_message"]
    assert (count(box, "records"), count(box, "accounts")) == before
    other = page.link("uba", login_type="account_number", credentials=creds)
    assert other["customer"] == done["customer"] and other["record"] != done["record"]


def test_business_accounts_where_the_bank_offers_them(page):
    done = page.link("stanbic-ibtc", account_type="business", accounts=(0, 1))
    assert done["account_type"] == "business" and len(done["accounts"]) == 2
    assert all(a["name"].endswith("ENTERPRISES") for a in done["accounts"])
    sess = page.session()
    body = service_error(page.login(sess, "kuda", "mobile", {"username": "x", "pin": "1234"},
                                    account_type="business"), "INVALID_FIELD")
    assert "personal" in body["error_message"]


def test_only_the_login_methods_the_bank_supports(page):
    sess = page.session()
    body = service_error(page.login(sess, "firstbank", "mobile",
                                    {"username": "x", "pin": "1234"}), "INVALID_FIELD")
    assert "bank, bvn, account_number" in body["error_message"]
    body = service_error(page.login(sess, "kuda", "bank", GOOD), "INVALID_FIELD")
    assert "mobile" in body["error_message"]


def test_the_same_login_again_creates_no_duplicate(box, page):
    creds = {"username": "returning_ola", "password": "pass_good"}
    first = page.link("uba", accounts=(0, 1), credentials=creds)
    records, accounts = count(box, "records"), count(box, "accounts")
    again = page.link("uba", accounts=(0, 1, 2), credentials=creds)
    assert again["record"] == first["record"] and again["returning"] is True
    assert [a["_id"] for a in again["accounts"]] == [a["_id"] for a in first["accounts"]]
    assert (count(box, "records"), count(box, "accounts")) == (records, accounts)
    # another bank of the same login: a new record, under the same customer
    other = page.link("access-bank", credentials=creds)
    assert other["record"] != first["record"]
    assert other["customer"] == first["customer"]


def test_a_returning_user_skips_bank_and_login(box, page):
    first = page.link("zenith-bank", accounts=(0, 1), credentials={
        "username": "known_user", "password": "pass_good"})
    customer = first["customer"]["_id"]
    records, accounts = count(box, "records"), count(box, "accounts")
    sess = page.session(customer=customer, returning=True)
    assert sess["returning"]["customer"] == first["customer"]
    assert sess["returning"]["bank"]["slug"] == "zenith-bank"
    assert len(sess["returning"]["accounts"]) == 2
    # no login step: it is already past it
    service_error(page.login(sess), "INVALID_FIELD")
    done = page.ok("finish", session=sess["session"], accounts=[0, 1], consent=True)
    assert done["record"] == first["record"] and done["returning"] is True
    assert {a["_id"] for a in done["accounts"]} == {a["_id"] for a in first["accounts"]}
    assert (count(box, "records"), count(box, "accounts")) == (records, accounts)


def test_a_customer_made_by_the_control_logs_in_by_id(box, page):
    made = box.control("customers/create", customers=[{"name": "Control Made"}])["customers"][0]
    done = page.link("stanbic-ibtc", credentials={"username": made["customer"],
                                                  "password": "pass_good"})
    assert done["customer"] == {"_id": made["customer"], "name": "Control Made"}
    with box.api() as api:
        auths = api.post("auth/getByCustomer", json={"customer": made["customer"]})
        assert {a["record"] for a in auths.json()["data"]["auths"]} == {made["record"],
                                                                      done["record"]}


# -- the 14 widget errors --------------------------------------------------------------------

def test_1000_wrong_password(page):
    widget_error(page.login(page.session(), credentials={"username": "a", "password": "x"}), 1000)
    widget_error(page.login(page.session(), "kuda", "mobile",
                            {"username": "a", "pin": "9999"}), 1000)


@pytest.mark.parametrize("code", [1002, 1003])
def test_1002_1003_the_bank_fails_a_fetch(page, code):
    widget_error(page.login(page.session(), credentials={
        "username": "a", "password": f"error_{code}"}), code)


@pytest.mark.parametrize(("plan", "code"), [("none", 1004), ("expired", 1007)])
def test_1004_1007_the_application_plan(page, plan, code):
    page.settings(plan=plan)
    try:
        widget_error(page.post("session", key=page.key), code)
    finally:
        page.settings(plan="active")


def test_1005_an_empty_wallet_refuses_paid_products_but_not_auth(box, page):
    wallet = page.conf["wallet"]
    page.settings(wallet=0)
    try:
        sess = page.session()
        assert page.login(sess).status_code == 200
        records = count(box, "records")
        widget_error(page.post("finish", session=sess["session"], accounts=[0], consent=True),
                     1005)
        assert count(box, "records") == records
        assert page.link(products="auth")["products"] == ["auth"]  # auth is free
    finally:
        page.settings(wallet=wallet)


def test_1006_a_key_that_is_not_this_environments(box, page):
    widget_error(page.post("session", key="pk_test_nonsense"), 1006)
    widget_error(page.post("session", key=box.sandbox_key), 1006)  # a secret key: refused
    widget_error(page.post("session", key=Page(box, "production").key), 1006)


def test_1008_a_bank_not_responding(box, page):
    bank = page.banks["firstbank"]["_id"]
    box.control("banks/status", bank=bank, status="not_responding")
    try:
        sess = page.session()
        assert next(b for b in sess["banks"] if b["_id"] == bank)["status"] == "not_responding"
        widget_error(page.login(sess, "firstbank"), 1008)
    finally:
        box.control("banks/status", bank=bank, status="healthy")


def test_1009_details_the_bank_cannot_match(page):
    widget_error(page.login(page.session(), "uba", "bvn", {"bvn": "12345678901"}), 1009)
    widget_error(page.login(page.session(), "uba", "account_number",
                            {"account_number": "0000000000"}), 1009)


@pytest.mark.parametrize(("bank", "answer", "code"), [("zenith-bank", "000000", 1010),
                                                      ("zenith-bank", "12ab", 1010),
                                                      ("gtbank", "error_1011", 1011)])
def test_1010_1011_the_security_step(page, bank, answer, code):
    sess = page.session()
    assert page.login(sess, bank).json()["data"]["step"] == "mfa"
    widget_error(page.post("mfa", session=sess["session"], answer=answer), code)
    # the user may try again
    assert page.ok("mfa", session=sess["session"], answer="123456")["step"] == "accounts"


def test_1012_a_session_idle_past_its_timeout(sandbox):
    page = Page(sandbox)
    sess = page.session()
    sandbox.control("clock/advance", seconds=sess["idle_timeout_s"] + 1)
    widget_error(page.login(sess), 1012)
    service_error(page.login(sess), "INVALID_FIELD")  # and it is gone


def test_1013_a_direct_debit_over_the_balance(box, page):
    sess = page.session(payment_amount=10**12)
    assert "payment" in sess["products"]
    assert page.login(sess).status_code == 200
    body = widget_error(page.post("finish", session=sess["session"], accounts=[0],
                                  consent=True), 1013)
    record = re.search(r"record ([0-9a-f]{24})", body["message"]).group(1)
    with box.api() as api:  # the account is linked; the debit failed with PAYMENT_FAILED
        cb = api.get("callback", params={"record": record, "method": "PAYMENT"}).json()["data"]
        assert cb["callback"]["code"] == "PAYMENT_FAILED"
    done = page.link(payment_amount=100)  # within the balance
    assert done["payment"]["status"] == "success"


def test_1026_production_before_its_agreement_is_signed(box):
    production = Page(box, "production")
    widget_error(production.post("session", key=production.key), 1026)
    production.settings(agreement=True)
    try:
        assert production.link()["env"] == "production"
    finally:
        production.settings(agreement=False)


# -- bad input: a clear message, nothing created --------------------------------------------

@pytest.mark.parametrize(("change", "code", "words"), [
    ({"credentials": {"username": "<script>alert(1)</script>", "password": "pass_good"}},
     "INVALID_FIELD", "username"),
    ({"credentials": {"username": "ada", "password": "x" * 10_240}}, "INVALID_FIELD",
     "password"),
    ({"credentials": {"username": "ada"}}, "MISSING_FIELDS", "password"),
    ({"credentials": {"username": "ada", "password": "p", "otp": "1"}}, "UNKNOWN_FIELDS", "otp"),
    ({"bank": "0" * 24}, "INVALID_BANK", "bank"),
    ({"bank": ["x"]}, "INVALID_BANK", "bank"),
    ({"login_type": "telepathy"}, "INVALID_FIELD", "login_type"),
    ({"extra": 1}, "UNKNOWN_FIELDS", "extra"),
])
def test_bad_login_input_is_refused_and_creates_nothing(box, page, change, code, words):
    sess = page.session()
    body = {"session": sess["session"], "bank": page.banks["access-bank"]["_id"],
            "login_type": "bank", "credentials": GOOD, **change}
    before = count(box, "records"), count(box, "customers")
    resp = page.post("login", **body)
    assert words in service_error(resp, code)["error_message"]
    assert (count(box, "records"), count(box, "customers")) == before


def test_a_bank_down_or_in_maintenance_cannot_be_chosen(box, page):
    bank = page.banks["wema-bank"]["_id"]
    for status, code in (("down", "BANK_DOWN"), ("unavailable", "BANK_NOT_AVAILABLE")):
        box.control("banks/status", bank=bank, status=status)
        try:
            sess = page.session()
            assert next(b for b in sess["banks"] if b["_id"] == bank)["status"] == status
            service_error(page.login(sess, "wema-bank"), code)
        finally:
            box.control("banks/status", bank=bank, status="healthy")


def test_bad_requests_to_the_page(box, page):
    service_error(httpx.post(f"{page.base}/api/session", content=b"{", headers={
        "content-type": "application/json"}), "INVALID_BODY")
    service_error(httpx.post(f"{page.base}/api/session", content=b"{}"), "INVALID_HEADERS")
    service_error(httpx.post(f"{page.base}/api/session", json={"key": page.key,
                                                             "pad": "x" * 70_000}),
                  "INVALID_BODY")
    service_error(page.post("nowhere"), "NOT_FOUND", 404)
    service_error(page.post("session", key=page.key, products="auth,rocket"), "INVALID_PRODUCT")
    service_error(page.post("session", key=page.key, customer="nobody"), "INVALID_FIELD")
    service_error(page.post("login", session="forged", bank="x", login_type="bank",
                            credentials=GOOD), "INVALID_FIELD")
    sess = page.session()
    assert page.login(sess).status_code == 200
    for body in ({"accounts": [0], "consent": False}, {"accounts": [], "consent": True},
                 {"accounts": [0, 0], "consent": True}, {"accounts": [7], "consent": True},
                 {"accounts": [True], "consent": True}):
        service_error(page.post("finish", session=sess["session"], **body), "INVALID_FIELD")
    with box.api() as api:  # a forged record in a callback query names nothing
        service_error(api.get("callback", params={"record": "a" * 24, "method": "AUTH"}),
                      "INVALID_FIELD")
