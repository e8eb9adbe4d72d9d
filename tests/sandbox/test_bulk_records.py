"""sandbox/records/bulk_create over real HTTP: thin records made in bulk serve every endpoint as
records of customers/create do, their ids decode by rule, their callbacks are paced or none,
a restart keeps them, and bad bodies change nothing (docs/interface.md, "Records in bulk")."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest
from sandbox_pulls import chain_breaks, create, frozen, kobo, ok, pull
from test_webhooks import Hook

from pipeline.local import Server
from tests.conftest import Sandbox, start_sandbox

BULK = "sandbox/records/bulk_create"


def err(resp, code: str, status: int = 400) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error_code"] == code, body
    return body


def raised(box: Sandbox, record: str) -> int:
    """How many deliveries the sandbox has raised for `record` (its webhooks.sqlite3)."""
    with contextlib.closing(sqlite3.connect(box.data_dir / "webhooks.sqlite3")) as db:
        return db.execute("select count(*) from deliveries where record = ?",
                          (record,)).fetchone()[0]


def restart(box: Sandbox) -> None:
    """The same data dir and keys in a new process, in `box`'s place."""
    box.server.stop()
    box.server = Server("sandbox", "--data-dir", str(box.data_dir),
                        env={"LEDGERLAKE_PRODUCTION_KEY": box.production_key,
                             "LEDGERLAKE_SANDBOX_KEY": box.sandbox_key},
                        log_path=box.data_dir.parent / "restarted.log").start()
    box.url = box.server.url


def nth(first: str, i: int) -> str:
    """The documented rule: record i of a batch is `first` with i added to digits 2-11."""
    return f"{first[:2]}{int(first[2:12], 16) + i:010x}{first[12:]}"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A sandbox whose clock stands still, and a batch of 3 records in it."""
    with frozen(tmp_path_factory.mktemp("bulk")) as box, box.api() as api:
        yield box, ok(api.post(BULK, json={"count": 3, "accounts": 2, "volume": 20, "seed": 9}))


@pytest.fixture
def hooked(tmp_path):
    """A fresh sandbox whose webhook is a receiver in this process."""
    hook, box = Hook(), start_sandbox(tmp_path / "sandbox")
    try:
        with box.api() as api:
            ok(api.post("settings/webhook", json={"url": hook.url}))
        yield box, hook
    finally:
        box.server.stop()
        hook.close()


def test_a_batch_answers_its_ids_by_rule(made):
    box, batch = made
    assert batch["batch"] == 1 and batch["count"] == 3
    assert batch["records"] == [nth(batch["first"], i) for i in range(3)]
    assert batch["last"] == batch["records"][-1]
    with box.api() as api:
        big = ok(api.post(BULK, json={"count": 10_001, "accounts": 1}))
        assert big["records"] is None and big["batch"] == 2
        for i in (0, 4321, 10_000):  # any index of the batch is a connected record
            rec = ok(api.post("record/get", json={"record": nth(big["first"], i)}))["record"]
            assert rec["_id"] == nth(big["first"], i) == rec["id"]
            assert rec["verified"] and set(rec["status"].values()) == {"ready"}
        assert nth(big["first"], 10_000) == big["last"]


def test_a_bulk_record_serves_every_endpoint(made):
    box, batch = made
    record = batch["first"]
    with box.api() as api:
        rec = ok(api.post("record/get", json={"record": record}))["record"]
        assert rec["login_type"] == "bank" and rec["account_type"] == "personal"
        customer = rec["customer"]
        accounts = ok(api.post("accounts/get", json={"record": record}))["accounts"]
        assert len(accounts) == 2 and all(a["record"] == record for a in accounts)
        assert ok(api.post("accounts/get", json={"customer": customer}))["accounts"] == accounts
        ids = [a["_id"] for a in accounts]
        balances = ok(api.post("balance/get", json={"record": record}))["balance"]
        assert [b["account"] for b in balances] == ids
        assert ok(api.post("balance/get", json={"account": ids[1]}))["balance"] == balances[1:]
        lines = pull(api, record=record)
        ledger = ok(api.post("sandbox/records/ledger", json={"record": record}))
        assert len(lines) == ledger["lines"] == len({t["_id"] for t in lines})
        opening = {a["account"]: a["opening_balance_kobo"] for a in ledger["accounts"]}
        assert chain_breaks(lines, opening) == []
        for b in balances:  # the running balance ends on the ledger balance
            posted = sorted((t for t in lines if t["account"] == b["account"]
                             and t["cleared_date"]), key=lambda t: (t["cleared_date"], t["_id"]))
            assert kobo(posted[-1]["balance"]) == kobo(b["ledger_balance"])
            days = b["periodic"]["ledger_balance"]
            assert days[-1]["amount"] == b["ledger_balance"]
            assert 31 <= len(days) <= 33  # `days` of history, by default 31
        # about `volume` lines a day, over its accounts
        assert 20 * 31 * 0.8 < sum(1 for t in lines if t["cleared_date"]) < 20 * 33 * 1.2
        # paging is stable: pages of 7 make the same list
        assert pull(api, record=record) == lines
        paged, page = [], 1
        while page:
            data = ok(api.post("transactions/get", json={"record": record, "page": page,
                                                         "limit": 7}))
            paged += data["transaction"]
            page = data["pagination"]["nextPage"]
        assert paged == lines
        day = lines[len(lines) // 2]["trans_date"][:10]
        window = pull(api, record=record, **{"from": day, "to": day})
        assert window == [t for t in lines if t["trans_date"][:10] == day]
        by_account = pull(api, account=ids[0])
        assert by_account == [t for t in lines if t["account"] == ids[0]]

        income = ok(api.post("income/get", json={"record": record}))["income"]
        salary = [t for t in lines if "income" in t["notes"]["topics"]]
        assert income["number_of_transactions"] == len(salary) > 0
        identity = ok(api.post("identity/get", json={"record": record}))["identity"]
        assert ok(api.post("identity/get", json={"customer": customer}))["identity"] == identity
        assert len(identity[0]["bvn"]) == 11
        auth = ok(api.post("auth/get", json={"record": record}))["auth"]
        assert [a["account_id"] for a in auth["accounts"]] == ids
        auths = ok(api.post("auth/getByCustomer", json={"customer": customer}))["auths"]
        assert [a["_id"] for a in auths] == [auth["_id"]]
        item = ok(api.post("item/get", json={"record": record}))["item"]
        assert item["verified"] and item["last_webhook"] is None
        token = f"access-sandbox-{record}"
        assert ok(api.post("record/get", json={"access_token": token}))["record"] == rec
        status = ok(api.get("callback", params={"record": record, "method": "TRANSACTIONS"}))
        assert status["callback"] is None  # callbacks: none by default
        # no webhook is set here: a trigger is refused, and raises nothing
        err(api.post("callback/trigger", json={"record": record}), "INVALID_FIELD")
        assert ok(api.get("callback", params={"record": record, "method": "AUTH"}))[
            "callback"] is None
        # records of one batch differ; no balance of theirs dips below zero
        other = pull(api, record=batch["records"][1])
        assert other and {t["_id"] for t in other}.isdisjoint(t["_id"] for t in lines)
        for r in batch["records"]:
            assert min(t["balance"] for t in pull(api, record=r) if t["cleared_date"]) >= 0


def test_ids_that_look_bulk_but_are_not_answer_as_unknown_ones(made):
    box, batch = made
    first, last = batch["first"], batch["last"]
    past = nth(first, 3 + 10_001)  # numbers run on across batches: this one is past them all
    with box.api() as api, box.api("production") as prod:
        unknown = err(api.post("record/get", json={"record": "0" * 24}), "INVALID_FIELD")
        for bad in (past, f"{first[:12]}{'0' * 12}",  # another sandbox's check
                    last.upper(), f"b1{first[2:]}"):  # not lower-case; a customer id
            body = err(api.post("record/get", json={"record": bad}), "INVALID_FIELD")
            assert body["error_message"] == unknown["error_message"]
        err(api.post("record/get", json={"access_token": f"access-sandbox-{past}"}),
            "INVALID_TOKEN")
        assert ok(api.post("balance/get", json={"account": f"c0{first[2:]}"}))["balance"]
        err(api.post("balance/get", json={"account": f"c2{first[2:]}"}),  # 2 accounts only
            "INVALID_ACCOUNT_ID")
        err(api.post("accounts/get", json={"customer": f"b1{past[2:]}"}), "INVALID_FIELD")
        err(prod.post("record/get", json={"record": first}), "INVALID_FIELD")  # sandbox only
        (plain,) = create(api, {})  # only a bulk record's id makes its access token
        err(api.post("record/get", json={"access_token": f"access-sandbox-{plain['record']}"}),
            "INVALID_TOKEN")


BAD = [
    ({}, "MISSING_FIELDS", "count"),
    ({"count": 1, "months": 2}, "UNKNOWN_FIELDS", "months"),
    ({"count": 0}, "INVALID_FIELD", "count"),
    ({"count": 1_000_001}, "INVALID_FIELD", "count"),
    ({"count": "5"}, "INVALID_FIELD", "count"),
    ({"count": True}, "INVALID_FIELD", "count"),
    ({"count": 1, "accounts": 4}, "INVALID_FIELD", "accounts"),
    ({"count": 1, "volume": 0}, "INVALID_FIELD", "volume"),
    ({"count": 1, "volume": 201}, "INVALID_FIELD", "volume"),
    ({"count": 1, "days": 30}, "INVALID_FIELD", "days"),
    ({"count": 1, "days": 367}, "INVALID_FIELD", "days"),
    ({"count": 1, "seed": -1}, "INVALID_FIELD", "seed"),
    ({"count": 1, "callbacks": "all"}, "INVALID_FIELD", "callbacks"),
    ({"count": 1, "rate": 10}, "INVALID_FIELD", "rate"),
    ({"count": 1, "callbacks": "paced", "rate": 0}, "INVALID_FIELD", "rate"),
    ({"count": 1, "callbacks": "paced", "rate": 5001}, "INVALID_FIELD", "rate"),
    ({"count": 1, "callbacks": "paced"}, "INVALID_FIELD", "webhook URL"),  # none set here
]


def test_bad_bodies_are_refused_and_create_nothing(tmp_path):
    with frozen(tmp_path) as b, b.api() as api, b.api("production") as prod:
        for body, code, names in BAD:
            assert names in err(api.post(BULK, json=body), code)["error_message"], body
        err(prod.post(BULK, json={"count": 1}), "SANDBOX_ONLY")
        assert ok(api.post(BULK, json={"count": 1}))["batch"] == 1  # none made before


def test_the_addition_limit_counts_bulk_records(tmp_path):
    box = start_sandbox(tmp_path / "limited", "--addition-limit", "5")
    try:
        with box.api() as api:
            create(api, {}, {})
            err(api.post(BULK, json={"count": 4}), "ADDITION_LIMIT", 429)
            made = ok(api.post(BULK, json={"count": 2}))
            assert made["batch"] == 1
            # a bulk record that is stored once it changes still counts once
            ok(api.post("sandbox/records/reset_login", json={"record": made["first"]}))
            create(api, {})
            err(api.post(BULK, json={"count": 1}), "ADDITION_LIMIT", 429)
            err(api.post("sandbox/customers/create", json={"customers": [{}]}),
                "ADDITION_LIMIT", 429)
    finally:
        box.server.stop()


def test_paced_callbacks_carry_what_ordinary_ones_do_and_survive_a_restart(hooked):
    box, hook = hooked
    with box.api() as api:
        (plain,) = create(api, {"accounts": 2})
        ordinary = {r.body["method"]: r.body for r in hook.wait_for(7, record=plain["record"])}
        made = ok(api.post(BULK, json={"count": 4, "callbacks": "paced", "rate": 5}))
        first, gone, *rest = made["records"]
        ok(api.post("record/remove", json={"record": gone}))  # before its turn
        hook.wait_for(3, record=first)
    restart(box)  # the cursor was kept: the rest follow, none is skipped
    for record in (first, *rest):
        got = [r.body for r in hook.wait_for(7, record=record)]
        assert sorted(b["method"] for b in got) == [
            "ACCOUNTS", "AUTH", "BALANCE", "BALANCE", "IDENTITY", "INCOME", "TRANSACTIONS"]
        for body in got:  # the members of an ordinary record's callback, nested ones too
            want = ordinary[body["method"]]
            assert set(body) == set(want), body["method"]
            for member in ("identity", "account", "balance"):
                assert set(body.get(member) or ()) == set(want.get(member) or ())
    with box.api() as api:
        rec = made["first"]
        seen = ok(api.get("callback", params={"record": rec, "method": "BALANCE"}))
        assert seen["status"]["process"]["completed"] and seen["balance"]
        newest = {b.body["accountId"]: b.body for b in hook.matching(record=rec,
                                                                      method="BALANCE")}
        for b in ok(api.post("balance/get", json={"record": rec}))["balance"]:
            assert newest[b["account"]]["balance"]["ledger_balance"] == b["ledger_balance"]
    # the removed record sent USER_DISCONNECT and nothing of a connection
    assert [r.body.get("event") for r in hook.matching(record=gone)] == ["USER_DISCONNECT"]


def test_without_callbacks_nothing_is_sent_until_triggered(hooked):
    box, hook = hooked
    with box.api() as api:
        made = ok(api.post(BULK, json={"count": 2}))
        # a changed bulk record is stored, and still sends no periodic callback
        ok(api.post("sandbox/records/fail", json={"record": made["last"],
                                                  "product": "auth", "times": 1}))
        (plain,) = create(api, {"accounts": 1})
        hook.wait_for(6, record=plain["record"])
        ok(api.post("sandbox/clock/advance", json={"seconds": 86400}))
        hook.wait_for(1, record=plain["record"], method="PERIODIC_TRANSACTIONS")
        # no periodic callback, nor any other, for a bulk record
        assert raised(box, made["first"]) == raised(box, made["last"]) == 0
        # a trigger raises a bulk record's connection callbacks, once
        ok(api.post("callback/trigger", json={"records": [made["first"], made["first"]]}))
        assert raised(box, made["first"]) == 7
        assert {r.body["method"] for r in hook.wait_for(7, record=made["first"])} == {
            "AUTH", "IDENTITY", "ACCOUNTS", "BALANCE", "TRANSACTIONS", "INCOME"}
        ok(api.post("callback/trigger", json={"record": made["first"]}))  # now: re-sent
        assert raised(box, made["first"]) == 14
        hook.wait_for(14, record=made["first"])
    assert raised(box, made["last"]) == 0


def test_remove_and_reset_login_act_on_one_bulk_record_for_good(hooked):
    box, hook = hooked
    with box.api() as api:
        made = ok(api.post(BULK, json={"count": 3, "accounts": 3}))
        gone, reauth, kept = made["records"]
        accounts = [a["_id"] for a in ok(api.post("accounts/get", json={"record": gone}))[
            "accounts"]]
        customer = ok(api.post("record/get", json={"record": gone}))["record"]["customer"]
        before = pull(api, record=kept)
        kept_rec = ok(api.post("record/get", json={"record": kept}))
        ok(api.post("record/remove", json={"record": gone}))
        event = hook.wait_for(1, event="USER_DISCONNECT")[0].body
        assert event["data"]["accounts"] == accounts
        assert event["data"]["customer"] == customer and event["record"] == gone
        ok(api.post("sandbox/records/reset_login", json={"record": reauth}))
        assert hook.wait_for(1, event="USER_REAUTH")[0].body["record"] == reauth
    restart(box)
    with box.api() as api:
        err(api.post("record/get", json={"record": gone}), "INVALID_FIELD")
        err(api.post("record/remove", json={"record": gone}), "INVALID_FIELD")
        err(api.post("accounts/get", json={"access_token": f"access-sandbox-{gone}"}),
            "INVALID_TOKEN")
        err(api.post("transactions/get", json={"account": accounts[2]}),
            "INVALID_ACCOUNT_ID")
        assert ok(api.post("accounts/get", json={"customer": customer}))["accounts"] == []
        err(api.post("transactions/get", json={"record": reauth}), "RECORD_LOGIN_REQUIRED")
        # the same data: the older half of the history cannot have moved meanwhile
        assert pull(api, record=kept)[:len(before) // 2] == before[:len(before) // 2]
        assert ok(api.post("record/get", json={"record": kept})) == kept_rec
