"""Webhook delivery round several URLs (a sandbox extension of /settings/webhook), with real
receiver processes: first deliveries alternate, and a redelivery goes to the next URL, so the
callbacks a dead receiver missed reach the survivor an hour (of sandbox clock) later."""

from __future__ import annotations

import secrets
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from pipeline.local import Server
from tests.conftest import Receiver, Sandbox

HOUR = 3600


def ok(resp: httpx.Response) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def start_receiver(folder: Path, token: str) -> Receiver:
    folder.mkdir()
    inbox = folder / "inbox.sqlite3"
    server = Server("receiver", "--inbox", str(inbox), env={"LEDGERLAKE_RECEIVER_TOKEN": token},
                    log_path=folder / "receiver.log").start()
    return Receiver(server.url, token, inbox, server)


@pytest.fixture
def pair(tmp_path: Path):
    """Two receiver processes sharing the environment's token, each with its own inbox."""
    token = secrets.token_hex(16)
    made = [start_receiver(tmp_path / name, token) for name in ("a", "b")]
    yield made
    for r in made:
        r.server.stop()


def arrived(receiver: Receiver) -> list[str]:
    """Records of the AUTH callbacks the receiver stored, in its order."""
    if not receiver.inbox.exists():
        return []
    db = sqlite3.connect(receiver.inbox)
    try:
        return [r[0] for r in db.execute(
            "select record from events where method = 'AUTH' order by id")]
    finally:
        db.close()


def wait_for(check, what: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)
    return got


def records(api: httpx.Client, n: int) -> list[str]:
    """Connected records made before any webhook is set (their first callbacks stay unsent);
    without balance and transactions, so the clock's days raise no periodic callbacks."""
    made = ok(api.post("sandbox/customers/create", json={"customers": [
        {"accounts": 1, "products": ["auth", "identity"]} for _ in range(n)]}))
    return [c["record"] for c in made["customers"]]


def fire(api: httpx.Client, record: str) -> None:
    ok(api.post("sandbox/records/fire_webhook", json={"record": record, "method": "AUTH"}))


def attempts(api: httpx.Client, record: str) -> list[dict]:
    return ok(api.get("callback", params={"record": record, "method": "AUTH"}))["callback"][
        "attempts"]


def test_first_deliveries_alternate_between_the_urls(sandbox: Sandbox, pair):
    a, b = pair
    with sandbox.api() as api:
        made = records(api, 6)
        answer = ok(api.post("settings/webhook", json={
            "url": [a.callback_url, b.callback_url], "token": a.token}))
        assert answer["url"] == [a.callback_url, b.callback_url] and answer["token_set"]
        for record in made:
            fire(api, record)
        wait_for(lambda: len(arrived(a)) + len(arrived(b)) == 6, "six callbacks")
    # delivery i went to URL i mod 2 (attempts run concurrently: arrival order may vary)
    assert sorted(arrived(a)) == sorted(made[0::2]) and sorted(arrived(b)) == sorted(made[1::2])


def test_redeliveries_go_to_the_survivor_when_one_receiver_dies(sandbox: Sandbox, pair):
    a, b = pair
    with sandbox.api() as api:
        made = records(api, 8)
        ok(api.post("settings/webhook", json={"url": [a.callback_url, b.callback_url],
                                              "token": a.token}))
        for record in made[:4]:
            fire(api, record)
        wait_for(lambda: len(arrived(a)) == 2 and len(arrived(b)) == 2, "two callbacks each")
        # stored is not yet acknowledged: killed in between, the service would redeliver
        for record in made[:4]:
            wait_for(lambda r=record: [t for t in attempts(api, r) if t.get("status") == 200],
                     f"{record} acknowledged")
        b.server.proc.kill()  # SIGKILL mid-stream
        b.server.proc.wait()
        for record in made[4:]:
            fire(api, record)
        # half of the later ones went to the dead receiver: attempted once, unacknowledged
        for record in made[5::2]:
            wait_for(lambda r=record: attempts(api, r), f"{record}'s first attempt")
            (first,) = attempts(api, record)
            assert first["success"] is False and first["error"] == "could not connect"
        wait_for(lambda: len(arrived(a)) == 4, "the survivor's own turns")
        assert not set(made[5::2]) & set(arrived(a))
        ok(api.post("sandbox/clock/advance", json={"seconds": HOUR}))
        wait_for(lambda: len(arrived(a)) == 6, "the survivor has the redeliveries")
        for record in made[5::2]:
            second = wait_for(lambda r=record: attempts(api, r)[1:], "a second attempt")[0]
            assert second["status"] == 200
    a_got, b_got = arrived(a), arrived(b)
    assert sorted(a_got[:4]) == sorted(made[0:8:2])  # its own turns, at once
    assert sorted(a_got[4:]) == sorted(made[5::2])  # the dead one's, an hour later
    assert sorted(b_got) == sorted([made[1], made[3]])  # stored before it died, kept
    assert sorted(a_got + b_got) == sorted(made)  # every event in exactly one inbox


def test_a_list_of_one_url_and_a_plain_url_deliver_as_before(sandbox: Sandbox, pair):
    a, b = pair
    with sandbox.api() as api:
        made = records(api, 4)
        assert ok(api.post("settings/webhook", json={"url": [a.callback_url],
                                                     "token": a.token}))["url"] == [a.callback_url]
        fire(api, made[0])
        fire(api, made[1])
        answer = ok(api.post("settings/webhook", json={"url": b.callback_url, "token": a.token}))
        assert answer == {"url": b.callback_url, "token_set": True, "env": "production-sandbox"}
        fire(api, made[2])
        fire(api, made[3])
        wait_for(lambda: len(arrived(a)) == 2 and len(arrived(b)) == 2, "two callbacks each")
    assert sorted(arrived(a)) == sorted(made[:2]) and sorted(arrived(b)) == sorted(made[2:])


@pytest.mark.parametrize("url", [[], ["http://127.0.0.1:9/x", "http://127.0.0.1:9/x"],
                                 ["http://127.0.0.1:9/x", "ftp://host/x"],
                                 [f"http://127.0.0.1:9/{i}" for i in range(9)], [7]])
def test_bad_url_lists_are_refused_and_change_nothing(sandbox: Sandbox, pair, url):
    a, _ = pair
    with sandbox.api() as api:
        (record,) = records(api, 1)
        ok(api.post("settings/webhook", json={"url": a.callback_url, "token": a.token}))
        resp = api.post("settings/webhook", json={"url": url, "token": a.token})
        assert resp.status_code == 400 and resp.json()["error_code"] == "INVALID_FIELD", resp.text
        assert resp.json()["error_message"].startswith("url")
        fire(api, record)
        wait_for(lambda: arrived(a) == [record], "the callback at the URL set before")
