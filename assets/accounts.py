"""The accounts of each record, fetched from `/accounts/get` into the lake."""

import pyarrow as pa
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)

from resources.client import ConnectionClient
from resources.columns import ref
from resources.lake import Lake

from .checks import accounts_belong_to_record
from .metadata import describe
from .partitions import batched, record_ids, records
from .schemas import Accounts, validate

UTC_MS = pa.timestamp("ms", tz="UTC")
SCHEMA = pa.schema([
    ("account_id", pa.string()),
    ("nuban", pa.string()),
    ("name", pa.string()),
    ("type", pa.string()),
    ("currency", pa.string()),
    ("bank_id", pa.string()),
    ("customer_id", pa.string()),
    ("customer_name", pa.string()),
    ("balance_id", pa.string()),
    ("env", pa.string()),
    ("created_at", UTC_MS),
    ("last_updated", UTC_MS),
])


def to_table(accounts: list[dict]) -> pa.Table:
    """The service's Account objects as rows of SCHEMA (a few per record: rows are fine)."""
    def col(key):
        return [a.get(key) for a in accounts]

    customers = [a.get("customer") if isinstance(a.get("customer"), dict) else {}
                 for a in accounts]
    return pa.table({
        "account_id": col("_id"),
        "nuban": col("nuban"),
        "name": col("name"),
        "type": col("type"),
        "currency": col("currency"),
        "bank_id": [ref(a.get("bank")) for a in accounts],
        "customer_id": [ref(a.get("customer")) for a in accounts],
        "customer_name": [c.get("name") for c in customers],
        "balance_id": col("balance"),
        "env": col("env"),
        "created_at": pa.array(col("created_at"), pa.string()).cast(UTC_MS),
        "last_updated": pa.array(col("last_updated"), pa.string()).cast(UTC_MS),
    }, schema=SCHEMA)


@asset(
    partitions_def=records, backfill_policy=batched, group_name="products",
    kinds={"parquet"},
    check_specs=[AssetCheckSpec("account_has_record", asset="accounts", blocking=True,
                                description="every account names its record, and the record "
                                            "is a known partition")],
)
def accounts(context: AssetExecutionContext, client: ConnectionClient, lake: Lake):
    """Every account of the record: NUBAN, name, type, currency, bank and owner."""
    known = set(context.instance.get_dynamic_partitions(records.name))
    tables, paths, problems = [], [], []
    for record_id in record_ids(context):
        raw = client.accounts(record_id)
        table = to_table(raw)
        validate(Accounts, table, f"accounts of record {record_id}")
        paths.append(lake.write("accounts", record_id, table, schema=SCHEMA))
        tables.append(table)
        problems += accounts_belong_to_record(record_id, raw, known)
        context.log.info("record %s: %d accounts", record_id, table.num_rows)
    total = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    yield MaterializeResult(metadata=describe(total, paths))
    yield AssetCheckResult(check_name="account_has_record", passed=not problems,
                           metadata={"problems": problems[:50]})
