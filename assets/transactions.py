"""Transactions of each record: incremental after the first pull, deduplicated by id.

The first pull takes the whole history; later pulls ask only from the last date seen, less
an overlap (late-clearing lines), and merge: a transaction delivered twice is kept once,
the newer copy winning.
"""

import datetime as dt

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

from resources.client import ConnectionClient
from resources.columns import TRANSACTION_SCHEMA
from resources.lake import Lake

from .checks import reconcile_running_balances
from .metadata import describe
from .partitions import batched, record_ids, records
from .schemas import Transactions, validate

# record_id lives in the folder name (hive layout), not in the file
SCHEMA = pa.schema([f for f in TRANSACTION_SCHEMA if f.name != "record_id"])
OVERLAP = dt.timedelta(days=3)
ORDER = [("trans_date", "ascending"), ("transaction_id", "ascending")]


def dedupe(table: pa.Table, key: str = "transaction_id") -> pa.Table:
    """Keep the last row of each key (later rows are newer copies), in the original order."""
    if table.num_rows == 0:
        return table
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
    written, paths, fresh_rows, pulls = [], [], 0, {}
    for record_id in record_ids(context):
        existing = lake.read("transactions", record_id, schema=SCHEMA)
        start = pull_from(existing)
        fresh = client.transactions(record_id, from_date=start).select(SCHEMA.names)
        fresh_rows += fresh.num_rows
        pulls[record_id] = start.isoformat() if start else "full history"
        table = merge(existing, fresh)
        validate(Transactions, table, f"transactions of record {record_id}")
        paths.append(lake.write("transactions", record_id, table, schema=SCHEMA))
        written.append(table)
        context.log.info("record %s: %d fetched (%s), %d in the partition", record_id,
                         fresh.num_rows, f"from {start}" if start else "full history",
                         table.num_rows)
    total = pa.concat_tables(written) if written else SCHEMA.empty_table()
    problems = [p for rid, t in zip(record_ids(context), written, strict=True)
                for p in reconcile_running_balances(client, rid, t)]
    yield MaterializeResult(metadata={**describe(total, paths), "fetched_rows": fresh_rows,
                                      "pulled_from": dict(list(pulls.items())[:100])})
    yield AssetCheckResult(
        check_name="running_balance_reconciles", passed=not problems,
        severity=AssetCheckSeverity.ERROR,
        metadata={"accounts_checked": int(pc.count_distinct(total["account_id"]).as_py())
                  if total.num_rows else 0,
                  "mismatches": problems[:50]})
