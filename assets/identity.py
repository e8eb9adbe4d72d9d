"""Identity of each record's customer (`/identity/get`): BVN, names, contacts, origin."""

import pyarrow as pa
from dagster import AssetExecutionContext

from resources.client import ConnectionClient
from resources.columns import ref
from resources.lake import Lake

from .catalog import PII
from .metadata import record_metadata
from .publish import Landing, land_each, product
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


@product("identity", schema=SCHEMA, tags=PII,
         description="Who the record's customer is, as their bank knows them")
def identity(context: AssetExecutionContext, client: ConnectionClient, lake: Lake):
    def land(record_id: str) -> Landing:
        table = to_table(client.identity(record_id))
        validate(Identity, table, f"identity of record {record_id}")
        return Landing(record_id, published=True, metadata=record_metadata(table),
                       rows={"identity": table})

    land_each(context, "identity", land, lake, {"identity": SCHEMA})
    yield from ()
