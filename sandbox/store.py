"""Sandbox state on disk: one SQLite file under --data-dir, so a restart loses nothing.

Documents are stored as JSON beside the columns that look them up. Bulk data
(transactions, balance histories) is not stored: datagen derives it from the seed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson


class SqliteFile:
    """One SQLite file in WAL mode, shared by the event loop and worker threads."""

    def __init__(self, path: Path, schema: Path) -> None:  # schema: a .sql file of tables
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("pragma journal_mode=wal")
        self._db.execute("pragma synchronous=normal")
        self._db.executescript(schema.read_text())

    def _run(self, sql: str, args: Iterable = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Many writes in one commit: all of them land, or none."""
        with self._lock:
            self._db.execute("begin")
            try:
                yield
            except BaseException:
                self._db.execute("rollback")
                raise
            self._db.execute("commit")


class Store(SqliteFile):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir / "sandbox.sqlite3", Path(__file__).with_name("store.sql"))

    def _docs(self, sql: str, args: tuple = ()) -> list[dict]:
        return [orjson.loads(r[0]) for r in self._run(sql, args)]

    def all(self, table: str) -> list[dict]:
        return self._docs(f"select doc from {table} order by rowid")

    # -- meta -----------------------------------------------------------------
    def get_meta(self, key: str, default=None):
        rows = self._run("select value from meta where key = ?", (key,))
        return orjson.loads(rows[0][0]) if rows else default

    def set_meta(self, key: str, value) -> None:
        self._run("insert into meta (key, value) values (?, ?) on conflict (key) "
                  "do update set value = excluded.value", (key, orjson.dumps(value)))

    # -- documents ------------------------------------------------------------
    def put(self, table: str, doc: dict, **columns: str) -> None:
        cols = ["id", "env", *columns, "doc"]
        self._run(f"insert or replace into {table} ({', '.join(cols)}) "
                  f"values ({', '.join('?' * len(cols))})",
                  [doc["_id"], doc["env"], *columns.values(), orjson.dumps(doc)])

    def get(self, table: str, env: str, doc_id: str) -> dict | None:
        docs = self._docs(f"select doc from {table} where id = ? and env = ?", (doc_id, env))
        return docs[0] if docs else None

    def find(self, table: str, env: str, column: str, value: str) -> list[dict]:
        return self._docs(f"select doc from {table} where {column} = ? and env = ? "
                          "order by rowid", (value, env))
