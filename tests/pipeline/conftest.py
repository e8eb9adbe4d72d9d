"""Callback and connection-event bodies shaped as the service sends them (spec, INTERFACE.md)."""

from __future__ import annotations

import itertools
import secrets

import pytest

_n = itertools.count()


def callback(record: str, method: str = "ACCOUNTS", code: str = "ACCOUNTS_SUCCESS", *,
             status: str = "is_success", ended_at: str | None = None, account: str | None = None,
             customer: str = "cust1", **extra) -> dict:
    body = {
        "method": method, "callback_type": method, "callback_code": code, "type": "CALLBACK",
        "code": code, "env": "production-sandbox", "status": status,
        "started_at": "2026-01-01T00:00:00.000Z",
        "ended_at": ended_at or f"2026-01-01T00:{next(_n) % 60:02d}:00.000Z",
        "message": "", "meta": {}, "options": {}, "extras": {}, "meta_responses": None,
        "bankName": "Sandbox Bank", "record": record, "recordId": record,
        "customerId": customer, "customerEmail": [], "country": "NG", **extra,
    }
    if account:
        body["accountId"] = account
        body["nuban"] = "0123456789"
    return body


def disconnect(customer: str, at: str, accounts: list[str] | None = None) -> dict:
    return {"message": "user disconnected", "event": "USER_DISCONNECT",
            "data": {"accounts": accounts or [], "customer": customer, "disconnected_at": at}}


def reauth(customer: str, at: str) -> dict:
    return {"message": "reauth needed", "event": "USER_REAUTH",
            "data": {"customer": customer, "deauthorized_at": at}}


def record_id() -> str:
    return secrets.token_hex(12)


@pytest.fixture
def make():
    """The body factories, for tests that would rather not import across test folders."""
    class Make:
        pass
    m = Make()
    m.callback, m.disconnect, m.reauth, m.record_id = callback, disconnect, reauth, record_id
    return m
