"""sandbox/records/fail, records/corrupt and records/ledger over real HTTP: what they do, what
they refuse, and that a refused call changes nothing."""

from __future__ import annotations

import pytest
from sandbox_pulls import chain_breaks, create, frozen, kobo, ok, pull

ENDPOINTS = {"accounts": "accounts/get", "balance": "balance/get",
             "transactions": "transactions/get", "income": "income/get",
             "identity": "identity/get", "auth": "auth/get"}


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    with frozen(tmp_path_factory.mktemp("controls")) as b:
        yield b


@pytest.fixture(scope="module")
def made(box):
    with box.api() as api:
        return create(api, {"accounts": 2, "months": 2, "volume": 12, "seed": 77},
                      {"accounts": 1, "months": 1, "seed": 78})


def err(resp, code: str, status: int = 400) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error_code"] == code and body["http_code"] == status, body
    return body


def test_fail_makes_the_next_calls_fail_then_lets_them_through(box, made):
    c = made[0]
    with box.api() as api:
        token = ok(api.post("token/exchange", json={"public_token": c["public_token"]}))
        answer = ok(api.post("sandbox/records/fail", json={
            "record": c["record"], "product": "transactions", "times": 3}))
        assert answer == {"record": c["record"], "product": "transactions", "remaining": 3}
        ok(api.post("balance/get", json={"record": c["record"]}))  # other products: untouched
        for target in ({"record": c["record"]}, {"access_token": token["access_token"]},
                       {"account": c["accounts"][1]}):  # each way of naming the record counts
            body = err(api.post("transactions/get", json=target), "INTERNAL_SERVER_ERROR", 500)
            assert body["error_type"] == "API_ERROR" and "records/fail" in body["error_message"]
        assert ok(api.post("transactions/get", json={"record": c["record"]}))["transaction"]
        # another record's calls never fail for it
        ok(api.post("transactions/get", json={"record": made[1]["record"]}))


@pytest.mark.parametrize("product", sorted(ENDPOINTS))
def test_fail_covers_each_product_with_any_known_code(box, made, product):
    record = made[0]["record"]
    with box.api() as api:
        ok(api.post("sandbox/records/fail", json={"record": record, "product": product,
                                                  "times": 1, "error_code": "BANK_NOT_RESPONDING"}))
        body = err(api.post(ENDPOINTS[product], json={"record": record}), "BANK_NOT_RESPONDING")
        assert body["error_type"] == "BANK_ERROR" and body["display_message"]
        ok(api.post(ENDPOINTS[product], json={"record": record}))


def test_fail_with_a_rate_limit_code_says_when_to_retry(box, made):
    record = made[0]["record"]
    with box.api() as api:
        ok(api.post("sandbox/records/fail", json={"record": record, "product": "accounts",
                                                  "times": 1, "error_code": "ACCOUNTS_LIMIT"}))
        resp = api.post("accounts/get", json={"record": record})
        err(resp, "ACCOUNTS_LIMIT", 429)
        assert resp.headers["retry-after"] == "1"
        # a later call replaces the earlier setting of that product
        ok(api.post("sandbox/records/fail", json={"record": record, "product": "identity",
                                                  "times": 5}))
        last = ok(api.post("sandbox/records/fail", json={
            "record": record, "product": "identity", "times": 1,
            "error_code": "RECORD_LOGIN_REQUIRED"}))
        assert last["remaining"] == 1
        err(api.post("identity/get", json={"record": record}), "RECORD_LOGIN_REQUIRED")
        ok(api.post("identity/get", json={"record": record}))


@pytest.mark.parametrize(("body", "code", "names"), [
    ({"product": "transactions", "times": 1}, "MISSING_FIELDS", "record"),
    ({"record": "R"}, "MISSING_FIELDS", "product"),
    ({"record": "R", "product": "transactions"}, "MISSING_FIELDS", "times"),
    ({"record": "R", "product": "transactions", "times": 1, "colour": 1}, "UNKNOWN_FIELDS",
     "colour"),
    ({"record": "R", "product": "loans", "times": 1}, "INVALID_FIELD", "product"),
    ({"record": "R", "product": "payment", "times": 1}, "INVALID_FIELD", "product"),
    ({"record": "R", "product": "transactions", "times": 0}, "INVALID_FIELD", "times"),
    ({"record": "R", "product": "transactions", "times": 1001}, "INVALID_FIELD", "times"),
    ({"record": "R", "product": "transactions", "times": "2"}, "INVALID_FIELD", "times"),
    ({"record": "R", "product": "transactions", "times": True}, "INVALID_FIELD", "times"),
    ({"record": "R", "product": "transactions", "times": 1, "error_code": "NOPE"},
     "INVALID_FIELD", "error_code"),
    ({"record": "R", "product": "transactions", "times": 1, "error_code": 500},
     "INVALID_FIELD", "error_code"),
    ({"record": "nope", "product": "transactions", "times": 1}, "INVALID_FIELD", "record"),
])
def test_fail_refuses_bad_bodies_and_changes_nothing(box, made, body, code, names):
    record = made[1]["record"]
    body = {k: record if v == "R" else v for k, v in body.items()}
    with box.api() as api:
        assert names in err(api.post("sandbox/records/fail", json=body), code)["error_message"]
        ok(api.post("transactions/get", json={"record": record}))


def test_controls_are_sandbox_only(box, made):
    with box.api("production") as prod:
        for path, body in (("records/fail", {"record": "x", "product": "auth", "times": 1}),
                           ("records/corrupt", {"record": "x"}),
                           ("records/ledger", {"record": "x"})):
            err(prod.post("sandbox/" + path, json=body), "SANDBOX_ONLY")


def test_corrupt_breaks_the_chain_at_one_line_and_nowhere_else(tmp_path):
    with frozen(tmp_path) as b, b.api() as api:
        (c,) = create(api, {"accounts": 2, "months": 2, "volume": 10, "seed": 5})
        account = c["accounts"][1]
        before = pull(api, record=c["record"])
        ledger = ok(api.post("sandbox/records/ledger", json={"record": c["record"]}))
        posted = sorted((t for t in before if t["account"] == account and t["cleared_date"]),
                        key=lambda t: (t["cleared_date"], t["_id"]))
        got = ok(api.post("sandbox/records/corrupt", json={"record": c["record"],
                                                           "account": account, "line": 7}))
        assert got == {"transaction": posted[7]["_id"], "account": account,
                       "balance_true": posted[7]["balance"],
                       "balance_served": (kobo(posted[7]["balance"]) + 100) / 100}
        again = ok(api.post("sandbox/records/corrupt", json={"record": c["record"],
                                                             "account": account, "line": 7}))
        assert again == got  # off by 1.00, not by 2.00
        after = pull(api, record=c["record"])
        by_account = pull(api, account=account)
        assert ok(api.post("sandbox/records/ledger", json={"record": c["record"]})) == ledger
    assert chain_breaks(before) == []
    assert chain_breaks(after) == [posted[7]["_id"], posted[8]["_id"]]
    assert chain_breaks(by_account) == [posted[7]["_id"], posted[8]["_id"]]
    changed = [(x, y) for x, y in zip(before, after, strict=True) if x != y]
    assert len(changed) == 1
    (x, y), = changed
    assert {k for k in x if x[k] != y[k]} == {"balance"}
    assert kobo(y["balance"]) - kobo(x["balance"]) == 100


def test_corrupt_defaults_to_the_middle_line_of_the_first_account(tmp_path):
    with frozen(tmp_path) as b, b.api() as api:
        (c,) = create(api, {"accounts": 2, "months": 1, "volume": 8, "seed": 6})
        ledger = ok(api.post("sandbox/records/ledger", json={"record": c["record"]}))
        got = ok(api.post("sandbox/records/corrupt", json={"record": c["record"]}))
        lines = pull(api, account=c["accounts"][0])
    posted = sorted((t for t in lines if t["cleared_date"]),
                    key=lambda t: (t["cleared_date"], t["_id"]))
    assert ledger["accounts"][0]["posted"] == len(posted)
    middle = posted[len(posted) // 2]
    assert got["transaction"] == middle["_id"] and got["account"] == c["accounts"][0]
    assert middle["balance"] == got["balance_served"]
    assert chain_breaks(lines)[0] == middle["_id"]


@pytest.mark.parametrize(("body", "code", "names"), [
    ({}, "MISSING_FIELDS", "record"),
    ({"record": "R", "lines": 1}, "UNKNOWN_FIELDS", "lines"),
    ({"record": "R", "account": "0" * 24}, "INVALID_FIELD", "account"),
    ({"record": "R", "line": -1}, "INVALID_FIELD", "line"),
    ({"record": "R", "line": 10**9}, "INVALID_FIELD", "line"),
    ({"record": "R", "line": "3"}, "INVALID_FIELD", "line"),
    ({"record": "R", "line": 2.5}, "INVALID_FIELD", "line"),
    ({"record": "nope"}, "INVALID_FIELD", "record"),
])
def test_corrupt_refuses_bad_bodies_and_changes_nothing(box, made, body, code, names):
    record = made[1]["record"]
    body = {k: record if v == "R" else v for k, v in body.items()}
    with box.api() as api:
        before = pull(api, record=record)
        assert names in err(api.post("sandbox/records/corrupt", json=body), code)[
            "error_message"]
        assert pull(api, record=record) == before
        assert chain_breaks(before) == []


def test_ledger_refuses_bad_bodies(box):
    with box.api() as api:
        assert "record" in err(api.post("sandbox/records/ledger", json={}),
                               "MISSING_FIELDS")["error_message"]
        assert "record" in err(api.post("sandbox/records/ledger", json={"record": "nope"}),
                               "INVALID_FIELD")["error_message"]
        err(api.post("sandbox/records/ledger", json={"record": "x", "as_of": 1}),
            "UNKNOWN_FIELDS")
