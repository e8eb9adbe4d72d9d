"""Which unit should Dagster orchestrate: a record, a bucket of records, or a run's batch?

Three candidates do the daily refresh of N records (balances and transactions, one check on
transactions) with asset bodies that fetch nothing and tell Dagster what the real ones tell it:
  a  a dynamic partition per record (today): runs over ranges of 100; per record and asset a
     materialization (~1.5 KB of metadata, a markdown preview), a check evaluation;
  b  --buckets static partitions (crc32 of the record id): runs over ranges of buckets of
     ~1,000 records; per bucket touched a materialization (a summary), a check evaluation;
  c  unpartitioned: runs over 1,000 record ids in run config (the `batch` resource); per run
     and asset a materialization (a summary under 1 KB), a check evaluation.
The records (id, status, bucket) are a SQLite table, the inbox's stand-in. Each point runs in
its own process on a fresh instance (SQLite, or a private Postgres through dagster-postgres):
the schedule's evaluation; the storage a refresh adds (--sample-runs runs executed in process,
extrapolated per run); the asset pages' GraphQL (the UI's documents, a real webserver); runs
created and queued (launch); sensor ticks of 500 new records. docs/decisions/ reads them.

    .venv/bin/python bench/unit_candidates.py --instance sqlite --sizes 1000,10000
"""

import argparse
import glob
import json
import math
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import psycopg2
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluation
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.run_coordinator import SubmitRunContext
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._serdes import serialize_value
from psycopg2.extras import execute_values

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.postgres import PostgresServer, find_bin, free_port, pg_env  # noqa: E402

ASSETS = {"balances": [], "transactions": ["running_balance_reconciles"]}  # today's refresh_job
START, END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
PER_RUN = {"a": 100, "b": 1000, "c": 1000}  # records a refresh run (a: today's RECORDS_PER_RUN)
NEW_PER_RUN, CALLBACKS = 20, 500  # the sensor's runs of new records; callbacks a tick
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
records = dg.DynamicPartitionsDefinition(name="records")
PREVIEW = "\n".join(  # assets/metadata.py's preview: five rows of the record's table
    ["| transaction_id | account_id | cleared_date | amount | balance | narration | type | category |",
     "|---|---|---|---|---|---|---|---|"]
    + [f"| 6f1e2d3c4b5a69788796a5b{i} | 0a1b2c3d4e5f60718293a4b5 | 2026-11-2{i} | -1250.00 | "
       f"48231.55 | POS PURCHASE SHOPRITE LEKKI LAGOS REF 88213{i} | debit | groceries |" for i in range(5)])


def record_id(i: int) -> str:  # 28 hex characters, in no order
    return zlib.crc32(b"r%d" % i).to_bytes(4, "big").hex() + f"{i:020x}"


def bucket_of(rid: str, buckets: int) -> int:
    return zlib.crc32(rid.encode()) % buckets


def bucket_key(b: int) -> str:
    return f"b{b:05d}"


def records_db() -> sqlite3.Connection:
    return sqlite3.connect(os.environ["BENCH_RECORDS_DB"])


class Batch(dg.ConfigurableResource):
    records: list[str] = []


def summary(name: str, n: int) -> dict:
    return {"records": n, "published": n - 3, "held_back": 1, "failed": 2,
            "failing_ids": dg.MetadataValue.json([record_id(i) for i in range(3)]),
            "rows": 1017 * n, "lake_table": dg.MetadataValue.path(f"s3://ledgerlake/lake/{name}"),
            "lake_version": 4242}


# --- the candidates' Definitions (the webserver loads this file with BENCH_CANDIDATE set) ---
def build_defs(candidate: str, buckets: int) -> dg.Definitions:
    pdef = {"a": records, "c": None,
            "b": dg.StaticPartitionsDefinition([bucket_key(b) for b in range(buckets)])}[candidate]

    def product(name: str, checks: list[str]):
        @dg.multi_asset(name=name, can_subset=True, partitions_def=pdef,
                        specs=[dg.AssetSpec(name, partitions_def=pdef, skippable=True)],
                        check_specs=[dg.AssetCheckSpec(c, asset=name, partitions_def=pdef)
                                     for c in checks])
        def body(context: dg.AssetExecutionContext, batch: Batch):
            if candidate == "a":  # as assets/publish.py's announce(): each record on its own
                told = {k: (1, {"dagster/row_count": 1017, "preview": dg.MetadataValue.md(PREVIEW),
                                "lake_table": dg.MetadataValue.path(f"s3://ledgerlake/lake/{name}"),
                                "lake_version": 4242, "pull": "window (2026-11-17..2026-11-24)",
                                "fetched_rows": 31}) for k in context.partition_keys}
            elif candidate == "b" and not batch.records:  # the buckets' records, from the inbox
                span = (int(context.partition_key_range.start[1:]), int(context.partition_key_range.end[1:]))
                with records_db() as db:
                    told = {bucket_key(b): (n, summary(name, n)) for b, n in db.execute(
                        "select bucket, count(*) from records where bucket between ? and ?"
                        " group by bucket", span)}
            else:  # c's batch, or b's new records (their ids in config)
                ids = batch.records
                keys = sorted({bucket_key(bucket_of(r, buckets)) for r in ids}) if pdef else [None]
                told = {k: (len(ids), summary(name, len(ids))) for k in keys}
            for key, (n, meta) in told.items():
                context.log_event(dg.AssetMaterialization(asset_key=name, partition=key, metadata=meta))
                for c in checks:
                    context.log_event(AssetCheckEvaluation(
                        asset_key=dg.AssetKey(name), check_name=c, passed=True, partition=key,
                        metadata={"problems": dg.MetadataValue.json([]), "problem_count": 0,
                                  "records_checked": n, "published": True}))
            context.log.info("%d partitions, %d records", len(told), sum(n for n, _ in told.values()))
            yield from ()
        return body

    job = dg.define_asset_job("refresh_job", selection=list(ASSETS))

    @dg.schedule(job=job, cron_schedule="0 2 * * *", name="daily_refresh")
    def daily_refresh(context: dg.ScheduleEvaluationContext):
        return refresh_requests(candidate, buckets, context.instance)

    @dg.sensor(job=job, name="inbox_sensor")
    def inbox_sensor(context: dg.SensorEvaluationContext):
        return tick(candidate, buckets, context)

    return dg.Definitions(assets=[product(n, c) for n, c in ASSETS.items()], jobs=[job],
                          schedules=[daily_refresh], sensors=[inbox_sensor],
                          resources={"batch": Batch()}, executor=dg.in_process_executor)


def ranged(keys: list[str], size: int, prefix: str) -> list[dg.RunRequest]:
    return [dg.RunRequest(run_key=f"{prefix}-{keys[i]}", tags={
        START: keys[i], END: keys[min(i + size, len(keys)) - 1]}) for i in range(0, len(keys), size)]


def in_config(ids: list[str], key: str, **tags) -> dg.RunRequest:
    return dg.RunRequest(run_key=key, tags={"ledgerlake/records": str(len(ids)), **tags},
                         run_config={"resources": {"batch": {"config": {"records": ids}}}})


def refresh_requests(candidate: str, buckets: int, instance) -> list[dg.RunRequest]:
    """The schedule's body. a: ranges of every partition key; b: ranges of buckets holding
    ~1,000 records; c: pages of 1,000 connected ids, keyset paging of the records table."""
    if candidate == "a":
        return ranged(instance.get_dynamic_partitions(records.name), PER_RUN["a"], "refresh")
    with records_db() as db:
        if candidate == "b":
            n = db.execute("select count(*) from records where status = 'connected'").fetchone()[0]
            group = max(1, min(buckets, round(PER_RUN["b"] * buckets / max(n, 1))))
            return ranged([bucket_key(b) for b in range(buckets)], group, "refresh")
        requests, last = [], ""
        while ids := [r for (r,) in db.execute("select id from records where status = 'connected'"
                                               " and id > ? order by id limit ?", (last, PER_RUN["c"]))]:
            requests.append(in_config(ids, f"refresh-{ids[0]}"))
            last = ids[-1]
        return requests


def tick(candidate: str, buckets: int, context: dg.SensorEvaluationContext):
    """The sensor's body for the callbacks after its cursor. a: every partition key read, the
    new ones added, runs over ranges of them; b: runs over the buckets the new records fall in,
    their ids in config; c: runs over their ids."""
    with records_db() as db:
        rows = db.execute("select id, record from callbacks where id > ? order by id limit ?",
                          (int(context.cursor or 0), CALLBACKS)).fetchall()
    if not rows:
        return dg.SkipReason("no callbacks")
    new = list(dict.fromkeys(r for _, r in rows))
    if candidate == "b":
        new.sort(key=lambda r: bucket_of(r, buckets))
    chunks = [new[i:i + NEW_PER_RUN] for i in range(0, len(new), NEW_PER_RUN)]
    if candidate == "a":
        known = set(context.instance.get_dynamic_partitions(records.name))
        return dg.SensorResult(
            run_requests=[dg.RunRequest(run_key=f"inbox-{c[0]}", tags={START: c[0], END: c[-1]})
                          for c in chunks], cursor=str(rows[-1][0]),
            dynamic_partitions_requests=[records.build_add_request([r for r in new if r not in known])])
    span = {"b": lambda c: {START: bucket_key(bucket_of(c[0], buckets)),
                            END: bucket_key(bucket_of(c[-1], buckets))}, "c": lambda c: {}}[candidate]
    return dg.SensorResult(run_requests=[in_config(c, f"inbox-{c[0]}", **span(c)) for c in chunks],
                           cursor=str(rows[-1][0]))


if os.environ.get("BENCH_CANDIDATE"):
    defs = build_defs(os.environ["BENCH_CANDIDATE"], int(os.environ.get("BENCH_BUCKETS", "1024")))


# --- an instance and what it stores ---
def instance_yaml(postgres: bool) -> str:  # JSON is YAML; the storage is deploy/dagster.yaml's
    env = {k: {"env": f"DAGSTER_PG_{v}"} for k, v in (("hostname", "HOST"), ("port", "PORT"),
           ("username", "USER"), ("password", "PASSWORD"), ("db_name", "DB"))}
    return json.dumps({"telemetry": {"enabled": False}, "run_coordinator": {
        "module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}, **({"storage": {
            "postgres": {"postgres_db": {**env, "scheme": "postgresql+psycopg2"}}}} if postgres else {})})


def storage(home: Path, pg_url: str | None) -> dict:
    """Rows per table; bytes per table (Postgres) or database file (SQLite: runs.db, index.db,
    the runs' own shards); the compute logs' files beside them."""
    rows, size = {}, {}
    if pg_url:
        with psycopg2.connect(pg_url) as con, con.cursor() as cur:
            cur.execute("select tablename from pg_tables where schemaname = 'public'")
            for (t,) in cur.fetchall():
                cur.execute(f'select count(*), pg_total_relation_size(%s) from "{t}"', (t,))
                rows[t], size[t] = cur.fetchone()
    dbs = glob.glob(f"{home}/**/*.db", recursive=True)
    for path in [] if pg_url else dbs:
        group = "run shards" if re.fullmatch(r"[0-9a-f-]{36}\.db", Path(path).name) else Path(path).name
        size[group] = size.get(group, 0) + sum(os.path.getsize(p) for p in (path, path + "-wal")
                                               if os.path.exists(p))
        with sqlite3.connect(path) as con:
            for (t,) in con.execute("select name from sqlite_master where type = 'table'"):
                rows[f"{group}/{t}"] = (rows.get(f"{group}/{t}", 0)
                                        + con.execute(f'select count(*) from "{t}"').fetchone()[0])
    logs = [p for p in glob.glob(f"{home}/storage/**/*", recursive=True) if os.path.isfile(p)]
    size["compute logs"] = sum(os.path.getsize(p) for p in logs)
    return {"rows": rows, "bytes": size, "files": len(logs) + len(dbs)}


def grown(before: dict, after: dict, per: float) -> dict:
    rows = {t: v - before["rows"].get(t, 0) for t, v in after["rows"].items()}
    size = {t: v - before["bytes"].get(t, 0) for t, v in after["bytes"].items()}
    return {"rows": round(sum(rows.values()) / per, 2), "bytes": round(sum(size.values()) / per),
            "files": round((after["files"] - before["files"]) / per, 3),
            "rows_by_table": {t: v for t, v in rows.items() if v},
            "bytes_by_table": {t: v for t, v in size.items() if v}}


def timed(fn, *args, **kw):
    t = time.perf_counter()
    try:
        return fn(*args, **kw), round(time.perf_counter() - t, 3), None
    except Exception as exc:  # kept with the point: what a candidate cannot do at this N
        return None, round(time.perf_counter() - t, 3), f"{type(exc).__name__}: {str(exc)[:300]}"


# --- the orchestrator's work ---
def seed(instance, candidate: str, n: int, buckets: int) -> dict:
    with records_db() as db:
        db.execute("create table records (id text primary key, status text, bucket int)")
        db.execute("create index records_bucket on records (bucket)")
        db.execute("create table callbacks (id integer primary key, record text)")
        db.executemany("insert into records values (?, 'connected', ?)",
                       ((r, bucket_of(r, buckets)) for r in map(record_id, range(n))))
    t = time.perf_counter()
    for i in range(0, n if candidate == "a" else 0, 10_000):
        instance.add_dynamic_partitions(records.name, [record_id(j) for j in range(i, min(i + 10_000, n))])
    return {"add_dynamic_partitions_s": round(time.perf_counter() - t, 2)} if candidate == "a" else {}


def evaluate_schedule(defs: dg.Definitions, instance) -> tuple[dict, list]:
    ctx = dg.build_schedule_context(instance=instance, scheduled_execution_time=datetime.now(UTC))
    data, s, err = timed(defs.resolve_schedule_def("daily_refresh").evaluate_tick, ctx)
    if err:
        return {"s": s, "error": err}, []
    blob, ser_s, _ = timed(serialize_value, data)  # what the code server sends the daemon
    return {"s": s, "serialize_s": ser_s, "runs": len(data.run_requests), "bytes": len(blob)}, \
        list(data.run_requests)


def refresh(instance, job, requests: list, sizes: list[int], sample: int, home, pg_url) -> tuple:
    """`sample` of the refresh's runs executed in process, after one run executed unmeasured
    (yesterday's: what an instance stores once, the job's snapshot, is not a day's)."""
    job.execute_in_process(instance=instance, tags=requests[0].tags,
                           run_config={**(requests[0].run_config or {}), **QUIET})
    before, t, run_ids = storage(home, pg_url), time.perf_counter(), []
    for rr in requests[:sample]:
        run_ids.append(job.execute_in_process(instance=instance, tags=rr.tags,
                                              run_config={**(rr.run_config or {}), **QUIET}).run_id)
    s, done, runs = time.perf_counter() - t, sum(sizes[:sample]), len(run_ids)
    g = grown(before, storage(home, pg_url), done)
    return {"runs_executed": runs, "records_refreshed": done, "s_per_run": round(s / runs, 3),
            "rows_per_record": g["rows"], "bytes_per_record": g["bytes"], "files_per_record": g["files"],
            "rows_per_run": round(g["rows"] * done / runs, 1), "bytes_per_run": round(g["bytes"] * done / runs),
            "runs_per_day": len(requests), "rows_per_day": round(g["rows"] * done / runs * len(requests)),
            "bytes_per_day": round(g["bytes"] * done / runs * len(requests)),
            "extrapolated": len(requests) > runs, "rows_by_table": g["rows_by_table"],
            "bytes_by_table": g["bytes_by_table"]}, run_ids


def fill(home: Path, pg_url, template_run: str, rest: list) -> dict:
    """The transactions asset's planned and materialization rows of the runs not executed,
    copied from an executed run's own rows (partition swapped): what the asset pages read after
    a whole refresh, without executing every run."""
    cols = "run_id, event, dagster_event_type, timestamp, step_key, asset_key, partition"
    con = psycopg2.connect(pg_url) if pg_url else sqlite3.connect(home / "history/runs/index.db")
    cur, mark, t, copies, batch = con.cursor(), "%s" if pg_url else "?", time.perf_counter(), 0, []
    cur.execute(f"select {cols} from event_logs where run_id = {mark} and asset_key like {mark} and "
                f"dagster_event_type in ({mark}, {mark}) order by id",
                (template_run, "%transactions%", "ASSET_MATERIALIZATION_PLANNED", "ASSET_MATERIALIZATION"))
    first = {}
    for row in cur.fetchall():
        first.setdefault(row[2], row)  # a planned and a materialization row

    def insert():
        if pg_url:
            execute_values(cur, f"insert into event_logs ({cols}) values %s", batch)
        else:
            cur.executemany(f"insert into event_logs ({cols}) values (?, ?, ?, ?, ?, ?, ?)", batch)
        return len(batch)
    for key in (k for keys in rest for k in keys):
        for run_id, event, kind, ts, step, asset, part in first.values():
            batch.append((run_id, event.replace(f'"{part}"', f'"{key}"') if part else event,
                          kind, ts, step, asset, key if part else None))
        if len(batch) >= 20_000:
            copies, batch = copies + insert(), []
    copies += insert() if batch else 0
    con.commit()
    con.close()
    return {"rows_copied": copies, "s": round(time.perf_counter() - t, 1)}


def launch(instance, job, requests: list, home: Path, pg_url) -> dict:
    """Runs created and queued as the daemon does for a tick's requests, not executed."""
    target = LoadableTargetOrigin(executable_path=sys.executable, python_file=__file__, attribute="defs")
    origin = RemoteRepositoryOrigin(ManagedGrpcPythonEnvCodeLocationOrigin(target, "unit_candidates"),
                                    "__repository__").get_job_origin(job.name)
    code = ReconstructableRepository.for_file(__file__, "defs").get_reconstructable_job(job.name)
    before, t = storage(home, pg_url), time.perf_counter()
    for rr in requests:
        run = instance.create_run_for_job(
            job, run_config=rr.run_config or None, remote_job_origin=origin,
            job_code_origin=code.get_python_origin(), tags={**rr.tags, "dagster/schedule_name": "daily_refresh"})
        instance.run_coordinator.submit_run(SubmitRunContext(run, workspace=None))
    s = time.perf_counter() - t
    g = grown(before, storage(home, pg_url), len(requests))
    return {"runs": len(requests), "s_per_run": round(s / len(requests), 3), "rows_per_run": g["rows"],
            "bytes_per_run": g["bytes"], "rows_by_table": g["rows_by_table"]}


def sensor_ticks(defs, instance, n: int, buckets: int, ticks: int = 3) -> dict:
    sensor, cursor, times, adds = defs.resolve_sensor_def("inbox_sensor"), "0", [], []
    for t in range(ticks):
        new = [record_id(i) for i in range(n + t * CALLBACKS, n + (t + 1) * CALLBACKS)]
        with records_db() as db:  # the receiver's part: the records and their callbacks
            db.executemany("insert into records values (?, 'connected', ?)", ((r, bucket_of(r, buckets)) for r in new))
            db.executemany("insert into callbacks (record) values (?)", ((r,) for r in new))
        ctx = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
        data, s, err = timed(sensor.evaluate_tick, ctx)
        if err:
            return {"error": err, "s": s}
        cursor, add_s = data.cursor, 0.0
        for req in data.dynamic_partitions_requests or []:  # as the daemon applies them
            _, add_s, _ = timed(instance.add_dynamic_partitions, req.partitions_def_name, list(req.partition_keys))
        times.append(s + add_s)
        adds.append(add_s)
    return {"tick_s": round(statistics.median(times), 3), "of_which_add_partitions_s": round(statistics.median(adds), 3),
            "runs_per_tick": len(data.run_requests), "bytes": len(serialize_value(data))}


# --- the asset pages' GraphQL: the UI's own documents, sent to a real webserver ---
OVERVIEW = ["AssetViewDefinitionQuery", "AssetGraphLiveQuery", "AssetStaleStatusDataQuery",
            "AssetHealthQuery", "AssetOverviewMetadataEventsQuery", "RecentAssetEventsQuery"]
PARTITIONS = ["PartitionHealthQuery", "AssetPartitionDetailQuery", "AssetPartitionStaleQuery"]
UI_TIMEOUT = 900  # seconds a query may take before its page is given up
PAGE_CAP = 20  # the overview's timeline (RecentUpdatesTimeline) asks 100 events at a time, 7 days


def ui_documents() -> dict[str, str]:
    """Each operation with the fragments it spreads, parsed out of the webserver's JS bundle."""
    import dagster_webserver
    from graphql import parse, print_ast
    found = {}
    literal = re.compile(r'"((?:[^"\\]|\\.)*(?:query|fragment) [A-Z](?:[^"\\]|\\.)*)"')
    for path in (Path(dagster_webserver.__file__).parent / "webapp/build/_next/static").rglob("*.js"):
        for m in literal.finditer(path.read_text(errors="replace")):
            try:
                for d in parse(json.loads(f'"{m.group(1)}"')).definitions:
                    found.setdefault(d.name.value, d)
            except Exception:
                continue  # a string that only looks like a document

    def document(op: str) -> str:
        need, names = [op], []
        while need:
            if (name := need.pop()) not in names:
                names.append(name)
                need += [f for f in re.findall(r"\.\.\.\s*(\w+)", print_ast(found[name])) if f != "on"]
        return "\n\n".join(print_ast(found[n]) for n in names)
    return {op: document(op) for op in OVERVIEW + PARTITIONS}


def graphql(port: int, doc: str, op: str | None, variables: dict) -> tuple[dict, int]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", json.dumps(
        {"query": doc, "operationName": op, "variables": variables}).encode(),
        {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=UI_TIMEOUT) as resp:
        raw = resp.read()
    return json.loads(raw), len(raw)


def ui_pass(port: int, docs: dict, ops: list[str], partition: str | None) -> dict:
    out, key = {}, {"path": ["transactions"]}
    for op in ops:
        variables = {"assetKey": key, "assetKeys": [key], "partitionKey": partition, "limit": 100,
                     "after": str(int((time.time() - 7 * 86400) * 1000)),
                     "eventTypeSelectors": ["MATERIALIZATION", "FAILED_TO_MATERIALIZE", "OBSERVATION"]}
        t, size, pages, errors = time.perf_counter(), 0, 0, None
        while True:
            try:
                data, n = graphql(port, docs[op], op, variables)
            except OSError as exc:  # no answer within the timeout: the page is given up
                out[op] = {"s": round(time.perf_counter() - t, 1), "error": f"{type(exc).__name__}: {exc}"}
                return out
            size, pages, errors = size + n, pages + 1, errors or data.get("errors")
            history = ((data.get("data") or {}).get("assetOrError") or {}).get("assetEventHistory")
            if op != "RecentAssetEventsQuery" or len((history or {}).get("results", [])) < 100 or pages >= PAGE_CAP:
                break
            variables["cursor"] = history["cursor"]
        out[op] = {"s": round(time.perf_counter() - t, 3), "bytes": size, "pages": pages,
                   **({"errors": str(errors)[:300]} if errors else {})}
    return out


def ui(home: Path, candidate: str, buckets: int, partition: str | None, mats: int) -> dict:
    """Start the webserver; each page's queries once cold (the first after the start), then
    twice warm (the faster kept)."""
    port, docs = free_port(), ui_documents()
    env = {**os.environ, "DAGSTER_HOME": str(home), "BENCH_CANDIDATE": candidate, "BENCH_BUCKETS": str(buckets)}
    with open(home / "webserver.log", "w") as log:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster-webserver"), "-h", "127.0.0.1",
                                 "-p", str(port), "-f", __file__], env=env, stdout=log, stderr=log)
    t, probe = time.perf_counter(), '{assetOrError(assetKey: {path: ["transactions"]}) {... on Asset {definition {id}}}}'
    try:
        while True:  # ready once the code location is loaded
            try:
                if (graphql(port, probe, None, {})[0]["data"]["assetOrError"] or {}).get("definition"):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.perf_counter() - t > 300:
                raise RuntimeError((home / "webserver.log").read_text()[-500:])
            time.sleep(0.5)
        out = {"webserver_ready_s": round(time.perf_counter() - t, 1)}
        for page, ops in (("overview", OVERVIEW), ("partitions", PARTITIONS if partition else [])):
            if ops:
                cold = ui_pass(port, docs, ops, partition)
                if any("error" in q for q in cold.values()):
                    out[page] = {"cold_s": round(sum(q["s"] for q in cold.values()), 1), "cold": cold}
                    break
                warm = [ui_pass(port, docs, ops, partition) for _ in range(2)]
                out[page] = {"cold_s": round(sum(q["s"] for q in cold.values()), 3),
                             "warm_s": round(min(sum(q["s"] for q in w.values()) for w in warm), 3),
                             "bytes": sum(q["bytes"] for q in warm[-1].values()), "cold": cold, "warm": warm[-1]}
        timeline = out["overview"].get("warm", {}).get("RecentAssetEventsQuery", {"pages": 0})
        if timeline["pages"] >= PAGE_CAP:  # the pages beyond the cap, at the cap's pace
            out["overview"]["timeline_pages_needed"] = math.ceil((mats + 1) / 100)
            out["overview"]["timeline_warm_s_extrapolated"] = round(timeline["s"] * (mats + 1) / 100 / PAGE_CAP, 1)
        return out
    finally:
        proc.terminate()  # a webserver busy with a query it will not finish ignores it
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- one point, in a child process (Dagster keeps process-wide state), and the driver ---
def point(kind: str, candidate: str, n: int, args, pg_url: str | None) -> dict:
    home = Path(tempfile.mkdtemp(prefix="unit-bench-"))
    (home / "dagster.yaml").write_text(instance_yaml(bool(pg_url)))
    os.environ.update({"DAGSTER_HOME": str(home), "BENCH_RECORDS_DB": str(home / "records.db"),
                       **(pg_env(pg_url) if pg_url else {})})
    instance, defs = dg.DagsterInstance.from_config(str(home)), build_defs(candidate, args.buckets)
    job, out, t = defs.resolve_job_def("refresh_job"), {"started": datetime.now(UTC).isoformat(timespec="seconds")}, time.perf_counter()
    say = lambda what: print(time.strftime("%H:%M:%S"), kind, candidate, n, what, flush=True)  # noqa: E731
    try:
        out["seed"] = seed(instance, candidate, n, args.buckets)
        out["schedule"], requests = evaluate_schedule(defs, instance)
        say(f"schedule {out['schedule']}")
        if not requests:
            return out
        with records_db() as db:
            per_bucket = dict(db.execute("select bucket, count(*) from records group by bucket").fetchall())
        sizes = {"a": lambda rr: None, "c": lambda rr: int(rr.tags["ledgerlake/records"]),
                 "b": lambda rr: sum(per_bucket.get(b, 0) for b in range(int(rr.tags[START][1:]), int(rr.tags[END][1:]) + 1))}
        sizes = [min(100, n - i * 100) for i in range(len(requests))] if candidate == "a" \
            else [sizes[candidate](rr) for rr in requests]
        out["refresh"], run_ids = refresh(instance, job, requests, sizes, args.sample_runs, home, pg_url)
        say(f"refresh {out['refresh']['rows_per_record']} rows, {out['refresh']['bytes_per_record']} B a record")
        keys = {"a": lambda: instance.get_dynamic_partitions(records.name), "c": lambda: [None],
                "b": lambda: [bucket_key(b) for b in range(args.buckets)]}[candidate]()
        at = {k: i for i, k in enumerate(keys)}
        rest = [keys[at[rr.tags[START]]: at[rr.tags[END]] + 1] if START in rr.tags else [None]
                for rr in requests[args.sample_runs:]]
        if rest and args.fill:
            out["fill"] = fill(home, pg_url, run_ids[-1], rest)
        if args.ui:
            mats = {"a": n, "b": args.buckets, "c": len(requests)}[candidate]
            page, s, err = timed(ui, home, candidate, args.buckets, keys[-1], mats)
            out["ui"] = page or {"error": err, "s": s}
            say(f"ui {s} s")
        out["launch"] = launch(instance, job, requests[:args.launch_runs], home, pg_url)
        out["sensor"] = sensor_ticks(defs, instance, n, args.buckets)
        out["total_s"] = round(time.perf_counter() - t, 1)
        return out
    finally:
        instance.dispose()
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--instance", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--sizes", default="1000,10000,100000,1000000")
    p.add_argument("--candidates", default="a,b,c")
    p.add_argument("--buckets", type=int, default=1024, help="b's static partitions")
    p.add_argument("--sample-runs", type=int, default=5, help="refresh runs executed a point")
    p.add_argument("--launch-runs", type=int, default=3, help="runs created and queued a point")
    p.add_argument("--no-fill", dest="fill", action="store_false", help="no copied rows for the pages")
    p.add_argument("--no-ui", dest="ui", action="store_false", help="no webserver")
    p.add_argument("--out", type=Path, default=ROOT / "bench/results/unit_candidates.json")
    p.add_argument("--point", nargs=3, help=argparse.SUPPRESS)  # candidate, N, result file
    args = p.parse_args()
    if args.point:
        res = point(args.instance, args.point[0], int(args.point[1]), args, os.environ.get("BENCH_PG_URL") or None)
        Path(args.point[2]).write_text(json.dumps(res))
        return
    pg = PostgresServer(find_bin()).start() if args.instance == "postgres" else None
    try:
        for n in map(int, args.sizes.split(",")):
            for candidate in args.candidates.split(","):
                into, load = Path(tempfile.mkdtemp()) / "point.json", os.getloadavg()[0]
                url = pg.create_database("unit") if pg else ""
                done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--point", candidate, str(n), str(into)],
                                      env={**os.environ, "BENCH_PG_URL": url})
                if pg:  # the next point's disk
                    con = psycopg2.connect(pg.url())
                    con.autocommit = True
                    con.cursor().execute(f'drop database "{url.rsplit("/", 1)[1]}" with (force)')
                    con.close()
                res = json.loads(into.read_text()) if into.exists() else {"error": f"the point's process exited {done.returncode}"}
                shutil.rmtree(into.parent)
                res["load_before"], res["load_after"] = round(load, 2), round(os.getloadavg()[0], 2)
                results = json.loads(args.out.read_text()) if args.out.exists() else {}
                results.setdefault("points", {}).setdefault(args.instance, {}).setdefault(candidate, {})[str(n)] = res
                results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "dagster": dg.__version__}
                results.setdefault("settings", {})[args.instance] = {
                    "buckets": args.buckets, "sample_runs": args.sample_runs, "launch_runs": args.launch_runs,
                    "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                             capture_output=True, text=True).stdout.strip()}
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=1) + "\n")
    finally:
        if pg:
            pg.remove()


if __name__ == "__main__":
    main()
