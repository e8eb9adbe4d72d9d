"""Does a query cost the same at 20,000 records as at 200? Issue 13's "Measured, in bench/".

The same 2,000,000 generated transactions (numpy, seeded; TRANSACTION_SCHEMA's columns, money
decimal(18,2), each account's running balance consistent with its posted lines) are spread
over 200, 2,000 and 20,000 records (100,000 with --huge) and laid out three ways in the same
run:

- `folders`: the lake before issue 13, one Parquet file per record in its own folder
  (`<lake>/transactions/record_id=<id>/part-0.parquet`, written as that lake wrote them), the
  warehouse built by `assets.warehouse.build` over the folders' glob;
- `delta_month`: one Delta table written by `resources.delta.replace` in runs of 100 records
  (one commit each, as the pipeline's backfills run), with a `month` column ('YYYY-MM' of
  trans_date, UTC) as its partition column, then `resources.delta.compact`;
- `delta_flat`: the lake as it is: one unpartitioned Delta table written by
  `resources.lake.Lake.replace` in runs of 100 records, then compacted as the nightly
  maintenance does (`resources.delta.compact(order_by="record_id")`: clustered by record).

The Delta warehouses are built by the same `assets.warehouse.build` (the same views of
`assets/sql/*.sql`), but with `{lake:transactions}` read as
`read_parquet([<the snapshot's files, resources.delta.files>], union_by_name = true)`; other
lake tables are absent, so their optional stand-ins (`assets.warehouse.stand_in`) serve, in
both layouts. Timed per layout and size: building the warehouse (for Delta: opening the table
and listing its snapshot included), and over the built file in a fresh read-only DuckDB
connection

    select sum(amount) from transactions
    select count(*) from daily_balances
    select count(*) from monthly_cashflow
    select * from transactions where record_id = ?        (one record in the middle)

then landing one more record of 1,000 rows (a new record, its id after all others as the
service's time-ordered ids are: time and bytes written) and, beside the target, rerunning an
existing record with 1,000 rows (what a record's refresh costs: Delta rewrites the files
holding its old rows). Medians of 3 repetitions; the layouts are taken in a rotated order in
each repetition (this machine has 2 cores shared with other work), and each figure's range is
kept. The answers are checked: the exact decimal sum equals the generated total and the
counts agree across layouts.

All sizes hold the very same rows: the accounts are fixed (20,000 of 100 lines, or 100,000 of
20 with --huge) and a record holds a run of consecutive accounts, so only the `record_id`
labels and the physical layout change with the number of records, and `daily_balances`
(one row per account per day) has the same answer at every size.

    .venv/bin/python bench/lake_scale.py                 # full: about 25 minutes
    .venv/bin/python bench/lake_scale.py --quick         # 200,000 rows, 20/200/2,000 records
    .venv/bin/python bench/lake_scale.py --huge          # adds 100,000 records
    .venv/bin/python bench/lake_scale.py --rows 2000 --sizes 10,20 --out /tmp/x.json  # smoke

Writes bench/results/lake_scale.json and its table in bench/README.md (with --quick:
/tmp/lake_scale_quick.json unless --out) and prints Markdown tables. If writing a size in the folder layout passes --write-budget seconds
it stops there and that size's `folders` figures are left out (the rate is kept).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import duckdb
import harness
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from assets import warehouse
from resources import delta
from resources.columns import TRANSACTION_SCHEMA, UTC_MS, money_from_kobo
from resources.lake import Lake

SEED = 20261122
START_MS = int(dt.datetime(2025, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
DAY_MS = 86_400_000
RUN = 100            # records per pipeline run: one Delta commit
LAND_ROWS = 1_000    # the record landed into a table that holds the size
REPS = 3
LAYOUTS = ("folders", "delta_month", "delta_flat")
MONTH_SCHEMA = TRANSACTION_SCHEMA.append(pa.field("month", pa.string()))
QUERIES = {
    "sum_amount": "select sum(amount) from transactions",
    "daily_balances": "select count(*) from daily_balances",
    "monthly_cashflow": "select count(*) from monthly_cashflow",
    "one_record": "select * from transactions where record_id = ?",
}
FIGURES = ("build", *QUERIES)
TARGETS = {"build": 1.5, "sum_amount": 1.5, "daily_balances": 1.5, "monthly_cashflow": 1.5,
           "one_record": 1.5, "land_new": 2.0}
NARRATION = np.array(["POS PURCHASE", "TRANSFER FROM", "TRANSFER TO", "ATM WITHDRAWAL",
                      "AIRTIME", "SALARY", "CARD FEE", "BILL PAYMENT", "USSD TRANSFER",
                      "INTEREST", "REVERSAL", "SMS ALERT CHARGE"])
TOPICS = np.array(["transfer", "card", "bills", "salary", "fees", "cash", "airtime"])
BRANCHES = np.array(["IKEJA", "LEKKI", "ABUJA CENTRAL", "PORT HARCOURT", "KANO", "IBADAN"])
CODES = np.array(["00", "01", "11", "21", "51", "99"])
BANKS = np.array([f"bank{i:02d}" for i in range(20)])


# ---------------------------------------------------------------- data

def generate(rows: int, accounts: int, seed: int, first_account: int = 0) -> pa.Table:
    """`rows` transactions of `accounts` accounts (equal shares, contiguous, each account's
    lines in posting order), in TRANSACTION_SCHEMA, with running balances per account."""
    rng = np.random.default_rng(seed)
    per = rows // accounts
    if per * accounts != rows:
        raise ValueError(f"{rows} rows do not split evenly over {accounts} accounts")
    acct = np.repeat(np.arange(accounts), per)
    trans = START_MS + rng.integers(0, 365 * DAY_MS, rows)
    pending = rng.random(rows) < 0.02
    cleared = trans + rng.integers(0, 3 * DAY_MS, rows)
    credit = rng.random(rows) < 0.3
    kobo = np.round(rng.lognormal(10.5, 1.1, rows) * np.where(credit, 2.5, 1.0)).astype(np.int64)
    # posting order within each account: by cleared time, pending lines last
    order = np.lexsort((np.where(pending, np.iinfo(np.int64).max, cleared), acct))
    trans, pending, cleared, credit, kobo = (x[order] for x in (trans, pending, cleared,
                                                                 credit, kobo))
    signed = np.where(credit, kobo, -kobo)
    posted = np.where(pending, 0, signed)
    run = np.cumsum(posted)
    starts = np.arange(accounts) * per
    before = run[starts] - posted[starts]           # the running sum before each account
    opening = rng.integers(100_000_00, 5_000_000_00, accounts)
    balance = opening[acct] + run - before[acct]
    n = np.arange(rows)
    ids = pc.cast(pa.array(n + seed % 997 * 10**8), pa.string())
    acc_no = pc.cast(pa.array(acct + first_account), pa.string())
    ref = pc.cast(pa.array(rng.integers(10**9, 10**10, rows)), pa.string())
    topic = TOPICS[rng.integers(0, len(TOPICS), rows)]
    created = trans + rng.integers(0, 3_600_000, rows)
    ts = lambda ms, null=None: pa.array(ms, UTC_MS, mask=null)  # noqa: E731
    return pa.Table.from_arrays([
        pc.binary_join_element_wise("txn", pc.utf8_lpad(ids, 12, "0"), ""),
        pc.binary_join_element_wise("acc", pc.utf8_lpad(acc_no, 8, "0"), ""),
        pc.binary_join_element_wise("cus", pc.utf8_lpad(acc_no, 8, "0"), ""),
        pa.array(BANKS[(acct + first_account) % len(BANKS)]),
        ts(trans), ts(cleared, pending),
        money_from_kobo(kobo, ~credit), money_from_kobo(kobo, credit),
        money_from_kobo(signed), money_from_kobo(balance, ~pending),
        pa.array(np.full(rows, "NGN")),
        pc.binary_join_element_wise(pa.array(NARRATION[rng.integers(0, len(NARRATION), rows)]),
                                    ref, " "),
        pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)), pa.array(topic)),
        ref, pa.array(BRANCHES[rng.integers(0, len(BRANCHES), rows)]),
        pa.array(CODES[rng.integers(0, len(CODES), rows)]), pa.array(np.full(rows, "production")),
        ts(created), ts(created),
    ], schema=TRANSACTION_SCHEMA)


def with_month(table: pa.Table) -> pa.Table:
    return table.append_column("month", pc.strftime(table["trans_date"], "%Y-%m"))


def record_ids(count: int, seed: int, first_second: int) -> list[str]:
    """Ids shaped like the service's (24 hex: 8 of a creation second, increasing, 16 random)."""
    rng = np.random.default_rng(seed)
    tails = rng.integers(0, 2**63, count)
    return [f"{first_second + i:08x}{t:016x}" for i, t in enumerate(tails)]


def kobo_total(table: pa.Table) -> int:
    from resources.columns import kobo_of
    return int(kobo_of(table["amount"]).sum())


# ---------------------------------------------------------------- writing

FOLDER_SCHEMA = pa.schema([f for f in TRANSACTION_SCHEMA if f.name != "record_id"])


def write_folder(root: Path, rid: str, rows: pa.Table) -> Path:
    """One record's file as the folder layout wrote it (record_id in the folder's name)."""
    folder = root / "transactions" / f"record_id={rid}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows.select(FOLDER_SCHEMA.names).cast(FOLDER_SCHEMA), folder / "part-0.parquet",
                   compression="zstd")
    return folder / "part-0.parquet"


def folders_source(root: Path) -> str:
    glob = str(root / "transactions" / "record_id=*" / "*.parquet").replace("'", "''")
    return (f"read_parquet('{glob}', hive_partitioning = true, "
            "hive_types = {'record_id': varchar}, union_by_name = true)")


def write_folders(root: Path, table: pa.Table, rids: list[str], budget_s: float) -> dict:
    per = table.num_rows // len(rids)
    t0 = time.perf_counter()
    for i, rid in enumerate(rids):
        write_folder(root, rid, table.slice(i * per, per))
        if time.perf_counter() - t0 > budget_s and i + 1 < len(rids):
            took = time.perf_counter() - t0
            return {"write_s": took, "records_written": i + 1, "complete": False,
                    "projected_write_s": took / (i + 1) * len(rids)}
    return {"write_s": time.perf_counter() - t0, "records_written": len(rids), "complete": True}


def write_delta(uri: str, table: pa.Table, rids: list[str], month: bool) -> dict:
    per = table.num_rows // len(rids)
    schema, partition_by = (MONTH_SCHEMA, ["month"]) if month else (TRANSACTION_SCHEMA, [])
    lake = Lake(root=str(Path(uri).parent))
    t0 = time.perf_counter()
    for start in range(0, len(rids), RUN):
        parts = {rid: table.slice(i * per, per)
                 for i, rid in enumerate(rids[start:start + RUN], start)}
        if month:
            delta.replace(uri, schema, parts, partition_by=partition_by)
        else:  # the lake's own write path
            lake.replace("transactions", parts, schema)
    loaded = time.perf_counter() - t0
    files_loaded = len(delta.files(uri))
    t0 = time.perf_counter()
    compaction = delta.compact(uri, order_by=None if month else "record_id")
    return {"write_s": loaded, "commits": delta.version(uri), "records_written": len(rids),
            "complete": True, "files_before_compaction": files_loaded,
            "compact_s": time.perf_counter() - t0, "compaction": compaction}


# ---------------------------------------------------------------- the warehouse over Delta

def build_over_delta(tables: dict[str, str], target: Path,
                     timezone: str = warehouse.DEFAULT_TIMEZONE) -> list[str]:
    """The warehouse over Delta: `assets.warehouse.build` with each given table read as the
    file list of its current snapshot (the rest stood in for, as over the folders)."""
    sources = {t: warehouse.lake_source(delta.files(uri)) for t, uri in tables.items()}
    return warehouse.build(target.parent, target, timezone, sources=sources)


# ---------------------------------------------------------------- measuring

def tree_sizes(path: Path) -> dict[str, int]:
    out = {}
    for folder, _, names in os.walk(path):
        for name in names:
            p = os.path.join(folder, name)
            out[p] = os.path.getsize(p)
    return out


class Layout:
    def __init__(self, name: str, root: Path):
        self.name, self.root = name, root
        self.db = root / "warehouse.duckdb"
        self.uri = str(root / "transactions")
        self.month = name == "delta_month"

    def write(self, table: pa.Table, rids: list[str], budget_s: float) -> dict:
        if self.name == "folders":
            return write_folders(self.root / "lake", table, rids, budget_s)
        return write_delta(self.uri, with_month(table) if self.month else table, rids,
                           self.month)

    def build(self) -> list[str]:
        if self.name == "folders":
            return warehouse.build(self.root / "lake", self.db, sources={
                "transactions": folders_source(self.root / "lake")})
        return build_over_delta({"transactions": self.uri}, self.db)

    def data_files(self) -> int:
        if self.name == "folders":
            return sum(1 for _ in (self.root / "lake" / "transactions").glob(
                "record_id=*/*.parquet"))
        return len(delta.files(self.uri))

    def land(self, rid: str, rows: pa.Table) -> tuple[float, int]:
        """Write one record's rows (new or replacing); seconds and bytes written."""
        if self.name == "folders":
            t0 = time.perf_counter()
            path = write_folder(self.root / "lake", rid, rows)
            took = time.perf_counter() - t0
            return took, os.path.getsize(path)
        rows = with_month(rows) if self.month else rows
        schema = MONTH_SCHEMA if self.month else TRANSACTION_SCHEMA
        before = tree_sizes(Path(self.uri))
        t0 = time.perf_counter()
        delta.replace(self.uri, schema, {rid: rows},
                      partition_by=["month"] if self.month else [])
        took = time.perf_counter() - t0
        after = tree_sizes(Path(self.uri))
        return took, sum(s for p, s in after.items() if p not in before)


def query(db: Path, sql: str, params: list | None = None) -> tuple[float, object]:
    with duckdb.connect(str(db), read_only=True) as con:
        t0 = time.perf_counter()
        result = con.sql(sql, params=params).to_arrow_table()
        took = time.perf_counter() - t0
    answer = result.num_rows if params else result.column(0)[0].as_py()
    return took, answer


def measure_size(idx: int, size: int, table: pa.Table, extra: pa.Table, work: Path, args,
                 expected_kobo: int) -> dict:
    print(f"\n== {size:,} records of {table.num_rows // size:,} rows", flush=True)
    rids = record_ids(size, SEED + size, 0x66000000)
    layouts = {name: Layout(name, work / f"{name}-{size}") for name in LAYOUTS}
    out: dict = {"records": size, "rows_per_record": table.num_rows // size,
                 "load_before": os.getloadavg()[0], "layouts": {}}
    order = harness.rotated(LAYOUTS, idx)    # who writes first moves with the size
    for name in order:
        lay = layouts[name]
        lay.root.mkdir(parents=True)
        res = lay.write(table, rids, args.write_budget)
        res["data_files"] = lay.data_files()
        out["layouts"][name] = res
        note = "" if res["complete"] else (f" STOPPED at {res['records_written']:,} records "
                                           f"(projected {res['projected_write_s']:.0f} s)")
        extra_s = f", compact {res['compact_s']:.1f} s" if "compact_s" in res else ""
        print(f"  {name}: wrote in {res['write_s']:.1f} s{extra_s}, {res['data_files']:,} "
              f"data files{note}", flush=True)
    live = [n for n in order if out["layouts"][n]["complete"]]
    lookup = rids[size // 2]
    samples = {n: {f: [] for f in FIGURES} for n in live}
    answers = {n: {} for n in live}
    for rep in range(REPS):
        for name in harness.rotated(live, rep):
            lay = layouts[name]
            t0 = time.perf_counter()
            views = lay.build()
            samples[name]["build"].append(time.perf_counter() - t0)
            for q, sql in QUERIES.items():
                took, ans = query(lay.db, sql, [lookup] if q == "one_record" else None)
                samples[name][q].append(took)
                answers[name][q] = ans
            answers[name]["views"] = views
        print(f"  queries, repetition {rep + 1}: "
              + "; ".join(f"{n} " + " ".join(f"{samples[n][f][-1]:.2f}" for f in FIGURES)
                          for n in live), flush=True)
    # one more record into a table that holds the size, then a rerun of existing records
    land = {n: {"land_new": [], "land_new_bytes": [], "rerun": [], "rerun_bytes": []}
            for n in live}
    new_ids = record_ids(REPS, SEED + 7, 0x67000000)
    for kind, ids in (("land_new", new_ids),
                      ("rerun", [rids[size // 3], rids[size // 4], rids[size // 5]])):
        for rep in range(REPS):
            rows = extra.slice((rep + (REPS if kind == "rerun" else 0)) * LAND_ROWS, LAND_ROWS)
            for name in harness.rotated(live, rep):
                took, written = layouts[name].land(ids[rep], rows)
                land[name][kind].append(took)
                land[name][kind + "_bytes"].append(written)
    for name in live:
        res = out["layouts"][name]
        res["figures"] = {f: harness.spread(v) for f, v in samples[name].items()}
        for kind in ("land_new", "rerun"):
            res["figures"][kind] = harness.spread(land[name][kind])
            res[kind + "_bytes"] = statistics.median(land[name][kind + "_bytes"])
        res["answers"] = answers[name]
        res["data_files_after_landing"] = layouts[name].data_files()
    # the answers must agree, and the sum be the generated one, exactly
    problems = []
    for name in live:
        a = answers[name]
        if a["sum_amount"] != Decimal(expected_kobo) / 100:
            problems.append(f"{name}: sum {a['sum_amount']} != {Decimal(expected_kobo) / 100}")
        if a["one_record"] != table.num_rows // size:
            problems.append(f"{name}: one record has {a['one_record']} rows")
        for q in ("daily_balances", "monthly_cashflow"):
            if a[q] != answers[live[0]][q]:
                problems.append(f"{name}: {q} {a[q]} != {live[0]}'s {answers[live[0]][q]}")
    out["answers_agree"] = not problems
    out["problems"] = problems
    for p in problems:
        print("  ANSWER MISMATCH:", p, flush=True)
    out["load_after"] = os.getloadavg()[0]
    if not args.keep:
        for lay in layouts.values():
            shutil.rmtree(lay.root, ignore_errors=True)
    return out


# ---------------------------------------------------------------- report

def ratios(results: dict, small: int, big: int) -> dict:
    out = {}
    by = {r["records"]: r for r in results["sizes"]}
    if small not in by or big not in by:
        return out
    for name in LAYOUTS:
        a, b = by[small]["layouts"].get(name, {}), by[big]["layouts"].get(name, {})
        if "figures" not in a or "figures" not in b:
            continue
        out[name] = {}
        for f in (*FIGURES, "land_new", "rerun"):
            lo, hi = a["figures"][f], b["figures"][f]
            out[name][f] = {"ratio": hi["median"] / lo["median"],
                            "range": [hi["min"] / lo["max"], hi["max"] / lo["min"]],
                            "target": TARGETS.get(f),
                            "holds": (hi["median"] / lo["median"] <= TARGETS[f])
                            if f in TARGETS else None}
    return out


def markdown(results: dict) -> str:
    """Every size and layout, medians (range); then the ratios."""
    def cell(fig: dict) -> str:
        return f"{fig['median']:.3f} ({fig['min']:.3f}–{fig['max']:.3f})"

    rows = []
    for size in results["sizes"]:
        for name, r in sorted(size["layouts"].items(), key=lambda x: LAYOUTS.index(x[0])):
            write = f"{r['write_s']:.1f}" + (f" + {r['compact_s']:.1f} compact"
                                             if "compact_s" in r else "")
            if "figures" not in r:
                rows.append((f"{size['records']:,}", name, "", f"{write} (stopped at "
                             f"{r['records_written']:,} records; projected "
                             f"{r['projected_write_s']:.0f})", *[""] * 7))
                continue
            fig = r["figures"]
            rows.append((f"{size['records']:,}", name, f"{r['data_files']:,}", write,
                         *(cell(fig[f]) for f in FIGURES),
                         f"{cell(fig['land_new'])} ({r['land_new_bytes']:,.0f})",
                         f"{cell(fig['rerun'])} ({r['rerun_bytes']:,.0f})"))
    text = harness.table(["records", "layout", "data files", "write s", "build s",
                          "sum(amount) s", "daily_balances s", "monthly_cashflow s",
                          "one record s", "land a new record s (bytes)",
                          "rerun a record s (bytes)"], rows, left=2)
    for key in results["ratios"]:
        text += f"\n\nRatios {key}\n\n" + ratio_table(results, key)
    return text


def ratio_table(results: dict, key: str) -> str:
    """The ratios of `key` by layout, with issue 13's targets (✓ held, ✗ missed)."""
    figures = (*FIGURES, "land_new", "rerun")
    return harness.table(
        ["layout", *(f"{f} (≤ {TARGETS[f]}×)" if f in TARGETS else f for f in figures)],
        [(name, *(f"{v[f]['ratio']:.2f}×" + {None: "", True: " ✓", False: " ✗"}[v[f]["holds"]]
                  for f in figures)) for name, v in results["ratios"][key].items()])


def table_md(results: dict) -> str:
    """For bench/README.md: the largest size against the smallest, and its seconds."""
    key = list(results["ratios"])[-1]
    big = results["sizes"][-1]
    return (f"{results['rows']:,} transactions; ratios {key} (medians of {REPS}):\n\n"
            + ratio_table(results, key) + f"\n\nSeconds at {big['records']:,} records:\n\n"
            + harness.table(["layout", *FIGURES, "land_new", "rerun"], [
                (name, *(f"{r['figures'][f]['median']:.3f}" for f in (*FIGURES, "land_new",
                                                                        "rerun")))
                for name, r in sorted(big["layouts"].items(), key=lambda x: LAYOUTS.index(x[0]))
                if "figures" in r]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true",
                    help="200,000 rows over 20/200/2,000 records (under 2 minutes)")
    ap.add_argument("--huge", action="store_true", help="also 100,000 records")
    ap.add_argument("--rows", type=int, help="transactions (default 2,000,000; quick 200,000)")
    ap.add_argument("--sizes", help="records of each size, smallest first (default 200,2000,"
                                    "20000; quick 20,200,2000)")
    ap.add_argument("--write-budget", type=float, default=600.0,
                    help="seconds to write one size in the folder layout before giving up on it")
    ap.add_argument("--data", type=Path, help="work folder (default: a new one in /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the lakes written")
    ap.add_argument("--note", default="", help="kept in the JSON")
    harness.arguments(ap, "lake_scale")
    args = ap.parse_args()
    if args.quick and not args.out:
        args.out = Path("/tmp/lake_scale_quick.json")
    rows = args.rows or (200_000 if args.quick else 2_000_000)
    sizes = ([int(n) for n in args.sizes.split(",")] if args.sizes
             else [20, 200, 2_000] if args.quick else [200, 2_000, 20_000])
    if args.huge:
        sizes.append(sizes[-1] * 5)
    accounts = sizes[-1] if rows // sizes[-1] >= 20 else rows // 20
    work = args.data or Path(tempfile.mkdtemp(prefix="ledgerlake-lake-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    print(f"generating {rows:,} transactions over {accounts:,} accounts", flush=True)
    table = generate(rows, accounts, SEED)
    extra = generate(LAND_ROWS * 2 * REPS, 2 * REPS, SEED + 1, first_account=10**7)
    expected = kobo_total(table)
    results = {
        "note": args.note, "load_start": load_start, "seed": SEED, "rows": rows,
        "accounts": accounts, "rows_per_account": rows // accounts, "run_records": RUN,
        "land_rows": LAND_ROWS, "repetitions": REPS, "timezone": warehouse.DEFAULT_TIMEZONE,
        "expected_sum": str(Decimal(expected) / 100), "queries": QUERIES, "targets": TARGETS,
        "sizes": [],
    }
    try:
        for idx, size in enumerate(sizes):
            results["sizes"].append(measure_size(idx, size, table, extra, work, args, expected))
    finally:
        if not args.keep and args.data is None:
            shutil.rmtree(work, ignore_errors=True)
    results["load_end"] = os.getloadavg()[0]
    results["wall_s"] = time.perf_counter() - started
    results["ratios"] = {f"{big:,} / {sizes[0]:,} records": ratios(results, sizes[0], big)
                         for big in sizes[1:]}
    results["answers_agree"] = all(s["answers_agree"] for s in results["sizes"])
    harness.publish(results, args, "lake_scale", table_md(results))
    print()
    print(markdown(results))
    print(f"\nwall {results['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
