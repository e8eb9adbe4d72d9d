"""Every error code of the spec, produced by a real request, with the spec's body and status."""

from __future__ import annotations

import httpx
import pytest

from sandbox.errors import BANK_ERRORS, RECORD_ERRORS
from tests.conftest import start_sandbox

TYPES = {"INVALID_REQUEST", "INVALID_INPUT", "BANK_ERROR", "RATE_LIMIT_EXCEEDED", "API_ERROR",
         "RECORD_ERROR", "AUTH_ERROR"}


def err(resp, code: str, status: int, error_type: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error_code"] == code, body
    assert body["error_type"] in TYPES
    if error_type:
        assert body["error_type"] == error_type
    assert body["http_code"] == status
    assert body["request_id"] == resp.headers["x-request-id"]
    assert isinstance(body["error_message"], str) and body["error_message"]
    assert body["display_message"] is None or isinstance(body["display_message"], str)
    return body


def create(api, **spec) -> dict:
    resp = api.post("sandbox/customers/create", json={"customers": [spec]})
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]["customers"][0]


def ready(api, record: str) -> None:
    for _ in range(200):
        rec = api.post("record/get", json={"record": record}).json()["data"]["record"]
        if all(s != "pending" for s in rec["status"].values()):
            return


# -- INVALID_REQUEST ----------------------------------------------------------------------

def test_invalid_request_codes(shared_sandbox):
    with shared_sandbox.api() as api:
        b = err(api.post("accounts/get", json={}), "MISSING_FIELDS", 400, "INVALID_REQUEST")
        assert "record or access_token or customer" in b["error_message"]
        assert b["display_message"] is None
        b = err(api.post("accounts/get", json={"record": "x", "colour": 1, "size": 2}),
                "UNKNOWN_FIELDS", 400)
        assert "colour" in b["error_message"] and "size" in b["error_message"]
        b = err(api.post("accounts/get", json={"record": "x", "limit": 101}),
                "INVALID_FIELD", 400)
        assert "limit" in b["error_message"]
        err(api.post("accounts/get", json={"record": "x", "page": "zero"}), "INVALID_FIELD", 400)
        customer = create(api)["customer"]
        err(api.post("accounts/get", json={"customer": customer, "page": "9" * 30}),
            "INVALID_FIELD", 400)
        err(api.post("accounts/get", content=b"{not json",
                     headers={"Content-Type": "application/json"}), "INVALID_BODY", 400)
        err(api.post("accounts/get", content=b"[1, 2]",
                     headers={"Content-Type": "application/json"}), "INVALID_BODY", 400)
        err(api.post("accounts/get", content=b'{"record": "x"}',
                     headers={"Content-Type": "text/plain"}), "INVALID_HEADERS", 400)
        err(api.post("no/such/endpoint", json={}), "NOT_FOUND", 404)
        err(api.delete("accounts/get"), "NOT_FOUND", 404)
    err(httpx.get(shared_sandbox.url + "/v3/anything"), "NOT_FOUND", 404)
    with shared_sandbox.api("production") as prod:
        err(prod.post("sandbox/customers/create", json={"customers": [{}]}), "SANDBOX_ONLY", 400)


# -- INVALID_INPUT ------------------------------------------------------------------------

def test_invalid_input_codes(shared_sandbox):
    url = shared_sandbox.url
    err(httpx.post(url + "/sandbox/v2/accounts/get", json={"record": "x"}),
        "INVALID_API_KEYS", 401, "INVALID_INPUT")
    err(httpx.post(url + "/sandbox/v2/accounts/get", json={"record": "x"},
                   headers={"Authorization": "Bearer sk_test_wrong"}), "INVALID_API_KEYS", 401)
    err(httpx.post(url + "/sandbox/v2/accounts/get", json={"record": "x"},
                   headers={"Authorization": "Basic abc"}), "INVALID_API_KEYS", 401)
    err(httpx.post(url + "/v2/accounts/get", json={"record": "x"},
                   headers={"Authorization": f"Bearer {shared_sandbox.sandbox_key}"}),
        "UNAUTHORIZED_ENVIRONMENT", 400, "INVALID_INPUT")
    err(httpx.post(url + "/sandbox/v2/accounts/get", json={"record": "x"},
                   headers={"Authorization": f"Bearer {shared_sandbox.production_key}"}),
        "UNAUTHORIZED_ENVIRONMENT", 400)
    with shared_sandbox.api() as api:
        err(api.post("item/get", json={"access_token": "access-sandbox-nope"}),
            "INVALID_TOKEN", 400)
        err(api.post("token/exchange", json={"public_token": "public-sandbox-nope"}),
            "INVALID_PUBLIC_TOKEN", 400)
        err(api.post("sandbox/customers/create", json={"customers": [{"products": ["crypto"]}]}),
            "INVALID_PRODUCT", 400)
        err(api.post("transactions/get", json={"account": "f" * 24}), "INVALID_ACCOUNT_ID", 400)
        err(api.post("sandbox/customers/create", json={"customers": [{"bank": "f" * 24}]}),
            "INVALID_BANK", 400)
        err(api.post("sandbox/banks/status", json={"bank": "nope", "status": "down"}),
            "INVALID_BANK", 400)


def test_public_token_of_other_environment(shared_sandbox):
    with shared_sandbox.api() as api, shared_sandbox.api("production") as prod:
        c = create(api)
        err(prod.post("token/exchange", json={"public_token": c["public_token"]}),
            "INVALID_PUBLIC_TOKEN", 400)


# -- RECORD_ERROR and BANK_ERROR through error_<CODE> passwords -----------------------------

@pytest.mark.parametrize("code", [c for c in RECORD_ERRORS] + list(BANK_ERRORS))
def test_error_password_makes_the_record_answer_the_code(shared_sandbox, code):
    with shared_sandbox.api() as api:
        c = create(api, password=f"error_{code}")
        ready(api, c["record"])
        kind = "BANK_ERROR" if code in BANK_ERRORS else "RECORD_ERROR"
        err(api.post("transactions/get", json={"record": c["record"]}), code, 400, kind)
        err(api.post("accounts/get", json={"record": c["record"]}), code, 400, kind)


def test_bank_status_answers_bank_errors(sandbox):
    with sandbox.api() as api:
        c = create(api)
        ready(api, c["record"])
        bank = api.post("record/get", json={"record": c["record"]}).json()["data"]["record"]
        for status, code in (("down", "BANK_DOWN"), ("not_responding", "BANK_NOT_RESPONDING"),
                             ("unavailable", "BANK_NOT_AVAILABLE"),
                             ("unsupported", "BANK_NO_LONGER_SUPPORTED")):
            r = api.post("sandbox/banks/status", json={"bank": bank["bank"], "status": status})
            assert r.json()["data"]["bank"]["status"] == status
            err(api.post("balance/get", json={"record": c["record"]}), code, 400, "BANK_ERROR")
            err(api.post("sandbox/customers/create",
                         json={"customers": [{"bank": bank["bank"]}]}), code, 400)
        api.post("sandbox/banks/status", json={"bank": bank["bank"], "status": "healthy"})
        assert api.post("balance/get", json={"record": c["record"]}).status_code == 200


def test_record_state_errors(sandbox):
    with sandbox.api() as api:
        only = create(api, products=["accounts"])
        ready(api, only["record"])
        err(api.post("transactions/get", json={"record": only["record"]}),
            "PRODUCTS_NOT_SUPPORTED", 400, "RECORD_ERROR")
        no_income = create(api, income=False)
        ready(api, no_income["record"])
        err(api.post("income/get", json={"record": no_income["record"]}),
            "PRODUCT_NOT_READY", 400, "RECORD_ERROR")
        c = create(api)
        ready(api, c["record"])
        assert api.post("sandbox/records/reset_login",
                        json={"record": c["record"]}).status_code == 200
        err(api.post("identity/get", json={"record": c["record"]}), "RECORD_LOGIN_REQUIRED", 400)


def test_micro_deposits_and_auth_errors(sandbox):
    with sandbox.api() as api:
        c = create(api, login_type="account_number")
        b = err(api.post("auth/get", json={"record": c["record"]}), "PRODUCT_NOT_READY", 400,
                "AUTH_ERROR")
        assert b["account_id"] == c["accounts"][0]
        err(api.post("transactions/get", json={"record": c["record"]}), "PRODUCT_NOT_READY",
            400, "RECORD_ERROR")
        for _ in range(3):
            err(api.post("sandbox/records/verify",
                         json={"record": c["record"], "amounts": [0.5, 0.7]}),
                "INCORRECT_DEPOSIT_AMOUNTS", 400, "RECORD_ERROR")
        # after three failures even the right amounts are too late: locked for good
        err(api.post("sandbox/records/verify",
                     json={"record": c["record"], "amounts": [0.01, 0.02]}),
            "TOO_MANY_VERIFICATION_ATTEMPTS", 400, "RECORD_ERROR")
        err(api.post("accounts/get", json={"record": c["record"]}),
            "TOO_MANY_VERIFICATION_ATTEMPTS", 400)

        good = create(api, login_type="account_number")
        v = api.post("sandbox/records/verify",
                     json={"record": good["record"], "amounts": [0.02, 0.01]})
        assert v.status_code == 200 and v.json()["data"]["verified"] is True
        ready(api, good["record"])
        assert api.post("auth/get", json={"record": good["record"]}).status_code == 200

        late = create(api, login_type="account_number")
        api.post("sandbox/clock/advance", json={"seconds": 7 * 86400 + 60})
        for _ in range(100):
            r = api.post("auth/get", json={"record": late["record"]})
            if r.json().get("error_code") == "VERIFICATION_EXPIRED":
                break
        b = err(r, "VERIFICATION_EXPIRED", 400, "AUTH_ERROR")
        assert b["account_id"] == late["accounts"][0]


# -- API_ERROR ------------------------------------------------------------------------------

def test_api_errors(sandbox):
    with sandbox.api() as api, sandbox.api("production") as prod:
        c = create(api, password="error_INTERNAL_SERVER_ERROR")
        ready(api, c["record"])
        b = err(api.post("accounts/get", json={"record": c["record"]}),
                "INTERNAL_SERVER_ERROR", 500, "API_ERROR")
        assert "Traceback" not in str(b)
        assert api.post("sandbox/maintenance", json={"on": True}).status_code == 200
        err(api.post("accounts/get", json={"record": c["record"]}), "PLANNED_MAINTENANCE", 500)
        err(prod.get("banks/list"), "PLANNED_MAINTENANCE", 500, "API_ERROR")
        assert api.post("sandbox/maintenance", json={"on": False}).status_code == 200
        assert prod.get("banks/list").status_code == 200


# -- RATE_LIMIT_EXCEEDED --------------------------------------------------------------------

ENDPOINT_CODES = [("accounts/get", "ACCOUNTS_LIMIT"), ("auth/get", "AUTH_LIMIT"),
                  ("identity/get", "IDENTITY_LIMIT"), ("income/get", "INCOME_LIMIT"),
                  ("record/get", "RECORD_GET_LIMIT"), ("transactions/get", "TRANSACTIONS_LIMIT"),
                  ("item/get", "RATE_LIMIT")]


def test_rate_limits_per_key_and_endpoint(tmp_path):
    box = start_sandbox(tmp_path / "limited", "--rate-limit", "5", "--addition-limit", "2")
    try:
        with box.api() as api, box.api("production") as prod:
            for path, code in ENDPOINT_CODES:
                answers = [api.post(path, json={"record": "r"}) for _ in range(8)]
                limited = [r for r in answers if r.status_code == 429]
                assert limited, path
                b = err(limited[0], code, 429, "RATE_LIMIT_EXCEEDED")
                assert b["error_code"] == code
                assert int(limited[0].headers["retry-after"]) >= 1
            # another key's bucket is untouched
            assert prod.post("record/get", json={"record": "r"}).status_code == 400
            create(api)
            create(api)
            err(api.post("sandbox/customers/create", json={"customers": [{}]}),
                "ADDITION_LIMIT", 429, "RATE_LIMIT_EXCEEDED")
    finally:
        box.server.stop()


def test_a_rate_under_one_a_second_allows_one_call_then_says_how_long(tmp_path):
    """A bucket once held `rate` tokens: under one, it never filled to a whole token."""
    box = start_sandbox(tmp_path / "slow", "--rate-limit", "0.2")
    try:
        with box.api() as api:
            first, second = (api.post("record/get", json={"record": "r"}) for _ in range(2))
            assert first.status_code == 400  # let through: no such record
            err(second, "RECORD_GET_LIMIT", 429, "RATE_LIMIT_EXCEEDED")
            assert 4 <= int(second.headers["retry-after"]) <= 5
    finally:
        box.server.stop()
