"""Identity of each record's customer (`/identity/get`): BVN, names, contacts, origin."""

import pyarrow as pa
from dagster import AssetExecutionContext, MaterializeResult, asset

from resources.client import ConnectionClient
from resources.columns import ref
from resources.lake import Lake

from .metadata import describe
from .partitions import batched, record_ids, records
from .schemas import Identity, validate

TEXT = ["bvn", "nin", "firstname", "middlename", "lastname", "fullname", "gender",
        "marital_status", "nationality", "state_of_origin", "state_of_residence",
        "lga_of_origin", "lga_of_residence"]
LISTS = {"phones": "phone", "emails": "email", "addresses": "address", "aliases": "aliases"}
SCHEMA = pa.schema(
    [("customer_id", pa.string())] + [(c, pa.string()) for c in TEXT[:6]]
    + [("dob", pa.date32())] + [(c, pa.string()) for c in TEXT[6:]]
    + [(c, pa.list_(pa.string())) for c in LISTS])



def to_table(items: list[dict]) -> pa.Table:
    def text(item, key):
        v = item.get(key)
        return None if v in (None, "") else str(v)

    cols = {"customer_id": [ref(i.get("customer")) for i in items]}
    cols |= {c: [text(i, c) for i in items] for c in TEXT}
    cols["dob"] = pa.array([text(i, "dob") and text(i, "dob")[:10] for i in items],
                           pa.string()).cast(pa.date32())
    cols |= {c: [[str(x) for x in (i.get(src) or [])] for i in items]
             for c, src in LISTS.items()}
    return pa.table(cols).select(SCHEMA.names).cast(SCHEMA)


@asset(partitions_def=records, backfill_policy=batched, group_name="products",
       kinds={"parquet"})
def identity(context: AssetExecutionContext, client: ConnectionClient, lake: Lake):
    """Who the record's customer is, as their bank knows them."""
    tables, paths = [], []
    for record_id in record_ids(context):
        table = to_table(client.identity(record_id))
        validate(Identity, table, f"identity of record {record_id}")
        paths.append(lake.write("identity", record_id, table, schema=SCHEMA))
        tables.append(table)
    total = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    return MaterializeResult(metadata=describe(total, paths))
