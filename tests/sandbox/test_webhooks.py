"""Webhook delivery over real HTTP: a sandbox child process and a receiving server whose
answer the test switches (200, 500, hang), with the sandbox clock advanced hour by hour.

The spec's state table: 2xx acknowledges; otherwise the event is raised again every hour
for 72 hours after the first attempt (attempts at 0 h, 1 h, ... 72 h), then dropped.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from sandbox.webhooks import PER_TARGET
from tests.conftest import Sandbox, start_sandbox

HOUR = 3600
HANG = "hang"
TOKEN = "whk_" + "c0ffee" * 4


# -- the receiving server ----------------------------------------------------------------------

@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict


@dataclass
class Hook:
    """A receiver on a free loopback port, in a thread of the test: keeps every request and
    answers with `answer`, a status code or HANG (hold the request open until switched)."""

    answer: int | str = 200
    requests: list[Received] = field(default_factory=list)
    hanging: int = 0

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._release = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                got = Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                               orjson.loads(raw))
                with hook._cond:
                    hook.requests.append(got)
                    answer, release = hook.answer, hook._release
                    hook.hanging += answer == HANG
                    hook._cond.notify_all()
                if answer == HANG:
                    release.wait(120)
                    with hook._cond:
                        hook.hanging -= 1
                        hook._cond.notify_all()
                    answer = 200
                try:
                    self.send_response(answer)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"this body": "is ignored"}')
                except OSError:  # the sender gave up waiting
                    pass

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/"

    def set(self, answer: int | str) -> None:
        with self._cond:
            self.answer = answer
            if answer != HANG:
                self._release.set()
                self._release = threading.Event()

    def matching(self, **members) -> list[Received]:
        with self._cond:
            return [r for r in self.requests
                    if all(r.body.get(k) == v for k, v in members.items())]

    def wait_for(self, count: int, timeout_s: float = 30.0, **members) -> list[Received]:
        """At least `count` requests whose body holds `members` (fails after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                got = [r for r in self.requests
                       if all(r.body.get(k) == v for k, v in members.items())]
                left = deadline - time.monotonic()
                if len(got) >= count or left <= 0:
                    break
                self._cond.wait(left)
        assert len(got) >= count, f"only {len(got)} of {count} requests with {members}"
        return got

    def wait_hanging(self, count: int, timeout_s: float = 30.0) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: self.hanging >= count, timeout_s)
            assert ok, f"{self.hanging} of {count} requests held open"

    def close(self) -> None:
        self.set(200)
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.close()


@pytest.fixture
def other_hook():
    h = Hook()
    yield h
    h.close()


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """One sandbox for the tests that need no fresh state (each works on its own record).
    Receivers get 2 s to answer, so a hang is a quick timeout."""
    b = start_sandbox(tmp_path_factory.mktemp("shared") / "sandbox", "--webhook-timeout", "2")
    yield b
    b.server.stop()


@pytest.fixture
def fresh(tmp_path):
    """A sandbox of its own, for tests that need an environment with no webhook set."""
    b = start_sandbox(tmp_path / "sandbox", "--webhook-timeout", "2")
    yield b
    b.server.stop()


# -- helpers -----------------------------------------------------------------------------------

def ok(resp) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def error_code(resp) -> str:
    assert resp.status_code == 400, resp.text
    return resp.json()["error_code"]


def new_record(api, products: list[str] | None = ["auth", "identity"]) -> str:  # noqa: B006
    """A connected record; by default without balance and transactions, so the clock's days
    raise no periodic callbacks beside the ones a test is counting."""
    spec = {"accounts": 1, **({"products": products} if products else {})}
    made = ok(api.post("sandbox/customers/create", json={"customers": [spec]}))
    return made["customers"][0]["record"]


def advance(api, seconds: int) -> None:
    ok(api.post("sandbox/clock/advance", json={"seconds": seconds}))


def status(api, record: str, method: str) -> dict:
    return ok(api.get("callback", params={"record": record, "method": method}))


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def wait_state(api, record: str, method: str, state: str, timeout_s: float = 30.0) -> dict:
    """GET /callback until the latest delivery of `method` is in `state`."""
    deadline = time.monotonic() + timeout_s
    while (seen := status(api, record, method))["callback"]["state"] != state:
        assert time.monotonic() < deadline, f"{method} stayed {seen['callback']['state']}"
        time.sleep(0.05)
    return seen


def wait_attempts(api, record: str, method: str, count: int, timeout_s: float = 30.0) -> list:
    """GET /callback until the latest delivery of `method` has `count` attempts recorded."""
    deadline = time.monotonic() + timeout_s
    while len(attempts := status(api, record, method)["callback"]["attempts"]) < count:
        assert time.monotonic() < deadline, f"{len(attempts)} of {count} attempts recorded"
        time.sleep(0.05)
    return attempts


def fire_auth(api, hook: Hook, record: str) -> Received:
    """Point the webhook at `hook` and raise one AUTH callback; returns its first delivery."""
    ok(api.post("settings/webhook", json={"url": hook.url, "token": TOKEN}))
    ok(api.post("sandbox/records/fire_webhook", json={"record": record, "method": "AUTH"}))
    return hook.wait_for(1, record=record, method="AUTH")[0]


def barrier(api, hook: Hook, record: str) -> None:
    """A fresh callback to `hook`, waited for: whatever was due before it has been started."""
    before = len(hook.matching(record=record, method="IDENTITY"))
    ok(api.post("sandbox/records/fire_webhook", json={"record": record, "method": "IDENTITY"}))
    hook.wait_for(before + 1, record=record, method="IDENTITY")


# -- the schedule ------------------------------------------------------------------------------

def test_unacknowledged_event_is_raised_hourly_for_72_hours_then_dropped(box, hook):
    hook.set(500)
    with box.api() as api:
        record = new_record(api)
        first = fire_auth(api, hook, record)
        for hour in range(1, 73):
            advance(api, HOUR)
            hook.wait_for(hour + 1, record=record, method="AUTH")
        advance(api, HOUR)
        advance(api, 10 * HOUR)
        barrier(api, hook, record)
        seen = wait_state(api, record, "AUTH", "dropped")
        # the payload's callback_url is that very status address
        url = urlsplit(first.body["callback_url"])
        assert url.path == "/sandbox/v2/callback"
        assert parse_qs(url.query) == {"record": [record], "method": ["AUTH"]}

    got = hook.matching(record=record, method="AUTH")
    assert len(got) == 73  # 0 h, 1 h, ... 72 h, and none after
    for r in got:
        assert r.headers["authorization"] == f"Bearer {TOKEN}"
        assert r.headers["content-type"] == "application/json"
        assert r.path == "/hooks/"
        body = r.body
        assert body["type"] == "CALLBACK" and body["code"] == body["callback_code"]
        # a redelivery is the same event: only serverResponse changes
        assert {k: v for k, v in body.items() if k != "serverResponse"} == first.body
    assert "serverResponse" not in first.body
    assert all(r.body["serverResponse"] == {"status": 500, "message": "Internal Server Error"}
               for r in got[1:])

    callback = seen["callback"]
    assert callback["state"] == "dropped" and callback["next_attempt_at"] is None
    attempts = callback["attempts"]
    assert [a["attempt"] for a in attempts] == list(range(73))
    assert all(a["status"] == 500 for a in attempts)
    start = ts(attempts[0]["at"])
    for a in attempts:  # attempt k falls in hour k of the sandbox clock after the first
        assert a["attempt"] * HOUR <= ts(a["at"]) - start < (a["attempt"] + 1) * HOUR
    assert seen["status"]["last_callback"] == attempts[-1]["at"]
    assert seen["status"]["process"] == {"running": False, "completed": True}


def test_a_clock_jump_makes_each_hour_its_own_attempt(box, hook):
    hook.set(503)
    with box.api() as api:
        record = new_record(api)
        fire_auth(api, hook, record)
        advance(api, 5 * HOUR + 60)
        hook.wait_for(6, record=record, method="AUTH")
        advance(api, 100 * HOUR)
        hook.wait_for(73, record=record, method="AUTH")
        barrier(api, hook, record)
        # the 73rd answer reaches the hook before the service records it: wait for the record
        callback = wait_state(api, record, "AUTH", "dropped")["callback"]
    assert len(hook.matching(record=record, method="AUTH")) == 73
    assert callback["state"] == "dropped" and len(callback["attempts"]) == 73


def test_acknowledgement_stops_redelivery(box, hook):
    hook.set(500)
    with box.api() as api:
        record = new_record(api)
        fire_auth(api, hook, record)
        advance(api, HOUR)
        hook.wait_for(2, record=record, method="AUTH")
        hook.set(200)
        advance(api, HOUR)
        hook.wait_for(3, record=record, method="AUTH")
        wait_state(api, record, "AUTH", "acknowledged")
        for _ in range(5):
            advance(api, HOUR)
        barrier(api, hook, record)
        seen = status(api, record, "AUTH")
    assert len(hook.matching(record=record, method="AUTH")) == 3
    callback = seen["callback"]
    assert callback["state"] == "acknowledged"
    assert [a.get("status") for a in callback["attempts"]] == [500, 500, 200]
    assert callback["sent_at"] == callback["attempts"][-1]["at"]


def test_no_answer_within_the_timeout_is_unacknowledged(box, hook):
    hook.set(HANG)
    with box.api() as api:
        record = new_record(api)
        fire_auth(api, hook, record)
        wait_attempts(api, record, "AUTH", 1)
        assert hook.hanging == 1  # the sandbox gave up while the receiver still held it
        hook.set(200)
        attempts = status(api, record, "AUTH")["callback"]["attempts"]
        assert attempts[0]["success"] is False and "no answer" in attempts[0]["error"]
        advance(api, HOUR)
        second = hook.wait_for(2, record=record, method="AUTH")[1]
        assert second.body["serverResponse"] == {k: v for k, v in attempts[0].items()
                                                 if k not in ("attempt", "at")}
        wait_state(api, record, "AUTH", "acknowledged")


def test_a_restart_in_the_middle_of_the_schedule_loses_nothing(tmp_path, hook):
    data_dir = tmp_path / "sandbox"
    box: Sandbox = start_sandbox(data_dir, "--webhook-timeout", "30")
    try:
        hook.set(500)
        with box.api() as api:
            record = new_record(api)
            fire_auth(api, hook, record)
            for hour in range(1, 11):
                advance(api, HOUR)
                hook.wait_for(hour + 1, record=record, method="AUTH")
            hook.set(HANG)  # attempt 11 is in flight when the sandbox stops
            advance(api, HOUR)
            hook.wait_hanging(1)
    finally:
        box.server.stop()
    hook.set(500)
    assert len(hook.matching(record=record, method="AUTH")) == 12

    box = start_sandbox(data_dir, "--webhook-timeout", "30")
    try:
        with box.api() as api:
            # the interrupted attempt is made again at once, then the schedule goes on
            hook.wait_for(13, record=record, method="AUTH")
            callback = status(api, record, "AUTH")["callback"]
            assert callback["state"] == "pending"
            for hour in range(12, 15):
                advance(api, HOUR)
                hook.wait_for(hour + 2, record=record, method="AUTH")
            advance(api, 60 * HOUR)  # hours 15 to 72 in one jump: each is its own attempt
            hook.wait_for(74, record=record, method="AUTH")
            advance(api, 5 * HOUR)
            barrier(api, hook, record)
            callback = wait_state(api, record, "AUTH", "dropped")["callback"]
    finally:
        box.server.stop()
    assert len(hook.matching(record=record, method="AUTH")) == 74  # 73 + the cut-short one
    assert callback["state"] == "dropped"
    assert [a["attempt"] for a in callback["attempts"]] == list(range(73))


# -- isolation ---------------------------------------------------------------------------------

def test_a_hanging_receiver_does_not_delay_another(tmp_path, hook, other_hook):
    box = start_sandbox(tmp_path / "sandbox", "--webhook-timeout", "60")
    try:
        hook.set(HANG)
        with box.api() as api:
            record = new_record(api)
            ok(api.post("settings/webhook", json={"url": hook.url, "token": TOKEN}))
            for method in ("AUTH", "IDENTITY", "INCOME", "BALANCE", "TRANSACTIONS", "PAYMENT"):
                ok(api.post("sandbox/records/fire_webhook",
                            json={"record": record, "method": method}))
            hook.wait_hanging(1)
            # send the record's latest callbacks elsewhere: they arrive while the first
            # receiver still holds every request it was sent
            ok(api.post("callback/trigger", json={"records": [record], "url": other_hook.url}))
            for method in ("AUTH", "IDENTITY", "INCOME", "BALANCE", "TRANSACTIONS", "PAYMENT"):
                other_hook.wait_for(1, record=record, method=method)
            wait_state(api, record, "INCOME", "acknowledged")  # the API answers meanwhile
            # the hanging receiver holds as many requests as one receiver may have in flight
            assert hook.hanging == len(hook.requests) == PER_TARGET
            assert all(not d.body.get("serverResponse") for d in hook.requests)
            assert other_hook.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
            hook.set(200)
    finally:
        box.server.stop()


# -- trigger and fire_webhook ------------------------------------------------------------------

def test_trigger_resends_latest_callbacks_to_saved_url_or_url(fresh, hook, other_hook):
    with fresh.api() as api:
        record = new_record(api)  # no webhook set yet: its callbacks are kept, unsent
        for method, code in (("INCOME", "PRODUCT_IS_READY"), ("INCOME", "INCOME_FAILED"),
                             ("PAYMENT", "PAYMENT_SUCCESS")):
            ok(api.post("sandbox/records/fire_webhook",
                        json={"record": record, "method": method, "code": code}))
        seen = status(api, record, "INCOME")
        assert seen["callback"]["state"] == "unsent" and seen["callback"]["code"] == "INCOME_FAILED"
        assert hook.requests == []

        resp = api.post("callback/trigger", json={"record": record, "url": other_hook.url})
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"status": "success", "messgae": "Webhook trigger initiated",
                               "data": {}}
        income = other_hook.wait_for(1, record=record, method="INCOME")
        other_hook.wait_for(1, record=record, method="PAYMENT")
        assert [r.body["code"] for r in income] == ["INCOME_FAILED"]  # only the latest
        assert income[0].body["status"] == "is_failed"
        assert income[0].body["callbackURL"] == other_hook.url

        ok(api.post("settings/webhook", json={"url": hook.url, "token": TOKEN}))
        ok(api.post("callback/trigger", json={"records": [record]}))
        got = hook.wait_for(1, record=record, method="INCOME")
        assert got[0].headers["authorization"] == f"Bearer {TOKEN}"
        assert got[0].body["code"] == "INCOME_FAILED"
        wait_state(api, record, "INCOME", "acknowledged")


def test_trigger_and_controls_refuse_bad_input_and_change_nothing(fresh, hook):
    with fresh.api() as api:
        record = new_record(api)
        assert error_code(api.post("callback/trigger", json={"records": [record] * 101})) \
            == "INVALID_FIELD"
        assert error_code(api.post("callback/trigger", json={"records": []})) == "INVALID_FIELD"
        assert error_code(api.post("callback/trigger",
                                   json={"records": [record, "0" * 24]})) == "INVALID_FIELD"
        assert error_code(api.post("callback/trigger", json={"records": [record, 7]})) \
            == "INVALID_FIELD"
        assert error_code(api.post("callback/trigger", json={"record": record})) \
            == "INVALID_FIELD"  # no saved URL and none given
        assert error_code(api.post("callback/trigger",
                                   json={"record": record, "url": "ftp://x"})) == "INVALID_FIELD"
        assert error_code(api.post("callback/trigger", json={})) == "MISSING_FIELDS"
        assert error_code(api.get("callback", params={"record": record, "method": "NOPE"})) \
            == "INVALID_FIELD"
        assert error_code(api.get("callback", params={"record": "0" * 24, "method": "AUTH"})) \
            == "INVALID_FIELD"
        assert error_code(api.post("sandbox/records/fire_webhook",
                                   json={"record": record, "method": "AUTH", "code": "x y"})) \
            == "INVALID_FIELD"
        for seconds in (-1, "3600", True, 10**9):
            assert error_code(api.post("sandbox/clock/advance", json={"seconds": seconds})) \
                == "INVALID_FIELD"
        ok(api.post("settings/webhook", json={"url": hook.url, "token": TOKEN}))
        barrier(api, hook, record)
        assert hook.matching(record=record, method="AUTH") == []
    with fresh.api("production") as prod:
        assert error_code(prod.post("sandbox/clock/advance", json={"seconds": 1})) \
            == "SANDBOX_ONLY"


def test_each_environment_has_its_own_webhook_and_token(box, hook, other_hook):
    with box.api("production") as prod:
        ok(prod.post("settings/webhook", json={"url": other_hook.url, "token": "prod-token"}))
    with box.api() as api:
        record = new_record(api)
        got = fire_auth(api, hook, record)
    assert got.headers["authorization"] == f"Bearer {TOKEN}"
    assert other_hook.matching(record=record) == []


def test_callback_status_shows_balance_family_and_product_data(box, hook):
    with box.api() as api:
        record = new_record(api)
        ok(api.post("settings/webhook", json={"url": hook.url, "token": TOKEN}))
        ok(api.post("sandbox/records/fire_webhook",
                    json={"record": record, "method": "PERIODIC_BALANCE"}))
        got = hook.wait_for(1, record=record, method="PERIODIC_BALANCE")[0].body
        assert got["callback_type"] == "BALANCE" and got["code"] == "BALANCE_SUCCESS"
        seen = status(api, record, "BALANCE")  # the query value shown covers the periodic one
        assert seen["product"] == "balance" and seen["callback"]["method"] == "PERIODIC_BALANCE"


# -- what is sent ------------------------------------------------------------------------------

def test_connection_callbacks_carry_the_spec_members_and_the_token(box, hook):
    with box.api() as api:
        ok(api.post("settings/webhook", json={"url": hook.url, "token": TOKEN}))
        record = new_record(api, products=None)
        hook.wait_for(1, record=record, method="ACCOUNTS")
        barrier(api, hook, record)
        got = [r for r in hook.matching(record=record) if r.body.get("type") == "CALLBACK"]
        assert got
        for r in got:
            body = r.body
            assert r.headers["authorization"] == f"Bearer {TOKEN}"
            assert body["code"] == body["callback_code"]
            assert body["env"] == "production-sandbox" and body["callbackURL"] == hook.url
            url = urlsplit(body["callback_url"])
            assert url.path == "/sandbox/v2/callback"
            assert parse_qs(url.query) == {"record": [record], "method": [body["method"]]}
            # the status address answers for that record and method
            seen = ok(api.get(body["callback_url"].split("/sandbox/v2/", 1)[1]))
            assert seen["record"] == record and seen["status"]["process"]["completed"]


def test_item_get_shows_the_last_webhook_attempt(box, hook):
    hook.set(500)
    with box.api() as api:
        record = new_record(api)
        fire_auth(api, hook, record)
        first = wait_attempts(api, record, "AUTH", 1)[-1]
        item = ok(api.post("item/get", json={"record": record}))["item"]
        assert item["last_webhook"] == {"code": "AUTH_SUCCESS", "sent_at": first["at"]}
        hook.set(200)
        advance(api, HOUR)
        second = wait_state(api, record, "AUTH", "acknowledged")["callback"]["attempts"][-1]
        item = ok(api.post("item/get", json={"record": record}))["item"]
        assert item["last_webhook"] == {"code": "AUTH_SUCCESS", "sent_at": second["at"]}
        assert second["status"] == 200 and ts(second["at"]) - ts(first["at"]) >= HOUR
