"""Sandbox state on disk: one SQLite file under --data-dir, so a restart loses nothing.

Documents are stored as JSON beside the columns that look them up. Bulk data
(transactions, balance histories) is not stored: datagen derives it from the seed.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import orjson

SCHEMA = """
create table if not exists meta (key text primary key, value blob not null);
create table if not exists customers (
    id text primary key, env text not null, doc blob not null);
create table if not exists records (
    id text primary key, env text not null, customer text not null, doc blob not null);
create index if not exists records_customer on records (customer);
create table if not exists accounts (
    id text primary key, env text not null, record text not null, doc blob not null);
create index if not exists accounts_record on accounts (record);
create table if not exists deliveries (
    id integer primary key autoincrement,
    env text not null,
    record text,
    method text,
    url text not null,
    token text,
    payload blob not null,
    first_attempt real,
    next_attempt real not null,
    attempts blob not null default '[]',
    state text not null default 'pending'
);
create index if not exists deliveries_due on deliveries (state, next_attempt);
"""


class Store:
    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "sandbox.sqlite3"
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("pragma journal_mode=wal")
        self._db.execute("pragma synchronous=normal")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- meta -----------------------------------------------------------------
    def get_meta(self, key: str, default=None):
        with self._lock:
            row = self._db.execute("select value from meta where key = ?", (key,)).fetchone()
        return orjson.loads(row[0]) if row else default

    def set_meta(self, key: str, value) -> None:
        with self._lock:
            self._db.execute(
                "insert into meta (key, value) values (?, ?) "
                "on conflict (key) do update set value = excluded.value",
                (key, orjson.dumps(value)),
            )

    # -- documents ------------------------------------------------------------
    def put(self, table: str, doc: dict, **columns: str) -> None:
        cols = ["id", "env", *columns, "doc"]
        values = [doc["_id"], doc["env"], *columns.values(), orjson.dumps(doc)]
        sql = (
            f"insert or replace into {table} ({', '.join(cols)}) "
            f"values ({', '.join('?' for _ in cols)})"
        )
        with self._lock:
            self._db.execute(sql, values)

    def get(self, table: str, env: str, doc_id: str) -> dict | None:
        with self._lock:
            row = self._db.execute(
                f"select doc from {table} where id = ? and env = ?", (doc_id, env)
            ).fetchone()
        return orjson.loads(row[0]) if row else None

    def find(self, table: str, env: str, column: str, value: str) -> list[dict]:
        with self._lock:
            rows = self._db.execute(
                f"select doc from {table} where {column} = ? and env = ? order by rowid",
                (value, env),
            ).fetchall()
        return [orjson.loads(r[0]) for r in rows]

    # -- webhook deliveries ---------------------------------------------------
    def add_delivery(self, env: str, record: str | None, method: str | None, url: str,
                     token: str | None, payload: dict, due: float) -> int:
        with self._lock:
            cur = self._db.execute(
                "insert into deliveries (env, record, method, url, token, payload, next_attempt)"
                " values (?, ?, ?, ?, ?, ?, ?)",
                (env, record, method, url, token, orjson.dumps(payload), due),
            )
            return cur.lastrowid

    def due_deliveries(self, now: float, limit: int = 100) -> list[dict]:
        with self._lock:
            rows = self._db.execute(
                "select id, env, record, method, url, token, payload, first_attempt, attempts "
                "from deliveries where state = 'pending' and next_attempt <= ? "
                "order by next_attempt, id limit ?",
                (now, limit),
            ).fetchall()
        keys = ("id", "env", "record", "method", "url", "token", "payload", "first_attempt",
                "attempts")
        out = []
        for row in rows:
            d = dict(zip(keys, row, strict=True))
            d["payload"] = orjson.loads(d["payload"])
            d["attempts"] = orjson.loads(d["attempts"])
            out.append(d)
        return out

    def finish_attempt(self, delivery_id: int, *, first_attempt: float, attempts: list,
                       state: str, next_attempt: float) -> None:
        with self._lock:
            self._db.execute(
                "update deliveries set first_attempt = ?, attempts = ?, state = ?, "
                "next_attempt = ? where id = ?",
                (first_attempt, orjson.dumps(attempts), state, next_attempt, delivery_id),
            )

    def deliveries_for(self, env: str, record: str, method: str | None = None) -> list[dict]:
        sql = "select id, method, payload, attempts, state from deliveries where env = ? and record = ?"
        args: list = [env, record]
        if method:
            sql += " and method = ?"
            args.append(method)
        with self._lock:
            rows = self._db.execute(sql + " order by id", args).fetchall()
        return [
            {"id": r[0], "method": r[1], "payload": orjson.loads(r[2]),
             "attempts": orjson.loads(r[3]), "state": r[4]}
            for r in rows
        ]
