"""Rows for the lake's tests, and the writer and reader they run as their own processes:

`python -m tests.resources.lake_writer write ROOT RECORD GO N` prints `ready`, waits for the
file GO, then N times (generation 0..N-1) replaces RECORD's rows of `transactions` and appends
rows of RECORD to `balances`, printing `transactions <version>` and `balances <version>` after
each commit.

`python -m tests.resources.lake_writer read ROOT STOP` reads `transactions` in a loop until the
file STOP exists, printing one JSON line per pass: `record`, the generations of record `r`'s
rows read alone, and `table`, each record's generations in one read of the whole table.

Kept apart from the tests so the processes import only the lake code, not pytest."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from resources.lake import Lake

MONEY = pa.decimal128(18, 2)
TS = pa.timestamp("ms", tz="UTC")
SCHEMA = pa.schema([("id", pa.string()), ("trans_date", TS), ("amount", MONEY),
                    ("note", pa.string()), ("gen", pa.int64())])
DAY0 = datetime(2025, 1, 1, 9, 30, 15, 123000, tzinfo=UTC)  # milliseconds kept


def rows(n: int, gen: int = 0, amount: str = "10.01") -> pa.Table:
    """`n` lines a day apart from DAY0, each marked with generation `gen`; `note` all null."""
    return pa.table({"id": [f"t{i}" for i in range(n)],
                     "trans_date": pa.array([DAY0 + timedelta(days=i) for i in range(n)], TS),
                     "amount": pa.array([Decimal(amount)] * n, MONEY),
                     "note": pa.nulls(n, pa.string()),
                     "gen": pa.array([gen] * n, pa.int64())}, schema=SCHEMA)


def commits(lake: Lake, record_id: str, n: int) -> Iterator[tuple[str, int]]:
    """`n` times, replace the record's rows of `transactions` and append rows of it to
    `balances`: each table and the version committed."""
    for gen in range(n):
        yield "transactions", lake.replace("transactions", {record_id: rows(1 + gen % 3, gen)},
                                           SCHEMA)
        yield "balances", lake.append("balances", {record_id: rows(2, gen)}, SCHEMA)


def write(root: str, record_id: str, go: str, n: str) -> None:
    lake = Lake(root=root)
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.01)
    for table, version in commits(lake, record_id, int(n)):
        print(table, version, flush=True)


def read(root: str, stop: str) -> None:
    lake = Lake(root=root)
    while not Path(stop).exists():
        record = lake.read("transactions", "r", SCHEMA)["gen"].to_pylist()
        whole = lake.read("transactions", schema=SCHEMA.append(pa.field("record_id",
                                                                        pa.string())))
        table: dict[str, list[int]] = {}
        for rid, gen in zip(whole["record_id"].to_pylist(), whole["gen"].to_pylist(),
                            strict=True):
            table.setdefault(rid, []).append(gen)
        print(json.dumps({"record": record, "table": table}), flush=True)


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](*sys.argv[2:])
    sys.stdout.flush()
    # not the interpreter's shutdown: deltalake 1.6 sometimes aborts in it after all went well
    # ("terminate called without an active exception", exit status 134)
    os._exit(0)
