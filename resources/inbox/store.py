"""The inbox: every callback the receiver accepted, durable before it is acknowledged.

One class over the dialect of where it is: a SQLite file (sqlite.py, the embedded default) or
a Postgres database (postgres.py, which several receivers share); the SQL here is both's
(docs/decisions/0015-inbox-dialect.md). Each event is stored once under its identity (the
fields that name it, INTERFACE.md), so a redelivery is a no-op for as long as the row lives
(events are never pruned here, which covers the service's 72-hour redelivery window). Ids grow
monotonically for sensor cursors. The same transaction that stores an event keeps the
`records` table, the status of each connection record, so nothing reads a status that
disagrees with the events.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .callbacks import CONNECTED, RECONNECT, STATUS_EVENTS, describe, kept_body, utc_stamp
from .errors import InboxUnavailable
from .sqlite import Sqlite

PAYLOADS = ("select body from events where record = ? and method in ({marks})"
            " order by id")
# The newest callback per method of the records that `{where}` (on `records`, or "") picks
PRODUCTS = ("select record, method, code, status, event, occurred_at, received_at"
            " from record_products where record in (select record from records{where})")

# A callback's writes beside its event: its record touched (made, connected, when first heard
# of), moved back to connected by a newer successful login, and its product's newest callback.
TOUCH = ("insert into records (record, customer, status, status_at, status_event, first_seen,"
         " last_seen) values (?, ?, ?, ?, ?, ?, ?) on conflict (record) do update set"
         " last_seen = excluded.last_seen, customer = coalesce(records.customer,"
         " excluded.customer)")
# out-of-order delivery: only a newer event moves the status
SET_STATUS = ("update records set status = ?, status_at = ?, status_event = ?"
              " where record = ? and status_at <= ?")
PRODUCT = ("insert into record_products (record, method, code, status, event, occurred_at,"
           " received_at) values (?, ?, ?, ?, ?, ?, ?) on conflict (record, method) do update"
           " set code = excluded.code, status = excluded.status, event = excluded.event,"
           " occurred_at = excluded.occurred_at, received_at = excluded.received_at"
           " where excluded.occurred_at >= record_products.occurred_at")
# a later landing replaces the state; the time the product was last published stays until
# another publishes it
LANDED = ("insert into landings (record, product, outcome, run_id, at, landed_at, row_count,"
          " detail) values (?, ?, ?, ?, ?, ?, ?, ?) on conflict (record, product) do update set"
          " outcome = excluded.outcome, run_id = excluded.run_id, at = excluded.at,"
          " landed_at = coalesce(excluded.landed_at, landings.landed_at),"
          " row_count = excluded.row_count, detail = excluded.detail")
LANDING_COLUMNS = "record, product, outcome, run_id, at, landed_at, row_count, detail"
# the connected records' landings of a product (`?`) that published it
PUBLISHED = (" from landings l join records r on r.record = l.record where l.product = ?"
             f" and r.status = '{CONNECTED}' and l.landed_at is not null")
# a record's number, given once (a forgotten record's tombstone keeps it from another)
NUMBER = ("insert into record_numbers (record) select ? where not exists"
          " (select 1 from forgotten where record = ?) on conflict (record) do nothing")


def tombstone(record: str) -> str:
    """A forgotten record's tombstone: its id's SHA-256 (ids are random: it names the record
    only to whoever holds the id)."""
    return hashlib.sha256(record.encode()).hexdigest()


def _identity(info: dict) -> str:
    """The key an event is stored under once: a digest of the fields that name it."""
    return hashlib.sha256(orjson.dumps(info["identity"])).hexdigest()


@dataclass(frozen=True)
class Event:
    id: int
    kind: str  # "callback" or "connection"
    method: str | None  # a callback's method, or a connection event's `event`
    code: str | None
    status: str | None
    record: str | None
    account: str | None
    body: dict
    received_at: float = 0.0
    affects: tuple[str, ...] = ()  # the records a connection event applies to

    @property
    def records(self) -> tuple[str, ...]:
        return (self.record,) if self.record else self.affects


@dataclass(frozen=True)
class Product:
    code: str
    status: str | None
    event: int
    occurred_at: str
    received_at: float


@dataclass(frozen=True)
class RecordState:
    record: str
    customer: str | None
    status: str  # connected, disconnected or reauth_required
    status_at: str
    first_seen: float
    last_seen: float
    replayed_at: float | None
    products: dict[str, Product] = field(default_factory=dict)  # by method


LANDED_OK, HELD, FAILED = "landed", "held", "failed"


@dataclass(frozen=True)
class LandingState:
    """A record's product as its last landing left it: `landed` (published), `held` (a
    blocking check failed: the previous rows stay in view) or `failed` (nothing written)."""
    record: str
    product: str
    outcome: str
    run_id: str
    at: float
    landed_at: float | None = None  # when it was last published, whatever came since
    row_count: int | None = None
    detail: dict = field(default_factory=dict)  # the pull, the lake version, why it is held

    def row(self) -> tuple:
        return (self.record, self.product, self.outcome, self.run_id, self.at,
                self.at if self.outcome == LANDED_OK else None, self.row_count,
                orjson.dumps(self.detail).decode() if self.detail else None)


@dataclass(frozen=True)
class Vitals:
    """The inbox in counts (Inbox.vitals): what the alerts and the metrics read."""
    last_event: int  # the newest event's id, 0 when there is none
    last_received_at: float | None  # when the receiver stored it
    waiting: int  # events after the cursor given
    oldest_waiting_at: float | None  # when the oldest of those was stored
    dead_letters: int
    statuses: dict[str, int]  # records by status
    outcomes: dict[tuple[str, str], int]  # (product, outcome) -> records, outcomes other
    # than landed


def _retried(method):
    """Run `method`; when its connection was lost (a Postgres server dropped it), once more on
    a new one (a write is safe to repeat: an event already stored is found by its identity),
    an iterator given read once before. Raises InboxUnavailable."""
    @functools.wraps(method)
    def call(self, *args, **kw):
        args = [list(a) if isinstance(a, Iterator) else a for a in args]
        kw = {k: list(v) if isinstance(v, Iterator) else v for k, v in kw.items()}
        try:
            return method(self, *args, **kw)
        except self._db.LOST:
            self._db.close()
        try:
            return method(self, *args, **kw)
        except self._db.LOST as exc:
            self._db.close()
            raise InboxUnavailable(self._db.unavailable(exc)) from None
    return call


class Inbox:
    """The inbox over one connection of its dialect (`Database`: a SQLite file here, a
    Postgres database in PostgresInbox), used from any thread (serialised by its lock); a
    call on a lost connection is tried once more (`_retried`, below)."""

    Database = Sqlite

    def __init__(self, location: str | Path, *, create: bool = False) -> None:
        """Open the inbox at `location`; `create=True` (the receiver's) makes it if missing."""
        self._held: contextlib.ExitStack | None = None
        self._erasing = False  # inside `erasing`: the erasure lock is this inbox's already
        self._db = self.Database(location, create)
        self._lock = self._db.lock
        self.shown = self._db.shown  # where it is, as logs and errors name it (no password)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown!r})"

    def close(self) -> None:
        self._db.close()
        if self._held is not None:
            self._held.close()

    def check(self) -> None:
        """Raise unless the inbox answers one indexed read (the receiver's /health)."""
        self._db.check()

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writes ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self, begin=None):
        """A transaction (the caller holds the lock) begun by `begin` (by default a write's:
        writers, in any process, take turns by the dialect's write lock), committed when the
        block ends, rolled back when it raises; yields what `begin` gave."""
        try:
            yield (begin or self._db.begin_write)()
            self._db.execute("commit")
        except BaseException:
            self._db.rollback()
            raise

    def add(self, payload: dict) -> tuple[int, bool]:
        """Store the event once; return (its id, whether it was new)."""
        return self.add_described([(describe(payload), kept_body(payload))])[0]

    def add_described(self, items: Sequence[tuple[dict, bytes]]) -> list[tuple[int, bool]]:
        """Store described events in one transaction (one disk sync for all of them)."""
        now = time.time()
        identities = [_identity(info) for info, _ in items]
        records = [info["record"] for info, _ in items]
        # begun with the read of the ids stored already (in Postgres, in the same round trip)
        begin = functools.partial(self._db.begin_batch, identities, records)
        with self._lock, self._writing(begin) as stored:
            gone = self._forgotten({r for r in records if r})
            return self._insert_all(items, identities, stored, now, gone)

    def _insert_all(self, items: Sequence[tuple[dict, bytes]], identities: list[str],
                    ids: dict[str, int], now: float, gone: set[str]
                    ) -> list[tuple[int, bool]]:
        """The batch's new events, in order; each item's (id, whether it was new): the first
        of an identity new to the inbox is new. An event of a forgotten record (`gone`) is
        dropped: (0, False)."""
        new: set[str] = set()
        for (info, raw), identity in zip(items, identities, strict=True):
            if identity not in ids and info["record"] not in gone:
                new.add(identity)
                ids[identity] = self._insert(info, raw, now, identity)
        out, told = [], set()
        for identity in identities:
            out.append((ids.get(identity, 0), identity in new and identity not in told))
            told.add(identity)
        return out

    def _insert(self, info: dict, raw: bytes, now: float, identity: str) -> int:
        """Store an event the batch found new (`add_described`, under the write lock)."""
        occurred = info["occurred_at"] or utc_stamp(now)
        affects = self._affected(info) if info["kind"] == "connection" else []
        (event_id,) = self._db.execute(
            "insert into events (identity, received_at, kind, method, code, status, record,"
            " account, customer, occurred_at, affects, body)"
            " values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) returning id",
            (identity, now, info["kind"], info["method"], info["code"], info["status"],
             info["record"], info["account"], info["customer"], occurred,
             orjson.dumps(affects).decode() if affects else None, raw)).fetchone()
        self._apply(info, affects, event_id, occurred, now)
        return event_id

    def _apply(self, info: dict, affects: list[str], event_id: int, occurred: str,
               now: float) -> None:
        """What an event does to the records it names (`affects`: a connection event's)."""
        if info["kind"] == "callback" and info["record"]:
            self._on_callback(info, event_id, occurred, now)
        elif info["kind"] == "connection":
            new_status = STATUS_EVENTS.get(info["method"], (None,))[0]
            for record in affects:
                self._touch(record, info["customer"], event_id, occurred, now)
                if new_status:
                    self._set_status(record, new_status, occurred, event_id)

    def _affected(self, info: dict) -> list[str]:
        """The records a connection event applies to: named, by account, else by customer."""
        if info["record"]:
            return [info["record"]]
        if info["accounts"]:
            marks = ",".join("?" * len(info["accounts"]))
            rows = self._db.execute(
                f"select distinct record from events where account in ({marks})"
                " and record is not null order by record", info["accounts"]).fetchall()
            if rows:
                return [r[0] for r in rows]
        if info["customer"]:
            rows = self._db.execute("select record from records where customer = ?"
                                    " order by record", (info["customer"],)).fetchall()
            return [r[0] for r in rows]
        return []

    def _touch(self, record: str, customer: str | None, event_id: int, occurred: str,
               now: float) -> None:
        self._db.execute(TOUCH, (record, customer, CONNECTED, occurred, event_id, now, now))
        self._db.execute("insert into record_numbers (record) values (?)"
                         " on conflict (record) do nothing", (record,))

    def _set_status(self, record: str, status: str, occurred: str, event_id: int) -> None:
        self._db.execute(SET_STATUS, (status, occurred, event_id, record, occurred))

    def _on_callback(self, info: dict, event_id: int, occurred: str, now: float) -> None:
        record = info["record"]
        self._touch(record, info["customer"], event_id, occurred, now)
        if (info["method"], info["code"]) == RECONNECT and info["status"] != "is_failed":
            self._set_status(record, CONNECTED, occurred, event_id)
        self._db.execute(PRODUCT, (record, info["method"], info["code"], info["status"],
                                   event_id, occurred, now))

    def dead_letter(self, reason: str, body: bytes) -> None:
        with self._lock:
            self._db.execute("insert into dead_letters (received_at, reason, body) values (?,?,?)",
                             (time.time(), reason, body))

    def probe_write(self) -> None:
        """One committed write that changes nothing else (the receiver's /health, when no
        callback was stored lately): raises when the inbox takes no writes."""
        with self._lock:
            self._db.execute("insert into write_probe (id, at) values (1, ?) on conflict (id)"
                             " do update set at = excluded.at", (time.time(),))

    def forget(self, records: Sequence[str], customers: Sequence[str] = ()) -> int:
        """Delete every row of `records` (`ledgerlake forget`, pipeline/forget.py), in one
        transaction: their events and bodies (a connection event naming others forgets only
        these), their number, status, products and landings, and the dead letters that name
        them or their customers; leave their tombstones. Of `customers` (`forget --customer`),
        every event naming one and no record goes too, whatever records it applies to (a
        USER_REAUTH heard before any of their records was), and the dead letters naming
        them. Deleted content is overwritten (SQLite's `secure_delete`) and the log
        truncated. Waits for the landings in flight (`hold_landing`). Returns the rows
        deleted."""
        ids, customers = sorted(set(records)), sorted(set(customers))
        if not ids and not customers:
            return 0
        with self.erasing(), self._lock:
            with self._writing():
                deleted = self._forget(ids, customers)
            self._db.truncate_log()
        return deleted

    @contextlib.contextmanager
    def erasing(self) -> Iterator[None]:
        """The erasure lock, alone, for the block: it waits for the landings in flight, and
        no landing step starts until it ends (`hold_landing`). `forget` holds it while it
        deletes the records' rows from the lake too: a landing's commit to a table the erasure
        deletes from makes the delete's commit lose (delta-rs counts the rows appended as
        ones the delete should have read), and a stream of runs would win every time."""
        if self._erasing:
            yield
            return
        with self._db.erasure_lock(exclusive=True):
            self._erasing = True
            try:
                yield
            finally:
                self._erasing = False

    def _forget(self, ids: list[str], customers: list[str]) -> int:
        of_ids, ids_param = self._db.among("record", ids)
        of_customers, customers_param = self._db.among("customer", customers)
        # a dead letter naming any of them goes too: the records, and their customers
        forgotten_ids = [r[0] for r in self._db.execute(
            f"select customer from records where {of_ids} and customer is not null",
            ids_param)] + ids + customers
        deleted, gone, theirs = 0, set(ids), set(customers)
        # the recordless events (few, indexed): those naming a customer forgotten, and those
        # that applied only to records forgotten, go; the rest forget these records
        for event, affects, customer in self._db.execute(
                "select id, affects, customer from events where record is null and"
                f" (affects is not null or {of_customers})", customers_param).fetchall():
            was = orjson.loads(affects) if affects else []
            left = [] if customer in theirs else [r for r in was if r not in gone]
            if not left:
                deleted += self._db.execute("delete from events where id = ?",
                                            (event,)).rowcount
            elif len(left) < len(was):
                self._db.execute("update events set affects = ? where id = ?",
                                 (orjson.dumps(left).decode(), event))
        self._db.executemany("insert into forgotten (record, forgotten_at) values (?, ?)"
                             " on conflict (record) do nothing",
                             [(tombstone(r), time.time()) for r in ids])
        for table in ("events", "record_products", "landings", "records", "record_numbers"):
            deleted += self._db.execute(f"delete from {table} where {of_ids}",
                                        ids_param).rowcount
        letters = [(i,) for i, body in self._db.execute("select id, body from dead_letters")
                   if any(n.encode() in bytes(body) for n in forgotten_ids)]
        self._db.executemany("delete from dead_letters where id = ?", letters)
        return deleted + len(letters)

    def hold_landing(self) -> None:
        """The erasure lock (forget's, alone), shared until this inbox closes: taken by a
        landing step before it reads its records, so a forget erases what it wrote or comes
        first."""
        if self._held is None:
            held = contextlib.ExitStack()
            held.enter_context(self._db.erasure_lock(exclusive=False))
            self._held = held  # only once held: a wait that failed leaves it to take again

    def of_customer(self, customer: str) -> list[str]:
        """The records the inbox knows of `customer` (its events naming them and no record
        go with `forget(..., customers=[customer])`)."""
        with self._lock:
            return [r[0] for r in self._db.execute(
                "select record from records where customer = ? order by record", (customer,))]

    def mark_replayed(self, records: Iterable[str], at: float | None = None) -> None:
        at = time.time() if at is None else at
        with self._lock:
            self._db.executemany("update records set replayed_at = ? where record = ?",
                                 [(at, r) for r in records])

    # -- reads (those that must agree with each other in the dialect's `snapshot`) ----------
    def after(self, cursor: int, limit: int = 500, max_bytes: int = 64 << 20) -> list[Event]:
        """Events with an id above `cursor`, oldest first: at most `limit` of them, and no more
        than `max_bytes` of bodies (but always at least one event, if there is one)."""
        events, size = [], 0
        with self._lock:
            rows = self._db.execute(
                "select id, kind, method, code, status, record, account, body, received_at,"
                " affects from events where id > ? order by id limit ?", (cursor, limit))
            for r in rows:
                size += len(r[7])
                if events and size > max_bytes:
                    break
                events.append(Event(*r[:7], body=orjson.loads(r[7]), received_at=r[8],
                                    affects=tuple(orjson.loads(r[9])) if r[9] else ()))
        return events

    def announced(self, since: float, until: float, limit: int = 10_000
                  ) -> list[tuple[str, str, Product]]:
        """Connected records' newest callback of each product received after `since` and
        up to `until`, oldest first: (record, method, its Product), at most `limit`."""
        with self._lock:
            rows = self._db.execute(
                "select p.record, p.method, p.code, p.status, p.event, p.occurred_at,"
                " p.received_at from record_products p join records r on r.record = p.record"
                " where r.status = ? and p.received_at > ? and p.received_at <= ?"
                " order by p.received_at limit ?", (CONNECTED, since, until, limit)).fetchall()
        return [(r[0], r[1], Product(*r[2:])) for r in rows]

    def payloads(self, record: str, methods: Sequence[str]) -> list[dict]:
        """Every stored body of `record` with one of `methods`, oldest first."""
        with self._db.snapshot():
            rows = self._db.execute(PAYLOADS.format(marks=",".join("?" * len(methods))),
                                    (record, *methods)).fetchall()
        return [orjson.loads(r[0]) for r in rows]

    def count(self) -> int:
        with self._lock:
            return self._db.execute("select count(*) from events").fetchone()[0]

    def records(self, ids: Iterable[str] | None = None,
                status: str | None = None) -> dict[str, RecordState]:
        """The status of records (all, or those named: any number of them, bound as one
        value), each with its last callback per method."""
        if ids is None:
            return self._records_where([], [], status)
        ids = list(ids)
        where, params = self._db.among("record", ids)
        return self._records_where([where], params, status) if ids else {}

    def _records_where(self, where: list[str], params: list, status: str | None
                       ) -> dict[str, RecordState]:
        if status is not None:
            where, params = [*where, "status = ?"], [*params, status]
        clause = (" where " + " and ".join(where)) if where else ""
        with self._db.snapshot():
            rows = self._db.execute(
                "select record, customer, status, status_at, first_seen, last_seen, replayed_at"
                f" from records{clause} order by record", params).fetchall()
            products = self._db.execute(PRODUCTS.format(where=clause), params).fetchall()
        out = {r[0]: RecordState(*r) for r in rows}
        for rec, method, *rest in products:
            if rec in out:  # not a record that a write between the two reads added (Postgres)
                out[rec].products[method] = Product(*rest)
        return out

    def numbered(self, after: int = 0, limit: int = 1000, status: str | None = None
                 ) -> list[int]:
        """A page of record numbers in order, those after `after`, of records in `status`
        (keyset paging: a page costs what its rows do, whatever the number of records)."""
        where = " and r.status = ?" if status is not None else ""
        with self._lock:
            return [r[0] for r in self._db.execute(
                "select n.number from record_numbers n join records r on r.record = n.record"
                f" where n.number > ?{where} order by n.number limit ?",
                (after, *([status] if status is not None else []), limit))]

    def numbers(self, ids: Iterable[str], *, create: bool = False) -> dict[str, int]:
        """Each record's number, what the orchestrator names it by (none if forgotten);
        `create`: number those without one (records no callback named: tests, benchmarks)."""
        ids = sorted(set(ids))
        if not ids:
            return {}
        where, params = self._db.among("record", ids)
        with self._lock:
            if create:
                with self._writing():
                    self._db.executemany(NUMBER, [(r, tombstone(r)) for r in ids])
            return dict(self._db.execute(
                f"select record, number from record_numbers where {where}", params).fetchall())

    def forgotten(self, ids: Iterable[str]) -> set[str]:
        """Those of `ids` that were forgotten."""
        with self._lock:
            return self._forgotten(set(ids))

    def _forgotten(self, ids: set[str]) -> set[str]:
        if not ids:
            return set()
        hashed = {tombstone(r): r for r in ids}
        where, params = self._db.among("record", sorted(hashed))
        return {hashed[r[0]] for r in self._db.execute(
            f"select record from forgotten where {where}", params)}

    def ids_of(self, numbers: Iterable[int]) -> dict[int, str]:
        """The records these numbers name (a forgotten record's number names none)."""
        numbers = sorted({int(n) for n in numbers})
        if not numbers:
            return {}
        where, params = self._db.among("number", numbers)
        with self._lock:
            return dict(self._db.execute(
                f"select number, record from record_numbers where {where}", params).fetchall())

    # -- what the pipeline made of each record ---------------------------------------------
    def save_landings(self, states: Sequence[LandingState]) -> None:
        """Keep each record's product as these landings left it, in one transaction; not
        of a record forgotten meanwhile (a step that lost its erasure lock, publish.py:
        `erase_forgotten`). Under the write lock, which `forget` takes too."""
        if not states:
            return
        with self._lock, self._writing():
            gone = self._forgotten({s.record for s in states})
            if kept := [s.row() for s in states if s.record not in gone]:
                self._db.executemany(LANDED, kept)

    def landings(self, records: Iterable[str] | None = None, *, product: str | None = None,
                 outcomes: Sequence[str] | None = None, run_id: str | None = None,
                 limit: int | None = None) -> list[LandingState]:
        """Landing states (those of `records`, any number of them; of one product, of these
        outcomes, of one run), by record and product."""
        where, params = [], []
        if records is not None:
            records = list(records)
            if not records:
                return []
            clause, param = self._db.among("record", records)
            where.append(clause)
            params += param
        for column, value in (("product", product), ("run_id", run_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if outcomes is not None:
            where.append(f"outcome in ({','.join('?' * len(outcomes))})")
            params += outcomes
        clause = (" where " + " and ".join(where)) if where else ""
        tail = f" limit {int(limit)}" if limit is not None else ""
        with self._lock:
            rows = self._db.execute(f"select {LANDING_COLUMNS} from landings{clause}"
                                    f" order by record, product{tail}", params).fetchall()
        return [LandingState(*r[:7], orjson.loads(r[7]) if r[7] else {}) for r in rows]

    def stale(self, product: str, cutoff: float, limit: int = 20) -> tuple[int, int, list[str]]:
        """Connected records whose `product` was published once: how many, how many not since
        `cutoff`, and the first `limit` of those."""
        with self._db.snapshot():
            expected, stale = self._db.execute(
                f"select count(*), coalesce(sum(case when l.landed_at < ? then 1 else 0 end), 0)"
                f"{PUBLISHED}", (cutoff, product)).fetchone()
            first = [r[0] for r in self._db.execute(
                f"select l.record{PUBLISHED} and l.landed_at < ? order by l.record limit ?",
                (product, cutoff, limit))]
        return expected, stale, first

    # -- what an operator watches (pipeline/watch.py): counts, never ids ------------------
    def vitals(self, cursor: int) -> Vitals:
        """The inbox's state in counts: the callbacks after `cursor` (the inbox sensor's), the
        newest callback, dead letters, records by status, and landings that did not land. A
        few aggregate reads, each over an index or a small table but `records`'s count."""
        with self._db.snapshot():
            last = self._db.execute("select id, received_at from events"
                                    " order by id desc limit 1").fetchone()
            waiting, oldest = self._db.execute(
                "select count(*), min(received_at) from events where id > ?",
                (cursor,)).fetchone()
            dead = self._db.execute("select count(*) from dead_letters").fetchone()[0]
            statuses = dict(self._db.execute(
                "select status, count(*) from records group by status").fetchall())
            outcomes = {(p, o): n for p, o, n in self._db.execute(
                "select product, outcome, count(*) from landings where outcome != ?"
                " group by product, outcome", (LANDED_OK,)).fetchall()}
        return Vitals(last_event=last[0] if last else 0,
                      last_received_at=last[1] if last else None, waiting=waiting,
                      oldest_waiting_at=oldest, dead_letters=dead, statuses=statuses,
                      outcomes=outcomes)

    def landing_ages(self, product: str) -> tuple[int, float | None, float | None]:
        """Connected records whose `product` was published: how many, and the median and the
        oldest of their last publication times (seconds since the epoch)."""
        with self._db.snapshot():
            count, oldest = self._db.execute(f"select count(*), min(l.landed_at){PUBLISHED}",
                                             (product,)).fetchone()
            median = self._db.execute(
                f"select l.landed_at{PUBLISHED} order by l.landed_at limit 1 offset ?",
                (product, count // 2)).fetchone() if count else None
        return count, median[0] if median else None, oldest

    def failing(self, product: str, outcome: str, *, not_runs: Sequence[str] = (),
                limit: int = 5) -> tuple[int, list[str], str | None]:
        """Records whose `product` last ended in `outcome` (failed or held), leaving out those
        of the runs `not_runs` (still running: a step may try again): how many, the first
        `limit` of them (by id), and the run that left the first so."""
        where = "product = ? and outcome = ?"
        params: list = [product, outcome]
        if not_runs:
            where += f" and run_id not in ({','.join('?' * len(not_runs))})"
            params += list(not_runs)
        with self._db.snapshot():
            count = self._db.execute(f"select count(*) from landings where {where}",
                                     params).fetchone()[0]
            rows = self._db.execute(f"select record, run_id from landings where {where}"
                                    " order by record limit ?", (*params, limit)).fetchall()
        return count, [r[0] for r in rows], rows[0][1] if rows else None

    def status(self, record: str) -> str | None:
        """connected, disconnected, reauth_required, or None for a record never heard of."""
        with self._lock:
            row = self._db.execute("select status from records where record = ?",
                                   (record,)).fetchone()
        return row[0] if row else None


# The calls tried once more when the connection was lost (a Postgres server dropped it): every
# one through the inbox's connection but add (whose add_described is) and probe_write
for _call in ("add_described", "after", "check", "count", "dead_letter", "failing", "forget",
              "forgotten", "ids_of", "landing_ages", "landings", "mark_replayed", "save_landings",
              "numbered", "numbers", "of_customer", "payloads", "records", "stale", "status",
              "vitals"):
    setattr(Inbox, _call, _retried(getattr(Inbox, _call)))
