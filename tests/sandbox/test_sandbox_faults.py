"""sandbox/faults over real HTTP: each fault as a client sees it (httpx against the sandbox
process), seeded replay across two sandboxes, the counts, refusals of bad rules, and webhook
faults (doubled, late, shuffled) as a real receiver process sees them."""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx
import orjson
import pytest

from tests.conftest import Receiver, Sandbox, start_sandbox


def ok(resp: httpx.Response) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def refused(resp: httpx.Response, code: str = "INVALID_FIELD", status: int = 400) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error_code"] == code, body
    return body


def faults(api: httpx.Client, *rules: dict, seed: int | None = None) -> dict:
    return ok(api.post("sandbox/faults", json={"rules": list(rules),
                                               **({"seed": seed} if seed is not None else {})}))


def new_record(api: httpx.Client) -> str:
    """A connected record whose products raise no periodic callbacks as the clock moves."""
    made = ok(api.post("sandbox/customers/create", json={"customers": [
        {"accounts": 1, "products": ["auth", "identity"]}]}))
    record = made["customers"][0]["record"]
    deadline = time.monotonic() + 30
    while api.post("identity/get", json={"record": record}).status_code != 200:
        assert time.monotonic() < deadline, "the connection never completed"
        time.sleep(0.05)
    return record


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    b = start_sandbox(tmp_path_factory.mktemp("faults") / "sandbox")
    yield b
    b.server.stop()


@pytest.fixture
def api(box: Sandbox):
    with box.api() as client:
        yield client
        ok(client.delete("sandbox/faults"))  # the next test starts with none


@pytest.fixture(scope="module")
def record(box: Sandbox) -> str:
    """A record with every product, for the data calls."""
    return box.customer(accounts=1, months=1)["record"]


# -- each kind, as the client sees it ----------------------------------------------------------

def test_429_says_when_to_retry_and_the_next_call_passes(api, record):
    faults(api, {"kind": 429, "seconds": 7, "count": 1, "paths": "transactions/get"})
    resp = api.post("transactions/get", json={"record": record})
    body = refused(resp, "TRANSACTIONS_LIMIT", 429)
    assert resp.headers["retry-after"] == "7"
    assert body["error_type"] == "RATE_LIMIT_EXCEEDED" and "sandbox/faults" in body["error_message"]
    assert ok(api.post("transactions/get", json={"record": record}))["transaction"]


@pytest.mark.parametrize(("kind", "code"), [("500", "INTERNAL_SERVER_ERROR"),
                                            ("503", "SERVICE_UNAVAILABLE")])
def test_5xx_answers_the_spec_error_body(api, record, kind, code):
    faults(api, {"kind": kind, "count": 2})
    for path in ("accounts/get", "identity/get"):  # the default paths: the product reads
        body = refused(api.post(path, json={"record": record}), code, int(kind))
        assert body["error_type"] == "API_ERROR" and body["http_code"] == int(kind)
    ok(api.post("accounts/get", json={"record": record}))


def test_reset_breaks_the_connection_after_the_headers(api, record):
    faults(api, {"kind": "reset", "count": 1, "paths": ["balance/get"]})
    with api.stream("POST", "balance/get", json={"record": record}) as resp:
        assert resp.status_code == 200  # the status line and headers arrived
        assert int(resp.headers["content-length"]) > 0
        with pytest.raises(httpx.TransportError):
            resp.read()
    assert ok(api.post("balance/get", json={"record": record}))


def test_stall_outlasts_the_client_timeout_while_other_calls_are_served(box, api, record):
    faults(api, {"kind": "stall", "seconds": 60, "count": 1, "paths": "income/get"})
    outcome: list = []

    def stalled() -> None:
        with box.api() as client:
            try:
                outcome.append(client.post("income/get", json={"record": record},
                                           timeout=httpx.Timeout(30, read=2)))
            except httpx.HTTPError as exc:
                outcome.append(exc)

    thread = threading.Thread(target=stalled)
    thread.start()
    deadline = time.monotonic() + 30
    while ok(api.get("sandbox/faults"))["rules"][0]["injected"] < 1:
        assert time.monotonic() < deadline, "the stalled call never reached the sandbox"
        time.sleep(0.02)
    # the stalled answer is held for 60 s; meanwhile the same server answers others
    assert ok(api.post("income/get", json={"record": record}))
    assert ok(api.post("identity/get", json={"record": record}))
    thread.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], httpx.ReadTimeout), outcome


def test_truncate_answers_200_with_a_body_that_is_not_json(api, record):
    faults(api, {"kind": "truncate", "count": 1})
    resp = api.post("transactions/get", json={"record": record})
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    assert resp.content.startswith(b"{")
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(resp.content)
    assert ok(api.post("transactions/get", json={"record": record}))["transaction"]


# -- which calls, how many, and the counts -----------------------------------------------------

def test_controls_and_unmatched_paths_never_fail(api, record):
    faults(api, {"kind": 500, "paths": "*"})
    for _ in range(3):  # the controls themselves
        assert ok(api.get("sandbox/faults"))["rules"]
        ok(api.post("sandbox/records/ledger", json={"record": record}))
    refused(api.post("accounts/get", json={"record": record}), "INTERNAL_SERVER_ERROR", 500)
    faults(api, {"kind": 500, "paths": ["transactions/get"]})
    ok(api.post("accounts/get", json={"record": record}))


def test_env_limits_a_rule_to_one_environment(box, api):
    faults(api, {"kind": 503, "paths": "banks/list", "env": "production"})
    ok(api.get("banks/list"))
    with box.api("production") as prod:
        refused(prod.get("banks/list"), "SERVICE_UNAVAILABLE", 503)


def test_count_caps_a_rule_and_the_counts_add_up(api, record):
    before = ok(api.get("sandbox/faults"))["injected"]
    faults(api, {"kind": 500, "count": 3, "paths": "record/get"},
           {"kind": 429, "paths": "record/get", "share": 1, "count": 2})
    statuses = [api.post("record/get", json={"record": record}).status_code for _ in range(8)]
    assert statuses == [500, 500, 500, 429, 429, 200, 200, 200]
    report = ok(api.get("sandbox/faults"))
    assert [r["injected"] for r in report["rules"]] == [3, 2]
    assert [r["active"] for r in report["rules"]] == [False, False]
    assert report["injected"]["500"] == before["500"] + 3
    assert report["injected"]["429"] == before["429"] + 2
    # clearing drops the rules, never the totals (the chaos report reads them at the end)
    cleared = ok(api.delete("sandbox/faults"))
    assert cleared["rules"] == [] and cleared["injected"] == report["injected"]
    ok(api.post("record/get", json={"record": record}))


def test_a_window_closes_by_the_wall_clock(api, record):
    rule = faults(api, {"kind": 500, "for_s": 0.5, "paths": "item/get"})["rules"][0]
    assert rule["for_s"] == 0.5 and rule["active"]
    deadline = time.monotonic() + 30
    while ok(api.get("sandbox/faults"))["rules"][0]["active"]:
        assert time.monotonic() < deadline, "the window never closed"
        time.sleep(0.1)
    ok(api.post("item/get", json={"record": record}))


SCHEDULE = [{"kind": "500", "share": 0.25, "paths": "banks/list"},
            {"kind": "429", "share": 0.25, "paths": "banks/list", "seconds": 2},
            {"kind": "truncate", "share": 0.2, "paths": "banks/list"}]


def schedule(box: Sandbox, seed: int, calls: int = 60) -> tuple[list[str], dict]:
    """What `calls` sequential calls met under SCHEDULE and `seed`; and the counts."""
    seen = []
    with box.api() as api:
        faults(api, *SCHEDULE, seed=seed)
        for _ in range(calls):
            resp = api.get("banks/list")
            try:
                orjson.loads(resp.content)
                seen.append(str(resp.status_code))
            except orjson.JSONDecodeError:
                seen.append("truncated")
        counts = {r["kind"]: r["injected"] for r in ok(api.get("sandbox/faults"))["rules"]}
        ok(api.delete("sandbox/faults"))
    return seen, counts


def test_the_same_seed_replays_the_same_faults_on_another_sandbox(box, tmp_path):
    first, counts = schedule(box, seed=2026)
    other = start_sandbox(tmp_path / "other")
    try:
        again, counts_again = schedule(other, seed=2026)
        different, _ = schedule(other, seed=7)
    finally:
        other.server.stop()
    assert again == first and counts_again == counts
    assert set(first) == {"200", "500", "429", "truncated"}  # a mix, not all or nothing
    assert counts == {"500": first.count("500"), "429": first.count("429"),
                      "truncate": first.count("truncated")}
    assert different != first


# -- refusals: 400, and nothing changes ---------------------------------------------------------

@pytest.mark.parametrize(("body", "names"), [
    ({"rules": [{"kind": "explode"}]}, "rules[0].kind"),
    ({"rules": [{"kind": "500", "share": 1.5}]}, "rules[0].share"),
    ({"rules": [{"kind": "500"}, {"kind": "500", "share": -0.1}]}, "rules[1].share"),
    ({"rules": [{"kind": "500", "share": "half"}]}, "rules[0].share"),
    ({"rules": [{"kind": "stall", "seconds": -1}]}, "rules[0].seconds"),
    ({"rules": [{"kind": "429", "seconds": 4000}]}, "rules[0].seconds"),
    ({"rules": [{"kind": "500", "for_s": -5}]}, "rules[0].for_s"),
    ({"rules": [{"kind": "500", "for_s": 0}]}, "rules[0].for_s"),
    ({"rules": [{"kind": "500", "count": 0}]}, "rules[0].count"),
    ({"rules": [{"kind": "500", "seconds": 3}]}, "rules[0].seconds"),
    ({"rules": [{"kind": "500", "paths": "sandbox/faults"}]}, "rules[0].paths"),
    ({"rules": [{"kind": "500", "paths": []}]}, "rules[0].paths"),
    ({"rules": [{"kind": "double", "paths": "*/get"}]}, "rules[0].paths"),
    ({"rules": [{"kind": "shuffle", "batch": 1}]}, "rules[0].batch"),
    ({"rules": [{"kind": "500", "env": "staging"}]}, "rules[0].env"),
    ({"rules": [{"kind": "500", "when": "now"}]}, "rules[0]"),
    ({"rules": ["500"]}, "rules[0]"),
    ({"rules": []}, "rules"),
    ({"rules": [{"kind": "500"}], "seed": -1}, "seed"),
    ({"rules": [{"kind": "500"}], "seed": "abc"}, "seed"),
])
def test_bad_rules_are_refused_and_change_nothing(api, record, body, names):
    kept = faults(api, {"kind": "503", "paths": "auth/get", "count": 5}, seed=9)
    body = refused(api.post("sandbox/faults", json=body))
    assert body["error_message"].startswith(names)
    assert ok(api.get("sandbox/faults")) == kept
    ok(api.post("identity/get", json={"record": record}))  # the old rules still hold, alone


def test_the_control_is_sandbox_only_and_checks_its_body(box, api):
    with box.api("production") as prod:
        refused(prod.post("sandbox/faults", json={"rules": [{"kind": "500"}]}), "SANDBOX_ONLY")
        refused(prod.delete("sandbox/faults"), "SANDBOX_ONLY")
    refused(api.post("sandbox/faults", json={}), "MISSING_FIELDS")
    refused(api.post("sandbox/faults", json={"rules": [], "extra": 1}), "UNKNOWN_FIELDS")
    refused(api.post("sandbox/faults", json={"rules": {"kind": "500"}}))
    assert ok(api.get("sandbox/faults"))["rules"] == []


# -- webhook faults, as a real receiver sees them ----------------------------------------------

def arrivals(receiver: Receiver, method: str = "AUTH") -> list[str]:
    """The records of the receiver's stored `method` callbacks, in the order it stored them."""
    db = sqlite3.connect(receiver.inbox)
    try:
        return [r[0] for r in db.execute(
            "select record from events where method = ? order by id", (method,))]
    finally:
        db.close()


def wait_arrivals(receiver: Receiver, count: int, timeout_s: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while len(got := arrivals(receiver)) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} callbacks arrived"
        time.sleep(0.05)
    return got


def receiver_log(receiver: Receiver) -> str:
    return (receiver.inbox.parent / "receiver.log").read_text()


@pytest.fixture
def hooked(sandbox: Sandbox, receiver: Receiver):
    """A fresh sandbox with records made before its webhook points at the receiver, so the
    only callbacks the receiver gets are the ones a test fires."""
    with sandbox.api() as api:
        records = [new_record(api) for _ in range(5)]
        ok(api.post("settings/webhook", json={"url": receiver.callback_url,
                                              "token": receiver.token}))
        yield api, records


def fire(api: httpx.Client, record: str) -> None:
    ok(api.post("sandbox/records/fire_webhook", json={"record": record, "method": "AUTH"}))


def test_double_delivers_the_same_callback_twice(hooked, receiver):
    api, records = hooked
    faults(api, {"kind": "double", "count": 1}, seed=1)
    fire(api, records[0])
    fire(api, records[1])
    assert sorted(wait_arrivals(receiver, 2)) == sorted(records[:2])
    report = ok(api.get("sandbox/faults"))
    assert report["injected"]["double"] == 1
    (noted,) = report["deliveries"]
    assert noted["kind"] == "double" and noted["record"] == records[0] and noted["attempt"] == 0
    deadline = time.monotonic() + 30
    while f"duplicate AUTH {records[0]}" not in receiver_log(receiver):  # the inbox deduped it
        assert time.monotonic() < deadline, "the second copy never reached the receiver"
        time.sleep(0.05)
    assert receiver_log(receiver).count(f"stored AUTH {records[0]}") == 1
    assert f"duplicate AUTH {records[1]}" not in receiver_log(receiver)
    # acknowledged once: the schedule saw one attempt
    seen = ok(api.get("callback", params={"record": records[0], "method": "AUTH"}))
    assert seen["callback"]["state"] == "acknowledged"
    assert len(seen["callback"]["attempts"]) == 1


def test_late_holds_a_callback_so_a_later_one_overtakes_it(hooked, receiver):
    api, records = hooked
    faults(api, {"kind": "late", "seconds": 8, "count": 1}, seed=1)
    fire(api, records[0])
    fire(api, records[1])
    assert wait_arrivals(receiver, 2) == [records[1], records[0]]
    report = ok(api.get("sandbox/faults"))
    assert report["injected"]["late"] == 1
    assert [(d["kind"], d["record"]) for d in report["deliveries"]] == [("late", records[0])]


def test_shuffle_delivers_a_held_batch_out_of_order(hooked, receiver):
    api, records = hooked
    faults(api, {"kind": "shuffle", "batch": 5, "seconds": 120}, seed=5)
    for record in records:
        fire(api, record)
    got = wait_arrivals(receiver, 5)
    assert sorted(got) == sorted(records) and got != records
    report = ok(api.get("sandbox/faults"))
    assert report["injected"]["shuffle"] == 5
    assert [d["record"] for d in report["deliveries"]] == records  # held in raised order
