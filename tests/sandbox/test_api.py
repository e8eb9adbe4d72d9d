"""Every endpoint of INTERFACE.md over real HTTP: its body rules and its response shape."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from sandbox_pulls import pull

HEX24 = re.compile(r"^[0-9a-f]{24}$")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
PAGINATION = {"totalDocs": int, "limit": int, "page": int, "totalPages": int,
              "pagingCounter": int, "hasPrevPage": bool, "hasNextPage": bool}


def ok(resp) -> dict:
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "success"
    assert resp.headers["x-request-id"]
    return body["data"]


def check_pagination(p: dict) -> None:
    for key, typ in PAGINATION.items():
        assert isinstance(p[key], typ), key
    assert p["prevPage"] is None or isinstance(p["prevPage"], int)
    assert p["nextPage"] is None or isinstance(p["nextPage"], int)


@pytest.fixture(scope="module")
def made(shared_sandbox):
    with shared_sandbox.api() as api:
        data = ok(api.post("sandbox/customers/create", json={"customers": [
            {"accounts": 3, "months": 3, "volume": 6, "seed": 7},
            {"accounts": 1, "months": 2, "account_type": "business", "seed": 8},
        ]}))
        # the connection completes on its own, right after the answer
        for c in data["customers"]:
            for _ in range(100):
                rec = ok(api.post("record/get", json={"record": c["record"]}))["record"]
                if all(s != "pending" for s in rec["status"].values()):
                    break
    return data["customers"]


def test_customers_create_answers_ids_and_public_tokens(made):
    assert len(made) == 2
    for c in made:
        assert HEX24.match(c["customer"]) and HEX24.match(c["record"])
        assert c["public_token"].startswith("public-sandbox-")
        assert all(HEX24.match(a) for a in c["accounts"])
    assert len(made[0]["accounts"]) == 3


def test_banks_list_in_both_environments(shared_sandbox):
    for env in ("sandbox", "production"):
        with shared_sandbox.api(env) as api:
            banks = ok(api.get("banks/list"))["banks"]
        assert banks
        for b in banks:
            for key in ("name", "logo", "icon", "v2_logo", "v2_icon", "status", "_id", "slug"):
                assert isinstance(b[key], str)
            assert set(b["colors"]) == {"primary", "accent", "bg", "button"}
            assert all(re.match(r"^#[0-9a-f]{6}$", v) for v in b["colors"].values())
            assert "login_types" in b and "products" in b


def test_accounts_by_record_and_customer(shared_sandbox, made):
    c = made[0]
    with shared_sandbox.api() as api:
        by_record = ok(api.post("accounts/get", json={"record": c["record"], "limit": "2"}))
        by_customer = ok(api.post("accounts/get", json={"customer": c["customer"]}))
    check_pagination(by_record["pagination"])
    assert by_record["pagination"]["totalDocs"] == 3
    assert by_record["pagination"]["nextPage"] == 2
    assert {a["_id"] for a in by_customer["accounts"]} == set(c["accounts"])
    for a in by_customer["accounts"]:
        assert re.match(r"^\d{10}$", a["nuban"])
        assert a["currency"] == "NGN" and a["env"] == "production-sandbox"
        assert a["customer"]["_id"] == c["customer"] and a["record"] == c["record"]
        assert ISO.match(a["created_at"]) and ISO.match(a["last_updated"])


def test_balance_agrees_with_the_last_transaction(shared_sandbox, made):
    c = made[0]
    with shared_sandbox.api() as api:
        balances = ok(api.post("balance/get", json={"record": c["record"]}))["balance"]
        assert len(balances) == 3
        for bal in balances:
            lines = pull(api, account=bal["account"])
            assert lines, "three months at six a day make lines"
            # the running balance is over posted lines in posting order; pending ones have none
            posted = sorted((t for t in lines if t["cleared_date"] is not None),
                            key=lambda t: (t["cleared_date"], t["_id"]))
            assert all(t["balance"] is None for t in lines if t["cleared_date"] is None)
            assert bal["ledger_balance"] == posted[-1]["balance"]
            assert isinstance(bal["available_balance"], float)
            # each line's running balance follows from the one before
            for prev, line in zip(posted, posted[1:], strict=False):
                delta = (line["credit"] or 0) - (line["debit"] or 0)
                assert abs(prev["balance"] + delta - line["balance"]) < 0.005
            periodic = bal["periodic"]
            # the series ends on the last line's day, the bank's (Lagos, UTC+1: a line posted
            # at 23:30 UTC ends the next day), with its balance
            cleared = dt.datetime.fromisoformat(posted[-1]["cleared_date"])
            last_day = (cleared + dt.timedelta(hours=1)).date().isoformat()
            assert periodic["ledger_balance"][-1]["date"] == last_day
            assert set(periodic) == {"available_balance", "ledger_balance"}


def test_transactions_fields_order_and_dates(shared_sandbox, made):
    c = made[0]
    with shared_sandbox.api() as api:
        data = ok(api.post("transactions/get", json={"record": c["record"], "limit": 100}))
        check_pagination(data["pagination"])
        lines = data["transaction"]
        assert len(lines) == 100
        keys = [(t["trans_date"], t["_id"]) for t in lines]
        assert keys == sorted(keys)
        for t in lines:
            assert (t["debit"] is None) != (t["credit"] is None)
            assert t["notes"]["desc"] and isinstance(t["notes"]["topics"], list)
            assert t["benefactor"] is None and t["currency"] == "NGN"
            assert t["account"] in c["accounts"] and t["record"] == c["record"]
            for key in ("ref", "branch", "code", "bank", "customer", "env", "id"):
                assert isinstance(t[key], str)
        day = lines[50]["trans_date"][:10]
        one_day = ok(api.post("transactions/get", json={"record": c["record"], "from": day,
                                                         "to": day, "limit": 100}))
        assert one_day["transaction"]
        assert {t["trans_date"][:10] for t in one_day["transaction"]} == {day}


def test_income_agrees_with_the_transactions(shared_sandbox, made):
    c = made[0]
    with shared_sandbox.api() as api:
        income = ok(api.post("income/get", json={"record": c["record"]}))["income"]
        lines = pull(api, record=c["record"])
    stream_lines = [t for t in lines if "income" in t["notes"]["topics"]]
    assert income["number_of_transactions"] == len(stream_lines)
    assert sum(s["number_of_transactions"] for s in income["streams"]) == len(stream_lines)
    summary = income["summary"]
    assert summary["number_of_streams"] == len(income["streams"])
    for window in ("past_three_months", "past_six_months", "past_twelve_months"):
        assert set(summary[window]) == {"average_per_month", "max_per_month", "min_per_month",
                                        "occurrence", "total"}
    assert isinstance(income["confidence"], float)
    primary = [s for s in income["streams"] if s["primary_stream"]]
    assert len(primary) == 1 and primary[0]["type"] in ("Salary", "Recurrent Credit")
    first = min(t["trans_date"] for t in stream_lines)
    assert any(s["occurrence"]["first_date"] == first for s in income["streams"])


def test_identity_auth_record_item(shared_sandbox, made):
    c = made[0]
    with shared_sandbox.api() as api:
        ident = ok(api.post("identity/get", json={"record": c["record"]}))
        check_pagination(ident["pagination"])
        person = ident["identity"][0]
        assert re.match(r"^\d{11}$", person["bvn"]) and re.match(r"^\d{4}-\d\d-\d\d$",
                                                                 person["dob"])
        for key in ("phone", "email", "address", "aliases", "photo_id", "projects"):
            assert isinstance(person[key], list)
        auths = ok(api.post("auth/getByCustomer", json={"customer": c["customer"]}))
        check_pagination(auths["pagination"])
        auth = auths["auths"][0]
        assert auth["record"] == c["record"] and auth["validated"] is True
        for key, typ in (("__v", int), ("owner", str), ("current_project", str),
                         ("projects", list), ("customer", dict), ("bank", dict)):
            assert isinstance(auth[key], typ)
        assert ok(api.post("auth/get", json={"record": c["record"]}))["auth"]["accounts"]
        rec = ok(api.post("record/get", json={"record": c["record"]}))["record"]
        assert set(rec) == {"_id", "id", "customer", "bank", "env", "login_type",
                            "account_type", "products", "status", "verified", "created_at",
                            "last_updated"}
        item = ok(api.post("item/get", json={"record": c["record"]}))["item"]
        assert set(item["products_enabled"]) <= set(item["products_supported"])
        assert "last_webhook" in item


def test_business_records(shared_sandbox, made):
    c = made[1]
    with shared_sandbox.api() as api:
        rec = ok(api.post("record/get", json={"record": c["record"]}))["record"]
        lines = ok(api.post("transactions/get", json={"record": c["record"], "limit": 100}))
    assert rec["account_type"] == "business"
    assert any("SETTLEMENT" in t["notes"]["desc"] or "TRF" in t["notes"]["desc"]
               for t in lines["transaction"])


def test_token_exchange_once_and_record_remove_kills_the_token(sandbox):
    with sandbox.api() as api:
        c = ok(api.post("sandbox/customers/create", json={"customers": [{}]}))["customers"][0]
        tok = ok(api.post("token/exchange", json={"public_token": c["public_token"]}))
        assert tok["record"] == c["record"]
        assert tok["access_token"].startswith("access-sandbox-")
        again = api.post("token/exchange", json={"public_token": c["public_token"]})
        assert again.json()["error_code"] == "INVALID_PUBLIC_TOKEN"
        item = ok(api.post("item/get", json={"access_token": tok["access_token"]}))["item"]
        assert item["record"] == c["record"]
        for _ in range(100):  # the connection completes on its own
            if all(v == "ready" for v in ok(api.post(
                    "record/get", json={"access_token": tok["access_token"]}))["record"][
                    "status"].values()):
                break
        for path in ("accounts/get", "balance/get", "transactions/get", "income/get",
                     "identity/get", "auth/get", "record/get"):
            by_token = ok(api.post(path, json={"access_token": tok["access_token"]}))
            by_record = ok(api.post(path, json={"record": c["record"]}))
            assert by_token == by_record, path
        assert ok(api.post("record/remove", json={"record": c["record"]})) == {}
        dead = api.post("item/get", json={"access_token": tok["access_token"]})
        assert dead.status_code == 400 and dead.json()["error_code"] == "INVALID_TOKEN"
    with sandbox.api("production") as prod:
        other = prod.post("item/get", json={"access_token": tok["access_token"]})
        assert other.json()["error_code"] == "INVALID_TOKEN"


def test_settings_webhook_per_environment(sandbox):
    with sandbox.api() as api, sandbox.api("production") as prod:
        a = ok(api.post("settings/webhook", json={"url": "http://127.0.0.1:9/a", "token": "t"}))
        b = ok(prod.post("settings/webhook", json={"url": "http://127.0.0.1:9/b"}))
    assert a["url"].endswith("/a") and b["url"].endswith("/b")
    assert "t" not in str(a.get("token", ""))


def test_environments_have_their_own_data(sandbox):
    with sandbox.api() as api, sandbox.api("production") as prod:
        c = ok(api.post("sandbox/customers/create", json={"customers": [{}]}))["customers"][0]
        assert prod.post("record/get", json={"record": c["record"]}).status_code == 400
        assert ok(api.post("record/get", json={"record": c["record"]}))


def test_openapi_lists_every_route(shared_sandbox):
    import httpx

    doc = httpx.get(shared_sandbox.url + "/openapi.json").json()
    paths = doc["paths"]
    for p in ("auth/getByCustomer", "auth/get", "accounts/get", "balance/get",
              "transactions/get", "income/get", "identity/get", "record/get",
              "record/remove", "item/get", "callback", "callback/trigger", "token/exchange",
              "settings/webhook", "banks/list"):
        assert "/sandbox/v2/" + p in paths and "/v2/" + p in paths
    for p in ("customers/create", "records/verify", "records/reset_login", "banks/status",
              "maintenance", "payments/initiate", "clock/advance", "records/fire_webhook",
              "records/fail", "records/corrupt", "records/ledger"):
        assert "/sandbox/v2/sandbox/" + p in paths and "/v2/sandbox/" + p not in paths


def test_request_log_has_ids_and_no_secret(shared_sandbox, made):
    log = (shared_sandbox.data_dir.parent / f"{shared_sandbox.data_dir.name}.log").read_text()
    assert re.search(r"[0-9a-f]{24} POST /sandbox/v2/sandbox/customers/create 200", log)
    assert shared_sandbox.sandbox_key not in log and shared_sandbox.production_key not in log


def test_callback_status_and_trigger(shared_sandbox, made):
    c = made[0]
    with shared_sandbox.api() as api:
        data = ok(api.get("callback", params={"record": c["record"], "method": "TRANSACTIONS"}))
        assert data["product"] == "transactions" and data["record"] == c["record"]
        assert data["status"]["process"]["completed"] is True
        assert isinstance(data["newTransactions"], int)
        bad = api.get("callback", params={"record": c["record"], "method": "LOANS"})
        assert bad.status_code == 400 and bad.json()["error_code"] == "INVALID_FIELD"
        trig = api.post("callback/trigger", json={"records": [c["record"]],
                                                  "url": "http://127.0.0.1:9/x"})
        assert trig.status_code == 200, trig.text
        assert trig.json() == {"status": "success", "messgae": "Webhook trigger initiated",
                               "data": {}}
        single = api.post("callback/trigger", json={"record": c["record"],
                                                    "url": "http://127.0.0.1:9/x"})
        assert single.status_code == 200
        many = api.post("callback/trigger", json={"records": [c["record"]] * 101,
                                                  "url": "http://127.0.0.1:9/x"})
        assert many.status_code == 400 and many.json()["error_code"] == "INVALID_FIELD"
