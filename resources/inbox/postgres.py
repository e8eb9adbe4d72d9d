"""The inbox in a Postgres database, which several receivers (each its own process, on any
machine) write at once and the sensor reads by cursor: `PostgresInbox`, the inbox over this
dialect. Writers take turns on one advisory lock, committed with `synchronous_commit` on
(durable before the receiver answers 200). A connection the server dropped is replaced at the
next call, which is tried once more on it (store.py's `_retried`); when the database does not
answer, calls raise InboxUnavailable (the receiver then answers 503 and the service
redelivers). URLs are shown without their password.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2

from .errors import InboxMissing, InboxUnavailable
from .store import Inbox

# one lock for every writer of the database, whatever its process or machine
WRITE_LOCK = zlib.crc32(b"ledgerlake inbox writers")
# the erasure lock (Inbox.hold_landing, Inbox.forget), across machines
ERASURE_LOCK = zlib.crc32(b"ledgerlake erasures")
CONNECT_TIMEOUT_S = 10

# Text compares byte by byte ("C"), as SQLite's does, so ISO times and record ids sort the same
# whatever the database's collation. An event's identity is unique on its own here:
# `begin_batch` looks stored events up by identity alone, in the round trip that takes the
# write lock.
SCHEMA = Path(__file__).with_name("schema.sql").read_text().format(
    serial="bigint generated always as identity primary key", integer="bigint",
    real="double precision", text='text collate "C"', blob="bytea",
    events_identity="create unique index if not exists events_identity on events (identity);"
    "\ncreate index if not exists events_record on events (record)")


def redact(url: str) -> str:
    """The URL as logs and errors may show it: its user, host, port and database, never its
    password or query (where libpq takes one too)."""
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    user = user.partition(":")[0]
    return (f"{parts.scheme}://{user + '@' if user else ''}{host}{parts.path}"
            + ("?..." if parts.query else ""))


def _connect(url: str):
    """A connection in autocommit mode: transactions are begun and ended explicitly."""
    # keepalives: a server gone silent (a lost machine, not a refused port) is noticed in
    # seconds, not at the kernel's two hours
    raw = psycopg2.connect(url, connect_timeout=CONNECT_TIMEOUT_S,
                           application_name="ledgerlake inbox", keepalives=1,
                           keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
    raw.autocommit = True
    raw.cursor().execute("set synchronous_commit = on")  # whatever the server's default: durable
    return raw


class Postgres:
    """One connection, used from any thread (serialised by `lock`), made again when the
    server dropped it. Its SQL is the inbox's, given `%s` for `?`."""

    # what a dropped or unreachable server raises (psycopg2's errors for a statement it
    # refused, such as a NOT NULL violation, are not among them: those are the caller's)
    LOST = (psycopg2.OperationalError, psycopg2.InterfaceError)

    def __init__(self, url: str, create: bool) -> None:
        self.url = url
        self.shown = redact(url)
        self.lock = threading.Lock()
        self._raw = None
        try:
            with self.lock:
                if create:
                    self._create()
                elif self.execute("select to_regclass('events')").fetchone()[0] is None:
                    self._close()
                    raise InboxMissing(
                        f"no inbox in {self.shown}: start the receiver with --inbox naming "
                        "this database (or set LEDGERLAKE_INBOX to the database it writes)")
        except self.LOST as exc:
            self._close()
            raise InboxUnavailable(self.unavailable(exc)) from None
        except psycopg2.ProgrammingError as exc:  # a URL libpq cannot read
            raise InboxUnavailable(self.unavailable(exc, "cannot be opened")) from None

    def _create(self) -> None:
        try:  # receivers starting together make the tables once
            self.begin_write()
            self.raw.cursor().execute(SCHEMA)
            self.execute("commit")
        except BaseException:
            self.rollback()
            raise

    @property
    def raw(self):
        if self._raw is None or self._raw.closed:
            self._raw = _connect(self.url)
        return self._raw

    # the inbox's SQL holds no '?' but its placeholders, and no '%'
    def execute(self, sql: str, params=()):
        cur = self.raw.cursor()
        cur.execute(sql.replace("?", "%s"), tuple(params))
        return cur

    def executemany(self, sql: str, rows):
        cur = self.raw.cursor()
        cur.executemany(sql.replace("?", "%s"), list(rows))
        return cur

    def _close(self) -> None:
        if self._raw is not None:
            with contextlib.suppress(psycopg2.Error):
                self._raw.close()
            self._raw = None

    def close(self) -> None:
        with self.lock:
            self._close()

    def unavailable(self, exc: Exception, what: str = "does not answer") -> str:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        why = lines[0] if lines else type(exc).__name__
        password = urlsplit(self.url).password
        if password:  # libpq does not repeat it; this makes sure
            why = why.replace(password, "***")
        return f"inbox {self.shown} {what}: {why}"

    def check(self) -> None:
        """Raise InboxUnavailable unless the database answers one indexed read."""
        with self.lock:
            self.execute("select max(id) from events").fetchone()

    def among(self, column: str, values: list) -> tuple[str, list]:
        """`column` in `values`, given as one array."""
        return f"{column} = any(?)", [values]

    def begin_write(self, then: str = "", params: tuple = ()):
        """Begin a write, and run `then` (whose rows come back) in the same round trip."""
        # writers take turns: ids (from one sequence) then become visible in the order they
        # were drawn, so a sensor's cursor never steps over an id that commits later
        return self.execute("begin; select pg_advisory_xact_lock(?)" + then,
                            (WRITE_LOCK, *params))

    def begin_batch(self, identities: list[str], records: list[str | None]) -> dict[str, int]:
        # what is stored already, read under the lock, in the same round trip
        return dict(self.begin_write("; select identity, id from events where identity ="
                                     " any(?)", (sorted(set(identities)),)).fetchall())

    def rollback(self) -> None:
        # a lost connection's transaction went with it: no new connection to end it on
        if self._raw is not None and not self._raw.closed:
            self.execute("rollback")

    def snapshot(self):
        return self.lock  # readers never wait for writers

    @contextlib.contextmanager
    def erasure_lock(self, exclusive: bool):
        """An advisory lock on a connection of its own, shared or alone (the server grants
        waiters in turn: a waiting forget goes before the landings that come after it)."""
        held = None
        try:  # a restart can drop the connection while it waits for the lock, too
            held = _connect(self.url)
            held.cursor().execute(f"select pg_advisory_lock{'' if exclusive else '_shared'}(%s)",
                                  (ERASURE_LOCK,))
        except self.LOST as exc:
            if held is not None:
                held.close()
            raise InboxUnavailable(self.unavailable(exc)) from None
        try:
            yield
        finally:
            held.close()

    def truncate_log(self) -> None:
        """Postgres keeps deleted rows until VACUUM reuses their space (docs/privacy.md)."""


class PostgresInbox(Inbox):
    """The inbox in a Postgres database (`open_inbox` of a postgresql:// URL)."""

    Database = Postgres
