"""Pages of transactions to Arrow: the schema, nulls, signs and clear refusals."""

from __future__ import annotations

import datetime as dt

import pytest

from resources.wire import TRANSACTION_SCHEMA, transactions_batch


def line(**over) -> dict:
    base = {"_id": "a" * 24, "id": "a" * 24, "account": "b" * 24, "record": "c" * 24,
            "customer": "d" * 24, "bank": "e" * 24, "trans_date": "2026-03-01T10:20:30.456Z",
            "cleared_date": "2026-03-02T00:00:00.000Z", "debit": 1500.25, "credit": None,
            "balance": 98500.5, "currency": "NGN",
            "notes": {"desc": "POS PURCHASE SHOPRITE", "topics": ["pos", "groceries"]},
            "ref": "ACC00000000000001", "branch": "ACC IKEJA", "code": "POS",
            "benefactor": None, "env": "production-sandbox",
            "created_at": "2026-03-01T10:20:30.456Z", "last_updated": "2026-03-01T10:20:30.456Z"}
    return {**base, **over}


def test_a_page_becomes_a_batch_of_the_lake_schema():
    batch = transactions_batch([line(), line(_id="f" * 24, debit=None, credit=20000)])
    assert batch.schema == TRANSACTION_SCHEMA
    rows = batch.to_pylist()
    assert [r["amount"] for r in rows] == [-1500.25, 20000.0]  # signed: credit - debit
    assert [r["debit"] for r in rows] == [1500.25, None]  # nulls stay null
    assert rows[0]["narration"] == "POS PURCHASE SHOPRITE"
    assert rows[0]["topics"] == ["pos", "groceries"]
    assert rows[0]["trans_date"] == dt.datetime(2026, 3, 1, 10, 20, 30, 456000, tzinfo=dt.UTC)
    assert rows[0]["transaction_id"] == "a" * 24 and rows[0]["bank_id"] == "e" * 24


def test_an_empty_page_is_an_empty_batch():
    batch = transactions_batch([])
    assert batch.num_rows == 0 and batch.schema == TRANSACTION_SCHEMA


def test_missing_members_are_null_and_unknown_ones_ignored():
    row = line(new_member={"x": 1})
    del row["cleared_date"], row["branch"], row["notes"]
    (got,) = transactions_batch([row]).to_pylist()
    assert got["cleared_date"] is None and got["branch"] is None
    assert got["narration"] is None and got["topics"] is None


@pytest.mark.parametrize(("bad", "says"), [
    ([line(debit="12.50")], "shape"),
    ([line(trans_date="01/03/2026")], "ISO 8601"),
    ([line(_id=None)], "_id"),
    ([None], "null"),
    ([line(notes="a string")], "shape"),
])
def test_a_line_of_the_wrong_shape_is_refused_clearly(bad, says):
    with pytest.raises(ValueError, match=says):
        transactions_batch(bad)
