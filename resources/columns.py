"""Pages of the service as Arrow columns: one C++ pass per page, no per-row Python.

The columns are the lake's (docs/lake.md); `record_id` is not one, the partition names it.

Two ways in, one way out (`wire_batch`): `read_transaction_pages` hands the pages' bytes
to Arrow's JSON reader, which builds the columns in C++ with no Python object per row (the
client's path for whole pulls); `transactions_batch` takes orjson's dicts, walked once
inside Arrow by `pa.array(rows, type=struct)` (Table.from_pylist first builds a Python list
per column). Either way members not in the struct are ignored, missing ones become null,
and timestamps are cast from their strings by the same parser.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

UTC_MS = pa.timestamp("ms", tz="UTC")

# INTERFACE.md's Transaction as it arrives; timestamps are parsed after the struct pass.
TRANSACTION_WIRE = pa.struct([
    ("_id", pa.string()),
    ("account", pa.string()),
    ("customer", pa.string()),
    ("bank", pa.string()),
    ("trans_date", pa.string()),
    ("cleared_date", pa.string()),
    ("debit", pa.float64()),
    ("credit", pa.float64()),
    ("balance", pa.float64()),
    ("currency", pa.string()),
    ("notes", pa.struct([("desc", pa.string()), ("topics", pa.list_(pa.string()))])),
    ("ref", pa.string()),
    ("branch", pa.string()),
    ("code", pa.string()),
    ("env", pa.string()),
    ("created_at", pa.string()),
    ("last_updated", pa.string()),
])

TRANSACTION_SCHEMA = pa.schema([
    pa.field("transaction_id", pa.string(), nullable=False),
    pa.field("account_id", pa.string()),
    pa.field("customer_id", pa.string()),
    pa.field("bank_id", pa.string()),
    pa.field("trans_date", UTC_MS),
    pa.field("cleared_date", UTC_MS),
    pa.field("debit", pa.float64()),
    pa.field("credit", pa.float64()),
    pa.field("amount", pa.float64()),  # signed: credit - debit
    pa.field("balance", pa.float64()),  # running balance after the line
    pa.field("currency", pa.string()),
    pa.field("narration", pa.string()),  # notes.desc
    pa.field("topics", pa.list_(pa.string())),  # notes.topics
    pa.field("ref", pa.string()),
    pa.field("branch", pa.string()),
    pa.field("code", pa.string()),
    pa.field("env", pa.string()),
    pa.field("created_at", UTC_MS),
    pa.field("last_updated", UTC_MS),
])


def ref(value: object) -> object:
    """The id of a referenced document: the service sends some as an id, some as an object."""
    return value.get("_id") if isinstance(value, dict) else value


# A page of /transactions/get as Arrow's JSON reader is told to read it.
PAGE_WIRE = pa.schema([
    ("status", pa.string()),
    ("data", pa.struct([
        ("pagination", pa.struct([("page", pa.int64()), ("totalPages", pa.int64()),
                                  ("hasNextPage", pa.bool_()), ("nextPage", pa.int64())])),
        ("transaction", pa.list_(TRANSACTION_WIRE)),
    ])),
])
_READ = pj.ParseOptions(explicit_schema=PAGE_WIRE, unexpected_field_behavior="ignore")
_READ_MULTILINE = pj.ParseOptions(explicit_schema=PAGE_WIRE, unexpected_field_behavior="ignore",
                                  newlines_in_values=True)


def read_transaction_pages(bodies: list[bytes]
                           ) -> tuple[list, list, pa.ListArray] | None:
    """Pages' JSON bodies read by Arrow: (statuses, paginations, each page's transactions).

    None when Arrow cannot read them as one object a page of the expected types; the caller
    then reads them through orjson, whose errors say what is wrong.
    """
    joined = b"\n".join(bodies)
    multiline = any(b"\n" in body for body in bodies)  # a pretty-printed body
    try:
        table = pj.read_json(pa.py_buffer(joined + b"\n"),
                             read_options=pj.ReadOptions(use_threads=False,
                                                         block_size=len(joined) + 2),
                             parse_options=_READ_MULTILINE if multiline else _READ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(bodies):
        return None
    data = table.column("data").combine_chunks()
    lists = data.field("transaction")
    if data.null_count or lists.null_count:
        return None
    return (table.column("status").to_pylist(), data.field("pagination").to_pylist(), lists)


def transactions_batch(rows: list[dict]) -> pa.RecordBatch:
    """One page of `/transactions/get` (`data.transaction`) as a batch of TRANSACTION_SCHEMA."""
    try:
        wire = pa.array(rows, type=TRANSACTION_WIRE)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise ValueError(f"a transaction does not have the interface's shape: {err}") from None
    return wire_batch(wire)


def wire_batch(wire: pa.StructArray) -> pa.RecordBatch:
    """Transactions as the interface sends them (TRANSACTION_WIRE) in the lake's columns."""
    if wire.null_count:
        raise ValueError("a transaction in the page is null, not an object")
    f = wire.field
    if f("_id").null_count:
        raise ValueError("a transaction has no _id")
    debit, credit = f("debit"), f("credit")
    narration, topics = f("notes").flatten()  # flatten keeps a null `notes` null below
    try:
        times = {name: pc.cast(f(name), UTC_MS)
                 for name in ("trans_date", "cleared_date", "created_at", "last_updated")}
    except pa.ArrowInvalid as err:
        raise ValueError(f"a transaction timestamp is not ISO 8601 UTC: {err}") from None
    return pa.RecordBatch.from_arrays([
        f("_id"), f("account"), f("customer"), f("bank"),
        times["trans_date"], times["cleared_date"],
        debit, credit,
        pc.subtract(pc.fill_null(credit, 0.0), pc.fill_null(debit, 0.0)),
        f("balance"), f("currency"),
        narration, topics,
        f("ref"), f("branch"), f("code"), f("env"),
        times["created_at"], times["last_updated"],
    ], schema=TRANSACTION_SCHEMA)
