"""Read access to the receiver's inbox for assets that land what callbacks carry.

Payments arrive only as callbacks (the payment object rides in the PAYMENT payload), and
record status comes from connection events, so these assets read the inbox file directly,
read-only, never taking the receiver's write lock.
"""

import sqlite3
from contextlib import closing
from pathlib import Path

import orjson
from dagster import ConfigurableResource

PAYMENT_METHODS = ("PAYMENT", "PAYMENT_RECURRING")


class CallbackLog(ConfigurableResource):
    """The inbox (pipeline/inbox.py's SQLite file), opened read-only."""

    inbox_path: str

    def _connect(self) -> sqlite3.Connection:
        path = Path(self.inbox_path)
        if not path.exists():
            raise FileNotFoundError(f"no inbox at {path}: is the receiver writing there?")
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    def payloads(self, record_id: str, methods: tuple[str, ...]) -> list[dict]:
        """Every stored callback of the record with one of `methods`, oldest first."""
        marks = ", ".join("?" for _ in methods)
        with closing(self._connect()) as db:
            rows = db.execute(f"select body from events where record = ? and method in ({marks})"
                              " order by id", (record_id, *methods)).fetchall()
        return [orjson.loads(r[0]) for r in rows]

    def record_status(self) -> list[dict]:
        """Each record's connection status and its last callback, for the `records` table."""
        with closing(self._connect()) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "select r.record, r.status, r.status_at, p.method, p.code, p.occurred_at"
                " from records r left join record_products p on p.record = r.record"
                " and p.event = (select max(event) from record_products q"
                "                where q.record = r.record)"
                " order by r.record").fetchall()
        return [dict(r) for r in rows]
