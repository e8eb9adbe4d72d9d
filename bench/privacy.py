"""Personal data (issue 20): what masking costs on ingest and on the warehouse, and what
`forget` costs on a 20,000-record lake.

1. **Masking.** 20,000 identity items shaped as the sandbox serves them
   (`sandbox/datagen.identity` through `sandbox/callbacks.identity_member`, one customer's per
   record, seeded): `assets.identity.to_table` alone (the peer) against `to_table` then
   `resources.privacy.protect` (masks, HMAC-SHA256 of BVN and NIN, each row's raw values
   sealed with AES-256-GCM), in µs a row: all items in one call, the same with Python's cyclic
   GC off, and --per-record-items items one call each, as the asset makes them (a record's
   `/identity/get`); protect's steps timed one by one beside it (the same calls as its body,
   in its order). Then the rows written to one lake both ways, in commits of
   --chunk records (`Lake.replace`) and compacted as the nightly maintenance does: raw
   (`assets.identity.RAW`) as the table `identity_raw`, protected as `identity`. The warehouse
   (`assets.warehouse.build`, every view, the other tables stood in for) is built with the
   identity view reading the protected table, and again reading the raw one (the peer:
   `sealed` given as a null column so the view's `select * exclude (sealed)` holds), each
   source's snapshot file list read inside the clock; over each built file, in a fresh
   read-only DuckDB connection, `select count(*), count(distinct bvn_hash)` against
   `... count(distinct bvn)` on the raw, and a lookup of one person by `bvn_hash` against by
   `bvn`.

2. **Forget.** One local lake of --records records written straight through `Lake.replace`
   (`Lake.append` for balance_history), --chunk records a commit: identity (protected, 1 row
   a record), accounts (2), transactions (--txn-rows, 20-40 a record, money decimal(18,2)),
   balance_history (2) and income (1), each cast to its module's SCHEMA; then each table
   compacted clustered by record (`resources.delta.compact(order_by="record_id")`, the
   maintenance's target size; no vacuum, as within the retention week) and, beside it, the
   same lake left uncompacted. Most customers have one record; one record in 97 of the
   lake's first third shares its customer with the records a third and two thirds further
   (69 customers of three records at 20,000). Per layout, for a one-record and a
   three-record customer, each round on fresh copies (`shutil.copytree`) of the built lake,
   in rotated order:
   `pipeline.forget.forget(lake, tables, customer=...)` (the tables `ledgerlake forget`
   passes) without and with the warehouse rebuild, and the peer: a plain
   `deltalake.DeltaTable(uri).delete("record_id IN (...)")` of the same records on each
   table, no purge, then `assets.warehouse.build` alone. Bytes rewritten and purged are read
   from the lake folder's files before and after; forget's time is split (records_of, each
   table's delete commit, the purge's scan of old files, the audit append) by wrapping those
   functions, which costs nothing measurable.

Medians of --rounds rounds (each contender once a round, in rotated order; the in-memory
masking at least 7, the identity lake writes at most 3); ratios are the median of each round's
ratio, the contender against its peer seconds apart, wall and CPU (this machine's 2 cores are
shared with other jobs: see the load in the JSON).

    .venv/bin/python bench/privacy.py                        # 20,000 records, 5 rounds: ~5 min
    .venv/bin/python bench/privacy.py --records 2000 --rounds 1 --out /tmp/privacy.json

Writes bench/results/privacy.json (unless --out) and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from deltalake import DeltaTable  # noqa: E402
from run import machine  # noqa: E402  (bench/run.py: the same machine facts)

import pipeline.forget as forget_module  # noqa: E402
from assets import accounts as accounts_module  # noqa: E402
from assets import balances as balances_module  # noqa: E402
from assets import identity as identity_module  # noqa: E402
from assets import income as income_module  # noqa: E402
from assets import transactions as transactions_module  # noqa: E402
from assets import warehouse  # noqa: E402
from assets.maintenance import target_bytes  # noqa: E402
from resources import delta, privacy  # noqa: E402
from resources.columns import UTC_MS, money_from_kobo  # noqa: E402
from resources.lake import Lake  # noqa: E402
from sandbox import callbacks, datagen  # noqa: E402

SEED = 20261122
RESULTS = ROOT / "bench" / "results" / "privacy.json"
START_MS = int(dt.datetime(2025, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
DAY_MS = 86_400_000
THREE_EVERY = 97  # one record in 97 of the first third: its customer has three, a third apart
# the tables `ledgerlake forget` erases from (pipeline/cli.py)
FORGET_TABLES = list(forget_module.TABLES)
NARRATION = np.array(["POS PURCHASE", "TRANSFER FROM", "TRANSFER TO", "ATM WITHDRAWAL",
                      "AIRTIME", "SALARY", "CARD FEE", "BILL PAYMENT", "USSD TRANSFER"])
TOPICS = np.array(["transfer", "card", "bills", "salary", "fees", "cash", "airtime"])
BRANCHES = np.array(["IKEJA", "LEKKI", "ABUJA CENTRAL", "PORT HARCOURT", "KANO", "IBADAN"])
BANKS = np.array([datagen.object_id(SEED, "bank", b["slug"]) for b in datagen.BANKS])
COUNT_SQL = {"protected": "select count(*), count(distinct bvn_hash) from identity",
             "raw": "select count(*), count(distinct bvn) from identity"}
LOOKUP_SQL = {"protected": "select fullname, birth_year from identity where bvn_hash = ?",
              "raw": "select fullname, dob from identity where bvn = ?"}


# ---------------------------------------------------------------- the records

def ids(count: int, seed: int, first_second: int) -> list[str]:
    """Ids shaped as the service's (24 hex: 8 of a creation second, increasing, 16 random)."""
    rng = np.random.default_rng(seed)
    tails = rng.integers(0, 2**63, count)
    return [f"{first_second + i:08x}{t:016x}" for i, t in enumerate(tails)]


def people(records: int, seed: int) -> tuple[list[str], list[str], dict[int, list[int]]]:
    """Record ids (time-ordered), each record's customer, and the records of each customer
    that has three: records i, i + n/3, i + 2n/3 for every THREE_EVERY-th i of the first third."""
    rids = ids(records, seed, 0x68000000)
    cust_ids = ids(records, seed + 1, 0x60000000)
    owner = list(range(records))
    third = records // 3
    triples = {}
    for i in range(0, third, THREE_EVERY):
        triples[i] = [i, i + third, i + 2 * third]
        for j in triples[i][1:]:
            owner[j] = i
    return rids, [cust_ids[o] for o in owner], triples


def identity_items(rids: list[str], customers: list[str], seed: int) -> list[dict]:
    """Each record's `/identity/get` item as the sandbox serves it (one person per customer:
    a customer's records carry the same identity)."""
    out = []
    for i, (rid, cid) in enumerate(zip(rids, customers, strict=True)):
        who = datagen.person(seed, cid)
        out.append(callbacks.identity_member(
            datagen.identity(seed, cid, who["name"]), customer=cid,
            bank=str(BANKS[i % len(BANKS)]), env="production",
            details=f"https://sandbox.invalid/callback/{rid}/IDENTITY",
            ident_id=datagen.object_id("identity", rid)))
    return out


def keys_for(seed: int) -> privacy.Keys:
    return privacy.Keys(hashlib.sha256(f"bench privacy {seed}".encode()).digest())


def products(rids: list[str], customers: list[str], names: list[str], seed: int,
             txn_rows: tuple[int, int]) -> dict[str, tuple[pa.Table, np.ndarray]]:
    """The other tables' rows, record after record, in their module SCHEMAs: table -> (rows,
    offsets: record i's rows are rows[offsets[i]:offsets[i + 1]])."""
    rng = np.random.default_rng(seed)
    n = len(rids)
    rec = np.arange(n)
    cust = np.array(customers)
    bank = BANKS[rec % len(BANKS)]
    acct = np.array([f"{rid[:8]}a{k}{rid[11:]}" for rid in rids for k in range(2)])
    created = START_MS + rng.integers(0, 30 * DAY_MS, n)
    ts = lambda ms: pa.array(ms, UTC_MS)  # noqa: E731

    def two(a):  # each record's value on both its accounts' rows
        return np.repeat(a, 2)

    opening = rng.integers(10_000_00, 5_000_000_00, 2 * n)
    accounts = pa.table({
        "account_id": acct,
        "nuban": [f"{x:010d}" for x in rng.integers(0, 10**10, 2 * n)],
        "name": np.repeat(np.array(names), 2),
        "type": np.tile(np.array(["SAVINGS_ACCOUNT", "CURRENT_ACCOUNT"]), n),
        "currency": np.full(2 * n, "NGN"), "bank_id": two(bank), "customer_id": two(cust),
        "customer_name": np.repeat(np.array(names), 2),
        "balance_id": [f"b{a}" for a in acct], "env": np.full(2 * n, "production"),
        "created_at": ts(two(created)), "last_updated": ts(two(created) + DAY_MS),
    })

    fetched = ts(two(created) + 200 * DAY_MS)
    history = pa.table({
        "account_id": acct, "fetched_at": fetched,
        "available_balance": money_from_kobo(opening), "ledger_balance": money_from_kobo(opening),
        "currency": np.full(2 * n, "NGN"), "source": np.full(2 * n, "balance"),
        "service_updated_at": fetched,
    })

    income = pa.table({
        "income_id": [f"{rid[:8]}c{rid[9:]}" for rid in rids], "customer_id": cust,
        "confidence": rng.random(n).round(2), "number_of_transactions": rng.integers(5, 200, n),
        **{c: money_from_kobo(rng.integers(5_000_000, 90_000_000, n))
           for c in ("average_monthly_income", "last_year_income", "past_three_months_total",
                     "past_six_months_total", "past_twelve_months_total",
                     "past_twelve_months_average")},
        "account_age_months": rng.integers(1, 120, n), "number_of_streams": rng.integers(1, 4, n),
        "created_at": ts(created + 201 * DAY_MS),
    })

    counts = rng.integers(txn_rows[0], txn_rows[1] + 1, n)
    rows = int(counts.sum())
    of = np.repeat(rec, counts)
    which = 2 * of + rng.integers(0, 2, rows)
    trans = START_MS + rng.integers(0, 365 * DAY_MS, rows)
    credit = rng.random(rows) < 0.3
    kobo = np.round(rng.lognormal(10.5, 1.1, rows)).astype(np.int64)
    signed = np.where(credit, kobo, -kobo)
    balance = opening[which] + signed
    ref = pc.cast(pa.array(rng.integers(10**9, 10**10, rows)), pa.string())
    topic = TOPICS[rng.integers(0, len(TOPICS), rows)]
    transactions = pa.table({
        "transaction_id": pc.binary_join_element_wise(
            "t", pc.utf8_lpad(pc.cast(pa.array(np.arange(rows)), pa.string()), 23, "0"), ""),
        "account_id": acct[which], "customer_id": cust[of], "bank_id": bank[of],
        "trans_date": ts(trans), "cleared_date": ts(trans + DAY_MS),
        "debit": money_from_kobo(kobo, ~credit), "credit": money_from_kobo(kobo, credit),
        "amount": money_from_kobo(signed), "balance": money_from_kobo(balance),
        "currency": np.full(rows, "NGN"),
        "narration": pc.binary_join_element_wise(
            pa.array(NARRATION[rng.integers(0, len(NARRATION), rows)]), ref, " "),
        "topics": pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)),
                                           pa.array(topic)),
        "ref": ref, "branch": BRANCHES[rng.integers(0, len(BRANCHES), rows)],
        "code": np.full(rows, "00"), "env": np.full(rows, "production"),
        "created_at": ts(trans + 3_600_000), "last_updated": ts(trans + 3_600_000),
    })

    def cast(rows: pa.Table, schema: pa.Schema) -> pa.Table:
        return rows.select(schema.names).cast(schema)

    per = lambda k: np.arange(0, k * n + 1, k)  # noqa: E731
    return {"accounts": (cast(accounts, accounts_module.SCHEMA), per(2)),
            "balance_history": (cast(history, balances_module.HISTORY), per(2)),
            "income": (cast(income, income_module.SUMMARY), per(1)),
            "transactions": (cast(transactions, transactions_module.SCHEMA),
                             np.concatenate([[0], np.cumsum(counts)]))}


def parts_of(rows: pa.Table, offsets: np.ndarray, rids: list[str], lo: int, hi: int) -> dict:
    return {rids[i]: rows.slice(int(offsets[i]), int(offsets[i + 1] - offsets[i]))
            for i in range(lo, hi)}


# ---------------------------------------------------------------- measuring

def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": [round(v, 6) for v in values]}


def rotated(rnd: int, names: list[str]) -> list[str]:
    k = rnd % len(names)
    return names[k:] + names[:k]


def clock(fn: Callable, *args, **kwargs) -> tuple[float, float, object]:
    """Wall and CPU seconds (this process, every thread: delta-rs and DuckDB's too), result."""
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return time.perf_counter() - w, time.process_time() - c, out


def files_under(path: Path) -> dict[str, int]:
    out = {}
    for folder, _, names in os.walk(path):
        for name in names:
            p = os.path.join(folder, name)
            out[os.path.relpath(p, path)] = os.path.getsize(p)
    return out


def data_files(listing: dict[str, int]) -> dict[str, int]:
    return {p: s for p, s in listing.items() if p.endswith(".parquet")}


def compact_lake(root: Path, tables: list[str]) -> dict:
    """What the nightly maintenance's compaction does to each table (no vacuum: the files it
    supersedes stay for the retention week)."""
    lake = Lake(root=str(root))
    return {t: delta.compact(lake.table_uri(t), target_size=target_bytes(), order_by="record_id")
            for t in tables}


# ---------------------------------------------------------------- 1. masking

def protect_steps(raw: pa.Table, keys: privacy.Keys) -> dict[str, float]:
    """`privacy.protect`'s body, step by step, timed (seconds a step)."""
    out = {}
    t = time.perf_counter()
    rows = raw.select(["customer_id", *privacy.SEALED]).to_pylist()
    out["rows_to_python"] = time.perf_counter() - t
    t = time.perf_counter()
    values = {name: raw[name].to_pylist() for name in privacy.HASHED}
    masked = {name: [privacy.mask_digits(v) for v in values[name]] for name in privacy.HASHED}
    out["mask_bvn_nin"] = time.perf_counter() - t
    t = time.perf_counter()
    hashed = {name: [keys.hash(v) for v in values[name]] for name in privacy.HASHED}
    out["hash_bvn_nin"] = time.perf_counter() - t
    t = time.perf_counter()
    year = pc.year(raw["dob"]).cast(pa.int32())
    phones = [[privacy.mask_digits(p) for p in v or []] for v in raw["phones"].to_pylist()]
    emails = [[privacy.mask_email(e) for e in v or []] for v in raw["emails"].to_pylist()]
    addresses = [[privacy.mask_address(a) for a in v or []]
                 for v in raw["addresses"].to_pylist()]
    out["mask_contacts_and_dob"] = time.perf_counter() - t
    t = time.perf_counter()
    sealed = [keys.seal({k: (v.isoformat() if k == "dob" and v is not None else v)
                         for k, v in row.items() if k != "customer_id"},
                        row["customer_id"] or "") for row in rows]
    out["seal"] = time.perf_counter() - t
    t = time.perf_counter()
    cols = {c: raw[c] for c in raw.column_names if c not in privacy.SEALED}
    cols |= masked | {f"{n}_hash": hashed[n] for n in privacy.HASHED}
    cols |= {"birth_year": year, "phones": phones, "emails": emails, "addresses": addresses,
             "sealed": sealed}
    pa.table({n: cols[n] for n in identity_module.SCHEMA.names}).cast(identity_module.SCHEMA)
    out["build_table"] = time.perf_counter() - t
    return out


def one_cipher_seal(raw: pa.Table, keys: privacy.Keys) -> float:
    """Sealing the same values with one AESGCM object for all rows (protect makes one a row):
    what reusing the cipher would save. Uses the sealing key the way Keys.seal does."""
    import secrets

    import orjson
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    rows = raw.select(["customer_id", *privacy.SEALED]).to_pylist()
    t = time.perf_counter()
    cipher = AESGCM(keys._seal)
    head = privacy.SEAL_VERSION + keys.key_id
    for row in rows:
        nonce = secrets.token_bytes(12)
        body = cipher.encrypt(nonce, orjson.dumps(
            {k: (v.isoformat() if k == "dob" and v is not None else v)
             for k, v in row.items() if k != "customer_id"}), (row["customer_id"] or "").encode())
        head + nonce + body  # noqa: B018
    return time.perf_counter() - t


def write_identity(root: Path, rids: list[str], table: pa.Table, name: str,
                   schema: pa.Schema, chunk: int) -> float:
    lake = Lake(root=str(root))
    t = time.perf_counter()
    for lo in range(0, len(rids), chunk):
        lake.replace(name, {rids[i]: table.slice(i, 1) for i in range(lo, min(lo + chunk,
                                                                               len(rids)))},
                     schema)
    return time.perf_counter() - t


def build_with_identity(lake_root: Path, target: Path, uri: str, raw: bool) -> None:
    """The whole warehouse, its identity view reading `uri`'s snapshot (the raw one given a
    null `sealed` so that the view's SQL stands), the other lake tables stood in for."""
    source = warehouse.lake_source(delta.files(uri))
    if raw:
        source = f"(select *, null::blob as sealed from {source})"
    warehouse.build(lake_root, target, sources={"identity": source})


def query(target: Path, sql: str, params: list | None = None, reps: int = 5
          ) -> tuple[float, float, list]:
    """The median wall and CPU seconds of `reps` runs of the query in a fresh read-only
    connection, and its rows."""
    took = []
    with duckdb.connect(str(target), read_only=True) as con:
        for _ in range(reps):
            w, c = time.perf_counter(), time.process_time()
            rows = con.execute(sql, params or []).fetchall()
            took.append((time.perf_counter() - w, time.process_time() - c))
    return statistics.median(t[0] for t in took), statistics.median(t[1] for t in took), rows


def ingest_once(items: list[dict], keys: privacy.Keys, protect: bool, per_record: bool,
                gc_on: bool = True) -> tuple[float, float]:
    """Wall and CPU seconds for to_table (then protect) over `items`: in one call, or one call
    an item as the asset makes them (a record's `/identity/get` holds its one customer)."""
    batches = [[item] for item in items] if per_record else [items]
    if not gc_on:
        gc.disable()
    try:
        w, c = time.perf_counter(), time.process_time()
        for batch in batches:
            table = identity_module.to_table(batch)
            if protect:
                privacy.protect(table, keys, identity_module.SCHEMA)
        return time.perf_counter() - w, time.process_time() - c
    finally:
        gc.enable()


def both(pairs: list[tuple[float, float]]) -> dict:
    """Wall and CPU seconds of rounds."""
    return {"wall": [p[0] for p in pairs], "cpu": [p[1] for p in pairs]}


def paired(peer: dict, name: dict) -> dict:
    """The median of each round's ratio name / peer, wall and CPU."""
    return {k: spread([b / a for a, b in zip(peer[k], name[k], strict=True)])
            for k in ("wall", "cpu")}


def masking(args, rids, customers, items, keys, work: Path) -> dict:
    n = len(items)
    raw = identity_module.to_table(items)
    protected = privacy.protect(raw, keys, identity_module.SCHEMA)
    few = items[:args.per_record_items]
    modes = {  # name: (items, protect, one call an item, gc on)
        "to_table": (items, False, False, True), "to_table_protect": (items, True, False, True),
        "to_table_gc_off": (items, False, False, False),
        "to_table_protect_gc_off": (items, True, False, False),
        "per_record_to_table": (few, False, True, True),
        "per_record_to_table_protect": (few, True, True, True)}
    runs: dict[str, list] = {k: [] for k in modes}
    steps: dict[str, list[float]] = {}
    for rnd in range(max(args.rounds, 7)):  # cheap: at least 7
        for name in rotated(rnd, list(modes)):
            chosen, protect, per_record, gc_on = modes[name]
            runs[name].append(ingest_once(chosen, keys, protect, per_record, gc_on))
        for s, v in protect_steps(raw, keys).items():
            steps.setdefault(s, []).append(v)
        steps.setdefault("seal_one_cipher", []).append(one_cipher_seal(raw, keys))
    ingest = {k: both(v) for k, v in runs.items()}

    def us(name: str, kind: str) -> float:
        return statistics.median(ingest[name][kind]) / len(modes[name][0]) * 1e6

    pairs = {"one_call": ("to_table", "to_table_protect"),
             "one_call_gc_off": ("to_table_gc_off", "to_table_protect_gc_off"),
             "per_record": ("per_record_to_table", "per_record_to_table_protect")}
    out = {"rows": n, "per_record_items": len(few),
           "ingest_s": {k: {kind: spread(v) for kind, v in d.items()} for k, d in ingest.items()},
           "ingest_us_per_row": {kind: {k: us(k, kind) for k in modes}
                                 for kind in ("wall", "cpu")},
           "protect_us_per_row": {kind: {p: us(b, kind) - us(a, kind)
                                         for p, (a, b) in pairs.items()}
                                  for kind in ("wall", "cpu")},
           "ratio_protect_over_to_table": {p: paired(ingest[a], ingest[b])
                                           for p, (a, b) in pairs.items()},
           "protect_steps_us_per_row": {k: statistics.median(v) / n * 1e6
                                        for k, v in steps.items()}}

    # the lake, both ways, then the warehouse over each
    names = {"raw": ("identity_raw", raw, identity_module.RAW),
             "protected": ("identity", protected, identity_module.SCHEMA)}
    writes: dict[str, list[float]] = {k: [] for k in names}
    lake_root = work / "mask-lake"
    for rnd in range(min(args.rounds, 3)):  # 20 commits each: the longest part
        for name in rotated(rnd, list(names)):
            table, rows, schema = names[name]
            shutil.rmtree(lake_root / table, ignore_errors=True)
            writes[name].append(write_identity(lake_root, rids, rows, table, schema, args.chunk))
    out["lake_write_s"] = {k: spread(v) for k, v in writes.items()}
    out["lake_write_ratio_protected_over_raw"] = spread(
        [p / r for r, p in zip(writes["raw"], writes["protected"], strict=True)])
    out["compaction"] = compact_lake(lake_root, ["identity", "identity_raw"])
    lake = Lake(root=str(lake_root))
    uris = {k: lake.table_uri(table) for k, (table, _, _) in names.items()}
    out["table_bytes"] = {k: sum(os.path.getsize(f.removeprefix("file://"))
                                 for f in delta.files(u)) for k, u in uris.items()}
    out["table_files"] = {k: len(delta.files(u)) for k, u in uris.items()}
    who = items[n // 2]
    params = {"protected": [keys.hash(who["bvn"])], "raw": [who["bvn"]]}
    figures: dict[str, list] = {f"{what}_{k}": [] for what in ("build", "count", "lookup")
                                for k in ("raw", "protected")} | {"build_production": []}
    answers = {}
    for name in ("raw", "protected"):  # warm-up, not counted
        build_with_identity(lake_root, work / "wh-warm.duckdb", uris[name], name == "raw")
        query(work / "wh-warm.duckdb", COUNT_SQL[name])
    for rnd in range(max(args.rounds, 5)):  # cheap: at least 5
        for name in rotated(rnd, ["raw", "protected", "production"]):
            target = work / f"wh-{name}.duckdb"
            if name == "production":  # as the warehouse asset builds it: every snapshot listed
                figures["build_production"].append(clock(warehouse.build, lake_root, target)[:2])
                continue
            figures[f"build_{name}"].append(clock(build_with_identity, lake_root, target,
                                                  uris[name], name == "raw")[:2])
            *took, rows = query(target, COUNT_SQL[name])
            figures[f"count_{name}"].append(took)
            answers[f"count_{name}"] = list(rows[0])
            *took, rows = query(target, LOOKUP_SQL[name], params[name])
            figures[f"lookup_{name}"].append(took)
            answers[f"lookup_{name}"] = [list(map(str, r)) for r in rows]
    wh = {k: both(v) for k, v in figures.items()}
    out["warehouse_s"] = {k: {kind: spread(v) for kind, v in d.items()} for k, d in wh.items()}
    out["warehouse_ratio_protected_over_raw"] = {
        what: paired(wh[f"{what}_raw"], wh[f"{what}_protected"])
        for what in ("build", "count", "lookup")}
    out["answers"] = answers
    out["answers_agree"] = (answers["count_raw"] == answers["count_protected"]
                            and len(answers["lookup_raw"]) == len(answers["lookup_protected"]) > 0)
    out["queries"] = {"count": COUNT_SQL, "lookup": LOOKUP_SQL}
    return out


# ---------------------------------------------------------------- 2. forget

def build_lake(root: Path, rids, customers, protected: pa.Table, tables: dict,
               chunk: int) -> dict:
    """Every table written as runs of `chunk` records would: one commit per table a chunk."""
    lake = Lake(root=str(root))
    schemas = {"accounts": accounts_module.SCHEMA, "transactions": transactions_module.SCHEMA,
               "income": income_module.SUMMARY}
    took = {t: 0.0 for t in ("identity", *schemas, "balance_history")}
    for lo in range(0, len(rids), chunk):
        hi = min(lo + chunk, len(rids))
        t = time.perf_counter()
        lake.replace("identity", {rids[i]: protected.slice(i, 1) for i in range(lo, hi)},
                     identity_module.SCHEMA)
        took["identity"] += time.perf_counter() - t
        for name, schema in schemas.items():
            t = time.perf_counter()
            lake.replace(name, parts_of(*tables[name], rids, lo, hi), schema)
            took[name] += time.perf_counter() - t
        t = time.perf_counter()
        lake.append("balance_history", parts_of(*tables["balance_history"], rids, lo, hi),
                    balances_module.HISTORY)
        took["balance_history"] += time.perf_counter() - t
    return {"write_s": took, "rows": {t: delta.read(lake.table_uri(t), columns=["record_id"])
                                      .num_rows for t in took}}


class Split:
    """Where forget's time goes: the functions it calls, wrapped with a clock."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.tables: dict[str, dict] = {}
        self.files_scanned = 0

    def add(self, key: str, s: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + s

    @contextlib.contextmanager
    def installed(self):
        real = {"records_of": forget_module.records_of, "_audit": forget_module._audit,
                "erase": delta.erase, "_retrying": delta._retrying, "_holds": delta._holds,
                "_open": delta._open}
        current: list[str] = []  # the table being erased, if any

        def timed(key, fn):
            def wrapper(*a, **kw):
                t = time.perf_counter()
                try:
                    return fn(*a, **kw)
                finally:
                    self.add(key, time.perf_counter() - t)
            return wrapper

        def erase(uri, record_ids, storage_options=None):
            current[:] = [Path(uri).name]
            t = time.perf_counter()
            try:
                out = real["erase"](uri, record_ids, storage_options)
            finally:
                table = current.pop()
            self.tables[table] = {"s": time.perf_counter() - t, **out}
            self.add("erase", time.perf_counter() - t)
            return out

        def retrying(uri, attempt):  # inside erase: its delete commit (else the audit's write)
            if not current:
                return real["_retrying"](uri, attempt)
            return timed("delete_commit", real["_retrying"])(uri, attempt)

        def open_table(uri, version, storage_options):  # erase's first look at the table
            if not current:
                return real["_open"](uri, version, storage_options)
            return timed("open_table", real["_open"])(uri, version, storage_options)

        def holds(store, path, ids):
            self.files_scanned += 1
            return timed("purge_read_old_files", real["_holds"])(store, path, ids)

        forget_module.records_of = timed("records_of", real["records_of"])
        forget_module._audit = timed("audit_append", real["_audit"])
        delta.erase = erase
        delta._retrying = retrying
        delta._holds = holds
        delta._open = open_table
        try:
            yield self
        finally:
            forget_module.records_of, forget_module._audit = real["records_of"], real["_audit"]
            delta.erase, delta._retrying, delta._holds, delta._open = (
                real["erase"], real["_retrying"], real["_holds"], real["_open"])


def commit_bytes(uri: str, version: int) -> dict:
    """Bytes a commit added and removed (its add and remove actions)."""
    added = removed = 0
    for line in (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        action = json.loads(line)
        if "add" in action:
            added += action["add"].get("size") or 0
        if "remove" in action:
            removed += action["remove"].get("size") or 0
    return {"added": added, "removed": removed}


def run_forget(lake_root: Path, target: Path, customer: str, rebuild: bool) -> dict:
    lake = Lake(root=str(lake_root))
    before = files_under(lake_root)
    split = Split()
    builder = (lambda: warehouse.build(lake.root, target)) if rebuild else None
    timed_build = None
    if builder is not None:
        def timed_build():
            t = time.perf_counter()
            builder()
            split.add("warehouse_build", time.perf_counter() - t)
    with split.installed():
        wall, cpu, done = clock(forget_module.forget, lake, FORGET_TABLES, customer=customer,
                                rebuild=timed_build, reason="bench")
    after = files_under(lake_root)
    old, new = data_files(before), data_files(after)
    rewritten = sum(commit_bytes(lake.table_uri(t), r["version"])["added"]
                    for t, r in done.tables.items() if r["version"] is not None)
    # the rest of erase: the table opened again, its folder listed, old files read, unlinked
    split.seconds["purge"] = sum(r["s"] for r in split.tables.values()) - split.seconds.get(
        "delete_commit", 0.0) - split.seconds.get("open_table", 0.0)
    return {"s": wall, "cpu_s": cpu, "records": done.records, "rows_deleted": done.rows,
            "files_purged": done.files, "bytes_purged": sum(s for p, s in old.items()
                                                            if p not in new),
            "bytes_rewritten": rewritten, "old_files_read": split.files_scanned,
            "split_s": split.seconds,
            "per_table": {t: {k: r.get(k) for k in ("s", "rows_deleted", "files_purged")}
                          for t, r in split.tables.items()}}


def run_delete(lake_root: Path, target: Path, records: list[str]) -> dict:
    """The peer: a plain Delta delete of the same records from each table there is, no purge;
    then the warehouse built alone."""
    lake = Lake(root=str(lake_root))
    predicate = "record_id IN (" + ", ".join(f"'{r}'" for r in records) + ")"
    before = data_files(files_under(lake_root))
    w, c = time.perf_counter(), time.process_time()
    deleted = removed = 0
    versions = {}
    for t in FORGET_TABLES:
        uri = lake.table_uri(t)
        if not (Path(uri) / "_delta_log").is_dir():
            continue
        table = DeltaTable(uri)
        metrics = table.delete(predicate, writer_properties=delta.ZSTD)
        deleted += metrics.get("num_deleted_rows", 0)
        removed += metrics.get("num_removed_files", 0)
        versions[t] = table.version()
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    build_s, build_cpu, _ = clock(warehouse.build, lake.root, target)
    after = data_files(files_under(lake_root))
    return {"s": wall, "cpu_s": cpu, "build_s": build_s, "build_cpu_s": build_cpu,
            "rows_deleted": deleted, "files_rewritten": removed,
            "bytes_rewritten": sum(commit_bytes(lake.table_uri(t), v)["added"]
                                   for t, v in versions.items()),
            "data_files_added": len(set(after) - set(before))}


def forget_cases(args, built: dict[str, Path], subjects: dict[str, str], work: Path) -> dict:
    # warm-up, not counted: DuckDB's and delta-rs's first calls in this process
    first, customer = next(iter(built.values())), next(iter(subjects.values()))
    for name in ("forget", "delete"):
        shutil.rmtree(work / "run", ignore_errors=True)
        shutil.copytree(first, work / "run" / "lake")
        if name == "forget":
            run_forget(work / "run" / "lake", work / "run" / "wh.duckdb", customer, True)
        else:
            run_delete(work / "run" / "lake", work / "run" / "wh.duckdb", forget_module.records_of(
                Lake(root=str(work / "run" / "lake")), customer))
    out = {}
    for layout, source in built.items():
        for label, customer in subjects.items():
            runs: dict[str, list[dict]] = {"forget": [], "forget_rebuild": [], "delete": []}
            for rnd in range(args.rounds):
                for name in rotated(rnd, list(runs)):
                    lake_root, target = work / "run" / "lake", work / "run" / "wh.duckdb"
                    shutil.rmtree(work / "run", ignore_errors=True)
                    shutil.copytree(source, lake_root)
                    if name == "delete":
                        records = runs["forget"][-1]["records"] if runs["forget"] else \
                            forget_module.records_of(Lake(root=str(lake_root)), customer)
                        runs[name].append(run_delete(lake_root, target, records))
                    else:
                        runs[name].append(run_forget(lake_root, target, customer,
                                                     name == "forget_rebuild"))
                    print(f"  {layout} {label} round {rnd + 1} {name}: "
                          f"{runs[name][-1]['s']:.2f} s", flush=True)
            shutil.rmtree(work / "run", ignore_errors=True)
            f, fr, d = runs["forget"], runs["forget_rebuild"], runs["delete"]
            med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
            split_keys = sorted({k for r in f for k in r["split_s"]})
            out[f"{layout}/{label}"] = {
                "layout": layout, "subject": label, "customer": customer,
                "records": f[0]["records"], "rows_deleted": f[0]["rows_deleted"],
                "files_purged": f[0]["files_purged"], "bytes_purged": f[0]["bytes_purged"],
                "old_files_read": f[0]["old_files_read"],
                "forget_bytes_rewritten": f[0]["bytes_rewritten"],
                "delete_bytes_rewritten": d[0]["bytes_rewritten"],
                "delete_files_rewritten": d[0]["files_rewritten"],
                "delete_rows_deleted": d[0]["rows_deleted"],
                "same_rows_every_run": len({r["rows_deleted"] for r in f + fr + d}) == 1,
                "forget_s": spread([r["s"] for r in f]),
                "forget_rebuild_s": spread([r["s"] for r in fr]),
                "delete_s": spread([r["s"] for r in d]),
                "build_s": spread([r["build_s"] for r in d]),
                "cpu_s": {"forget": med(f, "cpu_s"), "forget_rebuild": med(fr, "cpu_s"),
                          "delete": med(d, "cpu_s"), "build": med(d, "build_cpu_s")},
                "forget_split_s": {k: statistics.median(r["split_s"].get(k, 0.0) for r in f)
                                   for k in split_keys},
                "forget_per_table_s": {t: statistics.median(r["per_table"][t]["s"] for r in f)
                                       for t in f[0]["per_table"]},
                "ratio_forget_over_delete": spread([a["s"] / b["s"]
                                                    for a, b in zip(f, d, strict=True)]),
                "ratio_forget_over_delete_cpu": spread([a["cpu_s"] / b["cpu_s"]
                                                        for a, b in zip(f, d, strict=True)]),
                "ratio_forget_rebuild_over_delete_build": spread(
                    [a["s"] / (b["s"] + b["build_s"]) for a, b in zip(fr, d, strict=True)]),
            }
    return out


def forget_bench(args, rids, customers, triples, items, keys, work: Path) -> dict:
    names = [it["name"] for it in items]
    t = time.perf_counter()
    protected = privacy.protect(identity_module.to_table(items), keys, identity_module.SCHEMA)
    tables = products(rids, customers, names, args.seed, tuple(args.txn_rows))
    generate_s = time.perf_counter() - t
    root = work / "forget-lake"
    print(f"writing the lake: {len(rids):,} records, "
          f"{tables['transactions'][0].num_rows:,} transactions", flush=True)
    built = build_lake(root, rids, customers, protected, tables, args.chunk)
    lake_tables = list(built["write_s"])
    uncompacted = work / "forget-lake-uncompacted"
    layouts = {}
    if not args.skip_uncompacted:
        shutil.copytree(root, uncompacted)
        layouts["uncompacted"] = uncompacted
    t = time.perf_counter()
    compaction = compact_lake(root, lake_tables)
    compact_s = time.perf_counter() - t
    layouts = {"compacted": root, **layouts}
    # the subjects: a one-record customer and a three-record one, in the lake's middle
    middle = len(rids) // 2 + 1
    while any(middle in tr for tr in triples.values()):
        middle += 1
    three = sorted(triples)[len(triples) // 2]
    subjects = {"1 record": customers[middle], "3 records": customers[three]}
    sizes = {}
    for name, path in layouts.items():
        listing = files_under(path)
        lake = Lake(root=str(path))
        sizes[name] = {"bytes_on_disk": sum(data_files(listing).values()),
                       "parquet_files_on_disk": len(data_files(listing)),
                       "live_files": {t: len(lake.files(t)) for t in lake_tables}}
    out = {"generate_s": generate_s, "write_s": built["write_s"], "rows": built["rows"],
           "commits_per_table": -(-len(rids) // args.chunk), "compact_s": compact_s,
           "compaction": compaction, "layouts": sizes, "subjects": subjects,
           "tables_forget_erases": FORGET_TABLES}
    out["cases"] = forget_cases(args, layouts, subjects, work)
    return out


# ---------------------------------------------------------------- report

def versions() -> dict:
    out = {}
    for dist in ("deltalake", "duckdb", "pyarrow", "cryptography", "numpy"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def markdown(r: dict) -> str:
    m = r["masking"]
    lines = [f"Masking, {m['rows']:,} identity rows (medians; ratios: median of rounds' "
             "ratios)", "",
             "| | to_table µs a row (CPU) | + protect µs a row (CPU) | ratio wall | ratio CPU |",
             "|---|---:|---:|---:|---:|"]
    labels = {"one_call": f"{m['rows']:,} items, one call", "one_call_gc_off": "same, gc off",
              "per_record": f"{m['per_record_items']:,} items, a call each"}
    modes = {"one_call": ("to_table", "to_table_protect"),
             "one_call_gc_off": ("to_table_gc_off", "to_table_protect_gc_off"),
             "per_record": ("per_record_to_table", "per_record_to_table_protect")}
    for p, (a, b) in modes.items():
        us, rat = m["ingest_us_per_row"], m["ratio_protect_over_to_table"][p]
        lines.append(f"| {labels[p]} | {us['wall'][a]:.1f} ({us['cpu'][a]:.1f}) | "
                     f"{us['wall'][b]:.1f} ({us['cpu'][b]:.1f}) | {rat['wall']['median']:.2f} | "
                     f"{rat['cpu']['median']:.2f} |")
    lines += ["", "protect's steps, µs a row: " + ", ".join(
                  f"{k} {v:.1f}" for k, v in m["protect_steps_us_per_row"].items()), "",
              "| warehouse | raw (peer) s | protected s | protected / raw, wall | CPU |",
              "|---|---:|---:|---:|---:|"]
    w = m["warehouse_s"]
    for what in ("build", "count", "lookup"):
        rat = m["warehouse_ratio_protected_over_raw"][what]
        lines.append(f"| {what} | {w[f'{what}_raw']['wall']['median']:.4f} | "
                     f"{w[f'{what}_protected']['wall']['median']:.4f} | "
                     f"{rat['wall']['median']:.2f} | {rat['cpu']['median']:.2f} |")
    lines += [f"| build as the asset does (every snapshot listed) | | "
              f"{w['build_production']['wall']['median']:.4f} | | |", "",
              f"lake write ({r['chunk']} records a commit): raw "
              f"{m['lake_write_s']['raw']['median']:.2f} s, protected "
              f"{m['lake_write_s']['protected']['median']:.2f} s (ratio "
              f"{m['lake_write_ratio_protected_over_raw']['median']:.2f}); compacted bytes raw "
              f"{m['table_bytes']['raw']:,}, protected {m['table_bytes']['protected']:,}", ""]
    f = r["forget"]
    lines += [f"Forget, {r['records']:,} records ({f['rows']['transactions']:,} transactions)", "",
              "| lake | customer | rows | forget s | forget + rebuild s | plain delete s | "
              "build s | forget / delete (CPU) | (forget + rebuild) / (delete + build) | "
              "files purged | bytes rewritten (forget / delete) |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in f["cases"].values():
        lines.append(
            f"| {c['layout']} | {c['subject']} | {c['rows_deleted']} | "
            f"{c['forget_s']['median']:.2f} | {c['forget_rebuild_s']['median']:.2f} | "
            f"{c['delete_s']['median']:.2f} | {c['build_s']['median']:.2f} | "
            f"{c['ratio_forget_over_delete']['median']:.2f} "
            f"({c['ratio_forget_over_delete_cpu']['median']:.2f}) | "
            f"{c['ratio_forget_rebuild_over_delete_build']['median']:.2f} | "
            f"{c['files_purged']} | {c['forget_bytes_rewritten']:,} / "
            f"{c['delete_bytes_rewritten']:,} |")
    lines += ["", "forget's time (median s): "]
    for key, c in f["cases"].items():
        lines.append(f"- {key}: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                             c["forget_split_s"].items())
                     + f"; old files read {c['old_files_read']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds (the in-memory masking at least 7, the identity lake writes "
                         "at most 3)")
    ap.add_argument("--chunk", type=int, default=1_000, help="records a commit")
    ap.add_argument("--txn-rows", type=int, nargs=2, default=[20, 40], metavar=("MIN", "MAX"),
                    help="transactions a record")
    ap.add_argument("--per-record-items", type=int, default=2_000,
                    help="items timed one call each, as the asset calls to_table and protect")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--skip-uncompacted", action="store_true")
    ap.add_argument("--work", type=Path, help="work folder (default: a new one in /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    work = args.work or Path(tempfile.mkdtemp(prefix="ledgerlake-bench-privacy-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {
        "what": "masking on ingest and on the warehouse, and forget on a lake (bench/privacy.py)",
        "measured_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": ".venv/bin/python bench/privacy.py" + "".join(f" {a}" for a in sys.argv[1:]),
        "machine": machine(), "versions": versions(), "note": args.note,
        "load_avg_1m_start": round(load_start, 2), "seed": args.seed, "records": args.records,
        "rounds": args.rounds, "chunk": args.chunk, "txn_rows": args.txn_rows,
    }
    try:
        t = time.perf_counter()
        rids, customers, triples = people(args.records, args.seed)
        items = identity_items(rids, customers, args.seed)
        keys = keys_for(args.seed)
        results["identity_items_s"] = time.perf_counter() - t
        print(f"masking: {len(items):,} identity items", flush=True)
        results["masking"] = masking(args, rids, customers, items, keys, work)
        print("forget", flush=True)
        results["forget"] = forget_bench(args, rids, customers, triples, items, keys, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    results["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    results["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print()
    print(markdown(results))
    print(f"\nwall {results['wall_s']:.0f} s, load {load_start:.2f} -> "
          f"{results['load_avg_1m_end']}; written {args.out}")


if __name__ == "__main__":
    main()
