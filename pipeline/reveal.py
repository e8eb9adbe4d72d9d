"""`ledgerlake reveal`: a customer's or a record's sealed values opened with the key, each
opening written first to the lake's `reveals` table: who asked (the operating-system user),
when, which record, which columns; ids and column names, nothing personal (docs/privacy.md).
"""

from __future__ import annotations

import datetime as dt
import os
import pwd

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.forget import records_of
from resources import delta
from resources.lake import Lake
from resources.privacy import SEALED, Keys, reveal, stats_columns
from resources.tables import schema

AUDIT = "reveals"
IDENTITY = pa.schema([(c, schema("identity").field(c).type)
                      for c in ("customer_id", "sealed")])
LINES = pa.schema([(c, schema("transactions").field(c).type)
                   for c in ("transaction_id", "customer_id", "narration_sealed")])


def asker() -> str:
    """The operating-system user this process runs as (not what the environment claims)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a container's user without a passwd entry
        return f"uid {os.geteuid()}"


def opened(lake: Lake, keys: Keys, subject: str, subject_id: str) -> list[dict]:
    """The sealed values of the customer's or record's identity rows and transaction lines
    (their raw narrations), opened (a wrong key raises before anything is), and audited
    before they are returned. Empty when the lake has none."""
    records = [subject_id] if subject == "record" else records_of(lake, subject_id)
    people = lake.read_many("identity", records, IDENTITY)
    lines = lake.read_many("transactions", records, LINES)
    out, done = [], {}
    for record in records:
        rows = people.get(record, IDENTITY.empty_table())
        rows = rows.filter(pc.equal(rows["customer_id"], subject_id)) \
            if subject == "customer" else rows
        sealed = lines.get(record, LINES.empty_table())
        sealed = sealed.filter(pc.is_valid(sealed["narration_sealed"])).to_pylist()
        out += reveal(rows.append_column("record_id", pa.repeat(record, rows.num_rows)), keys)
        out += [{"customer_id": t["customer_id"], "record_id": record,
                 "transaction_id": t["transaction_id"],
                 **keys.open(t["narration_sealed"], t["customer_id"] or "")} for t in sealed]
        columns = [*(SEALED if rows.num_rows else ()), *(["narration"] if sealed else ())]
        if columns:
            done[record] = (columns, rows.num_rows + len(sealed))
    audit(lake, subject, subject_id, done)
    return out


def audit(lake: Lake, subject: str, subject_id: str,
          records: dict[str, tuple[list[str], int]]) -> None:
    """One row per record opened: its columns opened and rows, in one commit."""
    if not records:
        return
    now, who, table = dt.datetime.now(dt.UTC), asker(), schema(AUDIT)
    data = pa.Table.from_pylist([
        {"revealed_at": now, "revealed_by": who, "subject": subject, "subject_id": subject_id,
         "record_id": record, "opened": columns, "rows": n}
        for record, (columns, n) in sorted(records.items())], schema=table)
    delta.append(lake.table_uri(AUDIT), table, data, stats=stats_columns(AUDIT))
