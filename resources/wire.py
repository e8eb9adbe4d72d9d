"""Pages of the service as Arrow columns: one C++ pass per page, no per-row Python.

The columns are the lake's (docs/lake.md) but `record_id`, which the lake adds per record.

Money is exact: naira as `decimal(18,2)` (MONEY) from the JSON to the lake. Arrow's JSON
reader parses the numbers' text straight into decimals (and refuses a third decimal); values
that orjson already made floats go through `money`, which recovers the two-decimal number the
JSON held, exactly, or refuses it.

Two ways in, one way out (`wire_batch`): `read_transaction_pages` hands the pages' bytes
to Arrow's JSON reader (the client's path for whole pulls); `transactions_batch` takes
orjson's dicts, walked once inside Arrow by `pa.array(rows, type=struct)`. Either way members
not in the struct are ignored, missing ones become null.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from .tables import MONEY, UTC_MS, schema

_MAX_KOBO = 10**16  # what decimal(18,2) holds


def money_from_kobo(kobo: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """int64 kobo as decimal(18,2) naira, exactly: decimal128 stores the unscaled integer, so
    the kobo are the value's low 64 bits and the high 64 are their sign."""
    kobo = np.ascontiguousarray(kobo, dtype=np.int64)
    if len(kobo) and int(np.abs(kobo).max()) >= _MAX_KOBO:
        raise ValueError("an amount does not fit decimal(18,2)")
    words = np.empty(2 * len(kobo), dtype=np.int64)
    words[0::2], words[1::2] = kobo, kobo >> 63
    mask = None
    if valid is not None and not valid.all():
        mask = pa.array(valid, pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(MONEY, len(kobo), [mask, pa.py_buffer(words)],
                                 null_count=-1 if mask is not None else 0)


def kobo_of(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """decimal(18,2) naira as int64 kobo (nulls read as 0): the unscaled integers, exactly."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], MONEY)
    if values.type != MONEY:
        values = values.cast(MONEY)
    words = np.frombuffer(values.buffers()[1], dtype=np.int64)
    low = words[2 * values.offset: 2 * (values.offset + len(values)): 2].copy()
    if values.null_count:
        low[~values.is_valid().to_numpy(zero_copy_only=False)] = 0
    return low


def money(values) -> pa.Array:
    """Amounts as JSON numbers parsed by orjson (floats, ints, None) as exact decimal(18,2).

    A float parsed from a number with at most two decimals is the double nearest to it, so
    rounding it to the kobo gives that number back; one that is not within a millionth of a
    kobo of a whole kobo had more decimals, and is refused rather than rounded.
    """
    if not isinstance(values, pa.Array | pa.ChunkedArray):
        try:
            values = pa.array(values, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise ValueError(f"an amount is not a number: {err}") from None
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.float64())
    if pa.types.is_decimal(values.type):
        return values.cast(MONEY)
    x = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    valid = ~np.isnan(x)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.where(valid, x, 0.0) * 100
        kobo = np.round(scaled)
        off = ~np.isfinite(kobo) | (np.abs(scaled - kobo) > 1e-6 * np.maximum(1.0, np.abs(kobo)))
    if off.any():
        raise ValueError(f"amount {float(x[off][0])!r} is not naira with at most two decimals")
    if len(kobo) and np.abs(kobo).max() >= _MAX_KOBO:
        raise ValueError("an amount does not fit decimal(18,2)")
    return money_from_kobo(kobo.astype(np.int64), valid)


def naira(kobo: int) -> str:
    """Kobo as naira text with two decimals, exactly (for messages and metadata)."""
    sign, whole = ("-" if kobo < 0 else ""), abs(int(kobo))
    return f"{sign}{whole // 100}.{whole % 100:02d}"

# INTERFACE.md's Transaction as it arrives; timestamps are parsed after the struct pass.
TRANSACTION_WIRE = pa.struct(
    [(name, pa.string()) for name in ("_id", "account", "customer", "bank", "trans_date",
                                      "cleared_date")]
    + [(name, MONEY) for name in ("debit", "credit", "balance")]
    + [("currency", pa.string()),
       ("notes", pa.struct([("desc", pa.string()), ("topics", pa.list_(pa.string()))]))]
    + [(name, pa.string()) for name in ("ref", "branch", "code", "env", "created_at",
                                        "last_updated")])

# the lake's columns as the service sends them, in the order built below (the lake seals the
# narrations: resources/privacy.py)
TRANSACTION_SCHEMA = schema("transactions", sent=True)


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


# orjson hands amounts over as floats: read them as such, then exactly into MONEY
_FLOAT_WIRE = pa.struct([pa.field(f.name, pa.float64()) if f.type == MONEY else f
                         for f in TRANSACTION_WIRE])


def transactions_batch(rows: list[dict]) -> pa.RecordBatch:
    """One page of `/transactions/get` (`data.transaction`) as a batch of TRANSACTION_SCHEMA."""
    try:
        wire = pa.array(rows, type=_FLOAT_WIRE)
        if wire.null_count == 0:
            fields = [money(wire.field(f.name)) if f.type == MONEY else wire.field(f.name)
                      for f in TRANSACTION_WIRE]
            wire = pa.StructArray.from_arrays(fields, fields=list(TRANSACTION_WIRE))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise ValueError(f"a transaction does not have the interface's shape: {err}") from None
    return wire_batch(wire)


_ZERO = pa.scalar(0, MONEY)


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
        pc.subtract(pc.fill_null(credit, _ZERO), pc.fill_null(debit, _ZERO)).cast(MONEY),
        f("balance"), f("currency"),
        narration, topics,
        f("ref"), f("branch"), f("code"), f("env"),
        times["created_at"], times["last_updated"],
    ], schema=TRANSACTION_SCHEMA)
