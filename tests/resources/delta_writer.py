"""Lines for the Delta table tests, and a writer run as its own process by them:
`python -m tests.resources.delta_writer URI replace|append|contend RECORD GO_FILE` waits for
GO_FILE, then commits 20 times (generation 0..19) and prints each committed version; `contend`
replaces the one record `shared` instead, its generations offset by 100 when RECORD is right. Kept apart from
the tests so the process imports only the lake code, not pytest or Dagster."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from resources import delta

MONEY = pa.decimal128(18, 2)
TS = pa.timestamp("us", tz="UTC")  # what Delta stores; ms columns come back as us
SCHEMA = pa.schema([("record_id", pa.string()), ("id", pa.string()), ("trans_date", TS),
                    ("amount", MONEY), ("gen", pa.int64())])
DAY0 = datetime(2025, 1, 1, tzinfo=UTC)


def rows(n: int, gen: int = 0, start: int = 0, amount: str = "10.01") -> pa.Table:
    """`n` lines a day apart from DAY0 + `start` days, each carrying generation `gen`."""
    return pa.table({"id": [f"t{start + i}" for i in range(n)],
                     "trans_date": pa.array([DAY0 + timedelta(days=start + i) for i in range(n)],
                                            TS),
                     "amount": pa.array([Decimal(amount)] * n, MONEY),
                     "gen": pa.array([gen] * n, pa.int64())})


def main(uri: str, mode: str, record_id: str, go: str) -> None:
    while not Path(go).exists():
        time.sleep(0.01)
    for gen in range(20):
        if mode == "replace":
            version = delta.replace(uri, SCHEMA, {record_id: rows(2 + gen % 3, gen=gen)})
        elif mode == "contend":
            gen += 100 if record_id == "right" else 0
            version = delta.replace(uri, SCHEMA, {"shared": rows(2 + gen % 3, gen=gen)})
        else:
            part = rows(2, gen=gen)
            version = delta.append(uri, SCHEMA, part.append_column(
                "record_id", pa.array([record_id] * part.num_rows)))
        print(version, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
