"""Balances of each record: a snapshot appended per fetch, beside the service's own history.

`balance_history` grows by one row per account at every BALANCE or PERIODIC_BALANCE
callback, scheduled refresh or manual run; `balance_periodic` is the service's end-of-day
series, replaced whole at each fetch.
"""

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetExecutionContext, MaterializeResult, asset

from resources.client import ConnectionClient
from resources.columns import ref
from resources.lake import Lake

from .metadata import describe
from .partitions import batched, record_ids, records, source_of
from .schemas import BalanceHistory, BalancePeriodic, validate

UTC_MS = pa.timestamp("ms", tz="UTC")
HISTORY = pa.schema([
    ("account_id", pa.string()),
    ("fetched_at", UTC_MS),
    ("available_balance", pa.float64()),
    ("ledger_balance", pa.float64()),
    ("currency", pa.string()),
    ("source", pa.string()),
    ("service_updated_at", UTC_MS),
])
PERIODIC = pa.schema([
    ("account_id", pa.string()),
    ("date", pa.date32()),
    ("available_balance", pa.float64()),
    ("ledger_balance", pa.float64()),
])



def snapshot(items: list[dict], fetched_at: dt.datetime, source: str) -> pa.Table:
    return pa.table({
        "account_id": [ref(b.get("account")) for b in items],
        "fetched_at": pa.array([fetched_at] * len(items), UTC_MS),
        "available_balance": pa.array([b.get("available_balance") for b in items],
                                      pa.float64()),
        "ledger_balance": pa.array([b.get("ledger_balance") for b in items], pa.float64()),
        "currency": pa.array([b.get("currency") for b in items], pa.string()),
        "source": [source] * len(items),
        "service_updated_at": pa.array([b.get("last_updated") for b in items],
                                       pa.string()).cast(UTC_MS),
    }, schema=HISTORY)


def periodic(items: list[dict]) -> pa.Table:
    """The service's `periodic` series of every account, one row per account and day."""
    rows: dict[tuple[str, str], dict] = {}
    for b in items:
        account = ref(b.get("account"))
        series = b.get("periodic") or {}
        for kind in ("available_balance", "ledger_balance"):
            for point in series.get(kind) or []:
                day = str(point.get("date", ""))[:10]
                rows.setdefault((account, day), {})[kind] = point.get("amount")
    keys = sorted(rows)
    return pa.table({
        "account_id": [k[0] for k in keys],
        "date": pa.array([k[1] for k in keys], pa.string()).cast(pa.date32()),
        "available_balance": pa.array([rows[k].get("available_balance") for k in keys],
                                      pa.float64()),
        "ledger_balance": pa.array([rows[k].get("ledger_balance") for k in keys],
                                   pa.float64()),
    }, schema=PERIODIC)


@asset(partitions_def=records, backfill_policy=batched, group_name="products",
       kinds={"parquet"})
def balances(context: AssetExecutionContext, client: ConnectionClient, lake: Lake):
    """Available and ledger balance of every account, as a history of snapshots."""
    source = source_of(context)
    tables, paths = [], []
    for record_id in record_ids(context):
        items = client.balance(record_id)
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        fresh = snapshot(items, now, source)
        old = lake.read("balance_history", record_id, schema=HISTORY)
        if old is not None:  # a rerun within the same second replaces its own snapshot
            same = pc.equal(old["fetched_at"], pa.scalar(now, UTC_MS))
            old = old.filter(pc.invert(same))
        history = pa.concat_tables([old, fresh]) if old is not None else fresh
        series = periodic(items)
        validate(BalanceHistory, history, f"balance history of record {record_id}")
        validate(BalancePeriodic, series, f"periodic balances of record {record_id}")
        paths.append(lake.write("balance_history", record_id, history, schema=HISTORY))
        lake.write("balance_periodic", record_id, series, schema=PERIODIC)
        tables.append(fresh)
        context.log.info("record %s: %d balances (%s), %d snapshots, %d periodic days",
                         record_id, fresh.num_rows, source, history.num_rows, series.num_rows)
    total = pa.concat_tables(tables) if tables else HISTORY.empty_table()
    return MaterializeResult(metadata={**describe(total, paths), "source": source})
