"""Delta Lake (deltalake) against Apache Iceberg (pyiceberg, SQL catalog on SQLite) for the lake.

Issue 13 asks which open table format the lake should use. This measures both on the lake's
own workload, in one run, on the same data: a `transactions` table of 2,000,000 generated rows
(numpy, seeded) spread over 200, 2,000 and 20,000 records (10,000 / 1,000 / 100 rows each).
For each format, each size and two layouts (`flat`: unpartitioned; `bucket`: partitioned by a
bucket of record_id, 16 buckets):

1. load: runs of 100 records, each run ONE commit that replaces exactly those records' rows
   (Delta: predicate overwrite; Iceberg: `overwrite(..., overwrite_filter=In(...))`);
2. compaction: files and bytes before/after, and its time;
3. queries through DuckDB over the current snapshot's file list (no DuckDB extension: plain
   `read_parquet([...])`), before and after compaction, and the format's own reader;
4. landing one more record (1,000 rows; new, and a rerun of an existing one): time, bytes written;
5. (smallest size) two processes committing different records at once, 10 rounds;
6. time travel to the loaded version, then vacuum / expire snapshots + orphan removal;
7. installed size and import time of each library.

Timings alternate the formats (A/B, B/A, ...) because the CPU is shared; medians and ranges are
reported. Answers are checked: decimal sums exact and equal to the generated total, per-day
counts and one-record rows equal across formats.

    /tmp/fmtvenv/bin/python bench/lake_formats.py [--quick] [--out PATH] [--data DIR]

Measured with (pin these when adding to pyproject): deltalake==1.6.6 (delta-rs),
pyiceberg[sql-sqlite,pyiceberg-core]==0.12.0 (sqlalchemy 2.1.9; pyiceberg-core 0.10.1, without
which pyiceberg cannot write a bucket-partitioned table), pyarrow==26.0.1, duckdb==2.0.0,
numpy==2.4.6. Imports only those and the standard library, so it runs in the project venv too.
The venv it ran in:

    uv venv /tmp/fmtvenv --python 3.11
    uv pip install --python /tmp/fmtvenv/bin/python deltalake "pyiceberg[sql-sqlite,pyiceberg-core]" \
        pyarrow duckdb numpy

Writes bench/results/lake_formats.json and prints Markdown tables. The full run takes about
35 minutes (Iceberg's bucketed load at 20,000 records is stopped at --budget, 15 minutes);
--quick about 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import json
import logging
import multiprocessing as mp
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import warnings
import zlib
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import EqualTo, In
from pyiceberg.transforms import BucketTransform

ROOT = Path(__file__).resolve().parents[1]
SEED = 20261122
TS = pa.timestamp("ms", tz="UTC")
MONEY = pa.decimal128(18, 2)
START_MS = int(dt.datetime(2025, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
DAY_MS = 86_400_000
RUN = 100                  # records per pipeline run, one commit each
BUCKETS = 16
LAND_ROWS = 1_000          # the extra record of step 4 and the concurrent commits
FORMATS = ("delta", "iceberg")
LAYOUTS = ("flat", "bucket")
ZSTD = WriterProperties(compression="ZSTD")  # Iceberg's default codec; same bytes footing
NARRATION = np.array(["POS PURCHASE", "TRANSFER FROM", "TRANSFER TO", "ATM WITHDRAWAL",
                      "AIRTIME", "SALARY", "CARD FEE", "BILL PAYMENT", "USSD TRANSFER",
                      "INTEREST", "REVERSAL", "SMS ALERT CHARGE"])

warnings.filterwarnings("ignore", message="Delete operation did not match any records")


# --- data -------------------------------------------------------------------------------------

def decimal_from_minor(minor: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """decimal128(18,2) straight from integer kobo: 16-byte two's complement, no floats."""
    words = np.empty((len(minor), 2), dtype=np.int64)
    words[:, 0], words[:, 1] = minor, minor >> 63
    arr = pa.Array.from_buffers(MONEY, len(minor), [None, pa.py_buffer(words.tobytes())])
    return arr if null is None else pc.if_else(pa.array(null), pa.nulls(len(minor), MONEY), arr)


def generate_rows(n: int, seed: int) -> tuple[dict, np.ndarray]:
    """Columns of `n` transactions (no record ids yet) and their amounts in kobo."""
    rng = np.random.default_rng(seed)
    trans = START_MS + rng.integers(0, 365 * DAY_MS, n)
    cleared = trans + rng.integers(0, 3 * DAY_MS, n)
    credit = rng.random(n) < 0.3
    kobo = np.round(rng.lognormal(8.5, 1.0, n) * (1 + 3 * credit)).astype(np.int64)
    signed = np.where(credit, kobo, -kobo)
    balance = 50_000_000 + np.cumsum(signed)
    ref = pc.cast(pa.array(rng.integers(10**9, 10**10, n)), pa.string())
    cols = {
        "id": pc.binary_join_element_wise("txn", pc.utf8_lpad(
            pc.cast(pa.array(np.arange(n) + seed % 1000 * 10**7), pa.string()), 10, "0"), ""),
        "trans_date": pa.array(trans, TS),
        "cleared_date": pc.if_else(pa.array(rng.random(n) < 0.1), pa.nulls(n, TS),
                                   pa.array(cleared, TS)),
        "amount": decimal_from_minor(kobo),
        "signed_amount": decimal_from_minor(signed),
        "balance": decimal_from_minor(balance, rng.random(n) < 0.05),
        "type": pa.array(np.where(credit, "credit", "debit")),
        "narration": pc.binary_join_element_wise(
            pa.array(NARRATION[rng.integers(0, len(NARRATION), n)]), ref, " "),
        "currency": pa.array(np.full(n, "NGN")),
    }
    return cols, kobo


def record_ids(count: int, seed: int) -> np.ndarray:
    """Random-looking 24-hex ids, as the service issues: no ordering for min/max stats to use."""
    raw = np.random.default_rng(seed).integers(0, 2**63, (count, 2))
    return np.array([f"{a:016x}{b:016x}"[:24] for a, b in raw])


def bucket_of(rid: str) -> int:
    """Delta has no bucket transform: the pipeline stores crc32(record_id) % BUCKETS itself."""
    return zlib.crc32(rid.encode()) % BUCKETS


def assemble(cols: dict, rids: np.ndarray, per_row: np.ndarray) -> pa.Table:
    """The transactions table with record and account ids; `per_row` indexes `rids`."""
    rid = pa.array(rids).take(pa.array(per_row))
    account = pc.binary_join_element_wise(rid, pc.cast(pa.array(np.arange(len(per_row)) // 7 % 3),
                                                       pa.string()), ":a")
    return pa.table({"record_id": rid, "account_id": account, **cols})


def with_bucket(table: pa.Table) -> pa.Table:
    rids = table["record_id"].unique().to_pylist()
    lookup = pa.array([bucket_of(r) for r in rids], pa.int32())
    idx = pc.index_in(table["record_id"], value_set=pa.array(rids))
    return table.append_column("bucket", lookup.take(idx))


class Workload:
    """The same rows, grouped into `size` records; per-record totals for exact expectations."""

    def __init__(self, rows: int, size: int, cols: dict, kobo: np.ndarray):
        self.size, self.per = size, rows // size
        self.rids = record_ids(size, SEED + size)
        self.table = assemble(cols, self.rids, np.arange(rows) // self.per)
        self.record_kobo = dict(zip(self.rids, np.add.reduceat(kobo, np.arange(0, rows, self.per)).tolist(),
                                    strict=True))
        self.total_kobo = int(kobo.sum())

    def runs(self):
        """(record ids, rows) per pipeline run of RUN records."""
        for start in range(0, self.size, RUN):
            ids = self.rids[start:start + RUN]
            yield list(ids), self.table.slice(start * self.per, len(ids) * self.per)


def relabel(batch: pa.Table, rid: str) -> pa.Table:
    """The landing batch as the rows of record `rid`."""
    n = len(batch)
    return assemble({k: batch[k] for k in batch.column_names[2:]}, np.array([rid]), np.zeros(n, int))


def kobo_of(rows: pa.Table) -> int:
    return int(pc.sum(pc.cast(rows["amount"], pa.decimal128(38, 2))).as_py().scaleb(2))


def to_money(kobo: int) -> Decimal:
    return Decimal(kobo).scaleb(-2)


# --- the two formats behind one small interface -------------------------------------------------

class DeltaFormat:
    name = "delta"

    def __init__(self, root: Path, layout: str, size: int):
        self.layout, self.path = layout, str(root / f"delta-{layout}-{size}")

    def create(self, schema: pa.Schema) -> None:
        if self.layout == "bucket":
            schema = schema.append(pa.field("bucket", pa.int32()))
        DeltaTable.create(self.path, schema, partition_by=["bucket"] if self.layout == "bucket" else None)

    def predicate(self, ids: list[str]) -> str:
        quoted = ", ".join(f"'{r}'" for r in ids)
        if self.layout == "flat":
            return f"record_id IN ({quoted})"
        # naming the buckets lets delta-rs skip the other partitions' files
        buckets = ", ".join(str(b) for b in sorted({bucket_of(r) for r in ids}))
        return f"bucket IN ({buckets}) AND record_id IN ({quoted})"

    def commit(self, ids: list[str], rows: pa.Table, tag: str | None = None) -> None:
        """Replace exactly `ids`' rows, one commit (a run opens the table afresh, as here)."""
        if self.layout == "bucket":
            rows = with_bucket(rows)
        target, props = self.path, None
        if tag:  # a concurrent writer: keep the version it read, to see whether delta-rs rebased
            target = DeltaTable(self.path)
            self.read_version = target.version()
            props = CommitProperties(custom_metadata={"writer": tag})
        write_deltalake(target, rows, mode="overwrite", predicate=self.predicate(ids),
                        writer_properties=ZSTD, commit_properties=props)

    def files(self) -> tuple[list[str], bool]:
        return DeltaTable(self.path).file_uris(), False

    def files_for(self, rid: str) -> list[str]:
        pred = f"record_id = '{rid}'"
        if self.layout == "bucket":
            pred = f"bucket = {bucket_of(rid)} AND {pred}"
        return DeltaTable(self.path).file_uris(file_pruning_predicate=pred)

    def own_read(self, rid: str) -> pa.Table:
        expr = pc.field("record_id") == rid
        if self.layout == "bucket":
            expr &= pc.field("bucket") == bucket_of(rid)
        return DeltaTable(self.path).to_pyarrow_dataset().to_table(filter=expr)

    def live(self) -> tuple[int, int]:
        """Files and bytes of the current version."""
        adds = pa.table(DeltaTable(self.path).get_add_actions(flatten=True))
        return len(adds), int(pc.sum(adds["size_bytes"]).as_py() or 0)

    def compact(self) -> dict:
        m = DeltaTable(self.path).optimize.compact(writer_properties=ZSTD)
        return {"files_added": m["numFilesAdded"], "files_removed": m["numFilesRemoved"]}

    def version(self):
        return DeltaTable(self.path).version()

    def files_at(self, version) -> list[str]:
        return DeltaTable(self.path, version=version).file_uris()

    def clean(self) -> dict:
        """Vacuum now (retention 0): removes files no longer in the current version."""
        removed = DeltaTable(self.path).vacuum(retention_hours=0, enforce_retention_duration=False,
                                               dry_run=False)
        return {"data_files_removed": len(removed)}

    def metadata_files(self) -> int:
        return len(os.listdir(Path(self.path) / "_delta_log"))

    def disk(self) -> int:
        return disk_bytes(Path(self.path))


class IcebergFormat:
    name = "iceberg"

    def __init__(self, root: Path, layout: str, size: int):
        self.layout, self.root = layout, root
        self.ident = f"lake.transactions_{layout}_{size}"
        self.location = root / "iceberg" / "lake" / f"transactions_{layout}_{size}"

    def catalog(self) -> SqlCatalog:
        return iceberg_catalog(self.root)

    def table(self):
        return self.catalog().load_table(self.ident)

    def create(self, schema: pa.Schema) -> None:
        cat = self.catalog()
        if ("lake",) not in cat.list_namespaces():
            cat.create_namespace("lake")
        tbl = cat.create_table(self.ident, schema=schema)
        if self.layout == "bucket":
            with tbl.update_spec() as spec:
                spec.add_field("record_id", BucketTransform(BUCKETS), "record_id_bucket")

    def commit(self, ids: list[str], rows: pa.Table, tag: str | None = None) -> None:
        """One transaction: delete `ids`' rows (copy-on-write) and append the new ones."""
        self.table().overwrite(rows, overwrite_filter=In("record_id", ids))

    def files(self) -> tuple[list[str], bool]:
        tasks = self.table().scan().plan_files()
        return [t.file.file_path for t in tasks], any(t.delete_files for t in tasks)

    def files_for(self, rid: str) -> list[str]:
        return [t.file.file_path for t in self.table().scan(row_filter=EqualTo("record_id", rid)).plan_files()]

    def own_read(self, rid: str) -> pa.Table:
        return self.table().scan(row_filter=EqualTo("record_id", rid)).to_arrow()

    def live(self) -> tuple[int, int]:
        tasks = self.table().scan().plan_files()
        return len(tasks), sum(t.file.file_size_in_bytes for t in tasks)

    def compact(self) -> dict:
        """pyiceberg 0.12 has no rewrite_data_files: rewrite the whole table in one overwrite,
        read into memory (a bucket transform rules out dynamic_partition_overwrite)."""
        tbl = self.table()
        before = len(tbl.scan().plan_files())
        tbl.overwrite(tbl.scan().to_arrow())
        return {"files_added": len(self.table().scan().plan_files()), "files_removed": before}

    def version(self):
        return self.table().current_snapshot().snapshot_id

    def files_at(self, snapshot_id) -> list[str]:
        return [t.file.file_path for t in self.table().scan(snapshot_id=snapshot_id).plan_files()]

    def clean(self) -> dict:
        """Expire every snapshot but the current (metadata only in pyiceberg 0.12), then delete
        data files no snapshot references: pyiceberg has no orphan removal, this is our code."""
        tbl = self.table()
        t0 = time.perf_counter()
        tbl.maintenance.expire_snapshots().older_than(dt.datetime.now(dt.UTC)).commit()
        expire_s = time.perf_counter() - t0
        live = {p.removeprefix("file://") for p in self.table().inspect.all_files()["file_path"].to_pylist()}
        removed = 0
        for path in (self.location / "data").rglob("*.parquet"):
            if str(path) not in live:
                path.unlink()
                removed += 1
        return {"data_files_removed": removed, "expire_s": round(expire_s, 3),
                "snapshots_left": len(self.table().snapshots())}

    def metadata_files(self) -> int:
        return len(os.listdir(self.location / "metadata"))

    def disk(self) -> int:
        return disk_bytes(self.location)


def iceberg_catalog(root: Path) -> SqlCatalog:
    return SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db",
                      warehouse=f"file://{root}/iceberg")


def make(fmt: str, root: Path, layout: str, size: int):
    return (DeltaFormat if fmt == "delta" else IcebergFormat)(root, layout, size)


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --- measuring helpers --------------------------------------------------------------------------

def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "n": len(values)}


def ab(rnd: int, fmts=FORMATS) -> tuple[str, ...]:
    """Alternate which format goes first, round by round."""
    order = tuple(fmts)
    return order if rnd % 2 == 0 else order[::-1]


def load(table, work: Workload, budget_s: float) -> dict:
    """All runs, one commit each; stops (and says so) when the budget is spent."""
    table.create(work.table.schema)
    t0 = time.perf_counter()
    commits, per_commit = 0, []
    for ids, rows in work.runs():
        s, _ = timed(table.commit, ids, rows)
        per_commit.append(s)
        commits += 1
        if time.perf_counter() - t0 > budget_s:
            break
    total = time.perf_counter() - t0
    n_runs = -(-work.size // RUN)
    out = {"s": round(total, 2), "commits": commits, "complete": commits == n_runs,
           "first_commit_s": round(per_commit[0], 3), "last_commit_s": round(per_commit[-1], 3)}
    if commits < n_runs:
        out["projected_s"] = project(per_commit, n_runs)
    return out


def project(per_commit: list[float], n_runs: int) -> float:
    """A stopped load's whole time, if each commit keeps growing as it did (a line through the
    commit times: a commit rereads what earlier ones wrote). An estimate, labelled as such."""
    slope, icpt = np.polyfit(np.arange(len(per_commit)), per_commit, 1)
    rest = np.arange(len(per_commit), n_runs)
    return round(sum(per_commit) + float(np.sum(np.maximum(icpt + slope * rest, 0))), 0)


def footprint(table) -> dict:
    files, size = table.live()
    return {"files": files, "mb": round(size / 2**20, 1), "disk_mb": round(table.disk() / 2**20, 1),
            "metadata_files": table.metadata_files()}


class Queries:
    """DuckDB over a file list: what the warehouse would run."""

    def __init__(self):
        self.con = duckdb.connect()
        self.con.execute("set TimeZone = 'UTC'")

    def total(self, files: list[str]) -> Decimal:
        return self.con.execute("select sum(amount) from read_parquet(?)", [files]).fetchone()[0]

    def per_day(self, files: list[str]) -> list[tuple]:
        return self.con.execute("select cast(trans_date as date) d, count(*) from read_parquet(?) "
                                "group by 1 order by 1", [files]).fetchall()

    def record(self, files: list[str], rid: str) -> tuple[int, Decimal]:
        if not files:
            return 0, None
        return self.con.execute("select count(*), sum(amount) from read_parquet(?) where record_id = ?",
                                [files, rid]).fetchone()


def query_round(table, q: Queries, rid: str, expect_kobo: int) -> tuple[dict, dict]:
    """One pass of every query on one format: times, and answers to compare across formats."""
    t = {}
    t["list_s"], (files, has_deletes) = timed(table.files)
    t["sum_s"], total = timed(q.total, files)
    t["per_day_s"], days = timed(q.per_day, files)
    t0 = time.perf_counter()
    rfiles = table.files_for(rid)
    n, rsum = q.record(rfiles, rid)
    t["record_s"] = time.perf_counter() - t0
    t["own_reader_s"], own = timed(table.own_read, rid)
    assert total == to_money(expect_kobo), (table.name, total, to_money(expect_kobo))
    assert own.num_rows == n, (table.name, own.num_rows, n)
    answers = {"total": total, "days": days, "record": (n, rsum), "files": len(files),
               "record_files": len(rfiles), "delete_files": has_deletes}
    return t, answers


def queries(tables: dict, work: Workload, expect: dict, rounds: int, rng) -> dict:
    """`rounds` rounds, formats alternating; answers must agree between the formats."""
    q, times = Queries(), {f: {} for f in tables}
    answers = {}
    for rnd in range(rounds):
        rid = str(rng.choice(work.rids))
        for f in ab(rnd, tables):
            t, answers[f] = query_round(tables[f], q, rid, expect[f])
            for k, v in t.items():
                times[f].setdefault(k, []).append(v)
        for a in answers.values():
            assert a["days"] == answers[f]["days"] and a["record"] == answers[f]["record"], "formats disagree"
            assert a["record"][0] == work.per, a["record"]
    return {f: {**{k: spread(v) for k, v in times[f].items()},
                "files": answers[f]["files"], "record_files": answers[f]["record_files"],
                "delete_files": answers[f]["delete_files"], "sum": str(answers[f]["total"])}
            for f in tables}


def landing(tables: dict, work: Workload, batch: pa.Table, expect: dict, reps: int, taken: set) -> dict:
    """One more record (new), and a rerun of an existing one: time and bytes written."""
    out = {f: {"new_s": [], "new_mb": [], "rerun_s": [], "rerun_mb": []} for f in tables}
    new_ids = record_ids(reps, SEED + 7 * work.size + 1)
    batch_kobo = kobo_of(batch)
    for rnd in range(reps):
        rerun_id = str(work.rids[-(rnd + 1)])  # not the rows the queries look up first
        taken.add(rerun_id)
        for f in ab(rnd, tables):
            for kind, rid in (("new", str(new_ids[rnd])), ("rerun", rerun_id)):
                before = tables[f].disk()
                s, _ = timed(tables[f].commit, [rid], relabel(batch, rid))
                out[f][f"{kind}_s"].append(s)
                out[f][f"{kind}_mb"].append((tables[f].disk() - before) / 2**20)
                expect[f] += batch_kobo - (work.record_kobo[rid] if kind == "rerun" else 0)
        work.record_kobo[rerun_id] = batch_kobo
    return {f: {k: spread(v) for k, v in out[f].items()} for f in tables}


def time_travel(tables: dict, versions: dict, work: Workload, rounds: int) -> dict:
    """Read the version as loaded (before compaction and landings): must give the loaded total."""
    q, times = Queries(), {f: [] for f in tables}
    for rnd in range(rounds):
        for f in ab(rnd, tables):
            s, total = timed(lambda t=tables[f], v=versions[f]: q.total(t.files_at(v)))
            assert total == to_money(work.total_kobo), (f, total)
            times[f].append(s)
    return {f: spread(times[f]) for f in tables}


def clean(tables: dict, expect: dict) -> dict:
    """Vacuum / expire + orphan removal; the current answer must not change."""
    out, q = {}, Queries()
    for f in tables:
        before = tables[f].disk()
        s, info = timed(tables[f].clean)
        files, _ = tables[f].files()
        assert q.total(files) == to_money(expect[f]), f
        out[f] = {"s": round(s, 3), **info, "freed_mb": round((before - tables[f].disk()) / 2**20, 1),
                  "metadata_files_left": tables[f].metadata_files()}
    return out


# --- concurrency: two processes, different records, same table ---------------------------------

CONFLICTS = (CommitFailedError, CommitFailedException, ValidationException)


def delta_rebases(table: DeltaFormat, tag: str) -> int:
    """Commits delta-rs rebased this one over (it retries by itself when they don't conflict).
    Its commitInfo num_retries stays 0 here: it is written before the attempts, so the version
    landed against the version read tells instead."""
    for info in DeltaTable(table.path).history(limit=50):
        if info.get("writer") == tag:
            return info["version"] - table.read_version - 1
    raise AssertionError(f"commit {tag} not in the log")


class RetryCount(logging.Handler):
    """pyiceberg retries a failed catalog commit itself and logs each retry."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def emit(self, record):
        self.n += "retrying" in record.getMessage()


def writer(fmt, root, layout, size, batches, barrier, out) -> None:
    """Commit one record per round at the same moment as the other writer; retry on conflict."""
    warnings.filterwarnings("ignore")
    table, counter = make(fmt, Path(root), layout, size), RetryCount()
    logging.getLogger("pyiceberg").addHandler(counter)
    for rnd, (rid, rows) in enumerate(batches):
        raised, tag = [], f"{os.getpid()}-{rnd}"
        counter.n = 0
        barrier.wait()
        t0 = time.perf_counter()
        while True:
            try:
                table.commit([rid], rows, tag)
                break
            except CONFLICTS as exc:  # the caller's retry: write again against the new version
                raised.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                if len(raised) > 10:
                    raise
        elapsed = time.perf_counter() - t0
        internal = delta_rebases(table, tag) if fmt == "delta" else counter.n
        out.put({"round": rnd, "rid": rid, "raised": raised, "internal_retries": internal, "s": elapsed})


def concurrency(root: Path, layout: str, size: int, work: Workload, batch: pa.Table,
                rounds: int, expect: dict, taken: set) -> dict:
    """Per kind (new records / reruns of existing ones) and format: what the caller sees.
    Both formats get the same records, so their expected totals stay equal."""
    ctx = mp.get_context("spawn")
    batch_kobo = kobo_of(batch)
    fresh = [str(r) for r in record_ids(2 * rounds, SEED + 99)]
    existing = [str(r) for r in work.rids[:len(work.rids) // 2] if r not in taken][:2 * rounds]
    result = {}
    for kind, pool in (("new", fresh), ("rerun", existing)):
        picks = [pool[:rounds], pool[rounds:]]  # writer A's records, writer B's
        for f in FORMATS:
            barrier, out = ctx.Barrier(2), ctx.Queue()
            procs = [ctx.Process(target=writer, args=(f, str(root), layout, size,
                                                      [(r, relabel(batch, r)) for r in ids], barrier, out))
                     for ids in picks]
            for p in procs:
                p.start()
            reports = [out.get(timeout=900) for _ in range(2 * rounds)]
            for p in procs:
                p.join()
            assert all(p.exitcode == 0 for p in procs), f"{f} writer failed"
            result.setdefault(kind, {})[f] = summarise_writers(reports, make(f, root, layout, size), pool)
        for rid in pool:
            for f in FORMATS:
                expect[f] += batch_kobo - work.record_kobo.get(rid, 0)
            work.record_kobo[rid] = batch_kobo
    return result


def summarise_writers(reports: list[dict], table, rids: list[str]) -> dict:
    """Conflicts surfaced to the caller, the library's own retries, and that every commit landed."""
    files, _ = table.files()
    con = duckdb.connect()
    counts = dict(con.execute("select record_id, count(*) from read_parquet(?) where record_id in "
                              "(select unnest(?)) group by 1", [files, rids]).fetchall())
    return {"commits": len(reports),
            "commits_with_caller_retry": sum(1 for r in reports if r["raised"]),
            "caller_retries": sum(len(r["raised"]) for r in reports),
            "library_retries": sum(r["internal_retries"] for r in reports),
            "errors_seen": sorted({e.split(":")[0] for r in reports for e in r["raised"]}),
            "example_error": next((r["raised"][0] for r in reports if r["raised"]), None),
            "all_landed": all(counts.get(r) == LAND_ROWS for r in rids),
            "commit_s": spread([r["s"] for r in reports])}


# --- dependency weight --------------------------------------------------------------------------

def closure(name: str, extras: set[str] = frozenset()) -> set[str]:
    """Installed distributions `name` pulls in (markers: extras honoured, others if installed)."""
    seen, todo = set(), [(name, set(extras))]
    while todo:
        dist_name, ex = todo.pop()
        key = re.sub(r"[-_.]+", "-", dist_name).lower()
        if key in seen:
            continue
        try:
            dist = md.distribution(dist_name)
        except md.PackageNotFoundError:
            continue
        seen.add(key)
        for req in dist.requires or []:
            dep, _, marker = req.partition(";")
            m = re.search(r"extra\s*==\s*['\"]([^'\"]+)", marker)
            if m and m.group(1) not in ex:
                continue
            dep_name = re.match(r"[A-Za-z0-9._-]+", dep.strip()).group(0)
            dep_extras = set(re.findall(r"\[([^\]]+)\]", dep)[0].split(",")) if "[" in dep else set()
            todo.append((dep_name, dep_extras))
    return seen


def dist_mb(key: str) -> float:
    dist = md.distribution(key)
    return sum((dist.locate_file(f).stat().st_size for f in dist.files or []
                if dist.locate_file(f).exists()), 0) / 2**20


def import_seconds(module: str, runs: int) -> dict:
    """Fresh interpreter import time minus a bare interpreter start; alternated by caller."""
    def once(code):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t0
    return [once(f"import {module}") - once("pass") for _ in range(runs)]


def dependencies(runs: int) -> dict:
    locked = set(re.findall(r'^name = "([^"]+)"', (ROOT / "uv.lock").read_text(), re.M)) \
        if (ROOT / "uv.lock").exists() else set()
    out = {}
    imports = {"delta": "deltalake", "iceberg": "pyiceberg.catalog.sql, pyiceberg.table, pyiceberg.expressions"}
    times = {f: [] for f in FORMATS}
    for rnd in range(runs):
        for f in ab(rnd):
            times[f] += import_seconds(imports[f], 1)
    for f, (root_dist, extras) in {"delta": ("deltalake", set()),
                                   "iceberg": ("pyiceberg", {"sql-sqlite", "pyiceberg-core"})}.items():
        dists = sorted(closure(root_dist, extras) - {"pyarrow", "numpy"})  # both in the project already
        new = [d for d in dists if d not in locked]
        out[f] = {"distributions": dists, "not_in_uv_lock": new,
                  "installed_mb": round(sum(dist_mb(d) for d in dists), 1),
                  "new_to_project_mb": round(sum(dist_mb(d) for d in new), 1),
                  "import_s": spread(times[f])}
    return out


# --- the run ------------------------------------------------------------------------------------

def remove(table) -> None:
    shutil.rmtree(getattr(table, "path", None) or table.location, ignore_errors=True)


def say(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def size_pass(root: Path, size: int, rows: int, cols: dict, kobo: np.ndarray, batch: pa.Table,
              args, first: bool, index: int) -> dict:
    """Every step for one size, both layouts, both formats."""
    result = {}
    for li, layout in enumerate(LAYOUTS):
        work = Workload(rows, size, cols, kobo)  # fresh per layout: landings change its totals
        tables = {f: make(f, root, layout, size) for f in FORMATS}
        expect = {f: work.total_kobo for f in FORMATS}
        rng = np.random.default_rng(SEED + size)
        r = result[layout] = {"load": {}, "after_load": {}, "compact": {}, "after_compact": {}}
        for f in ab(index + li):
            r["load"][f] = load(tables[f], work, args.budget)
            say(f"{size} {layout} {f}: load", r["load"][f])
            r["after_load"][f] = footprint(tables[f])
        for f in [f for f in FORMATS if not r["load"][f]["complete"]]:
            r["note"] = f"{f}'s load hit the time budget: its later steps skipped"
            remove(tables.pop(f))
        if not tables:
            continue
        versions = {f: tables[f].version() for f in tables}
        r["queries_before_compaction"] = queries(tables, work, expect, args.rounds, rng)
        for f in ab(index + li + 1, tables):
            s, info = timed(tables[f].compact)
            r["compact"][f] = {"s": round(s, 2), **info}
            r["after_compact"][f] = footprint(tables[f])
        say(f"{size} {layout}: compacted", r["compact"])
        r["queries"] = queries(tables, work, expect, args.rounds, rng)
        taken = set()
        r["landing"] = landing(tables, work, batch, expect, args.land_reps, taken)
        say(f"{size} {layout}: queried, landed")
        r["time_travel"] = time_travel(tables, versions, work, args.rounds)
        if first and len(tables) == len(FORMATS):
            r["concurrency"] = concurrency(root, layout, size, work, batch, args.conc_rounds, expect, taken)
            say(f"{size} {layout}: concurrency", {k: {f: (c["caller_retries"], c["library_retries"])
                                                     for f, c in v.items()} for k, v in r["concurrency"].items()})
        r["clean"] = clean(tables, expect)
        r["exact_sum"] = {f: str(to_money(expect[f])) for f in tables}
        for table in tables.values():  # keep the disk small: the next size writes its own tables
            remove(table)
    return result


def versions() -> dict:
    import deltalake
    return {d: md.version(d) for d in ("deltalake", "pyiceberg", "pyarrow", "duckdb", "numpy", "sqlalchemy")} \
        | {"delta-rs core": deltalake.rust_core_version(), "python": platform.python_version()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200,000 rows, sizes 20/200/2,000")
    ap.add_argument("--data", type=Path, default=Path("/tmp/ledgerlake-bench-lake-formats"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "lake_formats.json")
    ap.add_argument("--budget", type=float, default=900, help="seconds for one load before it stops")
    args = ap.parse_args()
    rows, sizes = (200_000, (20, 200, 2_000)) if args.quick else (2_000_000, (200, 2_000, 20_000))
    args.rounds, args.land_reps, args.conc_rounds = (2, 2, 2) if args.quick else (5, 3, 10)
    started = time.perf_counter()
    shutil.rmtree(args.data, ignore_errors=True)
    args.data.mkdir(parents=True)
    cols, kobo = generate_rows(rows, SEED)
    batch_cols, _ = generate_rows(LAND_ROWS, SEED + 1)
    batch = assemble(batch_cols, np.array(["x"]), np.zeros(LAND_ROWS, int))
    out = {"measured_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": " ".join([Path(sys.executable).as_posix(), *sys.argv]),
           "machine": {"cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                       "load_at_start": os.getloadavg()[0]},
           "versions": versions(), "rows": rows, "records_per_commit": RUN, "buckets": BUCKETS,
           "expected_sum": str(to_money(int(kobo.sum()))), "sizes": {}}
    for i, size in enumerate(sizes):
        say(f"size {size} records ({rows // size} rows each)")
        out["sizes"][str(size)] = size_pass(args.data, size, rows, cols, kobo, batch, args, i == 0, i)
    out["dependencies"] = dependencies(3 if args.quick else 5)
    out["notes"] = NOTES
    out["machine"]["load_at_end"] = os.getloadavg()[0]
    out["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(markdown(out))


NOTES = {
    "readers": "Both are read by Spark and Trino (Delta: delta-spark, Trino delta_lake connector; "
               "Iceberg: iceberg-spark-runtime, Trino iceberg connector, which needs the same "
               "catalog: a JDBC catalog on the SQL catalog's database). DuckDB reads either only "
               "through its delta/iceberg extensions, not downloadable here, so read_parquet over "
               "the snapshot's file list is the portable path (exact only without delete files).",
    "object_storage": "Delta: s3:// through delta-rs's own object_store, storage_options "
                      "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION / AWS_ENDPOINT_URL / "
                      "AWS_ALLOW_HTTP; delta-rs 1.x commits with S3 conditional writes (no DynamoDB "
                      "lock). Iceberg: FileIO (pyarrow or fsspec) with s3.endpoint / "
                      "s3.access-key-id / s3.secret-access-key / s3.region; atomicity comes from "
                      "the catalog (SQLite locally, Postgres in production), not from S3.",
    "iceberg_compaction": "pyiceberg 0.12 has no rewrite_data_files: compaction here is a full "
                          "overwrite of the table read into memory, in one commit.",
    "iceberg_orphans": "pyiceberg 0.12 expire_snapshots only edits metadata; data files, "
                       "manifests and old metadata.json stay until removed by our own code "
                       "(data files removed here) or by Spark's remove_orphan_files.",
    "delta_vacuum": "DeltaTable.vacuum(retention_hours=...) deletes unreferenced data files; "
                    "log entries expire by delta.logRetentionDuration (30 days) via cleanup_metadata.",
}


# --- report -------------------------------------------------------------------------------------

def fmt_spread(s: dict | None) -> str:
    if not s:
        return "-"
    return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"


def markdown(out: dict) -> str:
    lines = [f"Measured {out['measured_at']} on {out['machine']['cores']} cores, {out['rows']:,} rows; "
             f"medians (min-max) in seconds; versions {out['versions']}", "",
             "| records | layout | format | load s (commits) | files / MB loaded | compact s | "
             "files / MB compacted | list s | sum s | per-day s | one record s (files) | own reader s | "
             "land new s / MB | rerun s / MB | time travel s | vacuum s / freed MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for size, layouts in out["sizes"].items():
        for layout, r in layouts.items():
            for f in FORMATS:
                lines.append(row(size, layout, f, r))
    lines += ["", "| records | layout | format | files before compaction: list s | sum s | per-day s | one record s |",
              "|---|---|---|---|---|---|---|"]
    for size, layouts in out["sizes"].items():
        for layout, r in layouts.items():
            for f in FORMATS:
                qb = r.get("queries_before_compaction", {}).get(f)
                if qb:
                    lines.append(f"| {size} | {layout} | {f} | {fmt_spread(qb['list_s'])} | "
                                 f"{fmt_spread(qb['sum_s'])} | {fmt_spread(qb['per_day_s'])} | "
                                 f"{fmt_spread(qb['record_s'])} ({qb['record_files']}) |")
    lines += ["", "| layout | kind | format | commits | with caller retry | caller retries | library retries | "
              "errors | all landed |", "|---|---|---|---|---|---|---|---|---|"]
    for size, layouts in out["sizes"].items():
        for layout, r in layouts.items():
            for kind, per in r.get("concurrency", {}).items():
                for f, c in per.items():
                    lines.append(f"| {layout} ({size}) | {kind} | {f} | {c['commits']} | "
                                 f"{c['commits_with_caller_retry']} | {c['caller_retries']} | "
                                 f"{c['library_retries']} | {', '.join(c['errors_seen']) or '-'} | "
                                 f"{c['all_landed']} |")
    lines += ["", "| format | installed MB (excl. pyarrow, numpy) | new to the project MB | import s |",
              "|---|---|---|---|"]
    for f, d in out.get("dependencies", {}).items():
        lines.append(f"| {f} | {d['installed_mb']} | {d['new_to_project_mb']} ({', '.join(d['not_in_uv_lock'])}) "
                     f"| {fmt_spread(d['import_s'])} |")
    return "\n".join(lines)


def row(size: str, layout: str, f: str, r: dict) -> str:
    ld, al = r["load"].get(f, {}), r["after_load"].get(f, {})
    head = (f"| {size} | {layout} | {f} | {ld.get('s')} ({ld.get('commits')}"
            f"{'' if ld.get('complete', True) else ', stopped; whole load projected ' + str(ld.get('projected_s')) + ' s'}) | {al.get('files')} / {al.get('mb')} |")
    if f not in r.get("queries", {}):
        return head + " - |" * 11
    c, ac, q = r["compact"][f], r["after_compact"][f], r["queries"][f]
    land, cl = r["landing"][f], r["clean"][f]
    mb = lambda s: f"{s['median']:.2f}"  # noqa: E731
    return (head + f" {c['s']} | {ac['files']} / {ac['mb']} | {fmt_spread(q['list_s'])} | "
            f"{fmt_spread(q['sum_s'])} | {fmt_spread(q['per_day_s'])} | "
            f"{fmt_spread(q['record_s'])} ({q['record_files']}) | {fmt_spread(q['own_reader_s'])} | "
            f"{fmt_spread(land['new_s'])} / {mb(land['new_mb'])} | "
            f"{fmt_spread(land['rerun_s'])} / {mb(land['rerun_mb'])} | "
            f"{fmt_spread(r['time_travel'][f])} | {cl['s']} / {cl['freed_mb']} |")


if __name__ == "__main__":
    main()
