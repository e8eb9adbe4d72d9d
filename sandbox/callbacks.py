"""What the service tells a webhook: the payloads of product callbacks and connection events.

A product callback is the spec's common members (Callback payload table) and then its
product's own. Which callbacks follow which action is products.py's to decide; delivery is
webhooks.py's job.
"""

from __future__ import annotations

from .clock import iso

PROJECT = "sandbox-project"
OWNER = "sandbox-owner"


def common(*, env: str, rec: dict, bank: dict, method: str, code: str, now: float,
           callback_url: str, webhook_url: str | None, customer: dict | None = None,
           callback_type: str | None = None, status: str = "is_success", message: str = "") -> dict:
    """The members every product callback has (spec: Callback payload, common fields)."""
    ident = (customer or {}).get("identity") or {}
    return {"method": method, "callback_type": callback_type or method, "callback_code": code,
            "type": "CALLBACK", "code": code, "callbackURL": webhook_url,
            "callback_url": callback_url, "env": env, "status": status,
            "started_at": rec["created_at"], "ended_at": iso(now), "message": message,
            "meta": {}, "options": {}, "extras": {}, "meta_responses": None,
            "bankName": bank["name"], "bankSlug": bank["slug"], "bankId": bank["_id"],
            "bankType": "ind", "record": rec["_id"], "recordId": rec["_id"],
            "login_type": rec["login_type"], "customerId": rec["customer"],
            "customerEmail": list(ident.get("email", [])), "customerBvn": ident.get("bvn"),
            "identityType": "bvn", "country": "NG", "current_project": PROJECT, "owner": OWNER}


def identity_member(identity: dict, *, customer: str, bank: str, env: str, details: str,
                    ident_id: str) -> dict:
    return {"id": ident_id, **identity, "options": {}, "details": details,
            "customer": customer, "bank": bank, "env": env, "projects": [PROJECT]}


def account_member(account: dict) -> dict:
    return {k: account[k] for k in ("_id", "bank", "env", "nuban", "created_at", "last_updated",
                                    "customer", "name", "type", "currency")}


def balance_member(balance: dict) -> dict:
    return {**{k: balance[k] for k in ("_id", "available_balance", "ledger_balance", "currency",
                                       "customer", "env", "created_at", "last_updated")},
            "$addToSet": {"owners": OWNER}}


def payment_object(*, pid: str, rec: dict, bank: dict, amount: int, ok: bool,
                   debit_account: dict, available: float | None, now: float, env: str,
                   ref: str, schedule: dict | None) -> dict:
    stamp = iso(now)
    return {"_id": pid, "record": rec["_id"], "amount": amount,
            "available_balance": available, "bank": bank["_id"],
            "bank_response": {
                "CODE": "00" if ok else "51",
                "MESSAGE": "Approved or completed successfully" if ok else "Insufficient funds",
                "SESSIONID": ref, "ERROR": None if ok else "INSUFFICIENT_FUNDS",
                "STATUSCODE": "00" if ok else "51", "STATUSMESSAGE": "SUCCESS" if ok else "FAILED",
                "BANKDOWNTIMEMESSAGE": None, "DestAccName": "SANDBOX MERCHANT",
                "NIBSSRESPONSECODE": "00" if ok else "51"},
            "created_at": stamp, "credit_account": "0000000000",
            "debit_account": debit_account["nuban"], "currency": "NGN",
            "current_project": PROJECT, "customer": rec["customer"], "email": None, "env": env,
            "error": None if ok else "Insufficient funds",
            "error_response": None if ok else {"code": 1013,
                                               "message": "Insufficient Funds - Direct Debit"},
            "fee": round(min(amount * 0.015, 200_000)), "last_updated": stamp, "link": None,
            "meta": {}, "meta_responses": None, "owner": OWNER, "ref": ref,
            "schedule": schedule, "source": "link", "status": "success" if ok else "failed"}


def user_event(event: str, message: str, rec: dict, data: dict) -> dict:
    """A connection event (USER_DISCONNECT, USER_REAUTH) rather than a product callback."""
    return {"event": event, "message": message, "record": rec["_id"], "env": rec["env"],
            "data": data}
