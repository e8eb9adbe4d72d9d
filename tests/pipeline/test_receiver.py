"""The receiver as a real process on loopback, fed hostile and repeated callbacks."""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.local import Server
from resources.inbox import Inbox
from tests.conftest import dead_letters, deliveries
from tests.ground_truth import wait

# one client for the module: making an httpx client costs tens of milliseconds (its SSL context)
HTTP = httpx.Client(timeout=30)


def post(receiver, body, *, token=None, raw: bytes | None = None, path="/callbacks/",
         headers=None) -> httpx.Response:
    hdrs = {"Content-Type": "application/json",
            "Authorization": f"Bearer {receiver.token if token is None else token}"}
    hdrs.update(headers or {})
    content = raw if raw is not None else orjson.dumps(body)
    return HTTP.post(receiver.url + path, content=content, headers=hdrs)


def stored(receiver) -> tuple[int, list[tuple[str, bytes]]]:
    with Inbox(receiver.inbox) as inbox:
        return inbox.count(), dead_letters(inbox)


def test_a_callback_is_stored_and_acknowledged(receiver, make):
    resp = post(receiver, make.callback("rec1"))
    assert resp.status_code == 200, resp.text
    assert resp.json()["duplicate"] is False
    with Inbox(receiver.inbox) as inbox:
        (event,) = inbox.after(0)
    assert (event.id, event.record, event.method) == (resp.json()["event"], "rec1", "ACCOUNTS")


def test_a_trailing_slash_is_tolerated(receiver, make):
    assert post(receiver, make.callback("r1"), path="/callbacks").status_code == 200
    assert post(receiver, make.callback("r2"), path="/callbacks/").status_code == 200
    assert post(receiver, make.callback("r3"), path="/elsewhere/").status_code == 404
    assert stored(receiver)[0] == 2


WRONG_AUTH = [
    {"Authorization": "Bearer wrong"},
    {"Authorization": ""},
    {},
    {"Authorization": "Basic {token}"},
    {"Authorization": "Bearer {token}x"},
    {"Authorization": "Bearer {short}"},
    {"Authorization": "Bearer", "Service-Auth": "{token}"},  # no such header configured here
]


def test_a_wrong_or_missing_token_is_401_and_stores_nothing(receiver, make):
    for headers in WRONG_AUTH:
        headers = {k: v.format(token=receiver.token, short=receiver.token[:-1])
                   for k, v in headers.items()}
        hdrs = {"Content-Type": "application/json", **headers}
        resp = HTTP.post(receiver.callback_url, content=orjson.dumps(make.callback("r1")),
                         headers=hdrs)
        assert resp.status_code == 401, headers
        assert receiver.token not in resp.text
    assert stored(receiver) == (0, [])  # not even a dead letter: strangers write nothing


def test_the_configured_auth_header_is_accepted(tmp_path, make):
    token = secrets.token_hex(16)
    inbox = tmp_path / "inbox.sqlite3"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    with Server("receiver", "--inbox", str(inbox), "--token-file", str(token_file),
                "--auth-header", "Service-Auth", "--path", "/hooks/in/") as server:
        url = server.url + "/hooks/in"
        ok = HTTP.post(url, json=make.callback("r1"), headers={"service-auth": token})
        bad = HTTP.post(url, json=make.callback("r2"), headers={"Service-Auth": "nope"})
        other = HTTP.post(url, json=make.callback("r3"), headers={"Other-Auth": token})
    assert (ok.status_code, bad.status_code, other.status_code) == (200, 401, 401)
    with Inbox(inbox, create=True) as ib:
        assert [e.record for e in ib.after(0)] == ["r1"]


def test_the_receiver_will_not_start_without_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LEDGERLAKE_RECEIVER_TOKEN"}
    with pytest.raises(RuntimeError, match="exited with 2"):
        Server("receiver", "--inbox", str(tmp_path / "i.sqlite3"), env=env).start()


def test_health_answers_a_load_balancer_without_a_token(receiver):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        resp = HTTP.get(receiver.url + "/health", headers=headers)
        assert (resp.status_code, resp.json()) == (200, {"status": "ok"})
    head = HTTP.head(receiver.url + "/health")
    assert (head.status_code, head.content) == (200, b"")
    assert HTTP.post(receiver.url + "/health").status_code == 405  # not a callback route
    assert stored(receiver) == (0, [])


def test_health_is_503_once_the_inbox_file_is_gone(receiver, make):
    assert post(receiver, make.callback("r1")).status_code == 200
    for suffix in ("", "-wal", "-shm"):  # the data folder wiped under a running receiver
        receiver.inbox.with_name(receiver.inbox.name + suffix).unlink(missing_ok=True)
    resp = HTTP.get(receiver.url + "/health")
    assert resp.status_code == 503
    assert resp.json()["status"] == "error"
    assert str(receiver.inbox.parent) not in resp.text  # no path, no error detail


def test_health_is_503_once_another_file_takes_the_inbox_files_place(receiver, make):
    """The WAL left beside it, SQLite would read the replaced file's first page from there:
    a read through the path alone still answered."""
    assert post(receiver, make.callback("r1")).status_code == 200
    assert HTTP.get(receiver.url + "/health").status_code == 200
    receiver.inbox.rename(receiver.inbox.with_name("moved.sqlite3"))
    receiver.inbox.write_bytes(b"not the inbox" * 100)
    resp = HTTP.get(receiver.url + "/health")
    assert (resp.status_code, resp.json()["status"]) == (503, "error")


def test_a_huge_body_is_413(receiver, make):
    body = make.callback("r1", extras={"pad": "x" * (2 << 20)})
    assert post(receiver, body).status_code == 413

    def chunks():  # no Content-Length: the cap holds on the stream itself
        yield b'{"pad": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    resp = HTTP.post(receiver.callback_url, content=chunks(),
                     headers={"Authorization": f"Bearer {receiver.token}"})
    assert resp.status_code == 413
    assert stored(receiver)[0] == 0
    # and the receiver still works afterwards
    assert post(receiver, make.callback("r2")).status_code == 200


NOT_EVENTS = [b"", b"{", b"not json", b"\xff\xfe", b'{"a": NaN}', b"[" * 5000, b'"\\ud800"',
              b"[]", b"null", b'{"a": 1}',
              # valid JSON (orjson reads 1024 levels) deeper than orjson writes (255)
              b'{"event": "X", "data": {"customer": "c", "z": ' + b'{"a": ' * 400 + b"1"
              + b"}" * 400 + b"}}"]


def test_bodies_that_are_not_events_are_400_and_dead_lettered(receiver):
    for raw in NOT_EVENTS:
        resp = post(receiver, None, raw=raw)
        assert resp.status_code == 400, (raw, resp.text)
        assert resp.json()["error"]
    count, dead = stored(receiver)
    assert count == 0
    # kept as sent but a JSON object, written again without its personal members
    assert [body for _, body in dead] == NOT_EVENTS[:9] + [b'{"a":1}', NOT_EVENTS[10]]
    assert all(reason for reason, _ in dead)


TRAVERSALS = ["../../etc", "../../etc/passwd", "..", "a/b", "a\\b", "%2e%2e%2f", "x" * 65, "",
              " r1", "r1\n"]


def test_path_traversal_record_ids_are_refused(receiver, make):
    for record in TRAVERSALS:
        body = make.callback("placeholder")
        body["record"] = body["recordId"] = record
        resp = post(receiver, body)
        assert resp.status_code == 400, record
        assert "record" in resp.json()["error"]
    count, dead = stored(receiver)
    assert count == 0 and len(dead) == len(TRAVERSALS)


def test_unknown_events(receiver, make):
    # a callback method or connection event not known yet is kept (the set grows over time)
    assert post(receiver, make.callback("r1", "CREDIT_SCORE", "PRODUCT_IS_READY")).status_code \
        == 200
    assert post(receiver, {"event": "USER_UPGRADED", "message": "",
                           "data": {"customer": "c1", "at": "x"}}).status_code == 200
    # a body with no event shape at all is not
    assert post(receiver, {"type": "PING"}).status_code == 400
    assert post(receiver, {"event": "X", "data": "not an object"}).status_code == 400
    count, dead = stored(receiver)
    assert (count, len(dead)) == (2, 2)


def test_duplicates_are_stored_once(receiver, make):
    body = make.callback("r1")
    first = post(receiver, body)
    again = post(receiver, {**body, "serverResponse": {"status": 503, "message": "busy"}})
    assert first.json()["event"] == again.json()["event"]
    assert again.json()["duplicate"] is True
    assert stored(receiver)[0] == 1


def test_out_of_order_delivery(receiver, make):
    rec = "rec-ooo"
    auth = make.callback(rec, "AUTH", "AUTH_SUCCESS", customer="cx",
                         ended_at="2026-01-01T00:00:00.000Z")
    gone = make.disconnect("cx", "2026-01-02T00:00:00.000Z")
    tx = make.callback(rec, "TRANSACTIONS", "PRODUCT_IS_READY", customer="cx",
                       ended_at="2026-01-01T00:05:00.000Z")
    # the first delivery of AUTH fails upstream; the disconnect and then a redelivery overtake it
    for body in (tx, auth, gone, auth, tx):
        assert post(receiver, body).status_code == 200
    with Inbox(receiver.inbox) as inbox:
        assert inbox.count() == 3
        assert inbox.status(rec) == "disconnected"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["method", "callback_code", "code", "record", "recordId", "event",
                         "data", "type", "accountId", "status", "started_at", "ended_at",
                         "customer", "accounts", "x"]), kids, max_size=8),
    max_leaves=20))
def test_no_input_makes_it_answer_5xx(receiver, body):
    resp = post(receiver, None, raw=json.dumps(body).encode())  # big ints too
    assert resp.status_code in (200, 400), (resp.status_code, body)


def test_killed_and_restarted_between_deliveries_loses_and_doubles_nothing(tmp_path, make):
    """SIGKILL mid-stream; the sender redelivers everything it has no 2xx for, and more."""
    token = secrets.token_hex(16)
    inbox_path = tmp_path / "inbox.sqlite3"
    bodies = [make.callback(f"rec{i:04d}", ended_at=f"2026-01-01T00:00:{i % 60:02d}.000Z")
              for i in range(600)]
    acked: set[int] = set()

    def deliver(url: str, indices: list[int]) -> None:
        def one(i: int) -> None:
            try:
                r = HTTP.post(url, content=orjson.dumps(bodies[i]),
                              headers={"Authorization": f"Bearer {token}"})
            except httpx.HTTPError:
                return  # unacknowledged: delivered again later
            if r.status_code == 200:
                acked.add(i)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, indices))

    first = Server("receiver", "--inbox", str(inbox_path),
                   env={"LEDGERLAKE_RECEIVER_TOKEN": token}, log_path=tmp_path / "r1.log").start()
    try:
        url = first.url + "/callbacks/"
        deliver(url, list(range(200)))
        with ThreadPoolExecutor(1) as killer:
            # kill while the next deliveries are in flight
            def kill():
                while len(acked) < 300:
                    time.sleep(0.005)
                os.kill(first.proc.pid, signal.SIGKILL)
            fut = killer.submit(kill)
            deliver(url, list(range(200, 600)))
            fut.result()
    finally:
        first.proc.wait()
    acked_before_kill = set(acked)
    assert 300 <= len(acked_before_kill) < 600

    with Inbox(inbox_path, create=True) as inbox:  # every acknowledged event survived the kill
        present = {e.record for e in inbox.after(0, 10_000)}
    assert {f"rec{i:04d}" for i in acked_before_kill} <= present

    with Server("receiver", "--inbox", str(inbox_path),
                env={"LEDGERLAKE_RECEIVER_TOKEN": token}, log_path=tmp_path / "r2.log") as second:
        url = second.url + "/callbacks/"
        unacked = [i for i in range(600) if i not in acked_before_kill]
        # the hourly redelivery sends the unacknowledged ones; a flaky network repeats some
        # acknowledged ones too, with a new serverResponse
        deliver(url, unacked)
        for i in sorted(acked_before_kill)[:50]:
            bodies[i] = {**bodies[i], "serverResponse": {"success": False, "error": "timeout"}}
        deliver(url, sorted(acked_before_kill)[:50])
    assert len(acked) == 600
    with Inbox(inbox_path, create=True) as inbox:
        events = inbox.after(0, 10_000)
        assert len(events) == inbox.count() == 600
    assert sorted(e.record for e in events) == [f"rec{i:04d}" for i in range(600)]
    assert [e.id for e in events] == sorted(e.id for e in events)


@pytest.mark.slow
def test_the_sandbox_redelivers_to_a_receiver_killed_and_restarted(sandbox, tmp_path):
    """The real sandbox's hourly redelivery, its clock advanced, across a SIGKILLed receiver."""
    token = secrets.token_hex(16)
    inbox_path = tmp_path / "inbox.sqlite3"
    expected = ["ACCOUNTS", "AUTH", "BALANCE", "IDENTITY", "INCOME", "TRANSACTIONS"]

    def methods() -> dict[str, list[str]]:
        with Inbox(inbox_path, create=True) as ib:
            out: dict[str, list[str]] = {}
            for e in ib.after(0, 10_000):
                out.setdefault(e.record, []).append(e.method)
        return {r: sorted(m) for r, m in out.items()}

    def wait_for(pred, timeout_s=30.0):
        deadline = time.monotonic() + timeout_s
        while not pred() and time.monotonic() < deadline:
            time.sleep(0.1)

    first = Server("receiver", "--inbox", str(inbox_path),
                   env={"LEDGERLAKE_RECEIVER_TOKEN": token}, log_path=tmp_path / "r1.log").start()
    port = first.url.rsplit(":", 1)[1]
    with sandbox.api() as api:
        # the sandbox's day turns at UTC midnight and sends every record's periodic callbacks:
        # start just past one, so the two hours this test moves never cross the next
        now = api.post("sandbox/clock/advance", json={"seconds": 1}).json()["data"]["now"]
        since_midnight = datetime.fromisoformat(now.replace("Z", "+00:00")).timestamp() % 86400
        api.post("sandbox/clock/advance", json={"seconds": int(86400 - since_midnight) + 60}
                 ).raise_for_status()
        api.post("settings/webhook", json={"url": first.url + "/callbacks/", "token": token}
                 ).raise_for_status()

        def create() -> str:
            made = api.post("sandbox/customers/create",
                            json={"customers": [{"accounts": 1, "months": 1}]})
            assert made.status_code == 200, made.text
            return made.json()["data"]["customers"][0]["record"]

        a = create()
        wait_for(lambda: methods().get(a) == expected)
        assert methods() == {a: expected}
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        b = create()  # its callbacks meet a dead port and wait for the next hour
        wait("b's callbacks tried at the dead port", lambda: all(
            d is not None and d["attempts"] and d["state"] == "pending"
            for d in deliveries(sandbox, b, expected).values()), 30, every_s=0.1)
        assert methods() == {a: expected}

        with Server("receiver", "--inbox", str(inbox_path), "--port", port,
                    env={"LEDGERLAKE_RECEIVER_TOKEN": token}, log_path=tmp_path / "r2.log"):
            # and A's callbacks are sent again on top: duplicates
            api.post("callback/trigger", json={"records": [a]}).raise_for_status()
            api.post("sandbox/clock/advance", json={"seconds": 3600}).raise_for_status()
            wait_for(lambda: methods().get(b) == expected)
            api.post("sandbox/clock/advance", json={"seconds": 3600}).raise_for_status()
            # nothing left to send: the sandbox says every callback of both was acknowledged
            # (A's re-sent ones are its latest), and the receiver stores before it answers
            wait("every callback acknowledged", lambda: all(
                d is not None and d["state"] == "acknowledged"
                for r in (a, b) for d in deliveries(sandbox, r, expected).values()), 30,
                 every_s=0.1)
            got = methods()
    assert got == {a: expected, b: expected}  # nothing lost, nothing doubled


def test_concurrent_callbacks_share_commits_and_each_is_stored_once(receiver, make, tmp_path):
    """Callbacks arriving while the writer commits go in its next batch: 300 senders at once,
    every one answered 200 with its own event, stored once, in fewer commits than callbacks
    (the receiver logs one line a batch)."""
    bodies = [make.callback(f"rec-c{i:03d}") for i in range(300)]
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda b: post(receiver, b), bodies))
    assert [a.status_code for a in answers] == [200] * 300
    events = [a.json()["event"] for a in answers]
    assert len(set(events)) == 300
    with Inbox(receiver.inbox) as inbox:
        stored = inbox.after(0, 1000)
    assert sorted(e.id for e in stored) == sorted(events)
    assert sorted(e.record for e in stored) == [f"rec-c{i:03d}" for i in range(300)]
    batches = [int(line.split()[line.split().index("stored") + 1])
               for line in (tmp_path / "receiver.log").read_text().splitlines()
               if " stored " in line and "callbacks" in line]
    assert sum(batches) == 300 and len(batches) < 300


def test_large_bodies_at_once_are_each_stored_whole(receiver, make):
    """24 bodies of ~900 KiB at once: every one stored whole and answered with its own
    event."""
    bodies = [make.callback(f"rec-big{i:02d}", note="x" * (900 << 10)) for i in range(24)]
    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda b: post(receiver, b), bodies))
    assert [a.status_code for a in answers] == [200] * 24
    with Inbox(receiver.inbox) as inbox:
        stored = {e.record: e for e in inbox.after(0, 100)}
    assert sorted(stored) == [f"rec-big{i:02d}" for i in range(24)]
    assert all(len(e.body["note"]) == 900 << 10 for e in stored.values())
    assert sorted(e.id for e in stored.values()) == sorted(a.json()["event"] for a in answers)


def test_personal_values_are_not_kept_in_the_inbox_or_its_dead_letters(receiver, make):
    """Every callback carries the customer's emails and BVN, IDENTITY's the whole identity:
    the inbox keeps the event without them (docs/privacy.md), and a refused body masked."""
    bvn, email, phone = "22012345678", "ada.obi7@example.com", "+2348031234567"
    body = {**make.callback("rec9", "IDENTITY", "PRODUCT_IS_READY"), "customerBvn": bvn,
            "customerEmail": [email], "identity": {"bvn": bvn, "phone": [phone]}}
    resp = post(receiver, body)
    assert resp.status_code == 200, resp.text
    again = post(receiver, {**body, "customerBvn": None})  # the same event, redelivered
    assert again.json() == {**resp.json(), "duplicate": True}
    refused = post(receiver, None, raw=f'{{"bvn": "{bvn}", "to": "{email}"}}'.encode())
    assert refused.status_code == 400
    # an account's holder in a body cut short, and in one whose record id is refused
    account = {"nuban": "0123456789", "name": "ZINNIA QUARTERBRIDGE",
               "customer": {"_id": "c1", "name": "Zinnia Quarterbridge"}}
    cut = orjson.dumps(make.callback("rec9", account=account))[:-40]
    assert post(receiver, None, raw=cut).status_code == 400
    assert post(receiver, make.callback("../x", account=account)).status_code == 400
    with Inbox(receiver.inbox) as inbox:
        (event,) = inbox.after(0)
        kept = orjson.dumps(event.body) + b"".join(b for _, b in dead_letters(inbox))
        assert len(dead_letters(inbox)) == 3
    assert (event.method, event.record) == ("IDENTITY", "rec9")
    assert event.body["customerBvn"] is None and event.body["identity"] is None
    assert [v for v in (bvn, email, phone, "0123456789", "ZINNIA", "Zinnia") if v.encode()
            in kept] == []


# every kind of event the spec defines, as the sandbox sends them: (method, code)
EVERY_KIND = {("AUTH", "AUTH_SUCCESS"), ("AUTH", "VERIFICATION_EXPIRED"),
              ("IDENTITY", "PRODUCT_IS_READY"), ("ACCOUNTS", "ACCOUNTS_SUCCESS"),
              ("BALANCE", "BALANCE_SUCCESS"), ("PERIODIC_BALANCE", "BALANCE_SUCCESS"),
              ("TRANSACTIONS", "PRODUCT_IS_READY"),
              ("PERIODIC_TRANSACTIONS", "PRODUCT_IS_READY"), ("PAYMENT", "PAYMENT_SUCCESS"),
              ("PAYMENT_RECURRING", "PAYMENT_SUCCESS"), ("USER_REAUTH", "USER_REAUTH"),
              ("USER_DISCONNECT", "USER_DISCONNECT")}


def test_no_kind_of_callback_the_sandbox_sends_leaves_a_personal_value_in_the_inbox(
        sandbox, receiver, tmp_path):
    """A customer goes through everything the spec has callbacks for (products, periodic
    products, a payment and its schedule, a reset login, a disconnect, an expired
    verification): the inbox keeps none of its names, account numbers, BVN, NIN, birth date,
    phones, emails or addresses, only a payment's accounts masked to their last 4 digits."""
    from tests.resources.test_privacy import found

    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()
        made = sandbox.control("customers/create", customers=[
            {"name": "Zinnia Quarterbridge", "accounts": 2, "months": 1},
            {"login_type": "account_number", "months": 1}])["customers"]
        rec = made[0]["record"]
        wait("the first callbacks", lambda: all(
            d and d["state"] == "acknowledged" for d in deliveries(
                sandbox, rec, ["ACCOUNTS", "IDENTITY", "TRANSACTIONS"]).values()), 60,
             every_s=0.2)
        ident = api.post("identity/get", json={"record": rec}).json()["data"]["identity"][0]
        accounts = api.post("accounts/get", json={"record": rec}).json()["data"]["accounts"]
        today = sandbox.control("clock/advance", seconds=1)["now"][:10]
        paid = sandbox.control("payments/initiate", record=rec, amount=50_000, recurring={
            "interval": "daily", "start_date": today})["payment"]
        sandbox.control("clock/advance", seconds=2 * 86400)  # periodic products, a payment
        sandbox.control("records/reset_login", record=rec)
        api.post("record/remove", json={"record": rec}).raise_for_status()
        sandbox.control("clock/advance", seconds=8 * 86400)  # the other's verification expires

    def kinds() -> set[tuple[str, str]]:
        with Inbox(receiver.inbox) as inbox:
            return {(e.method, e.code) for e in inbox.after(0, 10_000)}

    wait("every kind of callback", lambda: kinds() >= EVERY_KIND, 60, every_s=0.2)
    needles = {ident[k] for k in ("bvn", "nin", "dob", "firstname", "middlename", "lastname",
                                  "fullname")}
    needles |= {v for k in ("phone", "email", "address", "aliases") for v in ident[k]}
    needles |= {v for a in accounts for v in (a["nuban"], a["name"], a["customer"]["name"])}
    assert paid["debit_account"] in needles and len(needles) >= 15
    needles.add(paid["bank_response"]["DestAccName"])
    # the inbox's file and its log (the sandbox's own data, beside them, holds them all)
    hits = found(tmp_path, needles)
    assert hits and {p: n for p, n in hits.items()
                     if p.startswith(("inbox.sqlite3", "receiver.log"))} == {}
    with Inbox(receiver.inbox) as inbox:
        (payment,) = [e.body["payment"] for e in inbox.after(0, 10_000)
                      if e.method == "PAYMENT" and e.body["payment"]["_id"] == paid["_id"]]
    assert payment["debit_account"] == "******" + paid["debit_account"][-4:]
