"""Validation (assets/schemas.py, from resources/tables.py): a bad row is refused, named by its
number and the check it fails; a good one passes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from assets import schemas
from resources.tables import schema

T = dt.datetime(2024, 1, 2, tzinfo=dt.UTC)
GOOD = {
    "accounts": {"account_id": "a1", "nuban": "0123456789", "currency": "NGN",
                 "customer_id": "c1", "created_at": T},
    "transactions": {"transaction_id": "t1", "account_id": "a1", "trans_date": T,
                     "credit": Decimal("5.00"), "amount": Decimal("5.00"), "currency": "NGN"},
    "balance_history": {"account_id": "a1", "fetched_at": T, "source": "manual"},
    "income": {"customer_id": "c1", "confidence": 50.0, "number_of_transactions": 3,
               "number_of_streams": 1},
    "income_streams": {"stream_id": "s1", "monthly_amount": Decimal("1.00"),
                       "number_of_transactions": 1, "first_date": dt.date(2024, 1, 1),
                       "last_date": dt.date(2024, 2, 1)},
    "identity": {"customer_id": "c1", "bvn": "12345678901", "dob": dt.date(1990, 1, 1)},
    "payments": {"payment_id": "p1", "callback_type": "PAYMENT", "status": "success",
                 "amount": Decimal("1.00")},
}
MODELS = {"accounts": schemas.Accounts, "transactions": schemas.Transactions,
          "balance_history": schemas.BalanceHistory, "income": schemas.Income,
          "income_streams": schemas.IncomeStreams, "identity": schemas.Identity,
          "payments": schemas.Payments}


def check(table: str, bad: dict | None, twice: bool = False) -> None:
    rows = [GOOD[table], GOOD[table] if twice else {**GOOD[table], **(bad or {})}]
    keys = {"account_id", "transaction_id", "customer_id", "stream_id", "payment_id"}
    if not twice:  # the first row's key is its own
        rows[0] = {k: v + "x" if k in keys else v for k, v in rows[0].items()}
        rows[0] |= {"fetched_at": T + dt.timedelta(seconds=1)} if "fetched_at" in rows[0] else {}
    sent = schema(table, sent=True)
    schemas.validate(MODELS[table], pa.Table.from_pylist(rows, schema=sent), table)


@pytest.mark.parametrize("table", sorted(GOOD))
def test_good_rows_pass(table):
    check(table, None)


@pytest.mark.parametrize("table, bad, says", [
    ("accounts", {"nuban": "123"}, r"nuban: str_matches\('\^\\d\{10\}\$'\)"),
    ("accounts", {"currency": "XXX"}, "currency: isin"),
    ("accounts", {"customer_id": None}, "customer_id: not_nullable"),
    ("accounts", {"created_at": dt.datetime(1850, 1, 1, tzinfo=dt.UTC)},
     r"created_at: greater_than_or_equal_to\(1900-01-01"),
    ("transactions", {"debit": Decimal("1.00")}, "exactly one of debit and credit"),
    ("transactions", {"amount": Decimal("4.00")}, "amount must be credit minus debit"),
    ("transactions", {"trans_date": None}, "trans_date: not_nullable"),
    ("balance_history", {"source": "x"}, "source: isin"),
    ("income", {"confidence": 101.0}, r"confidence: less_than_or_equal_to\(100\)"),
    ("income_streams", {"first_date": dt.date(2024, 3, 1)}, "first date must not follow"),
    ("identity", {"bvn": "123"}, "bvn: str_matches"),
    ("identity", {"dob": dt.date(1850, 1, 1)}, "dob: greater_than_or_equal_to"),
    ("payments", {"fee": Decimal("-1.00")}, r"fee: greater_than_or_equal_to\(0\)"),
])
def test_a_bad_row_is_named_with_the_check_it_fails(table, bad, says):
    with pytest.raises(schemas.ValidationFailed, match=f"^{table}: 1 row.*{says}.*; rows 1; "):
        check(table, bad)


@pytest.mark.parametrize("table, says", [("transactions", "transaction_id: field_uniqueness"),
                                         ("balance_history", "multiple_fields_uniqueness")])
def test_a_key_twice_is_refused(table, says):
    with pytest.raises(schemas.ValidationFailed, match=f"{says}.*rows 0, 1;"):
        check(table, None, twice=True)
