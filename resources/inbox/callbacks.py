"""What a callback says, before any database: `describe` reads the fields that name an event
(or refuses the body, naming the fault), `kept_body` is the body as the inbox keeps it, and
`scrubbed` a refused body as the dead letters keep it. The inbox (store.py) stores them.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from datetime import UTC, datetime

import orjson

RECORD_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # methods, codes, statuses, event names
CANONICAL_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", re.ASCII)  # UTC, ms

CONNECTED, DISCONNECTED, REAUTH_REQUIRED = "connected", "disconnected", "reauth_required"
# connection events that move a record's status, and the data member that dates them
STATUS_EVENTS = {"USER_DISCONNECT": (DISCONNECTED, "disconnected_at"),
                 "USER_REAUTH": (REAUTH_REQUIRED, "deauthorized_at")}
RECONNECT = ("AUTH", "AUTH_SUCCESS")  # a newer successful login makes the record usable again

# Members that tell two occurrences of one method on one record apart (docs/interface.md,
# "Event identity"): two payments in one window are two events, not a redelivery. Each is part
# of the identity only when the payload carries it, so the identity of every other callback is
# what it always was.
NAMING_MEMBERS: dict[str, tuple[str, ...]] = {
    "PAYMENT": ("paymentId", "link", "schedule", "garnishment", "payment"),
    "PAYMENT_RECURRING": ("paymentId", "link", "schedule", "garnishment", "payment"),
    "TRANSACTIONS": ("newTransactions",),
    "PERIODIC_TRANSACTIONS": ("newTransactions",),
}
# of a nested payment object, only what names it (its other members may be restated)
PAYMENT_NAMES = ("_id", "status")

# Members of a callback that hold personal data, as paths into the body, for every kind the
# spec defines (spec, "Callback (webhook) payload"; the sandbox's sandbox/callbacks.py builds
# them): every callback's customer emails and BVN; an account-level callback's account number;
# IDENTITY's whole identity; ACCOUNTS' account number, holder's and customer's names;
# PAYMENT's email and the payee's name. The inbox keeps the body without their values:
# nothing reads them from it (the identity and accounts assets fetch from the service), and
# callbacks are kept for good (docs/privacy.md). A payment's accounts, which the payments
# table is made of (assets/payments.py), are kept masked to their last 4 digits.
PERSONAL_MEMBERS = ("customerEmail", "customerBvn", "identity", "nuban", "account.nuban",
                    "account.name", "account.customer.name", "payment.email",
                    "payment.bank_response.DestAccName")
MASKED_MEMBERS = ("payment.debit_account", "payment.credit_account")
# each match starts where a run of such characters starts (the lookbehind): without it a long
# run with no "@" is scanned again from each of its characters, and one 1 MiB body held the
# receiver's writer for hours
_EMAIL = re.compile(rb"(?<![\w.+-])[\w.+-]+@[\w-]+(\.[\w-]+)+")
_DIGITS = re.compile(rb"\+?\d{10,}")  # BVN, NIN, phones, account numbers
# in a body that does not parse: the string values of members named like a personal one
_NAMED = re.compile(rb'"(\w*name|nuban|\w*_account|email)"(\s*):(\s*)"(?:[^"\\]|\\.)*"',
                    re.IGNORECASE)


class InvalidEvent(ValueError):
    """A body that is not a callback or connection event we can act on."""


def utc_stamp(ts: float) -> str:
    """Seconds since the epoch as the inbox writes a time: UTC, milliseconds, Z (they sort)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _name(value, what: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise InvalidEvent(f"{what} is missing or not of the form ^[A-Za-z0-9_.-]{{1,64}}$")
    return value


def _record_id(value, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not RECORD_ID.fullmatch(value):
        raise InvalidEvent(f"{what} is not of the form ^[A-Za-z0-9_-]{{1,64}}$")
    return value


def _stamp(value, what: str) -> str | None:
    """An ISO 8601 timestamp, normalised to UTC with milliseconds and Z, so that they sort."""
    if value is None:
        return None
    try:
        if not isinstance(value, str) or len(value) > 64:
            raise ValueError
        if CANONICAL_STAMP.fullmatch(value):  # as the service writes them: checked, kept
            datetime.fromisoformat(value[:-1])
            return value
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidEvent(f"{what} must be an ISO 8601 timestamp or null") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return utc_stamp(when.timestamp())


def _naming_members(method: str, payload: dict) -> dict | None:
    """The members of `payload` that name this occurrence of `method`, canonical (sorted
    keys), or None when it carries none of them."""
    out = {}
    for key in NAMING_MEMBERS.get(method, ()):
        if key not in payload:
            continue
        value = payload[key]
        if key == "payment" and isinstance(value, dict):
            value = {k: value.get(k) for k in PAYMENT_NAMES}
        out[key] = value
    if not out:
        return None
    try:  # canonical: the same members in another order are the same event
        return orjson.loads(orjson.dumps(out, option=orjson.OPT_SORT_KEYS))
    except (TypeError, RecursionError):
        raise InvalidEvent(f"{method} callback members {sorted(out)} are not plain JSON "
                           "or are nested too deeply") from None


def _last4(value: str) -> str:
    """`******6285`: the last 4 characters of a long value, the rest starred (as
    resources/privacy.py's mask_digits)."""
    keep = value[-4:] if len(value) > 6 else ""
    return "*" * (len(value) - len(keep)) + keep


def kept_body(payload: dict) -> bytes:
    """The body as the inbox keeps it: its personal members' values null, a payment's
    accounts masked (`PERSONAL_MEMBERS`)."""
    kept = payload.copy()  # its members stay in their order; nested objects copied as changed
    for path in PERSONAL_MEMBERS + MASKED_MEMBERS:
        *parents, leaf = path.split(".")
        at = kept
        for key in parents:
            if not isinstance(at.get(key), dict):
                break
            at[key] = at = at[key].copy()
        else:
            if leaf in at:
                value = at[leaf]
                at[leaf] = None if path in PERSONAL_MEMBERS or not isinstance(value, str) \
                    else _last4(value)
    return orjson.dumps(kept)


def scrubbed(raw: bytes) -> bytes:
    """A refused body as the dead letters keep it: its personal members nulled if it parses;
    in any case members named like a personal one nulled, and anything shaped like an email
    or a long number masked."""
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        payload = None
    if isinstance(payload, dict):
        with contextlib.suppress(orjson.JSONEncodeError):  # deeper than orjson writes (255)
            raw = kept_body(payload)
    raw = _NAMED.sub(rb'"\1"\2:\3null', raw)
    return _DIGITS.sub(b"***", _EMAIL.sub(b"***@***", raw))


def describe(payload: object) -> dict:
    """The fields that name an event; raises InvalidEvent, naming the fault, for anything else."""
    if not isinstance(payload, dict):
        raise InvalidEvent("body is not a JSON object")
    if payload.get("type") == "CALLBACK" or "callback_code" in payload or "method" in payload:
        return _callback(payload)
    if payload.get("event") is not None or payload.get("data") is not None:
        return _connection(payload)
    raise InvalidEvent("body has neither a callback's method and callback_code "
                       "nor a connection event's event and data")


def _callback(payload: dict) -> dict:
    method = _name(payload.get("method"), "callback method")
    code = _name(payload.get("callback_code", payload.get("code")), "callback_code")
    record = _record_id(payload.get("record"), "callback record")
    record_alt = _record_id(payload.get("recordId"), "callback recordId")
    if record and record_alt and record != record_alt:
        raise InvalidEvent("callback record and recordId disagree")
    record = record or record_alt
    account = _record_id(payload.get("accountId"), "callback accountId")
    started, ended = payload.get("started_at"), payload.get("ended_at")
    ended_stamp = _stamp(ended, "callback ended_at")
    occurred = ended_stamp or _stamp(started, "callback started_at")
    if ended_stamp:
        _stamp(started, "callback started_at")  # checked even when ended_at is there
    customer = payload.get("customerId")
    # serverResponse and the rest may differ between deliveries of one event
    identity = ["callback", method, code, record, account, started, ended]
    naming = _naming_members(method, payload)
    if naming:
        identity.append(naming)
    return {"kind": "callback", "method": method, "code": code,
            "status": _name(payload.get("status"), "callback status", optional=True),
            "record": record, "account": account,
            # a customer no database text can hold (a NUL) is no customer, as a number is not
            "customer": customer if isinstance(customer, str) and "\x00" not in customer
            else None,
            "occurred_at": occurred, "identity": identity}


def _connection(payload: dict) -> dict:
    event = _name(payload.get("event"), "connection event")
    data = payload.get("data")
    if not isinstance(data, dict):
        raise InvalidEvent("connection event without a data object")
    customer = data.get("customer")
    if customer is not None and not isinstance(customer, str):
        raise InvalidEvent("connection event customer must be a string")
    if customer is not None and "\x00" in customer:  # Postgres text cannot hold one
        raise InvalidEvent("connection event customer holds a NUL character")
    record = _record_id(payload.get("record", data.get("record")), "connection event record")
    accounts = data.get("accounts") or []
    if not isinstance(accounts, list):
        raise InvalidEvent("connection event accounts must be a list of account ids")
    accounts = [_record_id(a, "connection event account") for a in accounts]
    stamp_key = STATUS_EVENTS.get(event, (None, None))[1]
    stamp = data.get(stamp_key) if stamp_key else next(
        (v for k, v in sorted(data.items()) if k.endswith("_at")), None)
    if stamp_key:
        occurred = _stamp(stamp, f"connection event {stamp_key}")
    else:  # an event we do not know yet: a date we cannot read is no reason to refuse it
        try:
            occurred = _stamp(stamp, "timestamp")
        except InvalidEvent:
            occurred = stamp = None
    if customer is None and record is None and not accounts:
        raise InvalidEvent("connection event names no customer, record or accounts")
    # an event we do not know and cannot date is named by all of its data
    try:
        extra = None if stamp else hashlib.sha256(
            orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()
    except (TypeError, RecursionError):  # deeper than orjson writes (255 levels)
        raise InvalidEvent("connection event data is nested too deeply") from None
    identity = ["connection", event, customer, stamp, extra, record]
    if accounts:  # one customer's disconnects of two records at one time are two events
        identity.append(sorted(accounts))
    return {"kind": "connection", "method": event, "code": event, "status": None,
            "record": record, "account": None, "customer": customer,
            "accounts": accounts, "occurred_at": occurred,
            # the record too, when named: one customer's two records are two events
            "identity": identity}

