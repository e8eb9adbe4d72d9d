"""datagen's settlement model, called directly: shares, windows, month independence, rows."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from sandbox import datagen, lines

MONTH = 2026 * 12 + 2  # March 2026
DAY = 86400
CTX = {"account": "a", "record": "r", "customer": "c", "bank": "b", "env": "production-sandbox"}


def spec(seed: int = 1, k: int = 0, **kw) -> datagen.AccountSpec:
    return datagen.AccountSpec(**{
        "seed": seed, "account_id": datagen.object_id(seed, "test", k), "bank_short": "GTB",
        "business": k % 3 == 2, "income": True, "primary": k == 0, "volume": 20,
        "first_month": MONTH - 6, "created_month": MONTH, **kw})


def clear() -> None:
    for f in (datagen.history, datagen._month, datagen._settle, datagen._opening,
              datagen._profile):
        f.cache_clear()


@pytest.fixture(scope="module")
def many() -> list[datagen.History]:
    # with `lead`, as in the last two days of a month: next month's precursors too
    return [datagen.history(spec(seed, k), MONTH, seed % 2 == 1)
            for seed in range(4) for k in range(3)]


def test_shares_of_back_dated_pending_and_reversed_lines(many):
    base = sum(len(h) for h in many)
    back = sum(int((h.trans != h.ts).sum()) for h in many)
    precursors = sum(int((h.pending.order % 2 == 1).sum()) for h in many)
    reversals = sum(int((h.pending.order % 2 == 0).sum()) for h in many)
    assert base > 40_000
    assert 0.004 < back / base < 0.006
    assert 0.017 < precursors / base < 0.023
    assert 0.008 < reversals / base < 0.012


def test_windows_and_value_dates(many):
    for h in many:
        lag = h.ts - h.trans
        back = lag > 0
        assert (lag >= 0).all() and ((lag[back] >= 4 * DAY) & (lag[back] <= 14 * DAY)).all()
        assert not (back & (h.stream >= 0)).any(), "income lines are never back-dated"
        p = h.pending
        assert ((p.until - p.start) == 2 * DAY).all()
        posted_at = set(h.ts.tolist())
        for start, until, order in zip(p.start.tolist(), p.until.tolist(), p.order.tolist(),
                                       strict=True):
            if order % 2:  # a precursor: gone when its line posts, 2 days after it appeared
                seq = order // 2
                i = int(np.searchsorted(h.seq, seq))
                if i < len(h) and h.seq[i] == seq:
                    assert h.ts[i] == until and h.trans[i] == h.ts[i] and h.stream[i] < 0
                else:  # next month's line, already pending at the end of this one
                    assert until > datagen.month_start(MONTH + 1) > start
                    assert until not in posted_at
        assert (p.signed[p.order % 2 == 0] < 0).all(), "reversals are debits"
        assert len(set(p.ids)) == len(p) and all(len(i) == 24 for i in p.ids)
        assert not set(p.ids) & set(h.ids(len(h)))


def test_next_months_precursors_are_the_ones_that_month_has():
    s = spec(11, 0)
    plain, lead = datagen.history(s, MONTH), datagen.history(s, MONTH, True)
    after = datagen.history(s, MONTH + 1)
    assert (plain.ts == lead.ts).all() and (plain.balance == lead.balance).all()
    assert set(plain.pending.ids) < set(lead.pending.ids) <= set(after.pending.ids)
    edge = datagen.month_start(MONTH + 1)
    early = {i for i, st in zip(after.pending.ids, after.pending.start.tolist(), strict=True)
             if edge - 2 * DAY <= st < edge}
    assert early and early <= set(lead.pending.ids)
    assert not datagen.lead(MONTH, edge - 2 * DAY - 1) and datagen.lead(MONTH, edge - 2 * DAY)


def test_a_month_depends_only_on_the_seed_account_and_month():
    s = spec(9, 1)
    short, longer = datagen.history(s, MONTH - 1), datagen.history(s, MONTH)
    n = len(short)
    assert (longer.ts[:n] == short.ts).all() and (longer.trans[:n] == short.trans).all()
    assert (longer.balance[:n] == short.balance).all()
    # the pending lines known a month earlier are the same lines, same ids, same windows
    old = dict(zip(short.pending.ids, short.pending.start.tolist(), strict=True))
    new = dict(zip(longer.pending.ids, longer.pending.start.tolist(), strict=True))
    assert old.items() <= new.items()
    rows_short = datagen.rows(short, CTX)
    rows_long = datagen.rows(longer, CTX)
    assert rows_long[:n] == rows_short[:n]
    clear()
    assert datagen.rows(datagen.history(s, MONTH), CTX) == rows_long


def test_the_served_chain_and_ids_hold_exactly(many):
    for h in many:
        rows = [orjson.loads(r) for r in datagen.rows(h, CTX)]
        posted, pending = rows[:len(h)], rows[len(h):]
        assert [t["_id"] for t in posted] == sorted(t["_id"] for t in posted)
        prev = h.opening
        for t in posted:
            amount = round((t["credit"] or 0) * 100) - round((t["debit"] or 0) * 100)
            assert prev + amount == round(t["balance"] * 100)
            prev = round(t["balance"] * 100)
        assert all(t["cleared_date"] is None and t["balance"] is None for t in pending)
        assert all(t["created_at"] == t["trans_date"] for t in pending)


def test_a_view_sorts_by_value_date_and_shows_each_line_in_its_window():
    hs = [datagen.history(spec(3, k), MONTH) for k in range(3)]
    parts = [(h.spec.account_id, h, datagen.rows(h, CTX)) for h in hs]
    view = lines.View.build(parts)
    assert (np.diff(view.tkey) >= 0).all()
    for now in (datagen.month_start(MONTH) + 9 * DAY + 3600, datagen.month_start(MONTH + 1) - 1):
        pos, tkey = view.visible(now)
        assert (np.diff(tkey) >= 0).all()
        want = sum(h.visible(now) + int(h.pending.visible(now).sum()) for h in hs)
        assert len(pos) == want
        served = [orjson.loads(r) for r in view.serve(pos)]
        ids = {t["_id"] for t in served}
        for h in hs:
            doc, account_ids = lines.ledger(h.spec.account_id, h, now)
            assert set(account_ids) <= ids and doc["lines"] == len(account_ids)


def test_settlement_off_leaves_the_history_as_it_was():
    h = datagen.history(spec(5, 0, settlement=False), MONTH)
    on = datagen.history(spec(5, 0), MONTH)
    assert len(h.pending) == 0 and (h.trans == h.ts).all()
    assert (h.ts == on.ts).all() and (h.balance == on.balance).all()
