"""The client against the real sandbox over HTTP: every endpoint and error family it serves."""

from __future__ import annotations

import logging
import re

import pytest
from sandboxes import client_for, make_customers

from resources.client.errors import InvalidInput, InvalidRequest, Unauthorized

REQUEST_ID = re.compile(r"^[0-9a-f]{24}$")


@pytest.fixture(scope="module")
def customers(client):
    """Two customers: one with five accounts (paging), one with one."""
    return make_customers(client, {"accounts": 5, "months": 1}, {"accounts": 1, "months": 1},
                          ready=False)


def test_banks_in_both_environments(shared_sandbox, client):
    banks = client.banks()
    assert banks and all({"_id", "name", "slug", "status"} <= set(b) for b in banks)
    with client_for(shared_sandbox, "production") as production:
        assert [b["_id"] for b in production.banks()] == [b["_id"] for b in banks]


def test_accounts_of_a_record_and_of_a_customer(client, customers):
    five = customers[0]
    by_record = client.accounts(five["record"])
    assert [a["_id"] for a in by_record] == five["accounts"]
    assert all(re.fullmatch(r"\d{10}", a["nuban"]) for a in by_record)
    by_customer = client.accounts(customer=five["customer"])
    assert [a["_id"] for a in by_customer] == five["accounts"]


def test_pages_follow_next_page_lazily(shared_sandbox, customers):
    five = customers[0]
    with client_for(shared_sandbox, page_size=2) as small:
        pages = small.pages("accounts/get", {"record": five["record"]}, "accounts")
        sizes = [len(p) for p in pages]
    assert sizes == [2, 2, 1]


def test_set_webhook(client):
    saved = client.set_webhook("http://127.0.0.1:9/callbacks/", token="t0ken")
    assert saved["url"] == "http://127.0.0.1:9/callbacks/"


def test_a_wrong_key_is_unauthorized(shared_sandbox):
    with client_for(shared_sandbox, secret_key="sk_test_" + "0" * 24) as wrong, \
            pytest.raises(Unauthorized) as info:
        wrong.banks()
    err = info.value
    assert (err.http_code, err.error_code, err.error_type) == (401, "INVALID_API_KEYS",
                                                                 "INVALID_INPUT")
    assert REQUEST_ID.fullmatch(err.request_id) and err.request_id in str(err)


def test_the_other_environments_key_is_invalid_input(shared_sandbox):
    with client_for(shared_sandbox, secret_key=shared_sandbox.production_key) as crossed, \
            pytest.raises(InvalidInput) as info:
        crossed.banks()
    assert (info.value.http_code, info.value.error_code) == (400, "UNAUTHORIZED_ENVIRONMENT")


def test_an_invalid_field_fails_at_once_naming_the_field(client, caplog):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    with pytest.raises(InvalidRequest) as info:
        client.accounts("0" * 24)
    err = info.value
    assert (err.http_code, err.error_code, err.attempts) == (400, "INVALID_FIELD", 1)
    assert "record" in str(err) and REQUEST_ID.fullmatch(err.request_id)
    assert not caplog.records  # no retry was even considered


@pytest.mark.parametrize(("body", "code"), [
    ({"record": "0" * 24, "colour": "blue"}, "UNKNOWN_FIELDS"),
    ({"page": 1}, "MISSING_FIELDS"),
    ({"record": "0" * 24, "limit": 101}, "INVALID_FIELD"),
])
def test_invalid_requests(client, body, code):
    with pytest.raises(InvalidRequest) as info:
        client.post("accounts/get", body)
    assert info.value.error_code == code and info.value.http_code == 400


def test_an_unknown_endpoint_is_not_found(client):
    with pytest.raises(InvalidRequest) as info:
        client.post("no/such/endpoint", {})
    assert (info.value.http_code, info.value.error_code) == (404, "NOT_FOUND")


def test_sandbox_controls_are_sandbox_only(shared_sandbox):
    with client_for(shared_sandbox, "production") as production, \
            pytest.raises(InvalidRequest) as info:
        production.post("sandbox/customers/create", {"customers": [{}]})
    assert info.value.error_code == "SANDBOX_ONLY"


def test_one_keep_alive_connection_serves_many_calls(shared_sandbox, customers):
    with client_for(shared_sandbox) as c:
        for _ in range(5):
            c.accounts(customers[1]["record"])
        pool = c._client()._transport._pool  # httpx's pool: how many sockets were opened
        assert len(pool.connections) == 1
