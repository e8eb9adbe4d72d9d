"""The inbox in a Postgres database, which several receivers (each its own process, on any
machine) write at once and the sensor reads by cursor.

Same tables, rules, reads and writes as the SQLite inbox (resources/inbox/store.py), its SQL
given `%s` for `?`. Writers take turns on one advisory lock, committed with `synchronous_commit` on (durable before the
receiver answers 200). A connection the server dropped is replaced at the next call, which is
tried once more on it; when the database does not answer, calls raise InboxUnavailable (the
receiver then answers 503 and the service redelivers). URLs are shown without their password.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import zlib
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

import psycopg2

from .store import SCHEMA as SQLITE_SCHEMA
from .store import (
    Inbox,
    InboxMissing,
    InboxUnavailable,
    RecordState,
)

# one lock for every writer of the database, whatever its process or machine
WRITE_LOCK = zlib.crc32(b"ledgerlake inbox writers")
# the erasure lock (Inbox.hold_landing, Inbox.forget), across machines
ERASURE_LOCK = zlib.crc32(b"ledgerlake erasures")
CONNECT_TIMEOUT_S = 10


def _schema(sqlite: str) -> str:
    """The SQLite inbox's schema (resources/inbox/store.py) in Postgres types. Text compares
    byte by byte ("C"), as SQLite's does, so ISO times and record ids sort the same whatever
    the database's collation. An event's identity is unique on its own here: `_begin_batch`
    looks stored events up by identity alone, in the round trip that takes the write lock."""
    kept = [s.strip() for s in sqlite.split(";") if "index if not exists events_identity" not in s]
    kept += ["create unique index if not exists events_identity on events (identity)",
             "create index if not exists events_record on events (record)"]
    text = ";\n".join(kept) + ";\n"
    for old, new in (("integer primary key autoincrement",
                      "bigint generated always as identity primary key"),
                     (" integer", " bigint"), (" real", " double precision"),
                     (" blob", " bytea"), (" text", ' text collate "C"')):
        text = text.replace(old, new)
    return text


SCHEMA = _schema(SQLITE_SCHEMA)

# what a dropped or unreachable server raises (psycopg2's errors for a statement it refused,
# such as a NOT NULL violation, are not among them: those are the caller's)
LOST = (psycopg2.OperationalError, psycopg2.InterfaceError)


def redact(url: str) -> str:
    """The URL as logs and errors may show it: its user, host, port and database, never its
    password or query (where libpq takes one too)."""
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    user = user.partition(":")[0]
    return (f"{parts.scheme}://{user + '@' if user else ''}{host}{parts.path}"
            + ("?..." if parts.query else ""))


@functools.lru_cache(maxsize=64)
def _pg(sql: str) -> str:
    return sql.replace("?", "%s")  # the shared SQL holds no other '?' and no '%'


class _Connection:
    """A psycopg2 connection behind sqlite3's `execute` (`?` placeholders, a cursor back),
    in autocommit mode so that transactions are begun and ended explicitly, as in SQLite."""

    def __init__(self, url: str) -> None:
        # keepalives: a server gone silent (a lost machine, not a refused port) is noticed
        # in seconds, not at the kernel's two hours
        self.raw = psycopg2.connect(url, connect_timeout=CONNECT_TIMEOUT_S,
                                    application_name="ledgerlake inbox", keepalives=1,
                                    keepalives_idle=10, keepalives_interval=5,
                                    keepalives_count=3)
        self.raw.autocommit = True
        self.execute("set synchronous_commit = on")  # whatever the server's default: durable

    def execute(self, sql: str, params=()):
        cur = self.raw.cursor()
        cur.execute(_pg(sql), tuple(params))
        return cur

    def executemany(self, sql: str, rows):
        cur = self.raw.cursor()
        cur.executemany(_pg(sql), list(rows))
        return cur

    def close(self) -> None:
        self.raw.close()


def _retried(method):
    """Run `method`; when the connection is lost, once more on a new one (a write is safe to
    repeat: an event already stored is found by its identity). Raises InboxUnavailable."""
    @functools.wraps(method)
    def call(self, *args, **kw):
        try:
            return method(self, *args, **kw)
        except LOST:
            self._drop()
        try:
            return method(self, *args, **kw)
        except LOST as exc:
            self._drop()
            raise InboxUnavailable(self._unavailable(exc)) from None
    return call


class PostgresInbox(Inbox):
    """The inbox in a Postgres database: one connection, used from any thread (serialised by
    a lock), made again when the server dropped it."""

    IDS_IN = "record = any(?)"
    NUMBERS_IN = "number = any(?)"
    CUSTOMERS_IN = "customer = any(?)"

    @staticmethod
    def _ids(ids: list[str]):
        return ids

    def __init__(self, url: str, *, create: bool = False) -> None:
        self.url = url
        self.shown = redact(url)
        self._held = None
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        try:
            with self._lock:
                if create:
                    self._db.execute("begin")
                    try:  # receivers starting together make the tables once
                        self._db.execute("select pg_advisory_xact_lock(?)", (WRITE_LOCK,))
                        self._db.raw.cursor().execute(SCHEMA)
                        self._db.execute("commit")
                    except BaseException:
                        self._db.execute("rollback")
                        raise
                elif self._db.execute("select to_regclass('events')").fetchone()[0] is None:
                    self._close()
                    raise InboxMissing(
                        f"no inbox in {self.shown}: start the receiver with --inbox naming "
                        "this database (or set LEDGERLAKE_INBOX to the database it writes)")
        except LOST as exc:
            self._close()
            raise InboxUnavailable(self._unavailable(exc)) from None
        except psycopg2.ProgrammingError as exc:  # a URL libpq cannot read
            raise InboxUnavailable(self._unavailable(exc, "cannot be opened")) from None

    @property
    def _db(self) -> _Connection:
        if self._conn is None or self._conn.raw.closed:
            self._conn = _Connection(self.url)
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg2.Error:
                pass
            self._conn = None

    def _drop(self) -> None:
        with self._lock:
            self._close()

    def _unavailable(self, exc: Exception, what: str = "does not answer") -> str:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        why = lines[0] if lines else type(exc).__name__
        password = urlsplit(self.url).password
        if password:  # libpq does not repeat it; this makes sure
            why = why.replace(password, "***")
        return f"inbox {self.shown} {what}: {why}"

    def __repr__(self) -> str:
        return f"PostgresInbox({self.shown!r})"

    def close(self) -> None:
        with self._lock:
            self._close()
        if self._held is not None:
            self._held.close()

    @contextlib.contextmanager
    def _erasure_lock(self, exclusive: bool):
        """An advisory lock on a connection of its own, shared or alone (the server grants
        waiters in turn: a waiting forget goes before the landings that come after it)."""
        try:
            held = _Connection(self.url)
        except LOST as exc:
            raise InboxUnavailable(self._unavailable(exc)) from None
        try:
            held.execute(f"select pg_advisory_lock{'' if exclusive else '_shared'}(?)",
                         (ERASURE_LOCK,))
            yield
        finally:
            held.close()

    @contextlib.contextmanager
    def _snapshot(self):
        with self._lock:  # readers never wait for writers
            yield

    def _begin_write(self, then: str = "", params: tuple = ()):
        """Begin a write, and run `then` (whose rows come back) in the same round trip."""
        # writers take turns: ids (from one sequence) then become visible in the order they
        # were drawn, so a sensor's cursor never steps over an id that commits later
        return self._db.execute("begin; select pg_advisory_xact_lock(?)" + then,
                                (WRITE_LOCK, *params))

    def _truncate_log(self) -> None:
        """Postgres keeps deleted rows until VACUUM reuses their space (docs/privacy.md)."""

    @_retried
    def check(self) -> None:
        """Raise InboxUnavailable unless the database answers one indexed read."""
        with self._lock:
            self._db.execute("select max(id) from events").fetchone()

    def _begin_batch(self, identities: list[str], records: list[str | None]
                     ) -> dict[str, int]:
        # what is stored already, read under the lock, in the same round trip
        return dict(self._begin_write("; select identity, id from events where identity ="
                                      " any(?)", (sorted(set(identities)),)).fetchall())

    # one transaction a batch: begin and the read of what is stored in one round trip, then
    # each new event's statements, then commit
    add_described = _retried(Inbox.add_described)
    dead_letter = _retried(Inbox.dead_letter)
    after = _retried(Inbox.after)
    count = _retried(Inbox.count)
    dead_letters = _retried(Inbox.dead_letters)
    status = _retried(Inbox.status)
    payloads = _retried(Inbox.payloads)
    numbered = _retried(Inbox.numbered)
    vitals = _retried(Inbox.vitals)
    landing_ages = _retried(Inbox.landing_ages)
    _failing = _retried(Inbox.failing)
    _numbers = _retried(Inbox.numbers)
    _ids_of = _retried(Inbox.ids_of)
    _forgotten_of = _retried(Inbox.forgotten)
    note_landings = _retried(Inbox.note_landings)
    forget = _retried(Inbox.forget)
    of_customer = _retried(Inbox.of_customer)
    stale = _retried(Inbox.stale)
    _landings = _retried(Inbox.landings)
    _mark_replayed = _retried(Inbox.mark_replayed)
    _records = _retried(Inbox.records)

    # an iterator given is read once, before a first try that may have to be repeated
    def mark_replayed(self, records: Iterable[str], at: float | None = None) -> None:
        self._mark_replayed(list(records), at)

    def numbers(self, ids: Iterable[str], *, create: bool = False) -> dict[str, int]:
        return self._numbers(list(ids), create=create)

    def ids_of(self, numbers: Iterable[int]) -> dict[int, str]:
        return self._ids_of(list(numbers))

    def forgotten(self, ids: Iterable[str]) -> set[str]:
        return self._forgotten_of(list(ids))

    def failing(self, product: str, outcome: str, *, not_runs: Sequence[str] = (),
                limit: int = 5) -> tuple[int, list[str], str | None]:
        return self._failing(product, outcome, not_runs=list(not_runs), limit=limit)

    def landings(self, records: Iterable[str] | None = None, **kw) -> list:
        return self._landings(None if records is None else list(records), **kw)

    def records(self, ids: Iterable[str] | None = None,
                status: str | None = None) -> dict[str, RecordState]:
        return self._records(None if ids is None else list(ids), status)
