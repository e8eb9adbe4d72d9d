"""The inbox on a real SQLite file and a real Postgres database: identity, refusals, record
status, out-of-order events."""

from __future__ import annotations

import sqlite3
import threading

import orjson
import psycopg2
import pytest

from resources.inbox import (
    PERSONAL_MEMBERS,
    Inbox,
    InboxMissing,
    InvalidEvent,
    LandingState,
    describe,
    kept_body,
    open_inbox,
    scrubbed,
)
from resources.inbox.store import _identity
from tests.conftest import dead_letters
from tests.resources.inbox_batches import random_batches


def test_wal_and_full_sync(tmp_path):
    Inbox(tmp_path / "inbox.sqlite3", create=True).close()
    con = sqlite3.connect(tmp_path / "inbox.sqlite3")
    assert con.execute("pragma journal_mode").fetchone()[0] == "wal"
    con.close()


def test_redelivery_with_changed_server_response_is_one_event(inbox, make):
    rec = make.record_id()
    first = make.callback(rec, ended_at="2026-01-01T01:00:00.000Z")
    again = {**first, "serverResponse": {"status": 500, "message": "Internal Server Error"},
             "message": "retried"}
    id1, new1 = inbox.add(first)
    id2, new2 = inbox.add(again)
    assert (new1, new2) == (True, False)
    assert id1 == id2
    assert inbox.count() == 1
    # a later refresh of the same product is a new event
    id3, new3 = inbox.add(make.callback(rec, ended_at="2026-01-02T01:00:00.000Z"))
    assert new3 and id3 > id1


def test_identity_fields_each_make_a_new_event(inbox, make):
    rec = make.record_id()
    base = make.callback(rec, "BALANCE", "BALANCE_SUCCESS", account="acct1",
                         ended_at="2026-01-01T01:00:00.000Z")
    variants = [base, {**base, "accountId": "acct2"}, {**base, "method": "PERIODIC_BALANCE"},
                {**base, "started_at": "2026-01-01T00:30:00.000Z"},
                {**base, "record": "other", "recordId": "other"}]
    assert [inbox.add(v)[1] for v in variants] == [True] * len(variants)
    assert inbox.count() == len(variants)


def test_the_body_is_kept_as_sent_but_its_personal_members(inbox, make):
    body = {**make.callback("r1"), "x": 1.5, "customerBvn": "22012345678"}
    event_id, _ = inbox.add(body)
    (stored,) = inbox.after(event_id - 1, 1)
    assert stored.body == {**body, "customerBvn": None, "customerEmail": None}


@pytest.mark.parametrize("record", ["../../etc/passwd", "a/b", "..", "", "x" * 65, "a b",
                                    "a\x00b", "réc", 12, ["r"], {"r": 1}])
def test_record_ids_outside_the_pattern_are_refused(inbox, make, record):
    body = make.callback("placeholder")
    body["record"] = body["recordId"] = record
    with pytest.raises(InvalidEvent, match="record"):
        inbox.add(body)
    assert inbox.count() == 0


def test_account_ids_and_disagreeing_record_fields_are_refused(inbox, make):
    with pytest.raises(InvalidEvent, match="accountId"):
        inbox.add(make.callback("r1", account="../x"))
    with pytest.raises(InvalidEvent, match="disagree"):
        inbox.add({**make.callback("r1"), "recordId": "r2"})
    assert inbox.count() == 0


@pytest.mark.parametrize("body", [[], "x", 1, None, {}, {"hello": "world"},
                                  {"method": "AUTH"}, {"event": "USER_DISCONNECT"},
                                  {"event": "USER_DISCONNECT", "data": {}},
                                  {"event": "../x", "data": {"customer": "c"}},
                                  {"method": "AUTH", "callback_code": "AUTH_SUCCESS",
                                   "record": "r", "ended_at": {"$gt": 1}},
                                  {"method": "AUTH", "callback_code": "AUTH_SUCCESS",
                                   "record": "r", "ended_at": "yesterday"},
                                  {"event": "USER_REAUTH", "data": {"customer": "c",
                                                                    "deauthorized_at": 5}}])
def test_unrecognisable_shapes_are_refused(body):
    with pytest.raises(InvalidEvent):
        describe(body)


def test_unknown_connection_events_are_kept(inbox):
    body = {"event": "USER_UPGRADED", "message": "", "data": {"customer": "c1",
                                                              "upgraded_at": "2026-01-01"}}
    assert inbox.add(body)[1] is True
    assert inbox.add(body)[1] is False


def test_disconnect_and_reauth_set_record_status(inbox, make):
    a, b = make.record_id(), make.record_id()
    inbox.add(make.callback(a, "AUTH", "AUTH_SUCCESS", customer="c1",
                            ended_at="2026-01-01T00:00:00.000Z"))
    inbox.add(make.callback(a, "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="c1", account="acc-a",
                            ended_at="2026-01-01T00:01:00.000Z"))
    inbox.add(make.callback(b, "AUTH", "AUTH_SUCCESS", customer="c2",
                            ended_at="2026-01-01T00:00:00.000Z"))
    assert inbox.status(a) == inbox.status(b) == "connected"
    assert inbox.status("never-seen") is None

    # USER_DISCONNECT names accounts and a customer, not a record
    inbox.add(make.disconnect("c1", "2026-01-02T00:00:00.000Z", accounts=["acc-a"]))
    inbox.add(make.reauth("c2", "2026-01-02T00:00:00.000Z"))
    states = inbox.records()
    assert states[a].status == "disconnected"
    assert states[b].status == "reauth_required"
    assert set(states[a].products) == {"AUTH", "ACCOUNTS"}  # its history stays
    assert inbox.records(status="disconnected").keys() == {a}

    # a late redelivery of an older login does not undo the disconnect ...
    inbox.add(make.callback(a, "AUTH", "AUTH_SUCCESS", customer="c1",
                            ended_at="2026-01-01T12:00:00.000Z"))
    assert inbox.status(a) == "disconnected"
    # ... a newer login does
    inbox.add(make.callback(b, "AUTH", "AUTH_SUCCESS", customer="c2",
                            ended_at="2026-01-03T00:00:00.000Z"))
    assert inbox.status(b) == "connected"


def test_of_two_logins_in_one_batch_the_newer_reconnects_whatever_their_order(inbox, make):
    """After a disconnect, a batch holding a newer login and then an older one (a late
    redelivery): the record is connected as of the newer, by the newer's event."""
    rec = make.record_id()
    inbox.add(make.callback(rec, "AUTH", "AUTH_SUCCESS", customer="c1",
                            ended_at="2026-01-01T00:00:00.000Z"))
    inbox.add(make.callback(rec, "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="c1", account="acc-a",
                            ended_at="2026-01-01T00:01:00.000Z"))
    inbox.add(make.disconnect("c1", "2026-01-02T00:00:00.000Z", accounts=["acc-a"]))
    assert inbox.status(rec) == "disconnected"
    newer, older = (make.callback(rec, "AUTH", "AUTH_SUCCESS", customer="c1", ended_at=at)
                    for at in ("2026-01-04T00:00:00.000Z", "2026-01-03T00:00:00.000Z"))
    (newer_id, _), _ = inbox.add_described([(describe(b), orjson.dumps(b))
                                            for b in (newer, older)])
    state = inbox.records([rec])[rec]
    assert (state.status, state.status_at) == ("connected", "2026-01-04T00:00:00.000Z")
    assert inbox._db.execute("select status_event from records where record = ?",
                             (rec,)).fetchone()[0] == newer_id


def test_out_of_order_callbacks_keep_the_newest_per_product(inbox, make):
    rec = make.record_id()
    inbox.add(make.callback(rec, "INCOME", "PRODUCT_IS_READY", ended_at="2026-01-03T00:00:00Z"))
    inbox.add(make.callback(rec, "INCOME", "INCOME_FAILED", status="is_failed",
                            ended_at="2026-01-01T00:00:00Z"))
    product = inbox.records([rec])[rec].products["INCOME"]
    assert (product.code, product.status) == ("PRODUCT_IS_READY", "is_success")
    assert inbox.count() == 2  # both events are kept; only the summary chooses


def test_cursor_reads_in_bounded_batches(inbox, make):
    for i in range(7):
        inbox.add(make.callback(f"r{i}"))
    first = inbox.after(0, 3)
    assert [e.record for e in first] == ["r0", "r1", "r2"]
    rest = inbox.after(first[-1].id, 100)
    assert [e.record for e in rest] == [f"r{i}" for i in range(3, 7)]
    assert inbox.after(rest[-1].id) == []
    # bodies count too: a batch stops before it outgrows max_bytes, but never comes back empty
    assert len(inbox.after(0, 100, max_bytes=1)) == 1
    one = len(orjson.dumps(make.callback("r0")))
    assert len(inbox.after(0, 100, max_bytes=3 * one + 10)) == 3


def test_a_second_process_sees_committed_events(where, make):
    with open_inbox(where, create=True) as writer, open_inbox(where, create=True) as reader:
        writer.add(make.callback("r1"))
        assert reader.count() == 1


def test_a_redelivery_72_hours_later_is_still_the_same_event(inbox, make, monkeypatch):
    import time

    body = make.callback("r1")
    first, _ = inbox.add(body)
    later = time.time() + 73 * 3600
    monkeypatch.setattr("resources.inbox.store.time.time", lambda: later)
    assert inbox.add({**body, "serverResponse": {"status": 502}}) == (first, False)


def _payment(make, rec: str, pid: str, **extra) -> dict:
    return {**make.callback(rec, "PAYMENT", "PAYMENT_SUCCESS", ended_at="2026-01-01T01:00:00.000Z"),
            "paymentId": pid, "link": None, "garnishment": {"amount_collected": 5000},
            "schedule": {"current_amount": 5000, "paymentId": pid},
            "payment": {"_id": pid, "status": "success", "amount": 5000}, **extra}


def test_two_payments_in_one_window_are_two_events(inbox, make):
    """A payment's id names the event: the second payment of a record in the same window is
    not a redelivery of the first (they were one event before paymentId joined the identity)."""
    rec = make.record_id()
    first, second = _payment(make, rec, "pay1"), _payment(make, rec, "pay2")
    assert [inbox.add(p)[1] for p in (first, second)] == [True, True]
    # a redelivery of either, with a new serverResponse and its members in another order,
    # is still one event
    again = dict(reversed(list({**second, "serverResponse": {"status": 500}}.items())))
    again["schedule"] = dict(reversed(list(second["schedule"].items())))
    assert inbox.add(again)[1] is False
    assert inbox.count() == 2


@pytest.mark.parametrize("member,value", [
    ("link", "lnk_2"), ("garnishment", {"amount_collected": 2500}),
    ("schedule", {"current_amount": 5000, "paymentId": "pay0", "history": ["pay0", "pay1"]}),
])
def test_each_payment_member_names_a_new_event(inbox, make, member, value):
    rec = make.record_id()
    base = _payment(make, rec, "pay1")
    assert inbox.add(base)[1] and inbox.add({**base, member: value})[1]


def test_new_transactions_count_names_a_transactions_event(inbox, make):
    rec = make.record_id()
    base = {**make.callback(rec, "TRANSACTIONS", "PRODUCT_IS_READY",
                            ended_at="2026-01-01T01:00:00.000Z"), "newTransactions": 5}
    assert inbox.add(base)[1] and inbox.add({**base, "newTransactions": 7})[1]
    assert not inbox.add(dict(base))[1]


def test_disconnects_of_different_accounts_at_one_time_are_two_events(inbox):
    def gone(accounts):
        return {"event": "USER_DISCONNECT", "message": "bye",
                "data": {"customer": "cust1", "accounts": accounts,
                         "disconnected_at": "2026-01-01T00:00:00.000Z"}}
    assert inbox.add(gone(["a1"]))[1] and inbox.add(gone(["a2"]))[1]
    assert not inbox.add(gone(["a2"]))[1]


def test_a_reader_never_creates_a_missing_inbox(tmp_path):
    path = tmp_path / "nowhere" / "inbox.sqlite3"
    with pytest.raises(InboxMissing, match=str(path)):
        Inbox(path)
    assert not path.exists() and not path.parent.exists()


# -- issue 19: what the review found untested -------------------------------------------------

@pytest.mark.parametrize("keep", ["record", "recordId"])
def test_a_callback_naming_its_record_by_one_member_alone_is_that_records(inbox, make, keep):
    body = make.callback("placeholder", "AUTH", "AUTH_SUCCESS", customer="c1",
                         ended_at="2026-01-01T00:00:00.000Z")
    del body["record"], body["recordId"]
    body[keep] = "rec-one"
    assert describe(body)["record"] == "rec-one"
    event_id, new = inbox.add(body)
    assert new
    (event,) = inbox.after(0)
    assert (event.id, event.record, event.records) == (event_id, "rec-one", ("rec-one",))
    state = inbox.records(["rec-one"])["rec-one"]
    assert (state.customer, state.status, set(state.products)) == ("c1", "connected", {"AUTH"})


@pytest.mark.parametrize("data, complaint", [
    ({"customer": 42, "disconnected_at": "2026-01-02T00:00:00Z"},
     "connection event customer must be a string"),
    ({"customer": ["c1"], "disconnected_at": "2026-01-02T00:00:00Z"},
     "connection event customer must be a string"),
    ({"customer": "c1\x00", "disconnected_at": "2026-01-02T00:00:00Z"},
     "connection event customer holds a NUL character"),
    ({"customer": "c1", "accounts": "acc-a", "disconnected_at": "2026-01-02T00:00:00Z"},
     "connection event accounts must be a list of account ids"),
    ({"customer": "c1", "accounts": {"acc-a": 1}, "disconnected_at": "2026-01-02T00:00:00Z"},
     "connection event accounts must be a list of account ids"),
])
def test_a_connection_event_with_a_wrong_customer_or_accounts_is_refused(inbox, make, data,
                                                                        complaint):
    inbox.add(make.callback("rec-a", "AUTH", "AUTH_SUCCESS", customer="c1", account="acc-a",
                            ended_at="2026-01-01T00:00:00.000Z"))
    body = {"event": "USER_DISCONNECT", "message": "bye", "data": data}
    with pytest.raises(InvalidEvent) as info:
        inbox.add(body)
    assert str(info.value) == complaint
    assert inbox.count() == 1 and inbox.status("rec-a") == "connected"  # nothing changed


def test_a_batch_that_fails_part_way_leaves_nothing_of_itself(inbox, make, where):
    before = make.callback("rec-0", ended_at="2026-01-01T00:00:00.000Z")
    inbox.add(before)
    good = [make.callback(f"rec-{i}", "AUTH", "AUTH_SUCCESS", customer="c1",
                          ended_at="2026-01-01T01:00:00.000Z") for i in (1, 2)]
    gone = describe(make.disconnect("c1", "2026-01-02T00:00:00.000Z"))
    items = [(describe(b), orjson.dumps(b)) for b in good] + [(gone, orjson.dumps({}))]
    items.append((describe(make.callback("rec-3")), None))  # body NOT NULL: the DB refuses it
    with pytest.raises((sqlite3.IntegrityError, psycopg2.IntegrityError)):
        inbox.add_described(items)
    # nothing of the batch: no event, no record, no product, no status change, in this
    # connection or another one
    assert [e.record for e in inbox.after(0)] == ["rec-0"]
    assert set(inbox.records()) == {"rec-0"}
    with open_inbox(where) as other:
        assert other.count() == 1 and set(other.records()) == {"rec-0"}
    # and the inbox is not left inside the failed transaction: the same events go in afterwards
    assert [new for _, new in inbox.add_described(items[:3])] == [True, True, True]
    assert inbox.records()["rec-1"].status == "disconnected"
    assert inbox.add(before)[1] is False


def test_received_at_is_read_back_as_stored(inbox, make, monkeypatch):
    clock = iter([1_767_225_600.25, 1_767_225_601.5])
    monkeypatch.setattr("resources.inbox.store.time.time", lambda: next(clock))
    first_id, _ = inbox.add(make.callback("rec-1", "AUTH", "AUTH_SUCCESS", customer="c1"))
    inbox.add(make.reauth("c1", "2026-01-02T00:00:00.000Z"))
    first, second = inbox.after(0)
    assert (first.id, first.received_at, second.received_at) == (
        first_id, 1_767_225_600.25, 1_767_225_601.5)
    state = inbox.records()["rec-1"]
    assert (state.first_seen, state.last_seen) == (1_767_225_600.25, 1_767_225_601.5)
    assert state.products["AUTH"].received_at == 1_767_225_600.25


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_batch_stores_what_its_events_one_by_one_store(tmp_path, make, monkeypatch, seed):
    """The receiver's batches go in as a few statements over many rows; the same events
    stored one at a time (each its own statements, in its own transaction) leave the same
    events, ids, statuses and products, and the same answers."""
    monkeypatch.setattr("resources.inbox.store.time.time", lambda: 1_767_225_600.25)
    batches = random_batches(make, seed)
    with Inbox(tmp_path / "batched.sqlite3", create=True) as batched, \
            Inbox(tmp_path / "one.sqlite3", create=True) as one:
        answers, singles, statuses = [], [], set()
        for batch in batches:
            answers.append(batched.add_described(batch))
            singles += one_by_one(one, batch, 1_767_225_600.25)
            # after each batch, not only at the end: a later event would hide what a batch
            # left wrong (of two products at one moment, the later one stays)
            assert batched.records() == one.records()
            assert tables(batched) == tables(one)  # which event set a status, too
            statuses.update(s.status for s in one.records().values())
        assert [a for answer in answers for a in answer] == singles
        assert batched.after(0, 10_000) == one.after(0, 10_000)
        assert statuses >= {"connected", "disconnected"}
        assert sum(new for _, new in singles) < len(singles)  # repeats were in the batches


def one_by_one(inbox: Inbox, batch: list, now: float) -> list[tuple[int, bool]]:
    """Store each event of `batch` alone, its own statements in its own transaction."""
    out = []
    for info, raw in batch:
        inbox._db.begin_write()
        identity = _identity(info)
        row = inbox._db.execute("select id from events where identity = ?",
                                (identity,)).fetchone()
        out.append((row[0], False) if row else (inbox._insert(info, raw, now, identity), True))
        inbox._db.execute("commit")
    return out


def tables(inbox: Inbox) -> tuple[list, list, list]:
    """The status and product tables whole, as stored, and the record of each event."""
    return (inbox._db.execute("select * from records order by record").fetchall(),
            inbox._db.execute("select * from record_products order by record, method")
            .fetchall(),
            inbox._db.execute("select id, record from events order by id").fetchall())


def test_a_batch_keeps_what_one_by_one_keeps_at_ties_and_without_a_customer(tmp_path, make,
                                                                           monkeypatch):
    """What the random batches above meet too rarely to be sure of: of two products or two
    logins of one record at one moment, the later one stays; the first customer given stays,
    though the record's first callback named none; an undated callback before a connection
    event in one batch is dated when it was received."""
    now = 1_767_225_600.25
    monkeypatch.setattr("resources.inbox.store.time.time", lambda: now)
    at, later = "2026-01-01T01:00:00.000Z", "2026-01-01T02:00:00.000Z"

    def login(started: str) -> dict:
        return make.callback("rec-x", "AUTH", "AUTH_SUCCESS", customer="c-x", ended_at=later,
                             started_at=started)

    undated = make.callback("rec-y", "INCOME", "INCOME_SUCCESS", customer="c-y")
    undated["started_at"] = undated["ended_at"] = None
    batches = [
        [make.callback("rec-x", "ACCOUNTS", "ACCOUNTS_SUCCESS", customer=None, ended_at=at),
         make.callback("rec-x", "ACCOUNTS", "PRODUCT_IS_READY", customer="c-x", ended_at=at),
         make.callback("rec-x", "INCOME", "INCOME_SUCCESS", customer="c-other", ended_at=at),
         make.disconnect("c-x", "2026-01-01T01:30:00.000Z")],
        [login("2026-01-01T01:58:00.000Z"), login("2026-01-01T01:59:00.000Z"),
         undated, make.reauth("c-y", later)],
    ]
    batches = [[(describe(b), orjson.dumps(b)) for b in batch] for batch in batches]
    with Inbox(tmp_path / "batched.sqlite3", create=True) as batched, \
            Inbox(tmp_path / "one.sqlite3", create=True) as one:
        for batch in batches:
            ids = [event for event, new in batched.add_described(batch) if new]
            one_by_one(one, batch, now)
            assert tables(batched) == tables(one)
            assert batched.records() == one.records()
        x, y = batched.records(["rec-x", "rec-y"]).values()
        assert (x.customer, x.status, x.status_at) == ("c-x", "connected", later)
        assert x.products["ACCOUNTS"].code == "PRODUCT_IS_READY"
        (status_event,) = batched._db.execute(
            "select status_event from records where record = 'rec-x'").fetchone()
        assert status_event == ids[1]  # the second login of the two at one moment
        assert y.status == "reauth_required"
        assert y.products["INCOME"].occurred_at == "2026-01-01T00:00:00.250Z"


# -- what mutation testing found no in-process test of (the receiver runs them in its own
# process): the dead letters' scrubbing, the payment bodies' reader, the file check ----------

def test_a_refused_body_is_kept_with_its_personal_values_masked():
    bvn, email, phone = "22012345678", "ada.obi7@example.com", "+2348031234567"
    parsed = orjson.dumps({"customerBvn": bvn, "customerEmail": [email], "amount": 123456789,
                           "note": f"call {phone} or {email}", "identity": {"bvn": bvn}})
    assert orjson.loads(scrubbed(parsed)) == {
        "customerBvn": None, "customerEmail": None, "amount": 123456789,
        "note": "call *** or ***@***", "identity": None}
    # not JSON, or JSON but not an object: masked where shaped like an email or a long number
    assert scrubbed(f'{{"bvn": {bvn}, "to": "{email}"'.encode()) == b'{"bvn": ***, "to": "***@***"'
    assert scrubbed(f'["{phone}", "0803123456", 123456789]'.encode()) == \
        b'["***", "***", 123456789]'
    assert scrubbed(b"plain words, no one named") == b"plain words, no one named"
    assert scrubbed(f'{{"to": "{email}", "n": 12345}}'.encode()) == b'{"to":"***@***","n":12345}'


def test_a_refused_body_nested_deeper_than_json_is_written_is_masked_as_it_came():
    """A body that parses but nests deeper than orjson writes (255 levels) cannot be written
    again with its members nulled: it is kept as it came, masked, and nothing raises."""
    bvn = "22012345678"
    raw = (f'{{"customerBvn": "{bvn}", "x": '.encode() + b'{"a":' * 300 + b"1" + b"}" * 300
           + b"}")
    assert scrubbed(raw) == raw.replace(bvn.encode(), b"***")


def test_a_payment_body_is_kept_without_its_nested_personal_members(make):
    """Members deeper in the body are nulled too; a payment's accounts are kept masked to
    their last 4 characters (all starred when 6 or fewer); the payload given is not
    changed."""
    body = {**make.callback("rec-1", "PAYMENT", "PAYMENT_SUCCESS", paymentId="p1"),
            "nuban": "0123456789",
            "account": {"nuban": "0123456789", "name": "Ada Obi", "type": "savings",
                        "customer": {"name": "Ada Obi", "id": "c1"}},
            "payment": {"_id": "pay1", "email": "ada@example.com", "amount": 5000,
                        "debit_account": "0123456789", "credit_account": "1234567",
                        "bank_response": {"DestAccName": "Ada Obi", "code": "00"}}}
    given = orjson.loads(orjson.dumps(body))
    kept = orjson.loads(kept_body(body))
    assert body == given
    assert (kept["nuban"], kept["customerEmail"]) == (None, None)
    assert kept["account"] == {"nuban": None, "name": None, "type": "savings",
                               "customer": {"name": None, "id": "c1"}}
    assert kept["payment"] == {"_id": "pay1", "email": None, "amount": 5000,
                               "debit_account": "******6789", "credit_account": "***4567",
                               "bank_response": {"DestAccName": None, "code": "00"}}
    short = {**body, "payment": {"debit_account": "123456", "credit_account": 12345678}}
    assert orjson.loads(kept_body(short))["payment"] == {"debit_account": "******",
                                                         "credit_account": None}
    # a member that is not an object where one is named holds nothing to null within
    assert orjson.loads(kept_body({**body, "account": "acc-1"}))["account"] == "acc-1"


def test_a_refused_body_has_members_named_like_personal_ones_nulled():
    raw = (b'{"account": {"name": "Ada Obi", "nuban" : "0123", "holder_name":"Ada"},'
           b' "debit_account": "1234", "note": "x", ')  # cut short: it does not parse
    assert scrubbed(raw) == (b'{"account": {"name": null, "nuban" : null, "holder_name":null},'
                             b' "debit_account": null, "note": "x", ')


def test_payloads_are_a_records_bodies_of_the_methods_asked_oldest_first(inbox, make):
    rec, other = make.record_id(), make.record_id()
    bodies = [make.callback(rec, "PAYMENT", "PAYMENT_SUCCESS", ended_at=f"2026-01-01T0{i}:00:00Z",
                            customerBvn="22012345678", paymentId=f"p{i}") for i in range(3)]
    inbox.add(bodies[0])
    inbox.add(make.callback(rec, "ACCOUNTS", "ACCOUNTS_SUCCESS"))
    inbox.add(make.callback(other, "PAYMENT", "PAYMENT_SUCCESS", paymentId="p9"))
    inbox.add(bodies[2])
    inbox.add(make.callback(rec, "DIRECT_DEBIT", "DIRECT_DEBIT_SUCCESS", paymentId="d1"))
    inbox.add(bodies[1])
    got = inbox.payloads(rec, ["PAYMENT", "DIRECT_DEBIT"])
    assert [p.get("paymentId") for p in got] == ["p0", "p2", "d1", "p1"]
    assert got[0] == {**bodies[0], "customerBvn": None, "customerEmail": None}
    assert inbox.payloads(rec, ["PAYMENT"])[1:] == [
        {**b, "customerBvn": None, "customerEmail": None} for b in (bodies[2], bodies[1])]
    assert inbox.payloads(make.record_id(), ["PAYMENT"]) == []


def test_check_fails_once_the_inbox_file_is_gone_or_replaced(tmp_path, make):
    path = tmp_path / "inbox.sqlite3"
    with Inbox(path, create=True) as inbox:
        inbox.add(make.callback(make.record_id()))
        inbox.check()
        path.rename(tmp_path / "moved.sqlite3")
        with pytest.raises(InboxMissing, match="deleted, moved or replaced"):
            inbox.check()
        assert not path.exists()  # read-only: the check made no file
        path.write_bytes(b"not a database" * 100)  # another file at the path (the old WAL
        with pytest.raises(InboxMissing):  # beside it would still answer a read of it)
            inbox.check()
        path.unlink()
        (tmp_path / "moved.sqlite3").rename(path)  # the same file back: it answers again
        inbox.check()
        inbox._db.execute("drop table events")  # the file, but not an inbox any more
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            inbox.check()


def test_an_inbox_opened_in_one_thread_stores_and_reads_in_another(tmp_path, make):
    # the receiver's health check and the sensor's reads run in worker threads
    with open_inbox(tmp_path / "inbox.sqlite3", create=True) as ib:
        rec = make.record_id()
        out: list = []
        worker = threading.Thread(target=lambda: out.append(
            (ib.add(make.callback(rec)), ib.status(rec), ib.count())))
        worker.start()
        worker.join()
        assert out == [((1, True), "connected", 1)]


def test_a_write_waits_for_another_writer_longer_than_sqlites_default_wait(tmp_path, make):
    """A second writer (another receiver, `ledgerlake forget`) holding the write lock for
    longer than SQLite's own 5 s does not fail a callback: it is stored once the lock is
    free, after the other's write."""
    path = tmp_path / "inbox.sqlite3"
    with open_inbox(path, create=True) as ib:
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("begin immediate")
        other.execute("insert into dead_letters (received_at, reason, body) values (0, 'x', x'')")
        release = threading.Timer(6.0, lambda: other.execute("commit"))
        release.start()
        try:
            assert ib.add(make.callback(make.record_id())) == (1, True)
        finally:
            release.join()
            other.close()
        assert ib.count() == 1 and len(dead_letters(ib)) == 1


def test_a_reader_opens_the_inbox_without_waiting_for_a_writer(tmp_path, make):
    """A reader (a sensor, `ledgerlake status`) opens the inbox while the receiver holds the
    write lock, and reads what was committed before, at once: only a new file's first
    opener writes (its tables)."""
    path = tmp_path / "inbox.sqlite3"
    with open_inbox(path, create=True) as ib:
        ib.add(make.callback(make.record_id()))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("begin immediate")
    other.execute("insert into dead_letters (received_at, reason, body) values (0, 'x', x'')")
    try:  # waiting would be for the inbox's 30 s, then "database is locked"
        for create in (False, True):
            with Inbox(path, create=create) as reader:
                assert (reader.count(), dead_letters(reader)) == (1, [])
    finally:
        other.execute("commit")
        other.close()


def test_a_batchs_ids_are_those_stored_and_above_every_id_given(tmp_path, make):
    """The ids a batch answers are the ids its events are stored (and read back) under, and
    above every id given before, the newest even once deleted (a cursor has passed it)."""
    with open_inbox(tmp_path / "inbox.sqlite3", create=True) as ib:
        first = [make.callback(make.record_id(), method=m, code=f"{m}_SUCCESS")
                 for m in ("ACCOUNTS", "BALANCE", "INCOME")]
        assert [ib.add(b)[0] for b in first] == [1, 2, 3]
        ib._db.execute("delete from events where id = 3")
        rec = make.record_id()
        batch = [make.callback(rec, method=m, code=f"{m}_SUCCESS", customer=c)
                 for m, c in (("ACCOUNTS", "a"), ("BALANCE", "b"), ("INCOME", "c"))]
        items = [(describe(b), orjson.dumps(b)) for b in batch]
        answers = ib.add_described(items + items[:1])  # the first again: its id, not new
        assert answers == [(4, True), (5, True), (6, True), (4, False)]
        stored = {e.id: e.method for e in ib.after(3)}
        assert stored == {4: "ACCOUNTS", 5: "BALANCE", 6: "INCOME"}
        products = ib.records([rec])[rec].products
        assert {m: p.event for m, p in products.items()} == {m: i for i, m in stored.items()}


# -- the body kept: personal members nulled in place where that is sure, else written anew -

PERSONAL = {"customerEmail": ["ada.obi7@example.com"], "customerBvn": "22012345678",
            "identity": {"bvn": "22012345678", "phone": ["+2348031234567"]}}
TRAPS = [  # other members that look like the personal ones
    {}, {"meta": {"customerEmail": ["ada.obi7@example.com"]}},
    {"note": '"customerBvn":"22012345678"'}, {"note": 'x"customerEmail'},
    {"extras": [{"identity": {"bvn": "22012345678"}}]}, {"customer\u00e9": 1, "n": 1.5},
]


@pytest.mark.parametrize("trap", range(len(TRAPS)))
@pytest.mark.parametrize("members", [(), ("customerEmail",), ("customerBvn", "identity"),
                                     ("identity", "customerEmail", "customerBvn")])
def test_the_kept_body_has_its_personal_values_nulled(make, trap, members):
    """Equal as JSON to the body with its personal members null: the members a trap nests, or
    a string that quotes one, are not its own and stay."""
    body = {**make.callback("rec-k"), **TRAPS[trap], **{m: PERSONAL[m] for m in members}}
    want = {**body, **{m: None for m in PERSONAL_MEMBERS if m in body}}
    assert orjson.loads(kept_body(body)) == want


def test_records_answers_for_any_number_of_ids_in_one_call(inbox, make):
    """300,000 records asked in one call (more variables than any SQLite build binds in one
    statement), each answered; ids the inbox never heard of are simply absent."""
    inbox.add(make.callback("rec-0000000", "AUTH", "AUTH_SUCCESS"))
    # the rest written straight into the tables (storing 300,000 callbacks is not the point)
    inbox._db.execute(
        "insert into records (record, status, status_at, status_event, first_seen, last_seen)"
        " with recursive n(i) as (select 1 union all select i + 1 from n where i < 299999)"
        " select 'rec-' || (1000000 + i), 'connected', '2026-11-27T00:00:00.000Z', 1, 0, 0"
        " from n")
    ids = ["rec-0000000", *(f"rec-{1_000_000 + i}" for i in range(1, 300_000))]
    got = inbox.records([*ids, "rec-never"])
    assert sorted(got) == sorted(ids)
    assert {s.status for s in got.values()} == {"connected"}
    assert got["rec-0000000"].products["AUTH"].code == "AUTH_SUCCESS"
    assert inbox.records([]) == {}


def test_record_numbers_come_in_pages_after_a_key(inbox, make):
    """A record's number is given when the inbox first hears of it, once; pages of them
    follow it, of every record or of those in one status."""
    for r in ("rec-c", "rec-a", "rec-b", "rec-d"):
        inbox.add(make.callback(r, "AUTH", "AUTH_SUCCESS"))
    inbox.add(make.callback("rec-c", "ACCOUNTS", "ACCOUNTS_SUCCESS"))  # known: no new number
    inbox.add({**make.disconnect("cust-b", "2099-11-03T00:00:00.000Z"), "record": "rec-b"})
    n = inbox.numbers(["rec-a", "rec-b", "rec-c", "rec-d", "rec-x"])
    assert sorted(n, key=n.get) == ["rec-c", "rec-a", "rec-b", "rec-d"]  # never heard: none
    assert inbox.ids_of(n.values()) == {v: k for k, v in n.items()}
    assert inbox.numbered(limit=2) == [n["rec-c"], n["rec-a"]]
    assert inbox.numbered(n["rec-a"], limit=2) == [n["rec-b"], n["rec-d"]]
    assert inbox.numbered(n["rec-d"]) == []
    assert inbox.numbered(status="connected") == [n["rec-c"], n["rec-a"], n["rec-d"]]
    assert inbox.numbered(n["rec-c"], limit=1, status="connected") == [n["rec-a"]]
    assert inbox.ids_of([n["rec-d"] + 1, -1]) == {}


def test_a_page_of_record_numbers_is_1000_unless_asked_otherwise(inbox, make):
    ids = [f"rec-{i:04d}" for i in range(1001)]
    inbox.add_described([(describe(b), kept_body(b))
                         for b in (make.callback(r, "AUTH", "AUTH_SUCCESS") for r in ids)])
    numbers = inbox.numbers(ids)
    assert inbox.numbered() == [numbers[r] for r in ids[:1000]]
    assert inbox.numbered(numbers[ids[999]]) == [numbers[ids[1000]]]


# -- what the pipeline made of each record: its landing state per product -------------------

def landing(record: str, product: str, outcome: str, run_id: str, at: float, **kw
            ) -> LandingState:
    return LandingState(record, product, outcome, run_id, at, **kw)


def test_a_records_landing_state_is_its_latest_and_keeps_when_it_last_landed(inbox, make):
    """Each (record, product) keeps the state its last landing left; a landing that held or
    failed leaves the time the product was last published as it was."""
    for r in ("rec-a", "rec-b"):
        inbox.add(make.callback(r, "AUTH", "AUTH_SUCCESS"))
    inbox.save_landings([
        landing("rec-a", "transactions", "landed", "run1", 100.0, row_count=5,
                detail={"pull": "full history", "lake_version": 3}),
        landing("rec-b", "transactions", "failed", "run1", 100.0,
                detail={"error": "ApiError: down"}),
        landing("rec-a", "income", "landed", "run1", 100.0, row_count=1)])
    got = inbox.landings()
    assert [(s.record, s.product, s.outcome, s.landed_at) for s in got] == [
        ("rec-a", "income", "landed", 100.0), ("rec-a", "transactions", "landed", 100.0),
        ("rec-b", "transactions", "failed", None)]
    assert got[1].detail == {"pull": "full history", "lake_version": 3} and got[1].row_count == 5
    assert got[2].detail == {"error": "ApiError: down"}

    inbox.save_landings([landing("rec-a", "transactions", "held", "run2", 200.0, row_count=6,
                                 detail={"checks": {"running_balance_reconciles": 2}})])
    (held,) = inbox.landings(["rec-a"], product="transactions")
    assert (held.outcome, held.run_id, held.at, held.landed_at, held.row_count) == (
        "held", "run2", 200.0, 100.0, 6)
    assert held.detail == {"checks": {"running_balance_reconciles": 2}}  # not merged
    inbox.save_landings([landing("rec-a", "transactions", "landed", "run3", 300.0)])
    (again,) = inbox.landings(["rec-a"], product="transactions")
    assert (again.outcome, again.landed_at, again.detail) == ("landed", 300.0, {})


def test_landing_states_are_read_by_record_product_outcome_and_run(inbox, make):
    """The reads the pipeline makes: a retry's (its run's landed and held records), `status
    --failed`'s (every record wanting action), a batch's records (any number of ids)."""
    inbox.save_landings([
        landing("rec-a", "accounts", "landed", "run1", 1.0),
        landing("rec-b", "accounts", "held", "run1", 1.0),
        landing("rec-c", "accounts", "failed", "run1", 1.0),
        landing("rec-a", "balances", "landed", "run2", 2.0),
        landing("rec-d", "accounts", "landed", "run2", 2.0)])

    def keys(states):
        return [(s.record, s.product) for s in states]

    assert keys(inbox.landings(run_id="run1", product="accounts",
                               outcomes=["landed", "held"])) == [
        ("rec-a", "accounts"), ("rec-b", "accounts")]
    assert keys(inbox.landings(outcomes=["held", "failed"])) == [
        ("rec-b", "accounts"), ("rec-c", "accounts")]
    assert keys(inbox.landings(["rec-a", "rec-never"])) == [
        ("rec-a", "accounts"), ("rec-a", "balances")]
    assert keys(inbox.landings(run_id="run2")) == [("rec-a", "balances"), ("rec-d", "accounts")]
    assert keys(inbox.landings(limit=2)) == [("rec-a", "accounts"), ("rec-a", "balances")]
    assert inbox.landings([]) == [] and inbox.landings(product="income") == []
    many = [f"rec-{i:06d}" for i in range(100_000)]  # more than a statement binds one by one
    assert keys(inbox.landings([*many, "rec-d"])) == [("rec-d", "accounts")]
    inbox.save_landings([])  # nothing to keep: nothing changes
    assert len(inbox.landings()) == 5


def test_landings_that_fail_part_way_leave_nothing_and_the_next_are_kept(inbox):
    """A batch of states is kept whole or not at all: the fault is the caller's to see, and
    the inbox takes the next batch."""
    with pytest.raises((OverflowError, psycopg2.DataError)):  # a count no database holds
        inbox.save_landings([landing("rec-a", "accounts", "landed", "run1", 1.0, row_count=3),
                             landing("rec-b", "accounts", "landed", "run1", 1.0,
                                     row_count=2**63)])
    assert inbox.landings() == []
    inbox.save_landings([landing("rec-a", "accounts", "held", "run2", 2.0)])
    assert [(s.record, s.outcome, s.run_id) for s in inbox.landings()] == [
        ("rec-a", "held", "run2")]


def test_stale_counts_the_connected_records_not_published_since_a_cutoff(inbox, make):
    """What the freshness check reads: of the connected records whose product was published
    once, how many have not been since the cutoff, and the first of them."""
    for r in ("rec-a", "rec-b", "rec-c", "rec-d", "rec-e"):
        inbox.add(make.callback(r, "AUTH", "AUTH_SUCCESS", customer=f"cust-{r[-1]}"))
    inbox.add({**make.disconnect("cust-d", "2099-11-03T00:00:00.000Z"), "record": "rec-d"})
    inbox.save_landings([
        landing("rec-a", "balances", "landed", "run1", 100.0),
        landing("rec-b", "balances", "landed", "run1", 300.0),
        landing("rec-c", "balances", "failed", "run1", 300.0),  # never published: not counted
        landing("rec-d", "balances", "landed", "run1", 50.0),  # disconnected: not counted
        landing("rec-e", "balances", "landed", "run1", 150.0),
        landing("rec-a", "transactions", "landed", "run1", 300.0)])
    assert inbox.stale("balances", 200.0) == (3, 2, ["rec-a", "rec-e"])
    assert inbox.stale("balances", 200.0, limit=1) == (3, 2, ["rec-a"])
    assert inbox.stale("transactions", 200.0) == (1, 0, [])
    # a later landing that fails leaves rec-b as fresh as its last publication
    inbox.save_landings([landing("rec-b", "balances", "failed", "run2", 400.0)])
    assert inbox.stale("balances", 250.0) == (3, 2, ["rec-a", "rec-e"])
    assert inbox.stale("balances", 350.0) == (3, 3, ["rec-a", "rec-b", "rec-e"])
    assert inbox.stale("income", 350.0) == (0, 0, [])


def test_stale_names_the_first_20_unless_asked_otherwise(inbox, make):
    ids = [f"rec-{i:02d}" for i in range(21)]
    inbox.add_described([(describe(b), kept_body(b))
                         for b in (make.callback(r, "AUTH", "AUTH_SUCCESS") for r in ids)])
    inbox.save_landings([landing(r, "balances", "landed", "run1", 100.0) for r in ids])
    assert inbox.stale("balances", 200.0) == (21, 21, ids[:20])


def test_vitals_landing_ages_and_failing_records_are_counts(inbox, make):
    """What the alerts and the metrics read (pipeline/watch.py), on SQLite and Postgres."""
    assert inbox.vitals(0) == type(inbox.vitals(0))(0, None, 0, None, 0, {}, {})
    for r in ("rec-a", "rec-b", "rec-c", "rec-d"):
        inbox.add(make.callback(r, "AUTH", "AUTH_SUCCESS", customer=f"cust-{r[-1]}"))
    inbox.add({**make.disconnect("cust-d", "2099-11-03T00:00:00.000Z"), "record": "rec-d"})
    inbox.dead_letter("body is not JSON", b"{")
    inbox.save_landings([
        landing("rec-a", "balances", "landed", "run1", 100.0),
        landing("rec-b", "balances", "landed", "run1", 300.0),
        landing("rec-c", "balances", "landed", "run1", 200.0),
        landing("rec-d", "balances", "landed", "run1", 10.0),  # disconnected: not counted
        landing("rec-a", "transactions", "failed", "run2", 300.0),
        landing("rec-b", "transactions", "failed", "run3", 300.0),
        landing("rec-c", "income", "held", "run2", 300.0)])
    vitals = inbox.vitals(2)
    assert (vitals.last_event, vitals.waiting, vitals.dead_letters) == (5, 3, 1)
    assert vitals.oldest_waiting_at is not None and vitals.last_received_at is not None
    assert vitals.statuses == {"connected": 3, "disconnected": 1}
    assert vitals.outcomes == {("transactions", "failed"): 2, ("income", "held"): 1}
    assert inbox.landing_ages("balances") == (3, 200.0, 100.0)
    assert inbox.landing_ages("transactions") == (0, None, None)
    assert inbox.failing("transactions", "failed") == (2, ["rec-a", "rec-b"], "run2")
    assert inbox.failing("transactions", "failed", not_runs=["run2"], limit=1) == \
        (1, ["rec-b"], "run3")
    assert inbox.failing("income", "failed") == (0, [], None)


# -- forgetting records (`ledgerlake forget` runs it in a process of its own) -----------------

def test_forget_deletes_every_row_of_the_records_and_keeps_the_others(inbox, make, where):
    """Their events, statuses, products, landing states and the dead letters naming them or
    their customers go, counted; a connection event that named others too keeps those."""
    owner = {"rec-x2": "cust-a", "rec-x1": "cust-a", "rec-y3": "cust-b"}
    for record, customer in owner.items():
        inbox.add(make.callback(record, "AUTH", "AUTH_SUCCESS", customer=customer))
        inbox.add(make.callback(record, "BALANCE", "BALANCE_SUCCESS", customer=customer,
                                account=f"acct-{record[-1]}"))
        inbox.save_landings([landing(record, "balances", "landed", "run1", 1.0)])
        inbox.dead_letter("bad", f'{{"recordId": "{record}"}}'.encode())
    inbox.dead_letter("bad", b'{"customerId": "cust-a"}')
    inbox.dead_letter("bad", b'{"customerId": "cust-b"}')
    at = "2026-01-02T00:00:00.000Z"
    inbox.add(make.disconnect("cust-a", at, ["acct-1", "acct-2"]))
    inbox.add(make.disconnect("cust-b", at, ["acct-2", "acct-3"]))
    inbox.add(make.disconnect("cust-b", "2026-01-03T00:00:00.000Z", ["acct-3"]))
    inbox.add(make.reauth("cust-a", "2026-01-04T00:00:00.000Z"))
    assert inbox.of_customer("cust-a") == ["rec-x1", "rec-x2"]

    # 6 events (4 callbacks, 2 connection events), 4 products, 2 landing states, 2 statuses,
    # 2 numbers, 3 dead letters
    assert inbox.forget(["rec-x2", "rec-x1", "rec-x2"]) == 19
    assert [(e.record, e.records) for e in inbox.after(0)] == [
        ("rec-y3", ("rec-y3",))] * 2 + [(None, ("rec-y3",))] * 2
    assert list(inbox.records()) == ["rec-y3"]
    assert inbox.of_customer("cust-a") == [] and inbox.of_customer("cust-b") == ["rec-y3"]
    assert [s.record for s in inbox.landings()] == ["rec-y3"]
    assert dead_letters(inbox) == [("bad", b'{"recordId": "rec-y3"}'),
                                   ("bad", b'{"customerId": "cust-b"}')]
    assert inbox.forget([]) == 0 and inbox.forget(["rec-x1", "rec-never"]) == 0
    assert inbox.count() == 4
    if not isinstance(where, str):  # SQLite: deleted content overwritten, the log emptied
        wal = where.with_name(where.name + "-wal")
        assert wal.stat().st_size == 0
        assert [n for n in (b"rec-x1", b"rec-x2", b"cust-a") if n in where.read_bytes()] == []


def test_forgetting_a_customer_reaches_their_events_that_name_no_record(inbox, make, where):
    """A connection event heard before any record of its customer was (a USER_REAUTH, a
    USER_DISCONNECT naming accounts no callback did), or a callback without a record, names
    the customer and no record: forgetting the customer deletes it, with or without records
    of theirs; another customer's stay, and forgetting only a record leaves them."""
    early = "2026-01-01T00:00:00.000Z"
    inbox.add(make.reauth("cust-a", early))  # before any record: it applies to none
    inbox.add(make.disconnect("cust-a", early, ["acct-unknown"]))
    inbox.add({k: v for k, v in make.callback("x", customer="cust-a").items()
               if k not in ("record", "recordId")})
    inbox.add(make.reauth("cust-b", early))
    inbox.dead_letter("bad", b'{"customerId": "cust-a"}')
    inbox.add(make.callback("rec-a1", "AUTH", "AUTH_SUCCESS", customer="cust-a"))
    inbox.add(make.reauth("cust-a", "2026-01-02T00:00:00.000Z"))  # applies to rec-a1
    inbox.add(make.callback("rec-b1", "AUTH", "AUTH_SUCCESS", customer="cust-b"))
    assert [e.records for e in inbox.after(0) if e.record is None] == [(), (), (), (),
                                                                       ("rec-a1",)]

    def left() -> list[tuple]:
        return [(e.method, e.record, e.body.get("customerId") or e.body["data"]["customer"])
                for e in inbox.after(0)]

    # its event, product, status and number: cust-b's connection event stays
    assert inbox.forget(["rec-b1"]) == 4
    assert inbox.forget([], customers=["cust-a", "cust-a"]) == 5  # 4 events, 1 dead letter
    assert left() == [("USER_REAUTH", None, "cust-b"), ("AUTH", "rec-a1", "cust-a")]
    # with its record (its event, product, status and number), nothing names cust-a any more
    assert inbox.forget(["rec-a1"], customers=["cust-a"]) == 4
    assert left() == [("USER_REAUTH", None, "cust-b")]
    assert dead_letters(inbox) == [] and inbox.of_customer("cust-a") == []
    assert inbox.forget([], customers=["cust-a"]) == 0
    if not isinstance(where, str):  # SQLite: deleted content overwritten, the log emptied
        assert b"cust-a" not in where.read_bytes()
