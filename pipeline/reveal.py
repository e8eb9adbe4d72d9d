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

from resources import delta
from resources.lake import Lake
from resources.privacy import SEALED, Keys, reveal, stats_columns
from resources.tables import schema

AUDIT = "reveals"


def asker() -> str:
    """The operating-system user this process runs as (not what the environment claims)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a container's user without a passwd entry
        return f"uid {os.geteuid()}"


def opened(lake: Lake, keys: Keys, subject: str, subject_id: str) -> list[dict]:
    """The sealed values of the customer's or record's identity rows, opened; audited before
    they are returned. Empty when the lake has none."""
    rows = lake.read("identity", subject_id if subject == "record" else None)
    if rows is None:
        return []
    rows = rows.filter(pc.equal(rows[f"{subject}_id"], subject_id))
    out = reveal(rows, keys)  # a wrong key raises here: nothing was opened, nothing audited
    counts = pc.value_counts(rows["record_id"]).to_pylist()
    audit(lake, subject, subject_id, {c["values"]: (list(SEALED), c["counts"]) for c in counts})
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
