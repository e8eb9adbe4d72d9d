"""The accounts of each record, fetched from `/accounts/get` into the lake."""

import pyarrow as pa
from dagster import AssetExecutionContext, ResourceParam

from resources.client import Client
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.tables import UTC_MS, schema
from resources.wire import ref

from .batch import Batch
from .checks import Check, accounts_belong_to_record
from .publish import Landing, Run, product
from .schemas import Accounts, validate

ACCOUNT_HAS_RECORD = Check("account_has_record", "every account names its record, and the "
                                                 "inbox knows the record; a record that fails "
                                                 "keeps its previously published accounts")

SCHEMA = schema("accounts")


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


@product(checks=[ACCOUNT_HAS_RECORD],
         description="Every account of the record: NUBAN, name, type, currency, bank, owner")
def accounts(context: AssetExecutionContext, batch: Batch, client: ResourceParam[Client],
             lake: Lake, inbox: InboxResource):
    def land(record_id: str, run: Run) -> Landing:
        raw = client.accounts(record_id)
        table = to_table(raw)
        validate(Accounts, table, f"accounts of record {record_id}")
        known = run.once("known", lambda: set(run.inbox.records(run.ids)))
        problems = accounts_belong_to_record(record_id, raw, known)
        return Landing(record_id, published=not problems, row_count=table.num_rows,
                       problems={ACCOUNT_HAS_RECORD.name: problems}, rows={"accounts": table})
    return land
