"""What the client puts on the wire and makes of each answer, endpoint by endpoint, over a real
socket with scripted answers (faults.py): the request each call sends, what it returns, the
words of every refusal and error, and exactly how long it waits between tries."""

from __future__ import annotations

import datetime as dt
import email.utils
import logging
import random

import dagster as dg
import httpx
import orjson
import pytest
from faults import KEY, answer, error, page, reset_mid_body, success

from resources.client import Client
from resources.client.errors import (
    ApiError,
    MalformedResponse,
    RateLimitExceeded,
    ServiceError,
    TransportError,
)
from resources.client.resource import ConnectionClient

RECORD = "a" * 24


def sent(faulty) -> list[tuple[str, str, dict | None]]:
    """Each request: its method, its path (with query), its JSON body (None without one)."""
    return [(s.method, s.path, s.json() if s.body else None) for s in faulty.seen]


def waits(caplog) -> list[float]:
    """The waits the client logged before each retry, exactly (not as printed)."""
    return [r.args[2] for r in caplog.records if r.name == "ledgerlake.client"]


def one_page(key: str, items: list, **extra) -> object:
    return success({key: items, "pagination": {"page": 1, "hasNextPage": False,
                                               "nextPage": None, **extra}})


# -- settings ---------------------------------------------------------------------------------

@pytest.mark.parametrize("setting, message", [
    ({"environment": "staging"},
     "environment must be one of ['production', 'sandbox'], not 'staging'"),
    ({"base_url": "ftp://127.0.0.1:1"},
     "base_url must be http(s)://host[:port], not 'ftp://127.0.0.1:1'"),
    ({"base_url": "http://127.0.0.1:1/v2/"},
     "base_url must be http(s)://host[:port], not 'http://127.0.0.1:1/v2/'"),
    ({"secret_key": ""}, "secret_key must be 1 to 512 visible ASCII characters (got 0 characters)"),
    ({"secret_key": "sk_" + "x" * 510},
     "secret_key must be 1 to 512 visible ASCII characters (got 513 characters)"),
    ({"page_size": 0}, "page_size must be 1 to 100 and max_attempts at least 1"),
    ({"page_size": 101}, "page_size must be 1 to 100 and max_attempts at least 1"),
    ({"max_attempts": 0}, "page_size must be 1 to 100 and max_attempts at least 1"),
])
def test_a_bad_setting_is_named_before_anything_is_sent(faulty, setting, message):
    with pytest.raises(ValueError) as info:
        faulty.client(**setting)
    assert str(info.value) == message
    assert faulty.seen == []


@pytest.mark.parametrize("setting", [{"page_size": 1}, {"page_size": 100}, {"max_attempts": 1},
                                     {"secret_key": "k"}, {"secret_key": "k" * 512}])
def test_settings_at_their_bounds_are_taken(faulty, setting):
    faulty.script = [success({"banks": []})]
    with faulty.client(**setting) as client:
        assert client.banks() == []


def test_the_http_client_is_built_from_the_settings():
    client = Client(base_url="http://BOX/", secret_key=KEY, environment="production",
                              connect_timeout_s=1.5, read_timeout_s=7.0)
    http = client._client()
    assert str(http.base_url) == "http://box/v2/"
    assert http.timeout == httpx.Timeout(7.0, connect=1.5)
    assert (http.headers["authorization"], http.headers["content-type"],
            http.headers["accept"]) == (f"Bearer {KEY}", "application/json", "application/json")
    pool = http._transport._pool  # httpx's: kept-alive sockets are capped and expire
    assert (pool._max_keepalive_connections, pool._keepalive_expiry) == (8, 30.0)
    client.close()


def test_a_closed_client_opens_again_and_a_run_closes_it(faulty):
    faulty.script = [success({"banks": []}), success({"banks": [{"_id": "b"}]})]
    client = faulty.client()
    first = client._client()
    assert client._client() is first  # one keep-alive client, not one a call
    client.banks()
    client.close()
    assert first.is_closed
    client.close()  # twice is harmless
    assert client.banks() == [{"_id": "b"}]
    assert client._client() is not first
    client.close()


def test_each_request_carries_the_key_the_types_and_the_services_cookies(faulty):
    faulty.script = [answer(200, orjson.dumps({"status": "success", "data": {"banks": []}}),
                            {"Content-Type": "application/json", "Set-Cookie": "lb=node-2"}),
                     success({"banks": []})]
    with faulty.client() as c:
        c.banks()
        c.banks()
    first, second = (s.headers for s in faulty.seen)
    for h in (first, second):
        assert (h["authorization"], h["content-type"], h["accept"]) == (
            f"Bearer {KEY}", "application/json", "application/json")
    assert "cookie" not in first and second["cookie"] == "lb=node-2"


# -- each endpoint's request and answer --------------------------------------------------------

def test_each_endpoint_sends_its_path_and_body_and_returns_its_member(faulty):
    faulty.script = [
        one_page("auths", [{"record": RECORD}]),
        success({"auth": {"record": RECORD}}),
        one_page("accounts", [{"_id": "acc"}]),
        one_page("accounts", [{"_id": "acc2"}]),
        one_page("balance", [{"available": 1}]),
        one_page("balance", [{"available": 2}]),
        success({"income": {"streams": []}}),
        success({"income": {"streams": [1]}}),
        success({"identity": [{"bvn": "1"}]}),
        success({"identity": [{"bvn": "2"}]}),
        success({"record": {"_id": RECORD}}),
        success({"removed": True}),
        success({"item": {"id": 1}}),
        success({"item": {"id": 2}}),
        success({"status": "ready"}),
        success({"access_token": "t", "record": RECORD}),
        success({"url": "http://127.0.0.1:9/cb"}),
        success({"url": "http://127.0.0.1:9/cb", "token": "tok"}),
        success({"banks": [{"_id": "b"}]}),
    ]
    with faulty.client() as c:
        got = [c.auth_by_customer("cust"), c.auth(RECORD), c.accounts(RECORD),
               c.accounts(customer="cust"), c.balance(RECORD), c.balance(account="acc"),
               c.income(RECORD), c.income(customer="cust"), c.identity(RECORD),
               c.identity(customer="cust"), c.record(RECORD), c.remove_record(RECORD),
               c.item(RECORD), c.item(access_token="tok"), c.callback_status(RECORD, "INCOME"),
               c.exchange_token("pub-1"), c.set_webhook("http://127.0.0.1:9/cb"),
               c.set_webhook("http://127.0.0.1:9/cb", token="tok"), c.banks()]
    assert got == [[{"record": RECORD}], {"record": RECORD}, [{"_id": "acc"}], [{"_id": "acc2"}],
                   [{"available": 1}], [{"available": 2}], {"streams": []}, {"streams": [1]},
                   [{"bvn": "1"}], [{"bvn": "2"}], {"_id": RECORD}, {"removed": True},
                   {"id": 1}, {"id": 2}, {"status": "ready"},
                   {"access_token": "t", "record": RECORD}, {"url": "http://127.0.0.1:9/cb"},
                   {"url": "http://127.0.0.1:9/cb", "token": "tok"}, [{"_id": "b"}]]
    paged = {"page": 1, "limit": 100}
    assert sent(faulty) == [
        ("POST", "/sandbox/v2/auth/getByCustomer", {"customer": "cust", **paged}),
        ("POST", "/sandbox/v2/auth/get", {"record": RECORD}),
        ("POST", "/sandbox/v2/accounts/get", {"record": RECORD, **paged}),
        ("POST", "/sandbox/v2/accounts/get", {"customer": "cust", **paged}),
        ("POST", "/sandbox/v2/balance/get", {"record": RECORD, **paged}),
        ("POST", "/sandbox/v2/balance/get", {"account": "acc", **paged}),
        ("POST", "/sandbox/v2/income/get", {"record": RECORD}),
        ("POST", "/sandbox/v2/income/get", {"customer": "cust"}),
        ("POST", "/sandbox/v2/identity/get", {"record": RECORD}),
        ("POST", "/sandbox/v2/identity/get", {"customer": "cust"}),
        ("POST", "/sandbox/v2/record/get", {"record": RECORD}),
        ("POST", "/sandbox/v2/record/remove", {"record": RECORD}),
        ("POST", "/sandbox/v2/item/get", {"record": RECORD}),
        ("POST", "/sandbox/v2/item/get", {"access_token": "tok"}),
        ("GET", f"/sandbox/v2/callback?record={RECORD}&method=INCOME", None),
        ("POST", "/sandbox/v2/token/exchange", {"public_token": "pub-1"}),
        ("POST", "/sandbox/v2/settings/webhook", {"url": "http://127.0.0.1:9/cb"}),
        ("POST", "/sandbox/v2/settings/webhook", {"url": "http://127.0.0.1:9/cb",
                                                   "token": "tok"}),
        ("GET", "/sandbox/v2/banks/list", None),
    ]


@pytest.mark.parametrize("call, message", [
    (lambda c: c.auth("../x"), "record must match ^[A-Za-z0-9_-]{1,64}$, not '../x'"),
    (lambda c: c.record("a b"), "record must match ^[A-Za-z0-9_-]{1,64}$, not 'a b'"),
    (lambda c: c.remove_record(None), "record must match ^[A-Za-z0-9_-]{1,64}$, not None"),
    (lambda c: c.auth_by_customer("x" * 65),
     f"customer must match ^[A-Za-z0-9_-]{{1,64}}$, not '{'x' * 65}'"),
    (lambda c: c.exchange_token("pub token"),
     "public_token must match ^[A-Za-z0-9_-]{1,64}$, not 'pub token'"),
    (lambda c: c.callback_status("../x", "INCOME"),
     "record must match ^[A-Za-z0-9_-]{1,64}$, not '../x'"),
    (lambda c: c.callback_status(RECORD, "income"),
     "method must be an upper-case product method such as TRANSACTIONS, not 'income'"),
    (lambda c: c.callback_status(RECORD, 5),
     "method must be an upper-case product method such as TRANSACTIONS, not 5"),
    (lambda c: c.income(RECORD, customer="cust"), "give exactly one of record, customer"),
    (lambda c: c.identity(), "give exactly one of record, customer"),
    (lambda c: c.item(record=RECORD, access_token="t"), "give exactly one of record, access_token"),
    (lambda c: c.balance(account="../x"), "account must match ^[A-Za-z0-9_-]{1,64}$, not '../x'"),
    (lambda c: c.transactions(RECORD, from_date="2024-1-2"),
     "from_date must be a date or YYYY-MM-DD, not '2024-1-2'"),
    (lambda c: c.transaction_total(RECORD, to_date=20240102),
     "to_date must be a date or YYYY-MM-DD, not 20240102"),
    (lambda c: c.transaction_total(RECORD, from_date="2024-02-30"),
     "from_date must be a date or YYYY-MM-DD, not '2024-02-30'"),
    (lambda c: list(c.transaction_pages(account="acc", from_date="2024-02-01",
                                        to_date="2024-01-31")),
     "from_date 2024-02-01 is after to_date 2024-01-31"),
    (lambda c: c.trigger_callbacks([]), "records must hold at least one record id"),
    (lambda c: c.trigger_callbacks(["ok", "../x"]),
     "records[] must match ^[A-Za-z0-9_-]{1,64}$, not '../x'"),
    (lambda c: c.trigger_callbacks([RECORD], url="ftp://x/"),
     "url must be an http(s) URL, not 'ftp://x/'"),
    (lambda c: c.set_webhook("http://x y/"), "url must be an http(s) URL, not 'http://x y/'"),
])
def test_each_bad_argument_is_named_before_anything_is_sent(faulty, call, message):
    with faulty.client() as client, pytest.raises(ValueError) as info:
        call(client)
    assert str(info.value) == message
    assert faulty.seen == []


def test_transaction_requests_carry_account_dates_and_pages(faulty):
    faulty.script = [page(2, 3, "transaction", size=1), page(3, 3, "transaction", size=1),
                     success({"pagination": {"totalDocs": 7}, "transaction": []}),
                     success({"pagination": {"totalDocs": 0}, "transaction": []})]
    with faulty.client(page_size=1) as c:
        pages = list(c.transaction_pages(account="acc", from_date=dt.date(2024, 1, 2),
                                         to_date=dt.datetime(2024, 1, 31, 23, 59),
                                         first_page=2))
        total = c.transaction_total(RECORD, from_date="2024-01-02", to_date="2024-01-02")
        assert c.transaction_total(account="acc") == 0
    assert [[t["page"] for t in p] for p in pages] == [[2], [3]]
    assert total == 7
    dates = {"from": "2024-01-02", "to": "2024-01-31"}
    assert [body for _, _, body in sent(faulty)] == [
        {"account": "acc", **dates, "page": 2, "limit": 1},
        {"account": "acc", **dates, "page": 3, "limit": 1},
        {"record": RECORD, "from": "2024-01-02", "to": "2024-01-02", "page": 1, "limit": 1},
        {"account": "acc", "page": 1, "limit": 1}]


def test_a_page_range_of_pages_stops_at_its_last(faulty):
    faulty.script = [page(2, 5, "transaction"), page(3, 5, "transaction")]
    with faulty.client(page_size=2) as c:
        got = list(c.transaction_pages(RECORD, first_page=2, last_page=3))
        assert [[t["page"] for t in p] for p in got] == [[2, 2], [3, 3]]
    faulty.script = [tx_page(1, 2), tx_page(2, 2, rows=[tx(2, 0)]), tx_page(1, 1)]
    with faulty.client() as c:
        batches = list(c.transaction_batches(account="acc", from_date="2026-10-01",
                                             to_date=dt.date(2026, 10, 31)))
        assert [b.num_rows for b in c.transaction_batches(RECORD)] == [2]
    assert [b.num_rows for b in batches] == [2, 1]
    assert batches[0]["transaction_id"].to_pylist() == [tx(1, 0)["_id"], tx(1, 1)["_id"]]
    window = {"account": "acc", "from": "2026-10-01", "to": "2026-10-31"}
    assert sent(faulty) == [
        ("POST", "/sandbox/v2/transactions/get", {"record": RECORD, "page": 2, "limit": 2}),
        ("POST", "/sandbox/v2/transactions/get", {"record": RECORD, "page": 3, "limit": 2}),
        ("POST", "/sandbox/v2/transactions/get", {**window, "page": 1, "limit": 100}),
        ("POST", "/sandbox/v2/transactions/get", {**window, "page": 2, "limit": 100}),
        ("POST", "/sandbox/v2/transactions/get", {"record": RECORD, "page": 1, "limit": 100})]


@pytest.mark.parametrize("pagination", [{}, {"totalDocs": -1}, {"totalDocs": True},
                                        {"totalDocs": "7"}, None])
def test_a_total_without_a_count_is_refused(faulty, pagination):
    faulty.script = [success({"transaction": [], **({"pagination": pagination}
                                                    if pagination is not None else {})})]
    with faulty.client() as c, pytest.raises(MalformedResponse) as info:
        c.transaction_total(RECORD)
    assert str(info.value) == ("no answer: transactions/get answered without a totalDocs count"
                               " on POST transactions/get (no http status, request unknown)")


def test_trigger_callbacks_takes_one_record_a_url_and_either_spelling(faulty):
    faulty.script = [answer(200, orjson.dumps({"status": "success", "message": "sent",
                                                "data": {}})),
                     answer(200, orjson.dumps({"status": "success", "data": {}}))]
    with faulty.client() as c:
        assert c.trigger_callbacks(RECORD, url="http://127.0.0.1:9/cb") == ["sent"]
        assert c.trigger_callbacks([RECORD]) == [""]
    assert sent(faulty) == [
        ("POST", "/sandbox/v2/callback/trigger",
         {"records": [RECORD], "url": "http://127.0.0.1:9/cb"}),
        ("POST", "/sandbox/v2/callback/trigger", {"records": [RECORD]})]


# -- answers that are not what the interface promises -------------------------------------------

@pytest.mark.parametrize("data, message", [
    ({"accounts": {}, "pagination": {"page": 1}},
     "page 1 has no `accounts` array or no pagination"),
    ({"accounts": [], "pagination": [1]}, "page 1 has no `accounts` array or no pagination"),
    ({"accounts": []}, "page 1 has no `accounts` array or no pagination"),
    ({"accounts": [], "pagination": {"page": 2}}, "asked for page 1, got 2"),
    ({"accounts": [], "pagination": {"page": 1, "hasNextPage": True}},
     "page 1 says hasNextPage but nextPage is None"),
    ({"accounts": [], "pagination": {"page": 1, "hasNextPage": True, "nextPage": True}},
     "page 1 says hasNextPage but nextPage is True"),
    ({"accounts": [], "pagination": {"page": 1, "hasNextPage": True, "nextPage": "2"}},
     "page 1 says hasNextPage but nextPage is '2'"),
    ({"accounts": [], "pagination": {"page": 1, "hasNextPage": True, "nextPage": 0}},
     "page 1 says hasNextPage but nextPage is 0"),
])
def test_a_malformed_page_is_refused_naming_page_and_call(faulty, data, message):
    faulty.script = [success(data)]
    with faulty.client() as c, pytest.raises(MalformedResponse) as info:
        c.accounts(RECORD)
    assert str(info.value) == (f"no answer: {message} on POST accounts/get "
                               "(no http status, request unknown)")


def test_a_page_without_its_number_is_taken_as_the_one_asked_for(faulty):
    faulty.script = [success({"accounts": [{"_id": "x"}], "pagination": {
                         "hasNextPage": True, "nextPage": 2}}),
                     success({"accounts": [{"_id": "y"}], "pagination": {
                         "hasNextPage": False}})]
    with faulty.client() as c:
        assert c.accounts(RECORD) == [{"_id": "x"}, {"_id": "y"}]


@pytest.mark.parametrize("body, got", [
    (b"<html>", "a body that is not JSON"),
    (b'{"status": "failure", "data": {}}', "JSON without status and data"),
    (b'{"status": "success", "data": []}', "JSON without status and data"),
    (b'{"status": "success"}', "JSON without status and data"),
    (b"[1]", "JSON without status and data"),
])
def test_a_2xx_that_is_not_the_envelope_says_so(faulty, body, got):
    faulty.script = [answer(201, body, request_id="f" * 24)]
    with faulty.client(max_attempts=1) as c, pytest.raises(MalformedResponse) as info:
        c.banks()
    assert str(info.value) == (f"HTTP 201: a 201 answer with {got} ({len(body)} bytes) on GET "
                               f"banks/list (http 201, request {'f' * 24})")
    assert (info.value.http_code, info.value.request_id) == (201, "f" * 24)


def test_errors_name_the_call_and_its_request(faulty):
    faulty.script = [error(400, "INVALID_REQUEST", "INVALID_FIELD", "bad record"),
                     error(400, "RECORD_ERROR", "PRODUCT_NOT_READY", "not yet")]
    with faulty.client() as c:
        with pytest.raises(ServiceError) as get:
            c.callback_status(RECORD, "INCOME")
        with pytest.raises(ServiceError) as post:
            c.post("income/get", {"record": RECORD})
    assert str(get.value).startswith("INVALID_FIELD: bad record on GET callback (http 400, ")
    assert str(post.value).startswith("PRODUCT_NOT_READY: not yet on POST income/get (http 400, ")


# -- transaction pages read by Arrow, and when they are asked for ------------------------------

def tx(n: int, i: int, **over) -> dict:
    stamp = f"2026-10-{1 + n % 28:02d}T06:04:{i % 60:02d}.000Z"
    return {"_id": f"{n:02d}{i:022x}", "account": "b" * 24, "customer": "c" * 24,
            "bank": "d" * 24, "trans_date": stamp, "cleared_date": stamp, "debit": None,
            "credit": 12.5 + i, "balance": 100.0 + i, "currency": "NGN",
            "notes": {"desc": f"line {n}.{i}", "topics": ["transfer"]}, "ref": f"r{n}{i}",
            "branch": "HQ", "code": "TRF", "env": "sandbox", "created_at": stamp,
            "last_updated": stamp, **over}


def tx_page(n: int, of: object, rows: list[dict] | None = None, raw: bytes | None = None,
            **pagination) -> object:
    rows = [tx(n, 0), tx(n, 1)] if rows is None else rows
    more = isinstance(of, int) and n < of
    data = {"pagination": {"page": n, "totalPages": of, "hasNextPage": more,
                           "nextPage": n + 1 if more else None, **pagination},
            "transaction": rows}
    if raw is None:
        return success(data)
    body = orjson.dumps({"status": "success", "data": data})
    return answer(200, body.replace(b'"transaction":[', b'"transaction":[' + raw + b",", 1))


def asked(faulty) -> list[int]:
    return [s.json()["page"] for s in faulty.seen]


def test_the_pages_after_the_first_are_asked_for_before_it_is_read(faulty):
    """Page 1 says there are 3: pages 2 and 3 are on their way before page 1 is parsed, so
    a bad line in page 1 is found after they were asked for."""
    faulty.script = [tx_page(1, 3, rows=[tx(1, 0, debit="twelve")]), tx_page(2, 3),
                     tx_page(3, 3)]
    with faulty.client(page_size=2) as c, pytest.raises(ValueError, match="interface's shape"):
        c.transactions(RECORD)
    assert asked(faulty) == [1, 2, 3]


@pytest.mark.parametrize("first", [
    answer(200, b"<html>", request_id="e" * 24),  # not JSON
    success([]),                                    # data not an object
    success({"pagination": [], "transaction": []}),  # pagination not an object
])
def test_a_first_page_without_a_count_is_refused_not_crashed_on(faulty, first):
    faulty.script = [first]  # one try: a body that is not JSON would be asked for again
    with faulty.client(max_attempts=1) as c, pytest.raises(MalformedResponse):
        c.transactions(RECORD)
    assert asked(faulty) == [1]


def test_a_count_that_is_not_a_number_is_no_hint_but_paging_goes_on(faulty):
    faulty.script = [tx_page(1, "2", hasNextPage=True, nextPage=2), tx_page(2, 2)]
    with faulty.client(page_size=2) as c:
        table = c.transactions(RECORD)
    assert table.num_rows == 4 and asked(faulty) == [1, 2]


def test_a_lone_page_claiming_another_number_is_refused(faulty):
    faulty.script = [tx_page(2, 1)]  # asked for page 1 of 1, answered as page 2
    with faulty.client(page_size=2) as c, pytest.raises(MalformedResponse) as info:
        c.transactions(RECORD)
    assert str(info.value) == ("no answer: asked for page 1, got 2 on POST transactions/get "
                               "(no http status, request unknown)")


def test_a_group_arrow_cannot_read_is_read_page_by_page_with_the_same_rows(faulty):
    """A member given twice stops Arrow's reader; orjson takes the last one, as JSON says."""
    dup = orjson.dumps(tx(1, 9))[:-1] + b',"ref":"again"}'
    faulty.script = [tx_page(1, 3, raw=dup), tx_page(2, 3, hasNextPage=False, nextPage=None),
                     tx_page(3, 3)]
    with faulty.client(page_size=3) as c:
        table = c.transactions(RECORD)
    assert asked(faulty) == [1, 2, 3]  # page 3 was asked for ahead, then dropped
    assert table["transaction_id"].to_pylist() == [
        tx(1, 9)["_id"], tx(1, 0)["_id"], tx(1, 1)["_id"], tx(2, 0)["_id"], tx(2, 1)["_id"]]


def test_a_page_in_a_group_that_is_not_json_names_its_status_and_request(faulty):
    faulty.script = [tx_page(1, 2), answer(202, b"<html>", request_id="e" * 24)]
    with (faulty.client(page_size=2, max_attempts=1) as c,
          pytest.raises(MalformedResponse) as info):
        c.transactions(RECORD)
    assert str(info.value) == ("HTTP 202: a 202 answer with a body that is not JSON (6 bytes) "
                               f"on POST transactions/get (http 202, request {'e' * 24})")


def test_a_page_cut_short_in_a_group_is_asked_for_again_and_read_once(faulty):
    whole = orjson.dumps({"status": "success", "data": {
        "pagination": {"page": 2, "totalPages": 3, "hasNextPage": True, "nextPage": 3},
        "transaction": [tx(2, 0), tx(2, 1)]}})
    faulty.script = [tx_page(1, 3), answer(200, whole[:len(whole) // 2]), tx_page(3, 3),
                     tx_page(2, 3)]
    with faulty.client(page_size=2) as c:
        table = c.transactions(RECORD)
    assert asked(faulty) == [1, 2, 3, 2]  # page 2 again, once; page 3 not asked twice
    assert table["transaction_id"].to_pylist() == [
        tx(n, i)["_id"] for n in (1, 2, 3) for i in (0, 1)]


def test_a_page_in_a_group_without_pagination_is_named(faulty):
    faulty.script = [tx_page(1, 2), success({"transaction": []})]
    with faulty.client(page_size=2) as c, pytest.raises(MalformedResponse) as info:
        c.transactions(RECORD)
    assert str(info.value) == ("no answer: page 2 has no `transaction` array or no pagination "
                               "on POST transactions/get (no http status, request unknown)")


# -- retries: which, how often, how long -----------------------------------------------------

@pytest.fixture
def jitter(monkeypatch):
    """The jitter at its top (`max`) or its bottom (`min`), so waits are exact."""
    def pick(end: str) -> None:
        monkeypatch.setattr(random, "uniform", (lambda a, b: b) if end == "max"
                            else (lambda a, b: a))
    return pick


@pytest.mark.parametrize("end, expected", [("max", [0.02, 0.04, 0.05, 0.05]),
                                           ("min", [0.01, 0.02, 0.025, 0.025])])
def test_the_backoff_doubles_from_its_base_to_its_cap_with_jitter_below_it(
        faulty, caplog, jitter, end, expected):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    jitter(end)
    faulty.script = [answer(503, request_id=f"{i}" * 24) for i in range(4)] + [
        success({"banks": []})]
    with faulty.client(backoff_base_s=0.02, backoff_max_s=0.05) as c:
        assert c.banks() == []
    assert waits(caplog) == pytest.approx(expected)
    assert [r.getMessage() for r in caplog.records] == [
        f"retrying GET banks/list in {wait:.2f}s (attempt {i + 2} of 6): HTTP 503: the service "
        f"answered 503 without a JSON error body on GET banks/list (http 503, request "
        f"{str(i) * 24})" for i, wait in enumerate(expected)]


def test_a_retry_after_date_is_waited_for_and_a_past_one_is_no_wait(faulty, caplog, jitter):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    jitter("max")
    soon = email.utils.format_datetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30),
                                       usegmt=True)
    past = email.utils.format_datetime(dt.datetime(2020, 1, 1, tzinfo=dt.UTC), usegmt=True)
    faulty.script = [error(429, "RATE_LIMIT_EXCEEDED", "RATE_LIMIT", headers={"Retry-After": v})
                     for v in (past, "soon", "-5")] + [success({"banks": []}),
                                                      error(429, "RATE_LIMIT_EXCEEDED",
                                                            "RATE_LIMIT",
                                                            headers={"Retry-After": soon})]
    with faulty.client(backoff_base_s=0.01, backoff_max_s=0.01, retry_budget_s=5) as c:
        assert c.banks() == []  # a date gone by, a word, a negative: backed off, not waited
        assert waits(caplog) == pytest.approx([0.01, 0.01, 0.01])
        with pytest.raises(RateLimitExceeded) as info:
            c.banks()
    assert 28 <= info.value.retry_after <= 30  # beyond the budget: raised at once
    assert "retry budget of 5s spent (next wait" in str(info.value)


def test_a_call_that_changes_nothing_retries_any_5xx(faulty):
    faulty.script = [error(500, "API_ERROR", "INTERNAL_SERVER_ERROR"),
                     error(502, "API_ERROR", "BAD_GATEWAY"), success({"record": {"_id": "r"}})]
    with faulty.client() as c:
        assert c.record(RECORD) == {"_id": "r"}
    assert len(faulty.seen) == 3


def test_what_a_call_that_changes_state_retries(faulty):
    faulty.script = [answer(503), success({"removed": 1}),
                     error(502, "API_ERROR", "BAD_GATEWAY"),
                     error(500, "API_ERROR", "PLANNED_MAINTENANCE"), success({"removed": 2})]
    with faulty.client() as c:
        assert c.remove_record(RECORD) == {"removed": 1}  # 503: not done, so tried again
        with pytest.raises(ApiError) as info:  # any other 5xx may have been half done
            c.remove_record(RECORD)
        assert (info.value.error_code, info.value.attempts) == ("BAD_GATEWAY", 1)
        assert c.remove_record(RECORD) == {"removed": 2}  # maintenance: not done either
    assert len(faulty.seen) == 5


def test_a_call_that_changes_state_is_retried_when_it_never_left(faulty):
    url = faulty.url
    faulty.stop()  # nothing listens: the request was never sent
    with faulty.client(base_url=url, max_attempts=3) as c, pytest.raises(TransportError) as info:
        c.exchange_token("pub-1")
    assert info.value.attempts == 3
    assert str(info.value).startswith("no answer: ConnectError: ")
    assert str(info.value).endswith(" on POST token/exchange (no http status, request unknown,"
                                    " after 3 attempts)")


def test_a_token_exchange_that_may_have_been_sent_is_not_retried(faulty):
    faulty.script = [reset_mid_body(), success({"access_token": "t"})]
    with faulty.client() as c, pytest.raises(TransportError) as info:
        c.exchange_token("pub-1")
    assert info.value.attempts == 1 and len(faulty.seen) == 1


def test_an_answer_that_cannot_be_decoded_is_not_retried(faulty):
    """A body httpx cannot decode would fail the same way again."""
    faulty.script = [answer(200, b"not gzip at all", {"Content-Encoding": "gzip"}),
                     success({"banks": []})]
    with faulty.client() as c, pytest.raises(TransportError) as info:
        c.banks()
    assert info.value.attempts == 1 and len(faulty.seen) == 1
    assert str(info.value).startswith("no answer: DecodingError: ")


def test_a_transport_error_without_words_still_says_what_it_was(faulty):
    """A fault no real peer can be made to produce: an httpx error with an empty message."""
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("")

    with faulty.client(max_attempts=1) as c:
        c._http = httpx.Client(base_url=faulty.url, transport=httpx.MockTransport(refuse))
        with pytest.raises(TransportError) as info:
            c.banks()
    assert str(info.value) == ("no answer: ReadError: no detail on GET banks/list "
                               "(no http status, request unknown)")


def test_as_a_dagster_resource_it_checks_its_settings_at_init_and_closes_after(faulty):
    faulty.script = [success({"banks": []})]
    context = dg.build_init_resource_context()
    resource = ConnectionClient(base_url=faulty.url, secret_key=KEY)
    with resource.yield_for_execution(context) as client:
        assert isinstance(client, Client) and client.banks() == []
        http = client._http
        assert not http.is_closed
    assert client._http is None and http.is_closed
    with pytest.raises(ValueError, match="page_size"):  # the run fails here, before any asset
        with ConnectionClient(base_url=faulty.url, secret_key=KEY,
                              page_size=0).yield_for_execution(context):
            pass


def test_transactions_of_an_account_in_a_window(faulty):
    faulty.script = [tx_page(1, 1)]
    with faulty.client() as c:
        table = c.transactions(account="acc", from_date="2026-10-01", to_date="2026-10-02")
    assert table.num_rows == 2
    assert sent(faulty) == [("POST", "/sandbox/v2/transactions/get", {
        "account": "acc", "from": "2026-10-01", "to": "2026-10-02", "page": 1, "limit": 100})]


def test_errors_of_a_pull_and_a_trigger_name_their_call(faulty):
    faulty.script = [error(400, "INVALID_REQUEST", "INVALID_FIELD", "bad from"),
                     tx_page(1, 2, hasNextPage=True, nextPage=1),
                     error(400, "INVALID_REQUEST", "INVALID_FIELD", "bad record")]
    with faulty.client() as c:
        with pytest.raises(ServiceError) as refused:
            c.transactions(RECORD)
        faulty.script.insert(1, tx_page(2, 2))  # asked for ahead of page 1
        with pytest.raises(MalformedResponse) as looping:
            c.transactions(RECORD)
        with pytest.raises(ServiceError) as trigger:
            c.trigger_callbacks([RECORD])
    assert str(refused.value).startswith("INVALID_FIELD: bad from on POST transactions/get (")
    assert str(looping.value) == ("no answer: page 1 says hasNextPage but nextPage is 1 on POST "
                                  "transactions/get (no http status, request unknown)")
    assert str(trigger.value).startswith("INVALID_FIELD: bad record on POST callback/trigger (")


def test_a_page_whose_status_is_not_success_is_refused(faulty):
    failed = answer(200, orjson.dumps({"status": "failure", "data": {
        "pagination": {"page": 1, "totalPages": 1, "hasNextPage": False},
        "transaction": [tx(1, 0)]}}), request_id="e" * 24)
    faulty.script = [failed]
    with faulty.client() as c, pytest.raises(MalformedResponse, match="without status and data"):
        c.transactions(RECORD)


@pytest.mark.parametrize("bad, asked_for", [
    (1, list(range(1, 21))),   # the first group is 20 pages, asked for before any is read
    (21, list(range(1, 26))),  # the rest are asked for ahead too, from the count read so far
])
def test_pages_are_read_twenty_at_a_time_and_asked_for_ahead(faulty, bad, asked_for):
    faulty.script = [tx_page(n, 25, rows=[tx(n, 0, debit="x") if n == bad else tx(n, 0)])
                     for n in range(1, 26)]
    with faulty.client(page_size=1) as c, pytest.raises(ValueError, match="interface's shape"):
        c.transactions(RECORD)
    assert asked(faulty) == asked_for
