"""The accounts of each record, fetched from `/accounts/get` into the lake."""

import pyarrow as pa
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from resources.client import ConnectionClient
from resources.lake import Lake

from .partitions import records

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
    ("created_at", pa.timestamp("ms", tz="UTC")),
    ("last_updated", pa.timestamp("ms", tz="UTC")),
])


def to_table(accounts: list[dict]) -> pa.Table:
    def col(key):
        return [a.get(key) for a in accounts]

    def bank_id(a):
        bank = a.get("bank")
        return bank.get("_id") if isinstance(bank, dict) else bank

    customers = [a.get("customer") or {} for a in accounts]
    return pa.table({
        "account_id": col("_id"),
        "nuban": col("nuban"),
        "name": col("name"),
        "type": col("type"),
        "currency": col("currency"),
        "bank_id": [bank_id(a) for a in accounts],
        "customer_id": [c.get("_id") for c in customers],
        "customer_name": [c.get("name") for c in customers],
        "balance_id": col("balance"),
        "env": col("env"),
        "created_at": pa.array(col("created_at"), pa.string()).cast(pa.timestamp("ms", tz="UTC")),
        "last_updated": pa.array(col("last_updated"), pa.string()).cast(
            pa.timestamp("ms", tz="UTC")),
    }, schema=SCHEMA)


@asset(partitions_def=records, group_name="products", kinds={"parquet"})
def accounts(context: AssetExecutionContext, client: ConnectionClient,
             lake: Lake) -> MaterializeResult:
    """Every account of the record: NUBAN, name, type, currency, bank and owner."""
    record_id = context.partition_key
    table = to_table(client.accounts(record_id))
    path = lake.write_partition("accounts", record_id, table)
    context.log.info("wrote %d accounts of record %s to %s", table.num_rows, record_id, path)
    return MaterializeResult(metadata={
        "dagster/row_count": table.num_rows,
        "path": MetadataValue.path(str(path)),
        "preview": MetadataValue.json(table.slice(0, 5).select(
            ["account_id", "nuban", "name", "type"]).to_pylist()),
    })
