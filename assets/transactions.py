"""Transactions of each record: a window pull where the source wins, audited before publish.

The first pull takes the whole history. Later pulls ask from the last date seen less an
overlap (lines clear late) and replace every row of the record inside that window with
what the service sent: a line gone at source (a pending line reversed, or posted again under a
new id) leaves the lake, a changed one changes. A line posted back-dated, before the window,
breaks the running-balance chain; the record is then pulled whole at once (and every record is,
on a rolling schedule: `daily_refresh` reconciles each record in full once every
LEDGERLAKE_RECONCILE_DAYS days, 7 by default). The record's new rows are published only if its
chain holds line by line and ends on the service's ledger balance; otherwise the previous one
stays in view and the check says why (docs/lake.md, "Write, audit, publish").

A record of more lines than STREAM_ROWS is never held: its pages are read ahead by a thread of
their own and taken a piece of STREAM_ROWS lines at a time (prefetch, pieces), each validated,
audited (the running balance carried from piece to piece: checks.RunningBalance) and staged on
local disk (resources/staging.py), and its commit streams them from there (`land_pull`). A
window pull of one reads the lake's rows around the window a batch at a time (`land_window`).
Memory is a piece's, whatever the record's size (bench/huge_record.py).
"""

import datetime as dt
import queue
import threading
import zlib
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetExecutionContext, Config, ResourceParam

from resources.client import Client
from resources.client.sdk import PARSE_PAGES, tls_context
from resources.config import Tuning
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.privacy import Keys, protect_narrations
from resources.staging import Staged
from resources.tables import UTC_MS, schema
from resources.wire import TRANSACTION_SCHEMA

from .batch import Batch
from .charts import chart_metadata
from .checks import (
    CHAIN_COLUMNS,
    Check,
    NotInPostingOrder,
    RunningBalance,
    chain_breaks,
    ledger_mismatches,
    ledger_problems,
    posted_in_order,
)
from .income import recheck_income
from .publish import Chunk, Landing, Lands, Run, Streamed, commit, keys, product
from .schemas import Transactions, ValidationFailed, checked_columns, validate

SCHEMA = schema("transactions")  # the lake adds record_id to each row (resources/lake.py)
SENT = schema("transactions", sent=True)  # as fetched, before the narrations are sealed
OVERLAP = dt.timedelta(days=3)
ORDER = [("trans_date", "ascending"), ("transaction_id", "ascending")]
# Speed (decision 5): the next AHEAD records are fetched by FETCHERS threads, three
# requests in flight, while this one merges, validates and writes (page parsing is in
# Arrow, off the GIL; with fewer fetchers the sandbox and the cores wait between pages);
# records are validated together up to VALIDATE_ROWS rows (pandera's cost is per call).
AHEAD = 3
FETCHERS = 3
VALIDATE_ROWS = 200_000
LOG_EACH = 10  # records a run logs one by one; more get one line
SPLIT_ROWS = 20_000  # a lone record this big is fetched in SPLIT_RANGES page ranges at once
SPLIT_RANGES = 2
# a record of more lines than this is landed a piece of this many lines at a time, never held
# (~35 MB of Arrow a piece; its protection, validation and audit hold a few times that)
STREAM_ROWS = 100_000
TAIL = 200  # lines of a piece held back for the next (a line sent twice at a page boundary)
PREFETCH = 4  # groups of pages (PARSE_PAGES each) read ahead of a streamed record's pieces
# validated columns only: to_pandas of the others (topics: a list a row) would cost time
CHECKED = checked_columns(Transactions)

RUNNING_BALANCE = Check(
    "running_balance_reconciles",
    "every posted line's running balance is the previous one plus its amount, to the kobo, "
    "and each account's last one equals its ledger balance at the service; a record that "
    "fails keeps its previously published rows")
FULL, WINDOW = "full history", "window"


def reconciles_on(record_id: str, day: dt.date, every: int) -> bool:
    """Whether `day`'s refresh pulls this record whole: each record once every `every` days,
    spread evenly (by a hash of its id), so no day pulls every history at once."""
    return every > 0 and zlib.crc32(record_id.encode()) % every == day.toordinal() % every


class PullConfig(Config):
    full_history: bool = False  # pull every record of the run whole (`ledgerlake rerun --full`)


def dedupe(table: pa.Table, key: str = "transaction_id") -> pa.Table:
    """Keep the last row of each key (later rows are newer copies), in the original order."""
    if table.num_rows == 0 or pc.count_distinct(table[key]).as_py() == table.num_rows:
        return table  # nothing doubled: no copy (a first pull of 200,000 lines is the case)
    idx = pa.array(np.arange(table.num_rows))
    last = (pa.table({key: table[key], "i": idx}).group_by(key, use_threads=False)
            .aggregate([("i", "max")]).column("i_max"))
    return table.take(pc.take(last, pc.sort_indices(last)))


def window_start(start: dt.date) -> pa.Scalar:
    """The first instant a pull `from` that date covers (the service compares UTC dates)."""
    return pa.scalar(dt.datetime.combine(start, dt.time(), dt.UTC), UTC_MS)


def apply_window(existing: pa.Table | None, fresh: pa.Table, start: dt.date | None) -> pa.Table:
    """The record's rows after a pull from `start` (None: the whole history).

    The source wins inside the window: every row dated from `start` on is replaced by what the
    service sent for it; rows before it stay, unless the pull brought their id again.
    """
    if existing is None or existing.num_rows == 0 or start is None:
        return dedupe(fresh).sort_by(ORDER)
    before = existing.filter(pc.less(existing["trans_date"], window_start(start)))
    before = before.filter(pc.invert(pc.is_in(before["transaction_id"],
                                              value_set=fresh["transaction_id"])))
    return dedupe(pa.concat_tables([before, fresh])).sort_by(ORDER)


def pull_from(existing: pa.Table | None) -> dt.date | None:
    """Where an incremental pull starts: the last date seen less the overlap."""
    if existing is None or existing.num_rows == 0:
        return None
    last = pc.max(existing["trans_date"]).as_py()
    return (last - OVERLAP).date() if last else None


def fetch(client: Client, record_id: str, start: dt.date | None) -> pa.Table:
    """The record's transactions from `start` (None: all), following nextPage, as the lake
    keeps them (narrations protected)."""
    return protected(client.transactions(record_id, from_date=start).select(SENT.names))


def protected(table: pa.Table) -> pa.Table:
    """Rows as the service sent them, their narrations masked and sealed (docs/privacy.md)."""
    return protect_narrations(table, Keys.from_env())


def audit(client: Client, record_id: str, table: pa.Table) -> list[dict]:
    """What stops the record's rows from being published: a broken chain, a last running balance
    that is not the service's ledger balance."""
    lines = posted_in_order(table)  # sorted once for both rules
    return chain_breaks(record_id, table, lines) or ledger_mismatches(
        record_id, table, client.balance(record_id), lines)


def bad_records(tables: dict[str, pa.Table]) -> dict[str, str]:
    """Validate several records' rows in one pandera call (its cost is per call); when
    that fails, find which records fail, each with the rows that do."""
    if len(tables) > 1:
        try:
            validate(Transactions, pa.concat_tables(
                [t.select(CHECKED) for t in tables.values()]), "transactions")
            return {}
        except ValidationFailed:
            pass  # find the records and their rows, below
    bad = {}
    for record_id, table in tables.items():
        try:
            validate(Transactions, table.select(CHECKED), f"transactions of record {record_id}")
        except ValidationFailed as err:
            bad[record_id] = f"ValidationFailed: {err}"
    return bad


def land_one(client: Client, record_id: str, table: pa.Table,
             start: dt.date | None, fetched: int, stream_rows: int = STREAM_ROWS) -> Landing:
    """Audit a record's validated rows; it is published (committed with the others) if it
    holds. A window pull that does not add up is pulled again whole: a line was posted
    back-dated, before the window (piece by piece, if its lines are more than `stream_rows`)."""
    pull = FULL if start is None else f"{WINDOW} from {start}"
    problems = audit(client, record_id, table)
    if problems and start is not None:
        fresh = fetch_ahead(client, record_id, None, stream_rows=stream_rows)
        if isinstance(fresh, Pull):
            whole = land_streamed(client, record_id, fresh, stream_rows,
                                  pull=f"{FULL} (the window pull from {start} did not reconcile)")
            return replace(whole, fetched_rows=(whole.fetched_rows or 0) + fetched)
        fetched += fresh.num_rows
        table = dedupe(fresh).sort_by(ORDER)
        pull = f"{FULL} (the window pull from {start} did not reconcile)"
        validate(Transactions, table.select(CHECKED), f"transactions of record {record_id}")
        problems = audit(client, record_id, table)
    return Landing(record_id, published=not problems, row_count=table.num_rows,
                   problems={RUNNING_BALANCE.name: problems}, fetched_rows=fetched, pull=pull,
                   rows={} if problems else {"transactions": table})


# -- a run's records, staged: prefetch -> window -> validate and audit -> commit, a chunk a time --

@dataclass(frozen=True)
class Fetched:
    """A record's pull as fetched (or the error that stopped it), with the rows the lake held
    of it (None: not read, the record is new, too big to read, or pulled whole)."""
    record_id: str
    start: dt.date | None
    existing: pa.Table | None
    fresh: "pa.Table | Pull | None" = None
    error: Exception | None = None


@dataclass(frozen=True)
class Windowed:
    """A record's rows after its pull, held, waiting to be validated and audited."""
    record_id: str
    table: pa.Table
    start: dt.date | None
    fetched: int


class LakeRows:
    """What the lake holds of a run's records: their row counts, and the rows of those small
    enough to hold, read a chunk at a time (one scan for CHUNK records, not one each)."""

    def __init__(self, lake: Lake, ids: list[str], full: Collection[str], stream_rows: int):
        self.lake = lake
        self.chunks = [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]
        self.chunk_of = {r: n for n, chunk in enumerate(self.chunks) for r in chunk}
        # a backfill's records are mostly new: their rows need not be looked for chunk by
        # chunk; those with more rows than a piece are never read whole
        self.sizes = lake.row_counts("transactions", [r for r in ids if r not in full])
        self.big = {r for r, n in self.sizes.items() if n > stream_rows}
        self.held: dict[str, pa.Table] = {}
        self.read: set[int] = set()

    def take(self, record_id: str) -> pa.Table | None:
        n = self.chunk_of[record_id]
        if n not in self.read:
            self.read.add(n)
            self.held.update(self.lake.read_many("transactions", [
                r for r in self.chunks[n] if r in self.sizes and r not in self.big], SCHEMA))
        return self.held.pop(record_id, None)

    def ends_chunk(self, record_id: str) -> bool:
        return record_id == self.chunks[self.chunk_of[record_id]][-1]


def prefetch(client: Client, rows: LakeRows, ids: list[str], full: Collection[str],
             lone: bool, stream_rows: int) -> Iterator[Fetched]:
    """Each record's pull, in order: FETCHERS threads fetch the next AHEAD records while the
    caller works on this one."""
    with ThreadPoolExecutor(FETCHERS, thread_name_prefix="transactions-fetch") as pool:
        waiting: deque[tuple[str, dt.date | None, pa.Table | None, Future]] = deque()
        for n, record_id in enumerate(ids):
            if record_id in full:
                existing, start = None, None
            elif record_id in rows.big:
                existing, start = None, pull_from_lake(rows.lake, record_id)
            else:
                existing = rows.take(record_id)
                start = pull_from(existing)
            waiting.append((record_id, start, existing, pool.submit(
                fetch_ahead, client, record_id, start, lone, stream_rows)))
            while len(waiting) > AHEAD or (waiting and n == len(ids) - 1):
                yield _fetched(*waiting.popleft())


def _fetched(record_id: str, start: dt.date | None, existing: pa.Table | None,
             fetching: Future) -> Fetched:
    try:
        return Fetched(record_id, start, existing, fetching.result())
    except Exception as exc:
        return Fetched(record_id, start, existing, error=exc)


def windowed(fetched: Iterable[Fetched], client: Client, rows: LakeRows, stream_rows: int,
             log: Callable[..., None] | None) -> Iterator[tuple[Landing | Windowed, bool]]:
    """Each record's rows after its pull (a record too big to hold, or failed: its landing
    already), with whether it ends its chunk: the chunk's last record, or CHUNK_ROWS rows
    held since the last commit."""
    held = 0
    for f in fetched:
        item = _windowed(f, client, rows, stream_rows)
        if log is not None and (n := _fetched_rows(item, f)) is not None:
            log("%s: %d fetched (%s), %d in the record", f.record_id, n,
                f"from {f.start}" if f.start else "full history",
                item.table.num_rows if isinstance(item, Windowed) else item.row_count)
        held += item.table.num_rows if isinstance(item, Windowed) else 0
        ends = rows.ends_chunk(f.record_id) or held >= CHUNK_ROWS
        held = 0 if ends else held
        del f  # its rows as fetched and as the lake held them: not kept while others land
        yield item, ends


def _windowed(f: Fetched, client: Client, rows: LakeRows, stream_rows: int
              ) -> Landing | Windowed:
    if f.error is not None:
        return Landing.failed(f.record_id, f.error)
    if isinstance(f.fresh, Pull) or f.record_id in rows.big:
        return land_big(client, rows.lake, f.record_id, f.fresh, f.start,
                        rows.sizes.get(f.record_id, 0), stream_rows)
    return Windowed(f.record_id, apply_window(f.existing, f.fresh, f.start), f.start,
                    f.fresh.num_rows)


def _fetched_rows(item: Landing | Windowed, f: Fetched) -> int | None:
    if isinstance(item, Windowed):
        return item.fetched
    return None if f.error is not None else item.fetched_rows


def audited(items: Iterable[tuple[Landing | Windowed, bool]], client: Client,
            audits: ThreadPoolExecutor, stream_rows: int
            ) -> Iterator[tuple[Landing | Future, bool]]:
    """The records in order, those held validated together (up to VALIDATE_ROWS rows a
    pandera call, and at each chunk's end) and their audits started beside (a future)."""
    group: list[tuple[Landing | Windowed, bool]] = []
    rows = 0
    for item, ends in items:
        size = item.table.num_rows if isinstance(item, Windowed) else 0
        if size and rows + size > VALIDATE_ROWS:
            yield from _validated(group, client, audits, stream_rows)
            group, rows = [], 0
        group.append((item, ends))
        rows += size
        if ends:
            yield from _validated(group, client, audits, stream_rows)
            group, rows = [], 0
    yield from _validated(group, client, audits, stream_rows)


def _validated(group: list[tuple[Landing | Windowed, bool]], client: Client,
               audits: ThreadPoolExecutor, stream_rows: int
               ) -> Iterator[tuple[Landing | Future, bool]]:
    bad = bad_records({x.record_id: x.table for x, _ in group if isinstance(x, Windowed)})
    for x, ends in group:
        if isinstance(x, Windowed) and x.record_id in bad:
            x = Landing(x.record_id, error=bad[x.record_id], retryable=False)
        elif isinstance(x, Windowed):
            x = audits.submit(land_audited, client, x, stream_rows)
        yield x, ends


def land_audited(client: Client, x: Windowed, stream_rows: int) -> Landing:
    """`land_one` of a validated record; its failure (the audit's /balance call) is its own."""
    try:
        return land_one(client, x.record_id, x.table, x.start, x.fetched, stream_rows)
    except Exception as exc:
        return Landing.failed(x.record_id, exc)


def committed(items: Iterable[tuple[Landing | Future, bool]], lake: Lake
              ) -> Iterator[list[Landing]]:
    """Each chunk's landings, once its last is audited, those that hold committed together."""
    chunk: list[Landing | Future] = []
    for item, ends in items:
        chunk.append(item)
        if ends:
            landings = [x.result() if isinstance(x, Future) else x for x in chunk]
            chunk = []
            yield commit(lake, landings, {"transactions": SCHEMA})


def land_chunks(client: Client, lake: Lake, ids: list[str],
                full: Collection[str] = frozenset(), log: Callable[..., None] | None = None,
                split: bool = False, stream_rows: int = STREAM_ROWS
                ) -> Iterator[list[Landing]]:
    """Fetch, window, validate and audit each record's rows, in order; each CHUNK records'
    landings (fewer once they hold CHUNK_ROWS rows), those that hold committed together, as
    soon as the last of them is audited.

    A staged pipeline of generators: `prefetch` (FETCHERS threads fetch the next AHEAD
    records while this thread works), `windowed`, `audited` (pandera over several records at
    once; the audits' /balance calls on threads beside) and `committed`. `full`: records
    pulled whole whatever the lake holds. `split`: a lone record of SPLIT_ROWS or more is
    fetched as page ranges at once. A record whose pull, or whose rows in the lake, hold
    more than `stream_rows` lines is landed piece by piece and never held (`land_big`). A
    record whose fetch or validation fails is reported with its error; the others go on.
    """
    rows = LakeRows(lake, ids, full, stream_rows)
    lone = split and len(ids) == 1  # the sensor's runs: one record, maybe a big one
    with ThreadPoolExecutor(2, thread_name_prefix="transactions-audit") as audits:
        fetched = prefetch(client, rows, ids, full, lone, stream_rows)
        items = audited(windowed(fetched, client, rows, stream_rows, log), client, audits,
                        stream_rows)
        yield from committed(items, lake)


# -- a record too big to hold: prefetch, pieces, validate, audit, stage; committed from disk ----

class NotStreamable(ValueError):
    """A record's lines cannot be landed piece by piece (a line came twice, pieces apart: the
    record changed while it was read); it is landed whole."""


@dataclass
class Pull:
    """A record's lines too many to hold, from `start`: the groups of pages read already
    (`head`), then the rest from page `first_page` on, read ahead as the pieces need them
    (`lines`)."""
    client: Client
    record_id: str
    start: dt.date | None
    head: list[pa.RecordBatch] = field(default_factory=list)
    first_page: int = 1

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.head)

    def lines(self) -> Iterator[pa.RecordBatch]:
        head, self.head = self.head, []
        yield from head
        yield from prefetched(self.client, self.record_id, self.start, self.first_page)

    def close(self) -> None:
        self.head = []


def fetch_ahead(client: Client, record_id: str, start: dt.date | None, lone: bool = False,
                stream_rows: int = STREAM_ROWS) -> pa.Table | Pull:
    """The record's lines from `start` (None: all), as the lake keeps them (`fetch`) when they
    are at most `stream_rows`, else a `Pull` of them. A lone record is counted first; one of
    SPLIT_ROWS or more lines is fetched as page ranges at once."""
    if lone:
        total = client.transaction_total(record_id, from_date=start)
        if total > stream_rows:
            return Pull(client, record_id, start)
        return fetch_split(client, record_id, start, total)
    groups = client.transaction_groups(record_id, from_date=start)
    head, rows = [], 0
    for batch in groups:
        head.append(batch)
        rows += batch.num_rows
        if rows > stream_rows:  # the rest from the page after those read
            groups.close()
            return Pull(client, record_id, start, head, -(-rows // client.page_size) + 1)
    return protected(pa.Table.from_batches(head, schema=TRANSACTION_SCHEMA).select(SENT.names))


_END = object()


def prefetched(client: Client, record_id: str, start: dt.date | None, first_page: int = 1
               ) -> Iterator[pa.RecordBatch]:
    """The record's lines from page `first_page` on, in the service's order, read ahead by
    SPLIT_RANGES threads: each takes every SPLIT_RANGES-th group of PARSE_PAGES pages, at most
    PREFETCH groups ahead of the pieces (the last group runs to the end, however many pages it
    has by then). A line that moved across a group's edge while they read is caught by
    `pieces`, a line lost by the running balance. Stopping early stops them."""
    total = client.transaction_total(record_id, from_date=start)
    pages = -(-total // client.page_size)
    firsts = list(range(first_page, pages + 1, PARSE_PAGES)) or [first_page]
    groups = [(f, None if i == len(firsts) - 1 else f + PARSE_PAGES - 1)
              for i, f in enumerate(firsts)]
    queues: list[queue.Queue] = [queue.Queue(PREFETCH) for _ in range(SPLIT_RANGES)]
    stop = threading.Event()
    readers = [threading.Thread(target=_read_groups, daemon=True, name=f"transactions-range-{w}",
                                args=(client, record_id, start, groups[w::SPLIT_RANGES],
                                      queues[w], stop)) for w in range(SPLIT_RANGES)]
    for reader in readers:
        reader.start()
    try:
        for i in range(len(groups)):
            yield from _taken(queues[i % SPLIT_RANGES])
    finally:
        stop.set()
        for reader in readers:
            reader.join()


def _read_groups(client: Client, record_id: str, start: dt.date | None,
                 groups: list[tuple[int, int | None]], ready: queue.Queue,
                 stop: threading.Event) -> None:
    """One reader's groups of pages into `ready`, each followed by _END (its error instead,
    if it fails), until they are read or `stop` is set."""
    try:
        for first, last in groups:
            batches = client.transaction_groups(record_id, from_date=start, first_page=first,
                                                last_page=last)
            if not all(_put(ready, b, stop) for b in batches) or not _put(ready, _END, stop):
                return
    except BaseException as exc:  # raised where the lines are taken
        _put(ready, exc, stop)


def _put(ready: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Put `item` once there is room; False if `stop` is set first."""
    while not stop.is_set():
        try:
            ready.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _taken(ready: queue.Queue) -> Iterator[pa.RecordBatch]:
    """One group's batches as its reader puts them, up to its _END; its error raised."""
    while (item := ready.get()) is not _END:
        if isinstance(item, BaseException):
            raise item
        yield item


def pieces(batches: Iterable[pa.RecordBatch], rows: int, tail: int = TAIL
           ) -> Iterator[pa.Table]:
    """The lines in tables of `rows` or so (whole groups of pages; the last one fewer), each
    deduped (a later copy kept) together with the last `tail` lines of the one before, held
    back for it: a line a page boundary sent twice, as the data changed, is one line."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        held.append(batch)
        count += batch.num_rows
        if count >= rows + tail:
            table = dedupe(pa.Table.from_batches(held))
            keep = max(0, table.num_rows - tail)
            yield table.slice(0, keep)
            held = table.slice(keep).combine_chunks().to_batches()
            count = table.num_rows - keep
    if held and (table := dedupe(pa.Table.from_batches(held))).num_rows:
        yield table


class Seen:
    """The ids of a record's lines landed so far as 64-bit hashes, sorted (8 bytes a line): a
    line that comes again in a later piece is caught (NotStreamable)."""

    def __init__(self) -> None:
        self.hashes = np.empty(0, np.int64)

    def add(self, record_id: str, ids: pa.ChunkedArray | pa.Array) -> None:
        new = np.fromiter(map(hash, ids.to_pylist()), np.int64, count=len(ids))
        at = np.searchsorted(self.hashes, new)
        if len(self.hashes):
            seen_before = self.hashes[np.minimum(at, len(self.hashes) - 1)] == new
            if seen_before.any():
                raise NotStreamable(f"record {record_id}: line {ids[int(np.argmax(seen_before))]} "
                                    "came twice, pieces apart (the record changed while it "
                                    "was read)")
        order = np.argsort(new, kind="stable")
        self.hashes = np.insert(self.hashes, at[order], new[order])


class Counted:
    """Batches passed on, their rows counted."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self.batches, self.rows = batches, 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self.batches:
            self.rows += batch.num_rows
            yield batch


def land_big(client: Client, lake: Lake, record_id: str, fresh: pa.Table | Pull,
             start: dt.date | None, in_lake: int, stream_rows: int = STREAM_ROWS) -> Landing:
    """Land a record too big to hold: its whole pull piece by piece (`land_streamed`), or the
    window of one the lake holds (`land_window`), pulled whole if it does not reconcile or
    brings more than `stream_rows` lines. Its failure is the record's."""
    try:
        if isinstance(fresh, Pull) and start is None:
            return land_streamed(client, record_id, fresh, stream_rows)
        if isinstance(fresh, Pull):  # the window alone is too big to hold: all of it
            window = fresh.num_rows
            fresh.close()
            whole = land_streamed(client, record_id, Pull(client, record_id, None),
                                  stream_rows, pull=f"{FULL} (the window from {start} holds "
                                                    f"more than {stream_rows} lines)")
        elif start is None:  # the lake's rows too many to read, the service's few
            table = apply_window(None, fresh, None)
            validate(Transactions, table.select(CHECKED), f"transactions of record {record_id}")
            return land_one(client, record_id, table, None, fresh.num_rows, stream_rows)
        else:
            landing = land_window(client, lake, record_id, start, fresh, in_lake)
            if landing.published:
                return landing
            window = fresh.num_rows
            whole = land_streamed(client, record_id, Pull(client, record_id, None),
                                  stream_rows,
                                  pull=f"{FULL} (the window pull from {start} did not reconcile)")
        return replace(whole, fetched_rows=(whole.fetched_rows or 0) + window)
    except Exception as exc:
        return Landing.failed(record_id, exc)


def land_streamed(client: Client, record_id: str, fresh: Pull, stream_rows: int = STREAM_ROWS,
                  pull: str = FULL) -> Landing:
    """`land_pull` of a pull; a record whose lines cannot be taken a piece at a time (one
    posted out of order, one sent twice pieces apart) is fetched again and landed whole,
    held in memory as a small one is."""
    try:
        return land_pull(client, record_id, fresh.lines(), stream_rows, pull)
    except (NotStreamable, NotInPostingOrder) as exc:
        fresh.close()
        fetched = fetch(client, record_id, None)
        table = apply_window(None, fetched, None)
        validate(Transactions, table.select(CHECKED), f"transactions of record {record_id}")
        landing = land_one(client, record_id, table, None, fetched.num_rows)
        return replace(landing, pull=f"{FULL} (held whole: {exc})")


def land_pull(client: Client, record_id: str, lines: Iterable[pa.RecordBatch],
              stream_rows: int = STREAM_ROWS, pull: str = FULL) -> Landing:
    """A record's whole pull, `stream_rows` lines at a time: each piece protected, validated
    (its rows numbered as the record's), fed to the running-balance rule and staged on disk;
    published if the rule holds at the end (the chunk's commit streams the rows from disk),
    else dropped. Raises ValidationFailed, or NotStreamable and NotInPostingOrder when the
    lines cannot be taken a piece at a time."""
    staged = Staged(SCHEMA, prefix="ledgerlake-transactions-")
    rule, seen, fetched, rows = RunningBalance(record_id), Seen(), Counted(lines), 0
    try:
        for piece in pieces(fetched, stream_rows):  # the pipeline's stages, a piece at a time
            seen.add(record_id, piece["transaction_id"])
            table = protected(piece.select(SENT.names))
            validate(Transactions, table.select(CHECKED), f"transactions of record {record_id}",
                     first_row=rows)
            rule.feed(table)
            staged.add(table)
            rows += table.num_rows
            del piece, table
            pa.default_memory_pool().release_unused()  # a piece's memory back, not kept
        rule.finish()
        problems = rule.breaks or ledger_problems(record_id, rule.running,
                                                  client.balance(record_id))
    except BaseException:
        staged.discard()
        raise
    finally:  # the service read no further (a prefetch thread stopped)
        if (close := getattr(lines, "close", None)) is not None:
            close()
    if problems:
        staged.discard()
    return Landing(record_id, published=not problems, row_count=rows,
                   problems={RUNNING_BALANCE.name: problems}, fetched_rows=fetched.rows,
                   pull=pull, rows={} if problems else {"transactions": Streamed(staged)})


NARROW = pa.schema([SCHEMA.field(c) for c in ["trans_date", *CHAIN_COLUMNS]])


def land_window(client: Client, lake: Lake, record_id: str, start: dt.date, fresh: pa.Table,
                in_lake: int) -> Landing:
    """A window pull of a record whose rows in the lake are too many to read at once.

    `fresh` (the service's lines from `start`, as the lake keeps them) replaces the record's
    rows from the window on; a line it re-sends from before the window loses its old copy,
    the record's rows from the earliest such one on rewritten without it. The running-balance
    rule runs over the record's posted lines from the first posting the pull changes on, each
    account's from the lake's line before it (the lines before were checked when they landed
    and are unchanged). The lake is read a batch at a time, twice, in its narrow columns."""
    fresh = dedupe(fresh).sort_by(ORDER)
    validate(Transactions, fresh.select(CHECKED), f"transactions of record {record_id}")
    since, trans = window_start(start), pc.field("trans_date")
    tid = pc.field("transaction_id").cast(pa.string())  # as the lake's own reads filter ids
    # what the pull takes out: the rows from the window on, and the old copies of lines it
    # re-sends from before it
    out = pa.Table.from_batches(list(lake.scan("transactions", record_id, NARROW, (
        trans >= since) | tid.isin(fresh["transaction_id"].combine_chunks()))), schema=NARROW)
    moved = out.filter(pc.less(out["trans_date"], since))
    rewrite_from = pc.min(moved["trans_date"]) if moved.num_rows else since  # all before it
    changed = pc.min(pa.chunked_array([  # the first posting the pull takes out or brings
        t.filter(pc.is_valid(t["balance"]))["cleared_date"] for t in (out, fresh)], UTC_MS))
    # the lake's posted lines that stay: before `changed`, each account's last; from it on,
    # all (a few: those posted since the window's start, and back-dated ones)
    kept = ~tid.isin(moved["transaction_id"].combine_chunks())
    before, after = {}, []
    for batch in lake.scan("transactions", record_id, NARROW, pc.is_valid(pc.field(
            "cleared_date")) & pc.is_valid(pc.field("balance")) & (trans < since) & kept):
        early = (pc.less(batch["cleared_date"], changed) if changed.is_valid
                 else pa.array([True] * batch.num_rows))
        before = last_posted([batch.filter(early)], before)
        after.append(batch.filter(pc.invert(early)))
    pa.default_memory_pool().release_unused()
    rule = RunningBalance(record_id, after=before)
    rule.feed(pa.concat_tables([pa.Table.from_batches(after, schema=NARROW),
                                fresh.select(NARROW.names).cast(NARROW)]))
    rule.finish()
    problems = rule.breaks or ledger_problems(record_id, rule.running, client.balance(record_id))
    if problems:
        return Landing(record_id, row_count=in_lake, problems={RUNNING_BALANCE.name: problems},
                       fetched_rows=fresh.num_rows, pull=f"{WINDOW} from {start}")
    staged = Staged(SCHEMA, prefix="ledgerlake-transactions-")
    try:
        if rewrite_from != since:
            for batch in lake.scan("transactions", record_id, SCHEMA,
                                   (trans >= rewrite_from) & (trans < since) & kept):
                staged.add(pa.Table.from_batches([batch]))
        staged.add(fresh)
    except BaseException:
        staged.discard()
        raise
    return Landing(record_id, published=True, row_count=in_lake - out.num_rows + fresh.num_rows,
                   problems={RUNNING_BALANCE.name: []}, fetched_rows=fresh.num_rows,
                   pull=f"{WINDOW} from {start}",
                   rows={"transactions": Streamed(staged, rewrite_from.as_py())})


def last_posted(batches: Iterable[pa.RecordBatch],
                last: dict[str | None, tuple[int, str, int]] | None = None
                ) -> dict[str | None, tuple[int, str, int]]:
    """Each account's last posted line among `batches` (any order) and `last`'s, as
    RunningBalance carries it: (cleared ms, transaction id, balance kobo)."""
    last = dict(last or {})
    for batch in batches:
        rule = RunningBalance("")
        rule.check(posted_in_order(pa.Table.from_batches([batch])))
        for account, line in rule.last.items():
            if account not in last or line[:2] > last[account][:2]:
                last[account] = line
    return last


def pull_from_lake(lake: Lake, record_id: str) -> dt.date | None:
    """`pull_from` of a record the lake holds too many rows of to read: its dates, a batch at
    a time."""
    last = None
    for batch in lake.scan("transactions", record_id, pa.schema([SCHEMA.field("trans_date")])):
        seen = pc.max(batch["trans_date"]).as_py()
        if seen is not None and (last is None or seen > last):
            last = seen
    return (last - OVERLAP).date() if last else None


# Records are spread over processes by the engine, not here: a backfill's runs (RECORDS_PER_RUN
# records each) and the sensor's go to the run launcher, which starts as many at once as the
# instance allows, each a process on one machine or a pod on Kubernetes (docs/operations.md,
# "From one box to many"). In a run, a chunk is committed and told while the next one lands.
# A commit costs the same whatever its size, so chunks are large (decision 5); the rows it
# holds (records of STREAM_ROWS lines at most: bigger ones wait staged on disk) are held until
# it is, so a chunk ends sooner once they are CHUNK_ROWS.
CHUNK = 50
CHUNK_ROWS = 500_000  # ~150 MB of Arrow
_warm: dict = {}


def warm() -> None:
    """Pay before the first record what the first record would: pandera builds its
    validators on first use (~0.3 s) and the trust store loads (~20 ms)."""
    if not _warm:
        validate(Transactions, SCHEMA.empty_table().select(CHECKED), "transactions (warm-up)")
        tls_context()
        _warm["done"] = True


def fetch_split(client: Client, record_id: str, start: dt.date | None,
                total: int | None = None) -> pa.Table:
    """One record's pull; a big one is fetched as SPLIT_RANGES page ranges side by side
    (`total`: its lines, if counted already).

    The service's order is stable (date, then id), so the ranges join in order; a line that
    moved across a boundary while we read is caught by `dedupe`.
    """
    if total is None:
        total = client.transaction_total(record_id, from_date=start)
    if total < SPLIT_ROWS:
        return fetch(client, record_id, start)
    pages = -(-total // client.page_size)
    cut = [1 + pages * k // SPLIT_RANGES for k in range(SPLIT_RANGES)]
    bounds = [(a, b - 1) for a, b in zip(cut, cut[1:], strict=False)]
    bounds.append((cut[-1], None))  # the last range runs to the end
    with ThreadPoolExecutor(SPLIT_RANGES, thread_name_prefix="transactions-range") as ranges:
        parts = list(ranges.map(lambda b: client.transactions(
            record_id, from_date=start, first_page=b[0], last_page=b[1]).select(SENT.names),
            bounds))
    return protected(dedupe(pa.concat_tables(parts)))


def full_pulls(context: AssetExecutionContext, config: PullConfig, ids: list[str],
               every: int) -> set[str]:
    """Records this run pulls whole: all when asked, else those `daily_refresh` reconciles
    today (its runs carry the day), each once `every` days (LEDGERLAKE_RECONCILE_DAYS)."""
    if config.full_history:
        return set(ids)
    day = context.run.tags.get("ledgerlake/refresh_day")
    if not day:
        return set()
    when = dt.date.fromisoformat(day)
    return {r for r in ids if reconciles_on(r, when, every)}


# first: income's check, in the same run, then finds them in the lake (assets/income.py)
@product(checks=[RUNNING_BALANCE], first=True,
         description="Every transaction of the record: signed amount, running balance, "
                     "narration; the source wins inside each pull's window")
def transactions(context: AssetExecutionContext, config: PullConfig, batch: Batch,
                 client: ResourceParam[Client], lake: Lake, inbox: InboxResource,
                 tuning: ResourceParam[Tuning]) -> Lands:
    def chunks(run: Run) -> Iterator[Chunk]:
        ids = run.ids
        full = full_pulls(context, config, list(ids), tuning.reconcile_days)
        keys(local_lake=lake.is_local)  # none: the step fails now, not record by record
        warm()
        # a Dagster log line is a stored event (~10 ms): said for few records only
        log = ((lambda text, rid, *rest: context.log.info(text, f"record #{ids[rid]}", *rest))
               if len(ids) <= LOG_EACH else None)
        for chunk in land_chunks(client, lake, list(ids), full, split=True, log=log):
            # income that landed before these transactions is checked now that both are here
            rechecked = recheck_income(lake, [x.record_id for x in chunk if x.published])
            yield ([replace(x, number=ids[x.record_id]) for x in chunk],
                   [replace(v, number=ids[v.record_id]) for v in rechecked])

    def metadata(landings: list[Landing]) -> dict:
        pulls = [x.pull or "" for x in landings]
        for x, pull in zip(landings, pulls, strict=True):
            if pull.startswith(f"{FULL} ("):
                context.log.warning("%s: %s", x.label, pull)
        return {"fetched_rows": sum(x.fetched_rows or 0 for x in landings),
                "pulled_whole": sum(p.startswith(FULL) for p in pulls),
                **chart_metadata(context, lake, landings, tuning)}

    return Lands(chunks=chunks, metadata=metadata)
