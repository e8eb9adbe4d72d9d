"""Transactions of each record: incremental after the first pull, deduplicated by id.

The first pull takes the whole history; later pulls ask only from the last date seen, less
an overlap (late-clearing lines), and merge: a transaction delivered twice is kept once,
the newer copy winning.
"""

import datetime as dt
import gc
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)

from resources.client import ConnectionClient, tls_context
from resources.columns import TRANSACTION_SCHEMA
from resources.lake import Lake

from .checks import reconcile_running_balances
from .metadata import LISTED, PREVIEW_ROWS, describe
from .partitions import batched, record_ids, records
from .schemas import Transactions, ValidationFailed, validate

# record_id lives in the folder name (hive layout), not in the file
SCHEMA = pa.schema([f for f in TRANSACTION_SCHEMA if f.name != "record_id"])
OVERLAP = dt.timedelta(days=3)
ORDER = [("trans_date", "ascending"), ("transaction_id", "ascending")]
# Speed (bench/README.md): the next AHEAD records are fetched by FETCHERS threads, two
# requests in flight, while this one merges, validates and writes (page parsing is in
# Arrow, off the GIL; one fetcher left the sandbox and the cores idle between pages: 2 took
# 1,000 records from ~30 s to ~26 s); records are validated together up to VALIDATE_ROWS
# rows (pandera's cost is per call).
AHEAD = 3
FETCHERS = 2
VALIDATE_ROWS = 200_000
LOG_EACH = 10  # records a run logs one by one; more get one line
CHECKED = [n for n in Transactions.to_schema().columns if n in SCHEMA.names]


def dedupe(table: pa.Table, key: str = "transaction_id") -> pa.Table:
    """Keep the last row of each key (later rows are newer copies), in the original order."""
    if table.num_rows == 0 or pc.count_distinct(table[key]).as_py() == table.num_rows:
        return table  # nothing doubled: no copy (a first pull of 200,000 lines is the case)
    idx = pa.array(np.arange(table.num_rows))
    last = (pa.table({key: table[key], "i": idx}).group_by(key, use_threads=False)
            .aggregate([("i", "max")]).column("i_max"))
    return table.take(pc.take(last, pc.sort_indices(last)))


def merge(existing: pa.Table | None, fresh: pa.Table) -> pa.Table:
    """The partition after a pull: old rows not re-delivered, then the fresh ones, by date."""
    if existing is None or existing.num_rows == 0:
        return dedupe(fresh)
    kept = existing.filter(pc.invert(pc.is_in(existing["transaction_id"],
                                              value_set=fresh["transaction_id"])))
    return dedupe(pa.concat_tables([kept, fresh])).sort_by(ORDER)


def pull_from(existing: pa.Table | None) -> dt.date | None:
    """Where an incremental pull starts: the last date seen less the overlap."""
    if existing is None or existing.num_rows == 0:
        return None
    last = pc.max(existing["trans_date"]).as_py()
    return (last - OVERLAP).date() if last else None


def fetch(client: ConnectionClient, record_id: str, start: dt.date | None) -> pa.Table:
    """The record's transactions from `start` (None: all), following nextPage."""
    return client.transactions(record_id, from_date=start).select(SCHEMA.names)


def validate_together(tables: dict[str, pa.Table]) -> None:
    """Validate several records' partitions in one pandera call; on failure name the record."""
    if len(tables) > 1:
        try:
            validate(Transactions, pa.concat_tables(
                [t.select(CHECKED) for t in tables.values()]), "transactions")
            return
        except ValidationFailed:
            pass  # find the record and its rows, below
    for record_id, table in tables.items():
        validate(Transactions, table.select(CHECKED), f"transactions of record {record_id}")


@dataclass
class Landed:
    """What landing some records wrote: enough for the run's metadata and its check."""
    paths: list[str] = field(default_factory=list)
    heads: list[pa.Table] = field(default_factory=list)
    accounts: set[str] = field(default_factory=set)
    total_rows: int = 0
    fresh_rows: int = 0
    pulls: dict[str, str] = field(default_factory=dict)
    problems: list[dict] = field(default_factory=list)

    def add(self, other: "Landed") -> None:
        self.paths += other.paths
        if sum(t.num_rows for t in self.heads) < PREVIEW_ROWS:
            self.heads += other.heads
        self.accounts |= other.accounts
        self.total_rows += other.total_rows
        self.fresh_rows += other.fresh_rows
        self.pulls.update(other.pulls)
        self.problems += other.problems


def land_records(client: ConnectionClient, lake: Lake, ids: list[str],
                 say: Callable[..., None] | None = None, split: bool = False) -> Landed:
    """Fetch, merge, validate, write and reconcile each record's partition, in order.

    `split`: a lone record of SPLIT_ROWS or more is fetched by the worker processes.
    """
    out = Landed()
    checks: list[Future] = []
    with (ThreadPoolExecutor(FETCHERS, thread_name_prefix="transactions-fetch") as pool,
          ThreadPoolExecutor(2, thread_name_prefix="transactions-write") as io):
        lone = split and len(ids) == 1  # the sensor's runs: one record, maybe a big one

        def start_fetch(record_id: str) -> tuple[pa.Table | None, dt.date | None, Future]:
            existing = lake.read("transactions", record_id, schema=SCHEMA)
            start = pull_from(existing)
            if not lone:
                return existing, start, pool.submit(fetch, client, record_id, start)
            done: Future = Future()  # fetched here: worker processes fork from this thread
            done.set_result(fetch_split(client, record_id, start))
            return existing, start, done

        ahead = {r: start_fetch(r) for r in ids[:AHEAD]}
        group: dict[str, pa.Table] = {}

        def flush() -> None:
            validate_together(group)
            writes = [(rid, io.submit(lake.write, "transactions", rid, t, schema=SCHEMA))
                      for rid, t in group.items()]
            for rid, w in writes:
                out.paths.append(w.result())
                checks.append(io.submit(reconcile_running_balances, client, rid, group[rid]))
            group.clear()

        for i, record_id in enumerate(ids):
            existing, start, fetched = ahead.pop(record_id)
            if i + AHEAD < len(ids):
                nxt = ids[i + AHEAD]
                ahead[nxt] = start_fetch(nxt)
            fresh = fetched.result()
            del fetched
            out.fresh_rows += fresh.num_rows
            out.pulls[record_id] = start.isoformat() if start else "full history"
            table = merge(existing, fresh)
            if say is not None:
                say("record %s: %d fetched (%s), %d in the partition", record_id,
                    fresh.num_rows, f"from {start}" if start else "full history",
                    table.num_rows)
            del existing, fresh
            if sum(t.num_rows for t in group.values()) + table.num_rows > VALIDATE_ROWS:
                flush()
            group[record_id] = table
            out.total_rows += table.num_rows
            if table.num_rows:
                out.accounts.update(pc.unique(table["account_id"]).to_pylist())
            if sum(t.num_rows for t in out.heads) < PREVIEW_ROWS:
                out.heads.append(table.slice(0, PREVIEW_ROWS))
        if group:
            flush()
        out.problems = [p for c in checks for p in c.result()]
    return out


# -- many records: two worker processes ------------------------------------------------------
# One process tops out at one core (the GIL: httpx per page, pandera and Parquet per
# record); a backfill of many records lands them in WORKERS forked processes,
# CHUNK records at a time, while the sandbox or service serves both. Small runs (the
# sensor's: one record) stay in process, where a fork would cost more than it saves.
WORKERS = 2
POOL_MIN_RECORDS = 8
CHUNK = 25
SPLIT_ROWS = 20_000  # a lone record this big is fetched in page ranges by the workers
_worker: dict = {}


def _start_worker(config: dict, lake_root: str | None) -> None:
    # what the parent built (Dagster, pandas, pandera: ~200k objects) lives as long as this
    # worker: out of the collector's sight, each collection no longer walks it (~15% of the
    # fetch's CPU went to the collector, bench/README.md)
    gc.freeze()
    # a forked child must not share the parent's sockets: it builds its own client
    _worker["client"] = ConnectionClient(**config)
    _worker["lake"] = Lake(root=lake_root) if lake_root else None


def _land_chunk(ids: list[str]) -> Landed:
    return land_records(_worker["client"], _worker["lake"], ids)


def warm() -> None:
    """Pay in the parent, once, what each forked worker would otherwise pay on its first
    record: pandera builds its validators on first use (~0.3 s) and the trust store loads
    (~20 ms). A backfill forks two workers a run, so this was ~0.6 s of CPU a run."""
    if not _worker.get("warm"):
        validate(Transactions, SCHEMA.empty_table().select(CHECKED), "transactions (warm-up)")
        tls_context()
        _worker["warm"] = True


def _workers(client: ConnectionClient, lake: Lake | None = None) -> ProcessPoolExecutor:
    warm()
    config = {name: getattr(client, name) for name in type(client).model_fields}
    return ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("fork"),
                               initializer=_start_worker,
                               initargs=(config, lake.root if lake else None))


def land_in_workers(client: ConnectionClient, lake: Lake, ids: list[str]) -> Landed:
    chunks = [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]
    out = Landed()
    with _workers(client, lake) as pool:
        for landed in pool.map(_land_chunk, chunks):  # in order: metadata stays stable
            out.add(landed)
    return out


def _fetch_pages(args: tuple) -> str:
    record_id, start, first, last, folder = args
    table = _worker["client"].transactions(record_id, from_date=start, first_page=first,
                                           last_page=last).select(SCHEMA.names)
    path = f"{folder}/pages-{first}.arrow"
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    return path


def _handoff_folder(rows: int) -> str | None:
    """Where workers leave their pages for the parent: memory (tmpfs) when it has room to
    spare (a container's /dev/shm may be 64 MiB), else the temporary folder."""
    try:
        shm = os.statvfs("/dev/shm")
    except OSError:
        return None
    room = shm.f_bavail * shm.f_frsize
    return "/dev/shm" if room > 1024 * rows and os.access("/dev/shm", os.W_OK) else None


def fetch_split(client: ConnectionClient, record_id: str, start: dt.date | None) -> pa.Table:
    """One record's pull; a big one is fetched as WORKERS page ranges side by side.

    The service's order is stable (date, then id), so the ranges join in order; a line that
    moved across a boundary while we read is caught by `dedupe`. Each worker hands its range
    over as an Arrow file the parent maps, not through the pool's pipe: pickling 100,000
    rows there and back cost ~0.4 s.
    """
    total = client.transaction_total(record_id, from_date=start)
    if total < SPLIT_ROWS or sys.platform != "linux":
        return fetch(client, record_id, start)
    pages = -(-total // client.page_size)
    cut = [1 + pages * k // WORKERS for k in range(WORKERS)]
    bounds = [(a, b - 1) for a, b in zip(cut, cut[1:], strict=False)]
    bounds.append((cut[-1], None))  # the last range runs to the end
    with (tempfile.TemporaryDirectory(prefix="ledgerlake-", dir=_handoff_folder(total)) as folder,
          _workers(client) as pool):
        paths = list(pool.map(_fetch_pages, [(record_id, start, a, b, folder)
                                             for a, b in bounds]))
        # mapped, then unlinked with the folder: the pages stay readable while referenced
        parts = [pa.ipc.open_file(pa.memory_map(p)).read_all() for p in paths]
    return dedupe(pa.concat_tables(parts))


@asset(
    partitions_def=records, backfill_policy=batched, group_name="products",
    kinds={"parquet"},
    check_specs=[AssetCheckSpec("running_balance_reconciles", asset="transactions",
                                blocking=True,
                                description="each account's last running balance equals "
                                            "its balance at the service")],
)
def transactions(context: AssetExecutionContext, client: ConnectionClient, lake: Lake):
    """Every transaction of the record, signed amount and narration included."""
    ids = record_ids(context)
    if len(ids) >= POOL_MIN_RECORDS and sys.platform == "linux":
        landed = land_in_workers(client, lake, ids)
    else:
        landed = land_records(client, lake, ids, split=sys.platform == "linux",
                              # a Dagster log line is a stored event (~10 ms): few records only
                              say=context.log.info if len(ids) <= LOG_EACH else None)
    paths, heads, pulls = landed.paths, landed.heads, landed.pulls
    total_rows, fresh_rows, problems = landed.total_rows, landed.fresh_rows, landed.problems
    accounts = landed.accounts
    if len(ids) > LOG_EACH:
        full = sum(1 for v in pulls.values() if v == "full history")
        context.log.info("%d records: %d fetched (%d full histories, %d incremental), %d in "
                         "their partitions", len(ids), fresh_rows, full, len(ids) - full,
                         total_rows)
    first = pa.concat_tables(heads) if heads else SCHEMA.empty_table()
    yield MaterializeResult(metadata={**describe(first, paths), "dagster/row_count": total_rows,
                                      "fetched_rows": fresh_rows,
                                      "pulled_from": dict(list(pulls.items())[:LISTED])})
    yield AssetCheckResult(
        check_name="running_balance_reconciles", passed=not problems,
        severity=AssetCheckSeverity.ERROR,
        metadata={"accounts_checked": len(accounts), "mismatches": problems[:50]})
