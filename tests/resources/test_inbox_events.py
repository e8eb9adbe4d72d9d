"""The inbox's rules, each pinned: every refusal and the words it uses, what names an event (and
so what dedupes it, across versions too), how times are normalised, which records a
connection event moves, and what the readers give back. On a real SQLite file and a real
Postgres database alike."""

from __future__ import annotations

import hashlib
import os
import time

import orjson
import pytest

from resources.inbox import Inbox, InboxMissing, InvalidEvent, describe, kept_body
from resources.inbox.resource import InboxResource
from tests.conftest import dead_letters

NAME = "is missing or not of the form ^[A-Za-z0-9_.-]{1,64}$"
ID = "is not of the form ^[A-Za-z0-9_-]{1,64}$"
STAMP = "must be an ISO 8601 timestamp or null"


def cb(**over) -> dict:
    """A callback as the service sends it; a member given as None is left out."""
    body = {"type": "CALLBACK", "method": "ACCOUNTS", "callback_code": "ACCOUNTS_SUCCESS",
            "code": "ACCOUNTS_SUCCESS", "status": "is_success", "record": "rec-1",
            "recordId": "rec-1", "accountId": "acc-1", "customerId": "cust-1",
            "started_at": "2026-01-01T00:00:00.000Z", "ended_at": "2026-01-01T00:05:00.000Z",
            "serverResponse": {"status": 200}}
    body.update(over)
    return {k: v for k, v in body.items() if v is not None}


def event(name: str = "USER_DISCONNECT", **data) -> dict:
    return {"event": name, "message": "", "data": data}


def deep(levels: int) -> dict:
    value: dict = {"a": 1}
    for _ in range(levels):
        value = {"a": value}
    return value


# -- refusals: each names what is wrong, in these words -----------------------------------------

REFUSALS = [
    ([], "body is not a JSON object"),
    ({"type": "CALLBACK"}, f"callback method {NAME}"),
    ({"callback_code": "AUTH_SUCCESS"}, f"callback method {NAME}"),
    (cb(method="AUTH/x"), f"callback method {NAME}"),
    (cb(callback_code=None, code=None), f"callback_code {NAME}"),
    (cb(record="../x", recordId=None), f"callback record {ID}"),
    (cb(record=None, recordId="a b"), f"callback recordId {ID}"),
    (cb(recordId="rec-2"), "callback record and recordId disagree"),
    (cb(accountId="../x"), f"callback accountId {ID}"),
    (cb(ended_at="yesterday"), f"callback ended_at {STAMP}"),
    (cb(started_at="yesterday"), f"callback started_at {STAMP}"),  # checked beside ended_at
    (cb(started_at=20260101, ended_at=None), f"callback started_at {STAMP}"),
    (cb(status="is failed"), f"callback status {NAME}"),
    (cb(method="PAYMENT", link=2**70),
     "PAYMENT callback members ['link'] are not plain JSON or are nested too deeply"),
    ({"event": "USER_DISCONNECT"}, "connection event without a data object"),
    ({"data": {"customer": "c1"}}, f"connection event {NAME}"),
    (event(customer="c1", record="../x"), f"connection event record {ID}"),
    ({**event(customer="c1"), "record": "a/b"}, f"connection event record {ID}"),
    (event(customer="c1", accounts=["acc-1", "../x"]), f"connection event account {ID}"),
    (event("USER_REAUTH", customer="c1", deauthorized_at=5),
     f"connection event deauthorized_at {STAMP}"),
    (event(customer="c1", disconnected_at="yesterday"),
     f"connection event disconnected_at {STAMP}"),
    (event("USER_UPGRADED", note="x"), "connection event names no customer, record or accounts"),
    (event("USER_UPGRADED", customer="c1", z=deep(300)),
     "connection event data is nested too deeply"),
    ({"hello": "world"}, "body has neither a callback's method and callback_code nor a "
                         "connection event's event and data"),
]


@pytest.mark.parametrize("body, message", REFUSALS)
def test_each_refusal_names_the_fault(inbox, body, message):
    with pytest.raises(InvalidEvent) as info:
        inbox.add(body)
    assert str(info.value) == message
    assert inbox.count() == 0


# -- what a body is, and what names it -----------------------------------------------------------

def test_a_callback_is_known_by_its_method_or_code_alone():
    """Neither `type` nor `callback_code` is required: `method` with `code` is a callback."""
    info = describe({"method": "AUTH", "code": "AUTH_SUCCESS", "record": "rec-1"})
    assert (info["kind"], info["method"], info["code"], info["record"]) == (
        "callback", "AUTH", "AUTH_SUCCESS", "rec-1")
    assert describe(cb(code="OTHER"))["code"] == "ACCOUNTS_SUCCESS"  # callback_code wins


def test_what_a_callback_is_described_as():
    assert describe(cb(customerId=12345)) == {
        "kind": "callback", "method": "ACCOUNTS", "code": "ACCOUNTS_SUCCESS",
        "status": "is_success", "record": "rec-1", "account": "acc-1",
        "customer": None,  # not a string: not trusted as a customer id
        "occurred_at": "2026-01-01T00:05:00.000Z",
        "identity": ["callback", "ACCOUNTS", "ACCOUNTS_SUCCESS", "rec-1", "acc-1",
                     "2026-01-01T00:00:00.000Z", "2026-01-01T00:05:00.000Z"]}
    assert describe(cb())["customer"] == "cust-1"


@pytest.mark.parametrize("started, ended, occurred", [
    ("2026-01-01T00:00:00.000Z", None, "2026-01-01T00:00:00.000Z"),  # no end: its start
    (None, "2026-01-01T02:00:00+01:00", "2026-01-01T01:00:00.000Z"),  # an offset, to UTC
    (None, "2026-01-01T00:00:00.123456z", "2026-01-01T00:00:00.123Z"),  # lower-case z
    (None, "2026-01-01Z", "2026-01-01T00:00:00.000Z"),  # a date alone: its midnight, UTC
    (None, "2026-01-01T00:00:00." + "0" * 38 + "+00:00", "2026-01-01T00:00:00.000Z"),  # 64
    (None, None, None),
])
def test_when_a_callback_happened(started, ended, occurred):
    assert describe(cb(started_at=started, ended_at=ended))["occurred_at"] == occurred


def test_a_timestamp_longer_than_64_characters_is_refused():
    with pytest.raises(InvalidEvent, match="ended_at"):
        describe(cb(ended_at="2026-01-01T00:00:00." + "0" * 39 + "+00:00"))


@pytest.fixture
def lagos():
    """The machine's own zone is not UTC (Lagos is UTC+1): stored times must not follow it."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Africa/Lagos"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_times_are_utc_whatever_the_machines_zone(inbox, lagos, monkeypatch):
    # a time without a zone is UTC's, not the machine's
    assert describe(cb(ended_at="2026-01-01T00:00:00"))["occurred_at"] == \
        "2026-01-01T00:00:00.000Z"
    # an event without any time is dated when it arrives, in UTC
    monkeypatch.setattr("resources.inbox.store.time.time", lambda: 1_767_225_600.5)  # 2026-01-01
    inbox.add(cb(started_at=None, ended_at=None))
    assert inbox.records()["rec-1"].products["ACCOUNTS"].occurred_at == \
        "2026-01-01T00:00:00.500Z"


def test_what_a_connection_event_is_described_as():
    gone = event(customer="c1", accounts=["acc-2", "acc-1"],
                 connected_at="2025-12-01T00:00:00Z", disconnected_at="2026-01-02T00:00:00Z")
    assert describe(gone) == {
        "kind": "connection", "method": "USER_DISCONNECT", "code": "USER_DISCONNECT",
        "status": None, "record": None, "account": None, "customer": "c1",
        "accounts": ["acc-2", "acc-1"],
        "occurred_at": "2026-01-02T00:00:00.000Z",  # its own date, not the first *_at
        "identity": ["connection", "USER_DISCONNECT", "c1", "2026-01-02T00:00:00Z", None, None,
                     ["acc-1", "acc-2"]]}


def test_a_connection_event_names_its_record_at_the_top_or_in_its_data():
    top = {**event("USER_REAUTH", customer="c1", deauthorized_at="2026-01-02T00:00:00Z"),
           "record": "rec-top"}
    inner = event("USER_REAUTH", customer="c1", record="rec-in",
                  deauthorized_at="2026-01-02T00:00:00Z")
    assert describe(top)["record"] == "rec-top"
    assert describe(inner)["record"] == "rec-in"
    assert describe({**inner, "record": "rec-top"})["record"] == "rec-top"  # the top wins


def test_an_unknown_connection_event_is_dated_by_its_first_at_member_if_it_can_be():
    dated = describe(event("USER_UPGRADED", customer="c1", upgraded_at="2026-01-03T00:00:00Z",
                           zeta_at="2026-01-04T00:00:00Z"))
    assert dated["occurred_at"] == "2026-01-03T00:00:00.000Z"
    assert dated["identity"] == ["connection", "USER_UPGRADED", "c1",
                                 "2026-01-03T00:00:00Z", None, None]
    # a date it cannot read, or none at all: named by the whole of its data instead
    for data in ({"customer": "c1", "upgraded_at": "soon"}, {"customer": "c1", "plan": "gold"}):
        info = describe(event("USER_UPGRADED", **data))
        digest = hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()
        assert info["occurred_at"] is None
        assert info["identity"] == ["connection", "USER_UPGRADED", "c1", None, digest, None]


def test_an_undated_unknown_event_is_one_event_per_distinct_data(inbox):
    gold = event("USER_UPGRADED", customer="c1", plan="gold", seats=2)
    assert inbox.add(gold)[1]
    assert not inbox.add(event("USER_UPGRADED", seats=2, plan="gold", customer="c1"))[1]
    assert inbox.add(event("USER_UPGRADED", customer="c1", plan="silver", seats=2))[1]
    # a dated one is named by its date: the same event told again with more data is one event
    dated = event("USER_UPGRADED", customer="c1", upgraded_at="2026-01-03T00:00:00Z")
    assert inbox.add(dated)[1]
    assert not inbox.add({**dated, "data": {**dated["data"], "plan": "gold"}})[1]
    assert inbox.count() == 3


def test_identities_are_stored_as_they_always_were(inbox):
    """The stored identity is what dedupes a redelivery, also one that arrives after an
    upgrade: a change to how it is computed must be deliberate (and migrate the inbox)."""
    inbox.add(cb())
    inbox.add(event(customer="c1", accounts=["acc-1"], disconnected_at="2026-01-02T00:00:00Z"))
    stored = [r[0] for r in inbox._db.execute("select identity from events order by id")]
    assert stored == [
        hashlib.sha256(b'["callback","ACCOUNTS","ACCOUNTS_SUCCESS","rec-1","acc-1",'
                       b'"2026-01-01T00:00:00.000Z","2026-01-01T00:05:00.000Z"]').hexdigest(),
        hashlib.sha256(b'["connection","USER_DISCONNECT","c1","2026-01-02T00:00:00Z",null,null,'
                       b'["acc-1"]]').hexdigest()]


def test_a_payment_is_named_by_its_own_ids_not_by_what_it_restates(inbox):
    def paid(payment: dict, **extra) -> dict:
        return cb(method="PAYMENT", callback_code="PAYMENT_SUCCESS", code="PAYMENT_SUCCESS",
                  accountId=None, payment=payment, **extra)

    first = paid({"_id": "pay1", "status": "success", "amount": 5000})
    assert inbox.add(first)[1]
    # restated amounts, another member: the same payment
    assert not inbox.add(paid({"_id": "pay1", "status": "success", "amount": 5000.0,
                               "fee": 50}))[1]
    # another payment object, or the same one in another status: another event
    assert inbox.add(paid({"_id": "pay2", "status": "success", "amount": 5000}))[1]
    assert inbox.add(paid({"_id": "pay1", "status": "reversed", "amount": 5000}))[1]
    # without a paymentId, a link alone still names it
    assert inbox.add(cb(method="PAYMENT", link="lnk_1"))[1]
    assert inbox.add(cb(method="PAYMENT", link="lnk_2"))[1]
    assert inbox.count() == 5


# -- which records a connection event moves --------------------------------------------------------

def login(inbox: Inbox, record: str, customer: str = "c1", account: str | None = None,
          at: str = "2026-01-01T00:00:00.000Z", **over) -> None:
    inbox.add(cb(method="AUTH", callback_code="AUTH_SUCCESS", code="AUTH_SUCCESS",
                 record=record, recordId=record, customerId=customer, accountId=account,
                 started_at=at, ended_at=at, **over))


def test_a_disconnect_moves_the_records_of_its_accounts_only(inbox):
    login(inbox, "rec-a", account="acc-a")
    login(inbox, "rec-b", account="acc-b")
    login(inbox, "rec-c", account="acc-c")
    inbox.add(event(customer="c1", accounts=["acc-a"], disconnected_at="2026-01-02T00:00:00Z"))
    assert {r: s.status for r, s in inbox.records().items()} == {
        "rec-a": "disconnected", "rec-b": "connected", "rec-c": "connected"}
    inbox.add(event(customer="c1", accounts=["acc-b", "acc-c"],
                    disconnected_at="2026-01-03T00:00:00Z"))
    assert set(inbox.records(status="disconnected")) == {"rec-a", "rec-b", "rec-c"}
    connection = inbox.after(0)[-1]
    assert connection.affects == connection.records == ("rec-b", "rec-c")


def test_accounts_it_never_saw_fall_back_to_the_customers_records(inbox):
    login(inbox, "rec-a", account="acc-a")
    login(inbox, "rec-b", customer="c2", account="acc-b")
    inbox.add(event(customer="c1", accounts=["acc-unknown"],
                    disconnected_at="2026-01-02T00:00:00Z"))
    assert inbox.status("rec-a") == "disconnected" and inbox.status("rec-b") == "connected"


def test_a_connection_event_naming_a_record_moves_that_record_even_a_new_one(inbox):
    login(inbox, "rec-a")
    inbox.add({**event("USER_REAUTH", customer="c1", deauthorized_at="2026-01-02T00:00:00Z"),
               "record": "rec-new"})
    states = inbox.records()
    assert set(states) == {"rec-a", "rec-new"}
    assert states["rec-a"].status == "connected"  # the customer's other record: untouched
    new = states["rec-new"]
    assert (new.customer, new.status, new.status_at) == (
        "c1", "reauth_required", "2026-01-02T00:00:00.000Z")
    assert new.products == {}  # a connection event is no product's callback
    assert inbox.after(0)[-1].affects == ("rec-new",)


def test_only_a_newer_successful_login_reconnects(inbox):
    login(inbox, "rec-a")
    inbox.add(event(customer="c1", disconnected_at="2026-01-02T00:00:00Z"))
    # a newer callback of another product, or a newer login that failed: still disconnected
    inbox.add(cb(record="rec-a", recordId="rec-a", customerId="c1",
                 started_at="2026-01-03T00:00:00Z", ended_at="2026-01-03T00:00:00Z"))
    login(inbox, "rec-a", at="2026-01-04T00:00:00.000Z", status="is_failed")
    assert inbox.status("rec-a") == "disconnected"
    login(inbox, "rec-a", at="2026-01-05T00:00:00.000Z")
    assert inbox.status("rec-a") == "connected"


# -- reads ---------------------------------------------------------------------------------------

def test_events_read_back_whole(inbox):
    body = cb()
    inbox.add(body)
    login(inbox, "rec-2")
    inbox.add(event("USER_REAUTH", customer="c1", deauthorized_at="2026-01-02T00:00:00Z"))
    callback, _, reauth = inbox.after(0)
    assert (callback.kind, callback.method, callback.code, callback.status, callback.record,
            callback.account, callback.body) == ("callback", "ACCOUNTS", "ACCOUNTS_SUCCESS",
                                                 "is_success", "rec-1", "acc-1", body)
    assert callback.affects == () and callback.records == ("rec-1",)
    assert (reauth.kind, reauth.method, reauth.record, reauth.affects) == (
        "connection", "USER_REAUTH", None, ("rec-2",))


def test_a_batch_is_500_events_unless_asked_otherwise(inbox):
    inbox.add_described([(describe(b), orjson.dumps(b))
                         for b in (cb(record=f"r{i:03d}", recordId=None) for i in range(501))])
    assert len(inbox.after(0)) == 500
    assert len(inbox.after(0, 1000)) == 501


def test_max_bytes_is_a_bound_that_can_be_met_exactly(inbox):
    bodies = [kept_body(cb(record=f"r{i}", recordId=None)) for i in range(4)]  # as stored
    for raw in bodies:
        inbox.add(orjson.loads(raw))
    one = len(bodies[0])
    assert [len(inbox.after(0, 10, max_bytes=n)) for n in (3 * one - 1, 3 * one)] == [2, 3]


def test_records_by_id_and_status_together(inbox):
    for rec in ("rec-a", "rec-b", "rec-c"):
        login(inbox, rec, account=f"acc-{rec}")
    inbox.add(event(customer="c1", accounts=["acc-rec-b"], disconnected_at="2026-01-02T00:00:00Z"))
    assert set(inbox.records(["rec-a", "rec-b"])) == {"rec-a", "rec-b"}
    assert set(inbox.records(["rec-a", "rec-b"], status="connected")) == {"rec-a"}
    assert inbox.records([]) == {}


def test_dead_letters_and_replay_marks(inbox, make, monkeypatch):
    inbox.dead_letter("body is not JSON", b"{")
    inbox.dead_letter("record is not of the form", b'{"record": "../x"}')
    assert dead_letters(inbox) == [("body is not JSON", b"{"),
                                   ("record is not of the form", b'{"record": "../x"}')]
    assert inbox.count() == 0  # a dead letter is no event
    for rec in ("rec-a", "rec-b", "rec-c"):
        login(inbox, rec)
    inbox.mark_replayed(["rec-a"], at=1_700_000_000.0)
    monkeypatch.setattr("resources.inbox.store.time.time", lambda: 1_800_000_000.0)
    inbox.mark_replayed(iter(["rec-b"]))
    assert {r: s.replayed_at for r, s in inbox.records().items()} == {
        "rec-a": 1_700_000_000.0, "rec-b": 1_800_000_000.0, "rec-c": None}


def test_the_receiver_alone_makes_the_inbox_and_its_folders(tmp_path):
    path = tmp_path / "a" / "b" / "inbox.sqlite3"
    with Inbox(path, create=True) as ib:
        ib.add(cb())
    with Inbox(path) as reader:
        assert reader.count() == 1


def test_the_inbox_resource_opens_the_configured_file_and_never_makes_one(tmp_path,
                                                                         monkeypatch):
    named, from_env = tmp_path / "named.sqlite3", tmp_path / "env.sqlite3"
    for path, record in ((named, "rec-named"), (from_env, "rec-env")):
        with Inbox(path, create=True) as ib:
            ib.add(cb(record=record, recordId=None))
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(from_env))
    with InboxResource(path=str(named)).open() as ib:
        assert [e.record for e in ib.after(0)] == ["rec-named"]
    with InboxResource().open() as ib:
        assert [e.record for e in ib.after(0)] == ["rec-env"]
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(tmp_path / "missing.sqlite3"))
    with pytest.raises(InboxMissing):
        InboxResource().open()
    assert not (tmp_path / "missing.sqlite3").exists()
