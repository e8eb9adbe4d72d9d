"""Read access to the receiver's inbox for assets that land what callbacks carry.

Payments arrive only as callbacks (the payment object rides in the PAYMENT payload), and
record status comes from connection events, so these assets read the inbox file directly,
read-only, never taking the receiver's write lock. An inbox in Postgres is read through
pipeline/inbox.py (where readers never wait for writers).
"""

import sqlite3
from contextlib import closing
from pathlib import Path

import orjson
from dagster import ConfigurableResource
from pydantic import Field

from pipeline.inbox import PAYLOADS, PRODUCTS, is_database_url, open_inbox

PAYMENT_METHODS = ("PAYMENT", "PAYMENT_RECURRING")


class CallbackLog(ConfigurableResource):
    """The inbox (pipeline/inbox.py's SQLite file, opened read-only, or its database)."""

    inbox_path: str | None = Field(default=None, description=(
        "The inbox file or postgresql:// URL (better without its password: this value shows "
        "in the UI); by default LEDGERLAKE_INBOX, read when it is opened"))

    def _where(self) -> str | Path:
        if self.inbox_path is not None:
            return self.inbox_path
        from pipeline.config import inbox_from_env

        return inbox_from_env()

    def _connect(self) -> sqlite3.Connection:
        path = Path(self._where())
        if not path.exists():
            raise FileNotFoundError(f"no inbox at {path}: is the receiver writing there?")
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    def payloads(self, record_id: str, methods: tuple[str, ...]) -> list[dict]:
        """Every stored callback of the record with one of `methods`, oldest first."""
        if is_database_url(where := self._where()):
            with open_inbox(where) as inbox:
                return inbox.payloads(record_id, methods)
        with closing(self._connect()) as db:
            rows = db.execute(PAYLOADS.format(marks=",".join("?" * len(methods))),
                              (record_id, *methods)).fetchall()
        return [orjson.loads(r[0]) for r in rows]

    def record_status(self) -> list[dict]:
        """Each record's connection status, its last callback, and its last per method."""
        if is_database_url(where := self._where()):
            with open_inbox(where) as inbox:
                read = inbox.records()
            states = [(r.record, r.status, r.status_at) for r in read.values()]
            products = [(r.record, method, p.code, p.occurred_at, p.event)
                        for r in read.values() for method, p in r.products.items()]
        else:
            with closing(self._connect()) as db:
                db.execute("begin")  # one snapshot: both reads
                states = db.execute("select record, status, status_at from records"
                                    " order by record").fetchall()
                products = [(record, method, code, occurred_at, event)
                            for record, method, code, _, event, occurred_at, _ in db.execute(
                                PRODUCTS.format(where=""))]
        per_record: dict[str, list[tuple]] = {}
        for record, method, code, occurred_at, event in products:
            per_record.setdefault(record, []).append((event, method, code, occurred_at))
        out = []
        for record, status, status_at in states:
            seen = sorted(per_record.get(record, []))  # by inbox event id: the last is newest
            last = seen[-1] if seen else (None, None, None, None)
            out.append({"record": record, "status": status, "status_at": status_at,
                        "method": last[1], "code": last[2], "occurred_at": last[3],
                        "methods": {m: (c, at) for _, m, c, at in seen}})
        return out
