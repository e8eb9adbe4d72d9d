"""How fast the warehouse answers over 10,000,000 transactions, against pandas on the same data.

Generates (numpy, deterministic) a lake of transactions in the docs/lake.md layout, one
Delta table of every record's rows (a commit per 200 records, as runs write it), builds the warehouse with `assets.warehouse.build`, then times
full aggregations over `daily_balances` and `monthly_cashflow`:

    select count(*), sum(balance) from daily_balances
    select count(*), sum(inflow), sum(outflow), sum(net) from monthly_cashflow

against the same computations in pandas (end-of-day balance of the last line by trans_date
then transaction_id, every day from each account's first to its last with the balance carried
forward; credits, debits and their difference per account and UTC month), both from the
Parquet files (as the views do: they read the lake on every query) and from a DataFrame
already in memory. Median of `--runs` runs each; the answers are checked to agree.

    .venv/bin/python bench/warehouse_query.py [--rows 10000000] [--records 2000] [--runs 3]

Writes bench/results/warehouse.json and prints a table. The generated lake is kept under
--data (default /tmp/ledgerlake-bench-warehouse) and reused when its parameters match.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

warnings.filterwarnings("ignore", message=".*is currently in beta")  # dagster, on import
from assets.warehouse import build  # noqa: E402
from resources.lake import Lake  # noqa: E402

TS = pa.timestamp("ms", tz="UTC")
START = int(pd.Timestamp("2025-01-01", tz="UTC").timestamp())
DAYS = 365
QUERIES = {
    "daily_balances": "select count(*) as n, sum(balance) as total from daily_balances",
    "monthly_cashflow": "select count(*) as n, sum(inflow) as inflow, sum(outflow) as outflow, "
                        "sum(net) as net from monthly_cashflow",
}
COLUMNS = ["transaction_id", "account_id", "trans_date", "debit", "credit", "amount", "balance"]


def generate(lake: Path, rows: int, records: int, seed: int) -> None:
    """`rows` transactions over `records` records of 1-4 accounts each, a year of history."""
    rng = np.random.default_rng(seed)
    per_record = rng.multinomial(rows, np.full(records, 1 / records))
    parts: dict[str, pa.Table] = {}
    for r, n in enumerate(per_record):
        record_id = f"{r:06x}".rjust(24, "r")
        n_accounts = int(rng.integers(1, 5))
        account = rng.integers(0, n_accounts, n)
        ts = START + rng.integers(0, DAYS * 86400, n)
        order = np.lexsort((ts, account))
        account, ts = account[order], ts[order]
        credit = rng.random(n) < 0.3
        kobo = np.round(rng.lognormal(8.5, 1.0, n) * (1 + 3 * credit)).astype(np.int64)
        signed = np.where(credit, kobo, -kobo)
        opening = rng.integers(10_000_00, 5_000_000_00, n_accounts)
        starts = np.searchsorted(account, np.arange(n_accounts))
        running = np.cumsum(signed)
        first = np.minimum(starts, n - 1)  # each account's first line
        before = running[first] - signed[first]
        balance = opening[account] + running - before[account]
        account_ids = np.char.add(f"{r:06x}a", account.astype(str)).astype(object)
        table = pa.table({
            "transaction_id": pa.array(np.char.add(f"{r:06x}t", np.arange(n).astype(str)
                                                   ).astype(object), pa.string()),
            "account_id": pa.array(account_ids, pa.string()),
            "customer_id": pa.array([f"{r:06x}c"] * n, pa.string()),
            "trans_date": pa.array(ts * 1000, pa.int64()).cast(TS),
            "debit": pa.array(np.where(credit, np.nan, kobo / 100), pa.float64(),
                              from_pandas=True),
            "credit": pa.array(np.where(credit, kobo / 100, np.nan), pa.float64(),
                               from_pandas=True),
            "amount": pa.array(signed / 100, pa.float64()),
            "balance": pa.array(balance / 100, pa.float64()),
            "currency": pa.array(["NGN"] * n, pa.string()),
        })
        parts[record_id] = table
        if len(parts) == 200 or r == len(per_record) - 1:
            Lake(root=str(lake)).replace("transactions", parts)
            parts = {}


def read_lake(lake: Path) -> pd.DataFrame:
    return Lake(root=str(lake)).read("transactions").select(COLUMNS).to_pandas()


def pandas_daily(df: pd.DataFrame) -> tuple[int, float]:
    day = df["trans_date"].dt.tz_convert("UTC").dt.tz_localize(None).dt.floor("D")
    df = df.assign(day=day).sort_values(["account_id", "trans_date", "transaction_id"])
    eod = df.groupby(["account_id", "day"], sort=True)["balance"].last().reset_index()
    spans = eod.groupby("account_id")["day"].agg(["min", "max"])
    lengths = ((spans["max"] - spans["min"]).dt.days + 1).to_numpy()
    spine = pd.DataFrame({
        "account_id": np.repeat(spans.index.to_numpy(), lengths),
        "day": np.repeat(spans["min"].to_numpy(), lengths)
        + pd.to_timedelta(np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths,
                                                                lengths), unit="D"),
    })
    daily = spine.merge(eod, on=["account_id", "day"], how="left")
    daily["balance"] = daily.groupby("account_id")["balance"].ffill()
    return len(daily), float(daily["balance"].sum())


def pandas_monthly(df: pd.DataFrame) -> tuple[int, float, float, float]:
    month = df["trans_date"].dt.tz_convert("UTC").dt.tz_localize(None).dt.to_period("M")
    g = df.assign(month=month).groupby(["account_id", "month"])
    out = g.agg(inflow=("credit", "sum"), outflow=("debit", "sum"))
    out = out.round(2)
    out["net"] = (out["inflow"] - out["outflow"]).round(2)
    return len(out), float(out["inflow"].sum()), float(out["outflow"].sum()), \
        float(out["net"].sum())


def timed(fn, runs: int):
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data", type=Path, default=Path("/tmp/ledgerlake-bench-warehouse"))
    ap.add_argument("--output", type=Path, default=ROOT / "bench/results/warehouse.json")
    args = ap.parse_args()

    lake, marker = args.data / "lake", args.data / "params.json"
    params = {"rows": args.rows, "records": args.records, "seed": args.seed}
    if not marker.exists() or json.loads(marker.read_text()) != params:
        shutil.rmtree(args.data, ignore_errors=True)
        t0 = time.perf_counter()
        generate(lake, args.rows, args.records, args.seed)
        marker.write_text(json.dumps(params))
        print(f"generated {args.rows:,} transactions in {time.perf_counter() - t0:.1f} s")
    size = sum(p.stat().st_size for p in lake.rglob("*.parquet"))

    target = args.data / "warehouse.duckdb"
    t0 = time.perf_counter()
    views = build(lake, target)
    build_s = time.perf_counter() - t0

    results: dict[str, dict] = {}
    with duckdb.connect(str(target), read_only=True) as con:
        for name, sql in QUERIES.items():
            med, runs, answer = timed(lambda sql=sql: con.execute(sql).fetchone(), args.runs)
            results[name] = {"duckdb_s": round(med, 3), "duckdb_runs_s": [round(t, 3) for t in runs],
                             "duckdb_answer": list(answer)}

    read_s, _, df = timed(lambda: read_lake(lake), args.runs)
    for name, fn in (("daily_balances", pandas_daily), ("monthly_cashflow", pandas_monthly)):
        med_mem, runs_mem, answer = timed(lambda fn=fn: fn(df), args.runs)
        r = results[name]
        r["pandas_in_memory_s"] = round(med_mem, 3)
        r["pandas_in_memory_runs_s"] = [round(t, 3) for t in runs_mem]
        r["pandas_read_s"] = round(read_s, 3)
        r["pandas_from_parquet_s"] = round(read_s + med_mem, 3)
        r["pandas_answer"] = list(answer)
        r["answers_agree"] = (r["duckdb_answer"][0] == answer[0] and all(
            abs(a - b) <= 1e-6 * max(1.0, abs(b))
            for a, b in zip(r["duckdb_answer"][1:], answer[1:], strict=True)))
        r["pandas_from_parquet_over_duckdb"] = round(r["pandas_from_parquet_s"] / r["duckdb_s"], 2)
        r["pandas_in_memory_over_duckdb"] = round(med_mem / r["duckdb_s"], 2)

    report = {
        "what": "full aggregations over warehouse views (DuckDB, reading the Parquet lake on "
                "each query) against the same computations in pandas",
        "rows": args.rows, "records": args.records, "runs": args.runs, "statistic": "median",
        "lake_bytes": size, "build_s": round(build_s, 3), "views": views,
        "queries": QUERIES, "results": results,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    "duckdb": duckdb.__version__, "pandas": pd.__version__},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")

    print(f"{args.rows:,} transactions, {args.records:,} records, {size / 1e6:.0f} MB Parquet; "
          f"warehouse built in {build_s:.2f} s; median of {args.runs}")
    print(f"{'view':<18}{'duckdb s':>10}{'pandas s':>10}{'ratio':>8}{'pandas mem s':>14}"
          f"{'ratio':>8}  agree")
    for name, r in results.items():
        print(f"{name:<18}{r['duckdb_s']:>10.2f}{r['pandas_from_parquet_s']:>10.2f}"
              f"{r['pandas_from_parquet_over_duckdb']:>8.1f}{r['pandas_in_memory_s']:>14.2f}"
              f"{r['pandas_in_memory_over_duckdb']:>8.1f}  {r['answers_agree']}")
    print("pandas s = read the Parquet + compute; pandas mem = compute on a DataFrame in memory; "
          "ratio = pandas / duckdb")
    return 0 if all(r["answers_agree"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
