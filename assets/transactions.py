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
"""

import datetime as dt
import os
import zlib
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetExecutionContext, Config, ResourceParam

from resources.client import Client
from resources.client.sdk import tls_context
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.privacy import Keys, protect_narrations
from resources.tables import UTC_MS, schema

from .batch import Batch
from .charts import chart_metadata
from .checks import chain_breaks, ledger_mismatches, posted_in_order
from .income import INCOME_MATCHES, recheck_income
from .publish import Check, Landing, commit, keys, log_rechecks, note, product, report, to_land
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
# validated columns only: to_pandas of the others (topics: a list a row) would cost time
CHECKED = checked_columns(Transactions)

RUNNING_BALANCE = Check(
    "running_balance_reconciles",
    "every posted line's running balance is the previous one plus its amount, to the kobo, "
    "and each account's last one equals its ledger balance at the service; a record that "
    "fails keeps its previously published rows")
FULL, WINDOW = "full history", "window"


def reconcile_days() -> int:
    raw = os.environ.get("LEDGERLAKE_RECONCILE_DAYS", "7")
    if not raw.isdigit() or not 0 <= int(raw) <= 366:
        raise ValueError(f"LEDGERLAKE_RECONCILE_DAYS must be 0 (never) to 366, not {raw!r}")
    return int(raw)


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
             start: dt.date | None, fetched: int) -> Landing:
    """Audit a record's validated rows; it is published (committed with the others) if it
    holds. A window pull that does not add up is pulled again whole: a line was posted
    back-dated, before the window."""
    pull = FULL if start is None else f"{WINDOW} from {start}"
    problems = audit(client, record_id, table)
    if problems and start is not None:
        fresh = fetch(client, record_id, None)
        fetched += fresh.num_rows
        table = dedupe(fresh).sort_by(ORDER)
        pull = f"{FULL} (the window pull from {start} did not reconcile)"
        validate(Transactions, table.select(CHECKED), f"transactions of record {record_id}")
        problems = audit(client, record_id, table)
    return Landing(record_id, published=not problems, row_count=table.num_rows,
                   problems={RUNNING_BALANCE.name: problems}, fetched_rows=fetched, pull=pull,
                   rows={} if problems else {"transactions": table})


def land_chunks(client: Client, lake: Lake, ids: list[str],
                full: Collection[str] = frozenset(), say: Callable[..., None] | None = None,
                split: bool = False) -> Iterator[list[Landing]]:
    """Fetch, window, validate and audit each record's rows, in order; each CHUNK records'
    landings (fewer once they hold CHUNK_ROWS rows), those that hold committed together, as
    soon as the last of them is audited.

    Threads do the waiting: FETCHERS fetch the next AHEAD records while this thread merges
    and validates (also while the caller tells Dagster of a chunk), and the audits' /balance
    calls run beside. `full`: records pulled whole whatever the lake holds. `split`: a lone
    record of SPLIT_ROWS or more is fetched as page ranges at once. A record whose fetch or
    validation fails is reported with its error; the others go on.
    """
    chunks = [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]
    chunk_of = {r: n for n, chunk in enumerate(chunks) for r in chunk}
    # a backfill's records are mostly new: their rows need not be looked for chunk by chunk
    known = lake.holding("transactions", [r for r in ids if r not in full])
    held: dict[str, pa.Table] = {}
    read: set[int] = set()
    lone = split and len(ids) == 1  # the sensor's runs: one record, maybe a big one

    def existing_of(record_id: str) -> pa.Table | None:
        n = chunk_of[record_id]
        if n not in read:  # a chunk's rows in one pass, not one scan of the table a record
            read.add(n)
            held.update(lake.read_many("transactions",
                                       [r for r in chunks[n] if r in known], SCHEMA))
        return held.pop(record_id, None)

    with (ThreadPoolExecutor(FETCHERS, thread_name_prefix="transactions-fetch") as pool,
          ThreadPoolExecutor(2, thread_name_prefix="transactions-audit") as io):

        def start_fetch(record_id: str) -> tuple[pa.Table | None, dt.date | None, Future]:
            existing = None if record_id in full else existing_of(record_id)
            start = None if record_id in full else pull_from(existing)
            get = fetch_split if lone else fetch
            return existing, start, pool.submit(get, client, record_id, start)

        ahead = {r: start_fetch(r) for r in ids[:AHEAD]}
        group: dict[str, tuple[pa.Table, dt.date | None, int]] = {}
        landings: dict[str, Landing | Future] = {}
        pending, pending_rows = [], 0  # landed since the last commit

        def flush() -> None:
            bad = bad_records({r: t for r, (t, _, _) in group.items()})
            for rid, (table, start, fetched) in group.items():
                if rid in bad:
                    landings[rid] = Landing(rid, error=bad[rid], retryable=False)
                else:
                    landings[rid] = io.submit(land_one, client, rid, table, start, fetched)
            group.clear()

        for i, record_id in enumerate(ids):
            existing, start, fetched = ahead.pop(record_id)
            if i + AHEAD < len(ids):
                nxt = ids[i + AHEAD]
                ahead[nxt] = start_fetch(nxt)
            try:
                fresh = fetched.result()
            except Exception as exc:
                landings[record_id] = Landing.failed(record_id, exc)
            else:
                del fetched
                table = apply_window(existing, fresh, start)
                if say is not None:
                    say("%s: %d fetched (%s), %d in the record", record_id,
                        fresh.num_rows, f"from {start}" if start else "full history",
                        table.num_rows)
                if sum(t.num_rows for t, _, _ in group.values()) + table.num_rows > VALIDATE_ROWS:
                    flush()
                group[record_id] = (table, start, fresh.num_rows)
                pending_rows += table.num_rows
                del existing, fresh
            pending.append(record_id)
            if record_id != chunks[chunk_of[record_id]][-1] and pending_rows < CHUNK_ROWS:
                continue
            flush()
            out = []
            for rid in pending:
                landing = landings.pop(rid)
                if isinstance(landing, Future):
                    try:
                        landing = landing.result()
                    except Exception as exc:  # the audit's /balance call
                        landing = Landing.failed(rid, exc)
                out.append(landing)
            pending, pending_rows = [], 0
            commit(lake, out, {"transactions": SCHEMA})
            yield out


def land_records(client: Client, lake: Lake, ids: list[str],
                 full: Collection[str] = frozenset(), say: Callable[..., None] | None = None,
                 split: bool = False) -> list[Landing]:
    """Every record's landing, in order, committed (`land_chunks`, all at once)."""
    return [x for chunk in land_chunks(client, lake, ids, full, say, split) for x in chunk]


# Records are spread over processes by the engine, not here: a backfill's runs (RECORDS_PER_RUN
# records each) and the sensor's go to the run launcher, which starts as many at once as the
# instance allows, each a process on one machine or a pod on Kubernetes (docs/operations.md,
# "From one box to many"). In a run, a chunk is committed and told while the next one lands.
# A commit costs the same whatever its size, so chunks are large (decision 5); its rows are
# held until it is, so big records end a chunk sooner.
CHUNK = 50
CHUNK_ROWS = 500_000  # ~150 MB of Arrow
SPLIT_ROWS = 20_000  # a lone record this big is fetched in SPLIT_RANGES page ranges at once
SPLIT_RANGES = 2
_warm: dict = {}


def warm() -> None:
    """Pay before the first record what the first record would: pandera builds its
    validators on first use (~0.3 s) and the trust store loads (~20 ms)."""
    if not _warm:
        validate(Transactions, SCHEMA.empty_table().select(CHECKED), "transactions (warm-up)")
        tls_context()
        _warm["done"] = True


def fetch_split(client: Client, record_id: str, start: dt.date | None) -> pa.Table:
    """One record's pull; a big one is fetched as SPLIT_RANGES page ranges side by side.

    The service's order is stable (date, then id), so the ranges join in order; a line that
    moved across a boundary while we read is caught by `dedupe`.
    """
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


def full_pulls(context: AssetExecutionContext, config: PullConfig, ids: list[str]) -> set[str]:
    """Records this run pulls whole: all when asked, else those `daily_refresh` reconciles
    today (its runs carry the day)."""
    if config.full_history:
        return set(ids)
    day = context.run.tags.get("ledgerlake/refresh_day")
    if not day:
        return set()
    every, when = reconcile_days(), dt.date.fromisoformat(day)
    return {r for r in ids if reconciles_on(r, when, every)}


# first: income's check, in the same run, then finds them in the lake (assets/income.py)
@product("transactions", checks=[RUNNING_BALANCE], first=True,
         description="Every transaction of the record: signed amount, running balance, "
                     "narration; the source wins inside each pull's window")
def transactions(context: AssetExecutionContext, config: PullConfig, batch: Batch,
                 client: ResourceParam[Client], lake: Lake, inbox: InboxResource):
    with inbox.open() as db:
        ids = to_land(context, batch, db, "transactions")
        full = full_pulls(context, config, ids)
        keys(local_lake=lake.is_local)  # none: the step fails now, not record by record
        warm()
        # a Dagster log line is a stored event (~10 ms): said for few records only
        landings, rechecked = [], []
        for chunk in land_chunks(client, lake, list(ids), full, split=True,
                                 say=(lambda text, rid, *rest: context.log.info(
                                     text, f"record #{ids[rid]}", *rest))
                                 if len(ids) <= LOG_EACH else None):
            for x in chunk:
                x.number = ids[x.record_id]
            # noted while the next chunk is fetched; income that landed before these
            # transactions is checked now that both are here
            again = [replace(v, number=ids[v.record_id]) for v in
                     recheck_income(lake, [x.record_id for x in chunk if x.published])]
            note(context, lake, db, "transactions", chunk, [RUNNING_BALANCE], extra=again)
            landings += chunk
            rechecked += again
    log_rechecks(context, "income", rechecked, [INCOME_MATCHES])
    pulls = [x.pull or "" for x in landings]
    for x, pull in zip(landings, pulls, strict=True):
        if pull.startswith(f"{FULL} ("):
            context.log.warning("%s: %s", x.shown, pull)
    yield from report(context, "transactions", landings, [RUNNING_BALANCE], extra={
        "fetched_rows": sum(x.fetched_rows or 0 for x in landings),
        "pulled_whole": sum(p.startswith(FULL) for p in pulls),
        **chart_metadata(context, lake, landings)})
