"""Lines settle as a real bank's do, over real HTTP: pending lines post under a new id,
reversed ones vanish, back-dated ones land behind an incremental pull's window, and the
running balance over posted lines holds to the kobo (docs/interface.md, "Settlement")."""

from __future__ import annotations

import datetime as dt

import pytest
from sandbox_pulls import advance, chain_breaks, create, frozen, kobo, ok, pull, signed, when

DAY = 86400
# three busy accounts: a two-day window then holds dozens of pending lines of each kind
BUSY = {"accounts": 3, "months": 1, "volume": 200, "seed": 424242}


def recent(api, record: str, now: dt.datetime, days: int = 5) -> list[dict]:
    since = (now - dt.timedelta(days=days)).date().isoformat()
    return pull(api, record=record, **{"from": since})


@pytest.mark.parametrize("at", ["now", "month_end"])
def test_a_pending_line_posts_under_a_new_id_and_a_reversed_one_vanishes(tmp_path, at):
    with frozen(tmp_path) as box, box.api() as api:
        (c,) = create(api, BUSY)
        now = advance(api, 0)
        if at == "month_end":  # a day before the month turns: next month's lines are pending
            turn = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            while turn - now < dt.timedelta(days=1, seconds=1):
                turn = (turn + dt.timedelta(days=32)).replace(day=1)
            now = advance(api, (turn - now).total_seconds() - DAY)
        before = recent(api, c["record"], now)
        pending = [t for t in before if t["cleared_date"] is None]
        assert pending
        for t in pending:  # a pending line: no clearing date, no running balance
            assert t["balance"] is None and when(t["trans_date"]) <= now
            assert when(t["trans_date"]) > now - dt.timedelta(days=2)
        later = advance(api, 2 * DAY + 1)
        after = recent(api, c["record"], later, days=7)
        ids_after = {t["_id"] for t in after}
        assert not ids_after & {t["_id"] for t in pending}, "every pending line is gone"
        posted_by_ref = {(t["account"], t["ref"]): t for t in after
                         if t["cleared_date"] is not None}
        precursors = reversed_ = 0
        for t in pending:
            got = posted_by_ref.get((t["account"], t["ref"]))
            if got is None:
                reversed_ += 1
                assert t["debit"] is not None and t["code"] == "POS", "reversals are card debits"
                continue
            precursors += 1
            assert got["_id"] != t["_id"]
            assert when(got["cleared_date"]) == when(t["trans_date"]) + dt.timedelta(days=2)
            assert got["trans_date"] == got["cleared_date"]
            assert (got["debit"], got["credit"], got["notes"]) == (
                t["debit"], t["credit"], t["notes"])
            assert got["balance"] is not None
        assert precursors and reversed_
        if at == "month_end":  # some posted in the new month, under their new ids
            keys = {(t["account"], t["ref"]) for t in pending}
            assert any(when(t["cleared_date"]) >= turn for key, t in posted_by_ref.items()
                       if key in keys)
        # a window misses the back-dated lines dated before it: the chain needs a full pull
        assert not chain_breaks(pull(api, record=c["record"]))


def test_a_back_dated_line_is_only_in_a_full_pull(tmp_path):
    with frozen(tmp_path) as box, box.api() as api:
        (c,) = create(api, BUSY)
        t0 = advance(api, 0)
        first = pull(api, record=c["record"])
        last_seen = max(when(t["trans_date"]) for t in first)
        advance(api, 6 * DAY)
        since = (last_seen - dt.timedelta(days=3)).date().isoformat()
        incremental = pull(api, record=c["record"], **{"from": since})
        full = pull(api, record=c["record"])
        start = dt.datetime.fromisoformat(since).replace(tzinfo=dt.UTC)
        assert [t for t in full if when(t["trans_date"]) >= start] == incremental
        missed = [t for t in full if t["cleared_date"] is not None
                  and when(t["cleared_date"]) > t0 and when(t["trans_date"]) < start]
        assert missed, "lines posted since the first pull but dated before the window"
        for t in missed:
            lag = when(t["cleared_date"]) - when(t["trans_date"])
            assert dt.timedelta(days=4) <= lag <= dt.timedelta(days=14)
            assert "income" not in t["notes"]["topics"]
        assert not chain_breaks(full)


def test_the_posted_chain_holds_exactly_across_records_and_seeds(tmp_path):
    specs = [{"accounts": 1 + i % 3, "months": 2, "volume": 15, "seed": 1000 + 37 * i,
              "account_type": "business" if i % 4 == 3 else "personal"} for i in range(10)]
    with frozen(tmp_path) as box, box.api() as api:
        made = create(api, *specs)
        advance(api, 3 * DAY + 17)
        checked = 0
        for c in made:
            lines = pull(api, record=c["record"])
            ledger = ok(api.post("sandbox/records/ledger", json={"record": c["record"]}))
            opening = {a["account"]: a["opening_balance_kobo"] for a in ledger["accounts"]}
            assert chain_breaks(lines, opening) == []
            assert ledger["lines"] == len(lines)
            balances = ok(api.post("balance/get", json={"record": c["record"]}))["balance"]
            for acct, bal in zip(ledger["accounts"], balances, strict=True):
                mine = [t for t in lines if t["account"] == acct["account"]]
                posted = sorted((t for t in mine if t["cleared_date"]),
                                key=lambda t: (t["cleared_date"], t["_id"]))
                assert [t["_id"] for t in posted] == sorted(t["_id"] for t in posted)
                assert acct["ledger_balance_kobo"] == kobo(posted[-1]["balance"])
                assert acct["ledger_balance_kobo"] == kobo(bal["ledger_balance"])
                assert acct["opening_balance_kobo"] + sum(map(signed, posted)) == \
                    acct["ledger_balance_kobo"]
                checked += len(posted)
        assert checked > 10_000


def test_the_ledger_is_what_a_full_pull_holds(tmp_path):
    import hashlib

    with frozen(tmp_path) as box, box.api() as api:
        (c,) = create(api, BUSY)
        now = advance(api, DAY // 2)
        lines = pull(api, record=c["record"])
        ledger = ok(api.post("sandbox/records/ledger", json={"record": c["record"]}))
    assert when(ledger["now"]) == now and ledger["record"] == c["record"]
    ids = sorted(t["_id"] for t in lines)
    assert ledger["ids_sha256"] == hashlib.sha256("\n".join(ids).encode()).hexdigest()
    assert ledger["lines"] == len(lines)
    for acct in ledger["accounts"]:
        mine = [t for t in lines if t["account"] == acct["account"]]
        pending = [t for t in mine if t["cleared_date"] is None]
        assert (acct["lines"], acct["pending"], acct["posted"]) == (
            len(mine), len(pending), len(mine) - len(pending))
        assert acct["credit_kobo"] == sum(kobo(t["credit"]) for t in mine)
        assert acct["debit_kobo"] == sum(kobo(t["debit"]) for t in mine)
        assert acct["net_kobo"] == acct["credit_kobo"] - acct["debit_kobo"]
        assert acct["pending_debit_kobo"] == sum(kobo(t["debit"]) for t in pending)
        assert acct["pending_credit_kobo"] == sum(kobo(t["credit"]) for t in pending)
        assert acct["ids_sha256"] == hashlib.sha256(
            "\n".join(sorted(t["_id"] for t in mine)).encode()).hexdigest()


def test_pending_lines_count_in_no_balance_and_no_income(tmp_path):
    with frozen(tmp_path) as box, box.api() as api:
        (c,) = create(api, BUSY)
        lines = pull(api, record=c["record"])
        income = ok(api.post("income/get", json={"record": c["record"]}))["income"]
        balances = ok(api.post("balance/get", json={"record": c["record"]}))["balance"]
        callback = ok(api.get("callback", params={"record": c["record"],
                                                  "method": "TRANSACTIONS"}))
    posted = [t for t in lines if t["cleared_date"] is not None]
    assert len(posted) < len(lines)
    assert callback["newTransactions"] == len(posted)
    assert not any("income" in t["notes"]["topics"] for t in lines if t["cleared_date"] is None)
    assert income["number_of_transactions"] == sum(
        "income" in t["notes"]["topics"] for t in posted)
    for bal in balances:
        last = max((t for t in posted if t["account"] == bal["account"]),
                   key=lambda t: (t["cleared_date"], t["_id"]))
        assert bal["ledger_balance"] == bal["available_balance"] == last["balance"]
        assert bal["periodic"]["ledger_balance"][-1]["amount"] == last["balance"]


def test_same_seed_and_clock_give_the_same_pages(tmp_path):
    with frozen(tmp_path, "a") as a, frozen(tmp_path, "b") as b, a.api() as x, b.api() as y:
        made = [create(api, BUSY, {"accounts": 2, "months": 2, "seed": 9}) for api in (x, y)]
        for m in made:
            for c in m:
                c.pop("public_token")  # random, as a real token is
        assert made[0] == made[1]
        # bring both clocks to the middle of the same second, two days on
        nows = [advance(api, 0) for api in (x, y)]
        target = max(nows).replace(microsecond=0) + dt.timedelta(days=2, seconds=1.5)
        for api, now in zip((x, y), nows, strict=True):
            advance(api, (target - now).total_seconds())
        for c in made[0]:
            pages = []
            for api in (x, y, x):
                got = []
                for page in range(1, 4):
                    resp = api.post("transactions/get", json={"record": c["record"],
                                                              "page": page, "limit": 100})
                    assert resp.status_code == 200, resp.text
                    got.append(resp.json()["data"])
                got.append(pull(api, record=c["record"]))
                got.append(ok(api.post("sandbox/records/ledger", json={"record": c["record"]})))
                pages.append(got)
            assert pages[0] == pages[1] == pages[2]
            if c is made[0][0]:  # the busy one has pending lines
                assert any(t["cleared_date"] is None for t in pages[0][-2])


def test_settlement_false_serves_only_posted_lines_dated_when_they_cleared(tmp_path):
    with frozen(tmp_path) as box, box.api() as api:
        (c,) = create(api, {**BUSY, "settlement": False})
        advance(api, 3 * DAY)
        lines = pull(api, record=c["record"])
        ledger = ok(api.post("sandbox/records/ledger", json={"record": c["record"]}))
        bad = api.post("sandbox/customers/create", json={"customers": [{"settlement": "no"}]})
    assert all(t["cleared_date"] == t["trans_date"] and t["balance"] is not None
               for t in lines)
    assert all(a["pending"] == 0 for a in ledger["accounts"])
    assert not chain_breaks(lines)
    assert bad.status_code == 400 and bad.json()["error_code"] == "INVALID_FIELD"
    assert "customers[0].settlement" in bad.json()["error_message"]
