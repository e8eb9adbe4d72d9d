"""The inbox: every callback the receiver accepted, durable before it is acknowledged.

SQLite in WAL mode. Each event is stored once under its identity (the fields that name it,
INTERFACE.md), so a redelivery is a no-op; ids grow monotonically for sensor cursors.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

RECORD_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

SCHEMA = """
create table if not exists events (
    id integer primary key autoincrement,
    identity text not null unique,
    received_at real not null,
    kind text not null,
    method text,
    code text,
    status text,
    record text,
    account text,
    body blob not null
);
create index if not exists events_record on events (record);
create table if not exists dead_letters (
    id integer primary key autoincrement,
    received_at real not null,
    reason text not null,
    body blob not null
);
"""


class InvalidEvent(ValueError):
    """A body that is not a callback or connection event we can act on."""


@dataclass(frozen=True)
class Event:
    id: int
    kind: str  # "callback" or "connection"
    method: str | None
    code: str | None
    status: str | None
    record: str | None
    account: str | None
    body: dict


def describe(payload: object) -> dict:
    """The fields that name an event; raises InvalidEvent for anything else."""
    if not isinstance(payload, dict):
        raise InvalidEvent("body is not a JSON object")
    if payload.get("type") == "CALLBACK" or "callback_code" in payload:
        method, code = payload.get("method"), payload.get("callback_code") or payload.get("code")
        if not isinstance(method, str) or not isinstance(code, str):
            raise InvalidEvent("callback without method and callback_code")
        record = payload.get("record") or payload.get("recordId")
        if not isinstance(record, str) or not RECORD_ID.fullmatch(record):
            raise InvalidEvent("callback record id is missing or not of the form "
                               "^[A-Za-z0-9_-]{1,64}$")
        account = payload.get("accountId")
        fields = [method, code, record, account, payload.get("started_at"),
                  payload.get("ended_at")]
        return {"kind": "callback", "method": method, "code": code,
                "status": payload.get("status"), "record": record,
                "account": account if isinstance(account, str) else None,
                "identity": fields}
    event = payload.get("event")
    if isinstance(event, str) and isinstance(payload.get("data"), dict):
        data = payload["data"]
        record = payload.get("record") or data.get("record")
        if record is not None and (not isinstance(record, str) or not RECORD_ID.fullmatch(record)):
            raise InvalidEvent("event record id is not of the form ^[A-Za-z0-9_-]{1,64}$")
        stamp = data.get("disconnected_at") or data.get("deauthorized_at")
        return {"kind": "connection", "method": event, "code": event, "status": None,
                "record": record, "account": None,
                "identity": [event, data.get("customer"), record, stamp]}
    raise InvalidEvent("body has neither a callback's method and callback_code "
                       "nor a connection event's event and data")


class Inbox:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("pragma journal_mode=wal")
        self._db.execute("pragma synchronous=full")  # committed means on disk
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, payload: dict) -> tuple[int, bool]:
        """Store the event once; return (its id, whether it was new)."""
        info = describe(payload)
        identity = hashlib.sha256(orjson.dumps(info["identity"])).hexdigest()
        with self._lock:
            cur = self._db.execute(
                "insert into events (identity, received_at, kind, method, code, status, record,"
                " account, body) values (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " on conflict (identity) do nothing returning id",
                (identity, time.time(), info["kind"], info["method"], info["code"],
                 info["status"], info["record"], info["account"], orjson.dumps(payload)),
            )
            row = cur.fetchone()
            if row:
                return row[0], True
            (existing,) = self._db.execute(
                "select id from events where identity = ?", (identity,)).fetchone()
            return existing, False

    def dead_letter(self, reason: str, body: bytes) -> None:
        with self._lock:
            self._db.execute("insert into dead_letters (received_at, reason, body) values (?,?,?)",
                             (time.time(), reason, body))

    def after(self, cursor: int, limit: int = 500) -> list[Event]:
        with self._lock:
            rows = self._db.execute(
                "select id, kind, method, code, status, record, account, body from events"
                " where id > ? order by id limit ?", (cursor, limit)).fetchall()
        return [Event(*r[:7], body=orjson.loads(r[7])) for r in rows]

    def count(self) -> int:
        with self._lock:
            return self._db.execute("select count(*) from events").fetchone()[0]
