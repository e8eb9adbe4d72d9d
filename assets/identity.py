"""Identity of each record's customer (`/identity/get`): BVN, names, contacts, origin.

The sensitive values (BVN, NIN, date of birth, phones, emails, addresses) never reach the lake
in clear: it keeps them masked, the BVN and NIN also as keyed hashes, and the raw values sealed
in `sealed` (resources/privacy.py). Validation runs on the raw rows, before they are protected.
"""

import pyarrow as pa
from dagster import AssetExecutionContext, ResourceParam

from resources.client import Client
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.privacy import protect
from resources.tables import schema
from resources.wire import ref

from .batch import Batch
from .catalog import PII
from .publish import Landing, Run, product
from .publish import keys as publish_keys
from .schemas import Identity, validate

TEXT = ["bvn", "nin", "firstname", "middlename", "lastname", "fullname", "gender",
        "marital_status", "nationality", "state_of_origin", "state_of_residence",
        "lga_of_origin", "lga_of_residence"]
LISTS = {"phones": "phone", "emails": "email", "addresses": "address", "aliases": "aliases"}
# as the service sends it (what validation checks, and what is sealed), and as the lake
# keeps it: bvn, nin, phones, emails, addresses masked; dob as its year; the raw values in
# `sealed`
RAW, SCHEMA = schema("identity", sent=True), schema("identity")


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
    return pa.table(cols).select(RAW.names).cast(RAW)


@product(tags=PII,
         description="Who the record's customer is, as their bank knows them")
def identity(context: AssetExecutionContext, batch: Batch, client: ResourceParam[Client],
             lake: Lake, inbox: InboxResource):
    keys = publish_keys(local_lake=lake.is_local)

    def land(record_id: str, run: Run) -> Landing:
        raw = to_table(client.identity(record_id))
        validate(Identity, raw, f"identity of record {record_id}")
        return Landing(record_id, published=True, row_count=raw.num_rows,
                       rows={"identity": protect(raw, keys, SCHEMA)})
    return land
