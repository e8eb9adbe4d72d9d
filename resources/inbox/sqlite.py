"""The inbox in a SQLite file, the embedded default: the dialect `store.Inbox` uses. WAL mode,
`synchronous=full`, so a committed event survives a killed process or a lost machine's power.
Writers, in any process, take turns on SQLite's own write lock; the erasure lock is a pair of
files beside the inbox.
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import threading
from pathlib import Path

import orjson

from .errors import InboxMissing

# An event's identity is unique within its record (the identity names the record), which also
# serves reads by record. The few recordless events have an index of their own.
SCHEMA = Path(__file__).with_name("schema.sql").read_text().format(
    serial="integer primary key autoincrement", integer="integer", real="real", text="text",
    blob="blob", events_identity="create unique index if not exists events_identity on events"
    " (record, identity) where record is not null;\ncreate unique index if not exists"
    " events_identity_recordless on events (identity) where record is null")


def _file_id(path: Path) -> tuple[int, int]:
    """The device and inode of the file at `path` (a replaced file has another)."""
    st = path.stat()
    return st.st_dev, st.st_ino


class Sqlite:
    """One SQLite connection, used from any thread (serialised by `lock`)."""

    LOST = ()  # what a lost connection raises: a file's is never lost, nothing is tried again

    def __init__(self, path: str | Path, create: bool) -> None:
        """Open the file at `path`; `create=True` (the receiver's) makes it if missing. Any
        other reader of a missing inbox gets InboxMissing naming the path, not a new empty
        file that hides a wrong setting."""
        self.path = Path(path)
        self.shown = str(self.path.resolve())
        if not create and not self.path.is_file():
            raise InboxMissing(f"no inbox at {self.path}: start the receiver with --inbox "
                               f"{self.path} (or set LEDGERLAKE_INBOX to the file it writes)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        # a reader or a second writer waits for the lock instead of failing
        self._con = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                    timeout=30.0)
        self.execute, self.executemany = self._con.execute, self._con.executemany
        try:
            self.execute("pragma journal_mode=wal")
            self.execute("pragma synchronous=full")  # committed means on disk
            self.execute("pragma secure_delete=on")  # what forget deletes is overwritten
            if not self.execute("select 1 from sqlite_master where type = 'table'"
                                " and name = 'forgotten'").fetchone():
                self.begin_write()  # two openers of a new file make its tables once
                for statement in SCHEMA.split(";"):
                    self.execute(statement)
                self.execute("commit")
        except BaseException:
            self._con.close()
            raise
        self._file = _file_id(self.path)  # the file the writer has open, for check()

    def close(self) -> None:
        with self.lock:
            self._con.close()

    def check(self) -> None:
        """Raise unless the path still names the file this inbox opened and it answers one
        indexed read through a connection of its own: unlike the writer's, it fails when the
        file was deleted or replaced under a running receiver (whose acknowledged callbacks
        would then be lost at its restart). Read-only, so it never creates a file."""
        try:
            same = _file_id(self.path) == self._file
        except FileNotFoundError:
            same = False
        if not same:
            raise InboxMissing(f"{self.shown} is no longer the file the inbox opened: deleted, "
                               "moved or replaced while open")
        con = sqlite3.connect(f"{Path(self.shown).as_uri()}?mode=ro", uri=True, timeout=2.0)
        try:
            con.execute("select max(id) from events").fetchone()
        finally:
            con.close()

    def among(self, column: str, values: list) -> tuple[str, list]:
        """`column` in `values`, given as one JSON array: one statement whatever their number
        (no bound variables beyond the build's limit)."""
        return f"{column} in (select value from json_each(?))", [orjson.dumps(values).decode()]

    def begin_write(self) -> None:
        # immediate: writers (even in other processes) take turns, so ids become visible
        # in the order they were given and a sensor's cursor never steps over one
        self.execute("begin immediate")

    def begin_batch(self, identities: list[str], records: list[str | None]) -> dict[str, int]:
        """Begin a write; the ids of the identities (of events of `records`) already stored,
        read through the index on (record, identity), or the recordless events' own."""
        self.begin_write()
        keyed = [(r, i) for i, r in zip(identities, records, strict=True) if r is not None]
        recordless = [i for i, r in zip(identities, records, strict=True) if r is None]
        out = {}
        if keyed:  # one probe a pair: `record in (..) and identity in (..)` probes every pairing
            out.update(self.execute(
                f"select e.identity, e.id from (values {','.join(['(?, ?)'] * len(keyed))}) p"
                " join events e on e.record = p.column1 and e.identity = p.column2",
                [v for pair in keyed for v in pair]))
        if recordless:
            out.update(self.execute(
                "select identity, id from events where record is null and identity in"
                f" ({','.join('?' * len(recordless))})", recordless))
        return out

    def rollback(self) -> None:
        if self._con.in_transaction:  # not when its begin failed: that error is the one told
            self.execute("rollback")

    @contextlib.contextmanager
    def snapshot(self):
        """Reads that must agree with each other, in one snapshot of the file."""
        with self.lock:
            self.execute("begin")
            try:
                yield
            finally:
                self.execute("commit")

    @contextlib.contextmanager
    def erasure_lock(self, exclusive: bool):
        """Between processes (files beside the inbox); a forget waiting holds the turnstile."""
        with open(f"{self.path}.turnstile", "ab") as turn, \
                open(f"{self.path}.erasing", "ab") as lock:
            fcntl.flock(turn, fcntl.LOCK_EX)
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if not exclusive:
                fcntl.flock(turn, fcntl.LOCK_UN)
            yield

    def truncate_log(self) -> None:
        """What a forget deleted leaves the write-ahead log too."""
        self.execute("pragma wal_checkpoint(truncate)")
