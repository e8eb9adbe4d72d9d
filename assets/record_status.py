"""Each record's connection status and last callbacks, from the inbox, as the `records` table
(its columns: resources/tables.py), so `INCOME_FAILED` or a missing TRANSACTIONS shows at a
glance."""

from collections import Counter

import pyarrow as pa
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.tables import schema

from .catalog import OWNERS, column_schema
from .publish import erase_forgotten

PRODUCT_ASSETS = ["accounts", "balances", "transactions", "income", "identity", "payments"]

# product -> the callback methods that report it (the spec's Events table)
PRODUCTS = {
    "auth": ("AUTH",), "identity": ("IDENTITY",), "accounts": ("ACCOUNTS",),
    "balance": ("BALANCE", "PERIODIC_BALANCE"),
    "transactions": ("TRANSACTIONS", "PERIODIC_TRANSACTIONS"),
    "income": ("INCOME",), "payment": ("PAYMENT", "PAYMENT_RECURRING"),
}
SCHEMA = schema("records")


def last_per_product(methods: dict[str, tuple[str, str]]) -> dict[str, str | None]:
    """The newest callback code and time of each product, over the methods reporting it."""
    out: dict[str, str | None] = {}
    for product, names in PRODUCTS.items():
        seen = sorted((at, code) for m, (code, at) in methods.items() if m in names and at)
        out[f"{product}_code"], out[f"{product}_at"] = (seen[-1][1], seen[-1][0]) if seen \
            else (None, None)
    return out


# on connection events (the inbox sensor asks for a run), and when the lake moved
# (pipeline/sensors.py), the statuses are rebuilt from the inbox
@asset(group_name="warehouse", kinds={"delta"}, deps=PRODUCT_ASSETS, owners=OWNERS,
       metadata={"dagster/column_schema": column_schema(SCHEMA, "records")})
def record_status(context: AssetExecutionContext, inbox: InboxResource, lake: Lake):
    """Connected, disconnected or needing reauthentication, with the last callback seen."""
    with inbox.open() as db:
        db.hold_landing()  # a forget waits, or comes first
        states = db.records()
        rows = _rows(states)
        table = pa.table({
            f.name: pa.array([r[f.name] for r in rows], pa.string()).cast(f.type)
            for f in SCHEMA}, schema=SCHEMA)
        version = lake.write("records", None, table, schema=SCHEMA)
        erase_forgotten(context, db, lake, states, ["records"])
    # counts, not a preview: Dagster's storage names no record (docs/privacy.md)
    return MaterializeResult(metadata={
        "dagster/row_count": table.num_rows, "lake_table": MetadataValue.path(lake.shown("records")),
        "lake_version": version, "records_by_status": MetadataValue.json(
            dict(sorted(Counter(r["status"] for r in rows).items())))})


def _rows(states: dict) -> list[dict]:
    """A row of the `records` table per record state."""
    rows = []
    for r in states.values():
        last = max(r.products.items(), key=lambda kv: kv[1].event, default=None)
        rows.append({"record_id": r.record, "status": r.status, "status_at": r.status_at,
                     "last_method": last[0] if last else None,
                     "last_code": last[1].code if last else None,
                     "last_callback_at": last[1].occurred_at if last else None,
                     **last_per_product({m: (p.code, p.occurred_at)
                                         for m, p in r.products.items()})})
    return rows
