"""Every product endpoint and record-level error of the real sandbox, through the client."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sandboxes import client_for, make_customers

from resources.client.errors import AuthError, InvalidInput, InvalidRequest, RecordError
from resources.client.sdk import PARSE_PAGES
from resources.wire import MONEY, TRANSACTION_SCHEMA


@pytest.fixture(scope="module")
def two(client):
    """Two accounts with three months of history (over 2,000 lines), and one small customer."""
    return make_customers(client, {"accounts": 2, "months": 3, "volume": 12},
                          {"accounts": 1, "months": 1})


def test_auth_by_customer_and_auth(client, two):
    first = two[0]
    auths = client.auth_by_customer(first["customer"])
    assert [a["record"] for a in auths] == [first["record"]]
    auth = client.auth(first["record"])
    assert auth["record"] == first["record"] and auth["validated"] is True
    assert [a["account_id"] for a in auth["accounts"]] == first["accounts"]


def test_auth_of_an_unverified_record_is_an_auth_error(client):
    (manual,) = make_customers(client, {"login_type": "account_number"}, ready=False)
    with pytest.raises(AuthError) as info:
        client.auth(manual["record"])
    err = info.value
    assert (err.error_code, err.http_code, err.attempts) == ("PRODUCT_NOT_READY", 400, 1)
    assert err.account_id == manual["accounts"][0]


def test_balance_by_record_and_by_account(client, two):
    first = two[0]
    by_record = client.balance(first["record"])
    assert [b["account"] for b in by_record] == first["accounts"]
    (one,) = client.balance(account=first["accounts"][1])
    assert one == by_record[1]
    assert isinstance(one["available_balance"], float)


def test_transactions_as_arrow(client, two):
    first = two[0]
    table = client.transactions(first["record"])
    assert table.schema == TRANSACTION_SCHEMA
    total = next(client.pages("transactions/get", {"record": first["record"]}, "transaction"))
    assert table.num_rows > 100  # more than one page
    assert pc.count_distinct(table["transaction_id"]).as_py() == table.num_rows
    assert set(table["account_id"].to_pylist()) == set(first["accounts"])
    debit, credit = table["debit"], table["credit"]
    assert pc.all(pc.xor(pc.is_null(debit), pc.is_null(credit))).as_py()  # exactly one set
    zero = pa.scalar(0, MONEY)  # exact: decimal naira, no tolerance
    assert pc.all(pc.equal(table["amount"], pc.subtract(pc.fill_null(credit, zero),
                                                         pc.fill_null(debit, zero)))).as_py()
    assert table["narration"].null_count == 0 and table["trans_date"].null_count == 0
    dates = table["trans_date"].to_numpy()
    assert (dates[1:] >= dates[:-1]).all()  # the service's order: by date
    assert [r["_id"] for r in total] == table["transaction_id"].to_pylist()[:len(total)]


def test_the_table_and_the_page_batches_hold_the_same_lines(client, two):
    record = two[0]["record"]
    table = client.transactions(record)
    assert table.num_rows > 100 * PARSE_PAGES  # so the pages were read in several groups
    streamed = pa.Table.from_batches(list(client.transaction_batches(record)))
    assert table.equals(streamed)


def test_the_running_balance_agrees_with_the_balance_endpoint(client, two):
    account = two[0]["accounts"][0]
    table = client.transactions(account=account)
    (balance,) = client.balance(account=account)
    posted = table.filter(pc.is_valid(table["balance"])).sort_by(
        [("cleared_date", "ascending"), ("transaction_id", "ascending")])  # posting order
    assert posted["balance"][-1].as_py() == Decimal(repr(balance["ledger_balance"]))


def test_transactions_from_to_and_batches_per_page(shared_sandbox, client, two):
    record = two[0]["record"]
    whole = client.transactions(record)
    last = whole["trans_date"][-1].as_py().date()
    start, end = last.replace(day=1), last
    window = client.transactions(record, from_date=start, to_date=end.isoformat())
    lo = pa.scalar(dt.datetime.combine(start, dt.time(), dt.UTC), pa.timestamp("ms", "UTC"))
    expected = whole.filter(pc.greater_equal(whole["trans_date"], lo))
    assert 0 < window.num_rows == expected.num_rows < whole.num_rows
    assert window["transaction_id"].to_pylist() == expected["transaction_id"].to_pylist()
    with client_for(shared_sandbox, page_size=50) as small:
        sizes = [b.num_rows for b in small.transaction_batches(record)]
    assert sum(sizes) == whole.num_rows and len(sizes) == -(-whole.num_rows // 50)
    assert set(sizes[:-1]) == {50}


def test_income_and_identity(client, two):
    first = two[0]
    income = client.income(first["record"])
    assert income["record"] == first["record"] and "summary" in income
    assert client.income(customer=first["customer"])["_id"] == income["_id"]
    (identity,) = client.identity(first["record"])
    assert re.fullmatch(r"\d{11}", identity["bvn"])
    assert client.identity(customer=first["customer"]) == [identity]


def test_record_and_item(client, two):
    first = two[0]
    record = client.record(first["record"])
    assert record["_id"] == first["record"] and record["verified"] is True
    item = client.item(first["record"])
    assert set(item["products_enabled"]) <= set(item["products_supported"])


def test_callback_status(client, two):
    status = client.callback_status(two[0]["record"], "TRANSACTIONS")
    assert status["record"] == two[0]["record"]
    assert status["status"]["process"]["completed"] is True
    with pytest.raises(InvalidRequest) as info:
        client.callback_status(two[0]["record"], "NOT_A_METHOD")
    assert info.value.error_code == "INVALID_FIELD" and "method" in str(info.value)


def test_trigger_callbacks_splits_past_100_records(client, receiver):
    client.set_webhook(receiver.callback_url, token=receiver.token)
    made = make_customers(client, *[{"months": 1, "volume": 1, "products": ["accounts"]}] * 101,
                          ready=False)
    said = client.trigger_callbacks([c["record"] for c in made])
    assert said == ["Webhook trigger initiated"] * 2


def test_exchange_token_works_once_and_remove_kills_the_token(client):
    (one,) = make_customers(client, {"months": 1})
    exchanged = client.exchange_token(one["public_token"])
    assert exchanged["record"] == one["record"]
    token = exchanged["access_token"]
    assert token.startswith("access-sandbox-")
    assert client.item(access_token=token)["record"] == one["record"]
    with pytest.raises(InvalidInput) as spent:
        client.exchange_token(one["public_token"])
    assert (spent.value.error_code, spent.value.attempts) == ("INVALID_PUBLIC_TOKEN", 1)

    assert client.remove_record(one["record"]) == {}
    with pytest.raises(InvalidInput) as dead:
        client.item(access_token=token)
    assert dead.value.error_code == "INVALID_TOKEN"


def test_a_record_whose_login_was_reset_is_a_record_error(client):
    (one,) = make_customers(client, {"months": 1})
    client.post("sandbox/records/reset_login", {"record": one["record"]})
    with pytest.raises(RecordError) as info:
        client.accounts(one["record"])
    assert (info.value.error_code, info.value.attempts) == ("RECORD_LOGIN_REQUIRED", 1)


def test_a_failed_connection_answers_its_record_error(client):
    (one,) = make_customers(client, {"months": 1, "password": "error_INVALID_CREDENTIALS"})
    with pytest.raises(RecordError) as info:
        client.transactions(one["record"])
    assert info.value.error_code == "INVALID_CREDENTIALS"
