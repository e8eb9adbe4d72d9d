"""Payments of each record, from the payment objects that PAYMENT callbacks carry.

The service offers no payments list endpoint: the callbacks are the source. A payment seen
in several callbacks (success after pending, a redelivery) is kept once, latest state wins.
The service sends payment amounts and fees as integer kobo; the lake holds both as exact
naira, `decimal(18,2)`, the unit of every other amount (docs/lake.md).
"""

import pyarrow as pa
from dagster import AssetExecutionContext

from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.tables import MONEY, UTC_MS, schema
from resources.wire import money_from_kobo

from .batch import Batch
from .publish import Landing, Run, product
from .schemas import Payments, validate

PAYMENT_METHODS = ("PAYMENT", "PAYMENT_RECURRING")  # the callbacks that carry payments
SCHEMA = schema("payments")


def _text(value) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        value = value.get("_id") or value.get("nuban") or value.get("account")
    return None if value is None else str(value)


def _kobo(value, what: str) -> int | None:
    """A payment amount as the service sends it: whole kobo (a JSON integer, or a float that
    is one, as some payloads carry)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"payment {what} {value!r} is not a whole number of kobo")
    return int(value)


def payment_row(callback: dict) -> dict | None:
    payment = callback.get("payment")
    if not isinstance(payment, dict):
        return None
    bank = payment.get("bank_response") if isinstance(payment.get("bank_response"), dict) else {}
    schedule = callback.get("schedule") if isinstance(callback.get("schedule"), dict) else {}
    return {
        "payment_id": _text(payment.get("_id") or callback.get("paymentId")),
        "callback_type": callback.get("callback_type"),
        "status": _text(payment.get("status")) or (
            "success" if callback.get("status") == "is_success" else "failed"),
        "amount": _kobo(payment.get("amount"), "amount"),
        "fee": _kobo(payment.get("fee"), "fee"),
        "currency": _text(payment.get("currency")),
        "ref": _text(payment.get("ref")),
        "debit_account": _text(payment.get("debit_account")),
        "credit_account": _text(payment.get("credit_account")),
        "source": _text(payment.get("source")),
        "interbank_response_code": next((_text(v) for k, v in bank.items()  # NIBSS...
                                         if k.endswith("RESPONSECODE") and k != "RESPONSECODE"),
                                        None),
        "bank_response_code": _text(bank.get("CODE")),
        "bank_response_message": _text(bank.get("MESSAGE")),
        "schedule_interval": _text(schedule.get("interval")),
        "created_at": payment.get("created_at"),
        "last_updated": payment.get("last_updated"),
    }


def to_table(callbacks: list[dict]) -> pa.Table:
    latest: dict[str, dict] = {}
    for cb in callbacks:  # oldest first: a later callback of the same payment wins
        row = payment_row(cb)
        if row is not None:
            latest[row["payment_id"]] = row
    # a PAYMENT_RECURRING callback carries only the schedule: it marks the payments it made
    for cb in callbacks:
        schedule = cb.get("schedule")
        if cb.get("callback_type") != "PAYMENT_RECURRING" or not isinstance(schedule, dict):
            continue
        made = [*(schedule.get("history") or []), schedule.get("paymentId")]
        for pid in filter(None, map(_text, made)):
            if pid in latest:
                latest[pid]["callback_type"] = "PAYMENT_RECURRING"
                latest[pid]["schedule_interval"] = _text(schedule.get("interval"))
    rows = list(latest.values())
    cols = {}
    for field in SCHEMA:
        values = [r[field.name] for r in rows]
        if field.type == MONEY:
            kobo = pa.array(values, pa.int64())
            cols[field.name] = money_from_kobo(
                kobo.fill_null(0).to_numpy(), kobo.is_valid().to_numpy(zero_copy_only=False))
        elif field.type == UTC_MS:
            cols[field.name] = pa.array(values, pa.string()).cast(field.type)
        else:
            cols[field.name] = pa.array(values, field.type)
    return pa.table(cols, schema=SCHEMA)


@product(description="Payments (one-off and recurring) made from the record's accounts, "
                     "from the PAYMENT callbacks")
def payments(context: AssetExecutionContext, batch: Batch, lake: Lake, inbox: InboxResource):
    def land(record_id: str, run: Run) -> Landing:
        table = to_table(run.inbox.payloads(record_id, PAYMENT_METHODS))
        validate(Payments, table, f"payments of record {record_id}")
        return Landing(record_id, published=True, row_count=table.num_rows,
                       rows={"payments": table})
    return land
