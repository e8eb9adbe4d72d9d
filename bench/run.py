"""ledgerlake against dlt and the raw-fetch floor, side by side on one sandbox, in one run.

Contenders, each in its own child process, fetch the same records' `/transactions/get` pages:
floor, a bare keep-alive httpx loop that throws the rows away; ledgerlake, the `transactions`
asset materialized in process, batched as the daily refresh batches, validated and audited
into the lake; dlt's `rest_api` source into Parquet, under `uv run --with dlt[parquet]`. Then
the callback-to-Parquet latency with sandbox and receiver as real processes.

    .venv/bin/python bench/run.py                      # what `make bench` runs
    .venv/bin/python bench/run.py --records 3 --rows-per-record 1000 --big 0 --runs 1 \\
        --skip-dlt --latency-samples 2 --out /tmp/x.json   # a smoke run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import harness
from harness import ROOT

DLT_VERSION = "1.31.0"
PAGE = 100
DAYS_PER_MONTH = 30.44


# -- children: one contender each, JSON on the last stdout line ----------------------------------

def child_floor(job: dict) -> dict:
    import httpx
    import orjson

    rows, pages, t0 = 0, 0, time.perf_counter()
    with httpx.Client(base_url=job["url"] + "/sandbox/v2/", timeout=60,
                      limits=httpx.Limits(max_keepalive_connections=1),
                      headers={"Authorization": f"Bearer {job['key']}",
                               "Content-Type": "application/json"}) as http:
        for record in job["records"]:
            page = 1
            while page:
                resp = http.post("transactions/get", content=orjson.dumps(
                    {"record": record, "page": page, "limit": PAGE})).raise_for_status()
                data = orjson.loads(resp.content)["data"]
                rows += len(data["transaction"])
                pages += 1
                page = data["pagination"]["nextPage"]
    return {"rows": rows, "pages": pages, "seconds": time.perf_counter() - t0}


def child_ledgerlake(job: dict) -> dict:
    import dagster as dg
    import pyarrow as pa
    import pyarrow.compute as pc

    from assets.batch import RECORDS_PER_RUN, Batch, batch_config
    from assets.transactions import transactions, warm
    from pipeline.local import QUIET
    from resources.client.resource import ConnectionClient
    from resources.config import Tuning
    from resources.inbox import describe, kept_body, open_inbox
    from resources.inbox.resource import InboxResource
    from resources.lake import Lake

    lake = Lake(root=job["out"])
    records = job["records"]
    inbox = Path(job["out"]).with_name("inbox.sqlite3")
    with open_inbox(inbox, create=True) as db:  # the records are connected, as in production
        db.add_described([(describe(b), kept_body(b)) for b in (
            {"method": "AUTH", "callback_code": "AUTH_SUCCESS", "record": r} for r in records)])
        numbered = db.numbers(records)  # what runs name records by
    numbers = [numbered[r] for r in records]
    defs = dg.Definitions(
        assets=[transactions], jobs=[dg.define_asset_job("bench", selection=["transactions"])],
        resources={"client": ConnectionClient(base_url=job["url"], secret_key=job["key"]),
                   "lake": lake, "inbox": InboxResource(path=str(inbox)), "batch": Batch.configure_at_launch(),
                   "tuning": Tuning.from_env()})  # the settings, as the definitions hand them
    ingest = defs.resolve_job_def("bench")

    @dg.asset
    def warm_up() -> None:
        """Loads Dagster's execution code (this sandbox compiles every import: no .pyc)."""

    # instance and imports are ready before the clock starts
    with dg.DagsterInstance.ephemeral() as instance:
        dg.materialize([warm_up], instance=instance, run_config=QUIET)
        warm()  # pandera builds its validators on first use: import time, not ingest time
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(0, len(records), RECORDS_PER_RUN):  # as the daily refresh batches
            chunk = numbers[i:i + RECORDS_PER_RUN]
            out = ingest.execute_in_process(instance=instance, raise_on_error=False,
                                            run_config={**QUIET, **batch_config(chunk)})
            if not out.success:
                raise SystemExit(f"ledgerlake run for records {i}..{i + len(chunk)} failed")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    landed = lake.read("transactions", schema=pa.schema([("record_id", pa.string())]))
    return {"rows": pc.sum(pc.is_in(landed["record_id"], pa.array(records))).as_py(),
            "runs": -(-len(records) // RECORDS_PER_RUN), "seconds": seconds,
            "cpu_s": round(cpu, 2)}  # every thread of the process: what it asks of the cores


def child_dlt(job: dict) -> dict:
    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")
    import dlt
    import pyarrow.parquet as pq
    from dlt.sources.helpers.rest_client.paginators import PageNumberPaginator
    from dlt.sources.rest_api import rest_api_source

    @dlt.resource(selected=False)
    def records():
        yield [{"id": r} for r in job["records"]]

    source = rest_api_source({
        "client": {
            "base_url": job["url"] + "/sandbox/v2/",
            "auth": {"type": "bearer", "token": job["key"]},
            # the sandbox pages by `page` in the JSON body and says hasNextPage
            "paginator": PageNumberPaginator(base_page=1, page_body_path="page",
                                             total_path=None,
                                             has_more_path="data.pagination.hasNextPage"),
        },
        "resources": [records, {
            "name": "transactions",
            "endpoint": {"path": "transactions/get", "method": "POST",
                         "json": {"record": "{resources.records.id}", "limit": PAGE},
                         "data_selector": "data.transaction"},
        }],
    })
    def pipeline(name: str):
        return dlt.pipeline(
            pipeline_name=name, dataset_name=name, pipelines_dir=job["out"] + "/.dlt",
            destination=dlt.destinations.filesystem(bucket_url=job["out"] + "/lake"),
            progress=None)

    # a one-row load first: dlt's imports are not ingest time (no .pyc here)
    pipeline("warm_up").run([{"a": 1}], table_name="warm_up", loader_file_format="parquet")
    t0 = time.perf_counter()
    pipeline("bench").run(source, loader_file_format="parquet")
    seconds = time.perf_counter() - t0
    files = sorted(Path(job["out"], "lake", "bench", "transactions").glob("*.parquet"))
    return {"rows": sum(pq.read_metadata(f).num_rows for f in files), "files": len(files),
            "seconds": seconds}


CHILDREN = {"floor": child_floor, "ledgerlake": child_ledgerlake, "dlt": child_dlt}


def child_main(name: str, job_path: str) -> None:
    result = CHILDREN[name](json.loads(Path(job_path).read_text()))
    peak = re.search(r"^VmHWM:\s+(\d+)", Path("/proc/self/status").read_text(), re.M)[1]
    result["peak_rss_mb"] = round(int(peak) / 1024, 1)  # the process's peak resident set
    print(json.dumps(result), flush=True)


# -- the parent: sandbox, records, rounds, latency, report ---------------------------------------

@contextmanager
def tree_memory(pid: int, every_s: float = 0.25) -> Iterator[list[int]]:
    """The peak memory of a process and all its descendants, sampled every `every_s` into the
    list yielded (KiB): their summed PSS (shared pages split between the processes sharing
    them), as a contender's own VmHWM would leave out any process it starts (dlt's, uv's)."""
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while True:  # a sample first: a child that ends within one interval still has one
            total = 0
            for member in harness.family(pid):
                with suppress(OSError):  # gone since it was listed
                    rollup = Path(f"/proc/{member}/smaps_rollup").read_text()
                    total += int(re.search(r"^Pss:\s+(\d+)", rollup, re.M)[1])
            peak[0] = max(peak[0], total)
            if stop.wait(every_s):
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


UV_ENV = {"UV_PROJECT_ENVIRONMENT": str(ROOT / ".venv")}  # uv adds dlt to the project's


def with_dlt(*args: str) -> list[str] | None:
    """`python ARGS` under uv, dlt added to the project's environment (None without uv)."""
    local = ROOT / ".venv" / "bin" / "uv"
    uv = shutil.which("uv") or (str(local) if local.exists() else None)
    return uv and [uv, "run", "--frozen", "--no-sync", "--quiet", "--with",
                   f"dlt[parquet]=={DLT_VERSION}", "python", *args]


def run_child(name: str, job: dict, work: Path, timeout_s: float) -> dict:
    """Run one contender in its own process; its JSON result, peak RSS included."""
    out = work / f"out-{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    job_path = work / f"job-{name}.json"
    job_path.write_text(json.dumps({**job, "out": str(out)}))
    me = [str(Path(__file__).resolve()), "--child", name, str(job_path)]
    cmd, env = ((with_dlt(*me), {**os.environ, **UV_ENV}) if name == "dlt"
                else ([sys.executable, *me], None))
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with tree_memory(proc.pid) as peak_kib:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    wall = time.perf_counter() - started
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return {**json.loads(stdout.strip().splitlines()[-1]), "process_wall_s": round(wall, 2),
            "peak_tree_mb": round(peak_kib[0] / 1024, 1)}


def dlt_available() -> bool:
    probe = with_dlt("-c", "import dlt")
    return probe is not None and subprocess.run(
        probe, cwd=ROOT, capture_output=True, timeout=300,
        env={**os.environ, **UV_ENV}).returncode == 0


def make_records(box: harness.Sandbox, count: int, rows_per_record: int,
                 seed: int) -> tuple[list[str], int]:
    """`count` customers of one account whose histories hold about `rows_per_record` lines."""
    today = dt.datetime.now(dt.UTC)
    # the history runs from `months` whole months back to today
    days_now = today.day - 1 + today.hour / 24
    months = max(1, round((rows_per_record / 200 - days_now) / DAYS_PER_MONTH + 0.5))
    volume = max(1, min(200, round(rows_per_record / (months * DAYS_PER_MONTH + days_now))))
    records, total = [], 0
    with box.api() as api:
        for start in range(0, count, 100):
            specs = [{"accounts": 1, "months": months, "volume": volume, "seed": seed + start + i,
                      "income": True} for i in range(min(100, count - start))]
            made = api.post("sandbox/customers/create", json={"customers": specs})
            records += [c["record"] for c in made.raise_for_status().json()["data"]["customers"]]
        deadline = time.monotonic() + 120
        for record in records:  # connections complete on their own, right after creation
            while (resp := api.post("transactions/get", json={"record": record, "limit": 1})
                   ).status_code != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"record {record} not ready: {resp.text[:300]}")
                time.sleep(0.1)
            total += resp.json()["data"]["pagination"]["totalDocs"]
    return records, total


def bench_size(label: str, box: harness.Sandbox, records: list[str], total: int,
               contenders: list[str], runs: int, work: Path, dlt_runs: int) -> dict:
    job = {"url": box.url, "key": box.key, "records": records}
    per: dict[str, list[dict]] = {c: [] for c in contenders}
    for n in range(runs):
        for name in harness.rotated(contenders, n):
            if name == "dlt" and len(per["dlt"]) >= dlt_runs:
                continue
            r = run_child(name, job, work, timeout_s=1800)
            if r["rows"] != total:
                raise RuntimeError(f"{name} landed {r['rows']} rows of {total}")
            r["rows_per_s"] = round(r["rows"] / r["seconds"])
            per[name].append(r)
            print(f"[bench] {label} run {n + 1}: {name:10s} {r['rows_per_s']:>8,} rows/s "
                  f"{r['seconds']:7.2f}s peak {r['peak_rss_mb']:7.1f} MiB", flush=True)
    out: dict = {"records": len(records), "rows": total, "contenders": {}}
    for name, rs in per.items():
        def median(key: str, rs=rs) -> float:
            return statistics.median(r[key] for r in rs)

        c = out["contenders"][name] = {
            "runs": len(rs), "rows_per_s": round(median("rows_per_s")),
            "seconds": round(median("seconds"), 2),
            "each_rows_per_s": [r["rows_per_s"] for r in rs]}
        for mb in ("peak_rss_mb", "peak_tree_mb"):  # the median run's, and the most of any
            c[mb], c[f"{mb}_max"] = round(median(mb), 1), max(r[mb] for r in rs)
        if "cpu_s" in rs[0]:
            c["cpu_s"] = round(median("cpu_s"), 2)
    mine = out["contenders"]["ledgerlake"]
    for peer, digits in (("floor", 3), ("dlt", 2)):
        if per.get(peer):  # dlt runs in the first rounds only: paired with those rounds
            within = harness.ratios(mine["each_rows_per_s"],
                                    out["contenders"][peer]["each_rows_per_s"], digits)
            out[f"ledgerlake_over_{peer}"] = round(
                mine["rows_per_s"] / out["contenders"][peer]["rows_per_s"], digits)
            out[f"ledgerlake_over_{peer}_paired"] = within["median"]
            out[f"ledgerlake_over_{peer}_each_round"] = within["rounds"]
    return out


def latency(samples: int, interval_s: float, work: Path, seed: int) -> dict:
    """Callback-to-Parquet: create customers, tick the sensor, watch for their files."""
    import dagster as dg

    from pipeline.local import QUIET, Server, tick

    home = work / "latency"
    home.mkdir(parents=True)
    token = secrets.token_hex(16)
    os.environ.update({"LEDGERLAKE_HOME": str(home), "LEDGERLAKE_INBOX":
                       str(home / "inbox.sqlite3"), "LEDGERLAKE_LAKE": str(home / "lake")})
    from assets.batch import Batch
    from assets.transactions import transactions
    from assets.warehouse import Warehouse
    from pipeline.freshness import freshness_checks
    from pipeline.jobs import ingest_job
    from pipeline.sensors import inbox_sensor
    from resources.client.resource import ConnectionClient
    from resources.config import Tuning
    from resources.inbox.resource import InboxResource
    from resources.lake import Lake
    from tests.ground_truth import partitions

    with harness.sandbox(home, seed) as box, box.api(30) as api, Server(
            "receiver", "--inbox", str(home / "inbox.sqlite3"),
            env={"LEDGERLAKE_RECEIVER_TOKEN": token}, log_path=home / "receiver.log") as receiver:
        lake = Lake(root=str(home / "lake"))
        defs = dg.Definitions(
            assets=[transactions], jobs=[ingest_job], sensors=[inbox_sensor()],
            asset_checks=freshness_checks,  # ingest_job leaves them out by name
            resources={"client": ConnectionClient(base_url=box.url, secret_key=box.key),
                       "lake": lake, "inbox": InboxResource(), "batch": Batch.configure_at_launch(),
                       "tuning": Tuning.from_env(),  # as the definitions hand it
                       # forget_job's, a target of the sensor (it never runs here)
                       "warehouse_db": Warehouse(path=str(home / "warehouse.duckdb"))})
        api.post("settings/webhook", json={"url": receiver.url + "/callbacks/",
                                           "token": token}).raise_for_status()
        sent, landed, done = {}, {}, threading.Event()  # record -> when sent, when landed

        def create() -> None:  # one customer every interval/4: a few per tick
            for i in range(samples):
                t0 = time.time()
                resp = api.post("sandbox/customers/create", json={"customers": [
                    {"accounts": 1, "months": 1, "volume": 10, "seed": seed + i}]})
                sent[resp.raise_for_status().json()["data"]["customers"][0]["record"]] = t0
                time.sleep(interval_s / 4)

        def watch() -> None:
            while not done.is_set():
                if waiting := [r for r in list(sent) if r not in landed]:
                    there = set(partitions(lake, "transactions"))  # records with rows
                    landed.update((r, time.time()) for r in waiting if r in there)
                time.sleep(0.05)

        maker, watcher = (threading.Thread(target=f, daemon=True) for f in (create, watch))
        maker.start()
        watcher.start()
        deadline = time.monotonic() + samples * interval_s + 120
        with dg.DagsterInstance.ephemeral() as instance:
            next_tick = time.monotonic()
            while time.monotonic() < deadline:
                time.sleep(max(0.0, next_tick - time.monotonic()))
                next_tick += interval_s
                tick(defs, instance, run_config=QUIET)
                if not maker.is_alive() and len(landed) == samples:
                    break
        done.set()
        watcher.join()
    waits = sorted(landed[r] - sent[r] for r in landed)
    if len(waits) < samples:
        raise RuntimeError(f"only {len(waits)} of {samples} callbacks became Parquet")
    q = statistics.quantiles(waits, n=20, method="inclusive") if len(waits) > 1 else waits * 19
    return {"samples": len(waits), "sensor_interval_s": interval_s,
            "p50_s": round(statistics.median(waits), 2), "p95_s": round(q[18], 2),
            "max_s": round(waits[-1], 2),
            "from": "customers/create request (its TRANSACTIONS callback follows at once)",
            "to": "the record's transactions are committed to the lake's Delta table"}


def table_md(result: dict) -> str:
    rows = [(label, name, f"{size['rows']:,}", f"{c['rows_per_s']:,}", c["seconds"],
             c["peak_tree_mb"], c["peak_rss_mb"], c["runs"])
            for label, size in result["sizes"].items() for name, c in size["contenders"].items()]
    text = harness.table(["size", "contender", "rows", "rows/s", "median s",
                          "peak MiB, all its processes (PSS)", "peak RSS MiB, main process",
                          "runs"], rows, left=2)
    goal = result["targets"]
    text += "\n\n" + harness.table(
        ["size", f"ledgerlake / floor (target >= {goal['ledgerlake_over_floor_at_least']})",
         "same, median of rounds",
         f"ledgerlake / dlt (target >= {goal['ledgerlake_over_dlt_at_least']})",
         "same, median of rounds"],
        [(label, size["ledgerlake_over_floor"], size["ledgerlake_over_floor_paired"],
          size.get("ledgerlake_over_dlt") or "n/a", size.get("ledgerlake_over_dlt_paired", "n/a"))
         for label, size in result["sizes"].items()])
    if lat := result.get("latency"):
        text += (f"\n\nCallback to Parquet ({lat['samples']} samples, sensor ticked every "
                 f"{lat['sensor_interval_s']} s): p50 {lat['p50_s']} s, p95 {lat['p95_s']} s, "
                 f"max {lat['max_s']} s.")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1000, help="records of the many-size")
    ap.add_argument("--rows-per-record", type=int, default=1000)
    ap.add_argument("--big", type=int, default=200_000,
                    help="transactions of the one-record size, 0 to skip it")
    ap.add_argument("--runs", type=int, default=5,
                    help="runs of floor and ledgerlake per size (dlt: see --dlt-runs)")
    ap.add_argument("--dlt-runs", type=int, default=2,
                    help="runs of dlt at the many-records size (the one-record size takes "
                         "--runs, at most 3); dlt at 1,000,000 rows alone takes minutes")
    ap.add_argument("--skip-dlt", action="store_true")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--latency-samples", type=int, default=30, help="0 to skip")
    ap.add_argument("--sensor-interval", type=float, default=5.0,
                    help="seconds between sensor ticks (the sensor's minimum_interval_seconds)")
    harness.arguments(ap, "latest")
    ap.add_argument("--child", nargs=2, metavar=("NAME", "JOB"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child_main(*args.child)
        return 0

    dlt = not args.skip_dlt and dlt_available()
    if not args.skip_dlt and not dlt:
        print("[bench] dlt could not be installed with uv; skipping it", flush=True)
    contenders = ["floor", "ledgerlake"] + ["dlt"] * dlt
    started = time.perf_counter()
    result: dict = {"what": __doc__.splitlines()[0], "seed": args.seed, "runs": args.runs,
                    "dlt_runs": {"many_records": args.dlt_runs, "one_record": min(args.runs, 3)}
                    if dlt else None, "dlt_version": DLT_VERSION if dlt else None,
                    "page_size": PAGE, "sizes": {}}
    sizes = [(f"{args.records} records", args.records, args.rows_per_record)] * bool(args.records)
    sizes += [("1 record", 1, args.big)] * bool(args.big)
    with tempfile.TemporaryDirectory(prefix="ledgerlake-bench-") as tmp:
        work = Path(tmp)
        with harness.sandbox(work, args.seed, *harness.STILL) as box:
            for label, count, per in sizes:
                t0 = time.perf_counter()
                records, total = make_records(box, count, per, args.seed)
                print(f"[bench] {label}: {total:,} transactions "
                      f"({time.perf_counter() - t0:.1f}s to create)", flush=True)
                dlt_runs = args.dlt_runs if count > 1 else min(args.runs, 3)
                result["sizes"][label] = bench_size(label, box, records, total, contenders,
                                                    args.runs, work, dlt_runs)
        if args.latency_samples:
            result["latency"] = latency(args.latency_samples, args.sensor_interval, work, args.seed)
    result["targets"] = {
        "ledgerlake_over_dlt_at_least": 4, "ledgerlake_over_floor_at_least": 0.8,
        "one_record_peak_mb_below": 1024}  # all its processes, PSS
    result["wall_s"] = round(time.perf_counter() - started, 1)
    harness.publish(result, args, "latest", table_md(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
