"""Balances of each record: a snapshot appended per fetch, beside the service's own history.

`balance_history` grows by one row per account at every BALANCE or PERIODIC_BALANCE
callback, scheduled refresh or manual run: each snapshot is appended as a file of its own, so
a callback's run and the daily refresh fetching the same record at once both land (nothing is
read back and rewritten). `balance_periodic` is the service's end-of-day series, replaced
whole at each fetch (two writers write the same series: the last one is as good as the first).
"""

import datetime as dt

import pyarrow as pa
from dagster import AssetExecutionContext, ResourceParam

from resources.client import Client
from resources.config import Tuning
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.tables import UTC_MS, schema
from resources.wire import money, ref

from .batch import Batch, source_of
from .charts import chart_metadata
from .publish import Landing, Lands, Run, product
from .schemas import BalanceHistory, BalancePeriodic, validate

HISTORY, PERIODIC = schema("balance_history"), schema("balance_periodic")


def snapshot(items: list[dict], fetched_at: dt.datetime, source: str) -> pa.Table:
    return pa.table({
        "account_id": [ref(b.get("account")) for b in items],
        "fetched_at": pa.array([fetched_at] * len(items), UTC_MS),
        "available_balance": money([b.get("available_balance") for b in items]),
        "ledger_balance": money([b.get("ledger_balance") for b in items]),
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
        "available_balance": money([rows[k].get("available_balance") for k in keys]),
        "ledger_balance": money([rows[k].get("ledger_balance") for k in keys]),
    }, schema=PERIODIC)


@product(table="balance_history",
         tables={"balance_history": HISTORY, "balance_periodic": PERIODIC},
         appended={"balance_history"},
         description="Available and ledger balance of every account, as a "
                     "history of snapshots beside the service's daily series")
def balances(context: AssetExecutionContext, batch: Batch, client: ResourceParam[Client],
             lake: Lake, inbox: InboxResource, tuning: ResourceParam[Tuning]) -> Lands:
    source = source_of(context)

    def land(record_id: str, run: Run) -> Landing:
        items = client.balance(record_id)
        # milliseconds: two runs fetching one record at once keep two snapshots
        now = dt.datetime.now(dt.UTC)
        now = now.replace(microsecond=now.microsecond // 1000 * 1000)
        fresh, series = snapshot(items, now, source), periodic(items)
        validate(BalanceHistory, fresh, f"balance snapshot of record {record_id}")
        validate(BalancePeriodic, series, f"periodic balances of record {record_id}")
        return Landing(record_id, published=True, row_count=fresh.num_rows,
                       rows={"balance_history": fresh, "balance_periodic": series})

    return Lands(land, metadata=lambda landings: {
        "source": source, **chart_metadata(context, lake, landings, tuning)})
