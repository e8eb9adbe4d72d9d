"""Ingest with every run in its own process (the daemon's run launcher), against in-process.

On one sandbox and the same records: bench/run.py's floor and in-process contender, and
`launched`: a TRANSACTIONS callback a record written to the inbox, `dagster-daemon` (queued
run coordinator, `--concurrent-runs`, one process a run) ticking the inbox sensor and
launching its runs, timed until the last record's transactions are in the lake; with `--dlt`,
run.py's dlt. Also each launched run's start cost (launch to RUN_START to the first STEP_START)
and a new process's (`start_cost`: interpreter, Dagster, the code location). bench/README.md.

    .venv/bin/python bench/launched_runs.py [--records 1000] [--dlt] [--concurrent-runs 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
import orjson
import run  # bench/run.py: its records and contenders
import yaml
from harness import ROOT


def ready(record: str, i: int) -> dict:
    """The callback the service sends when a record's transactions are ready."""
    return {"method": "TRANSACTIONS", "callback_type": "TRANSACTIONS", "type": "CALLBACK",
            "callback_code": "PRODUCT_IS_READY", "code": "PRODUCT_IS_READY",
            "status": "is_success", "started_at": "2026-01-01T00:00:00.000Z",
            "ended_at": f"2026-01-01T00:00:{i % 60:02d}.000Z", "record": record,
            "recordId": record, "customerId": f"bench-{i}", "message": "", "meta": {}}


def launched(box: harness.Sandbox, records: list[str], work: Path, timeout_s: float,
             concurrent_runs: int) -> dict:
    """The daemon launches the sensor's runs, each in its own process; seconds until landed."""
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    from pipeline.local import one_box_pools, stop_process
    from resources.inbox import Inbox, describe
    from resources.lake import Lake
    from tests.ground_truth import partitions

    home = work / "launched"
    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True)
    settings = (ROOT / "dagster.yaml").read_text()
    assert "max_concurrent_runs: 4" in settings  # the shipped default, set for this run
    # the production profile's queue (deploy/dagster.yaml) on the embedded storage
    production = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    queue = yaml.safe_dump({k: production[k] for k in ("run_coordinator", "run_launcher")})
    (dagster_home / "dagster.yaml").write_text(settings.replace(
        "max_concurrent_runs: 4", f"max_concurrent_runs: {concurrent_runs}") + queue)
    # as `ledgerlake dev` and the demo do: the service's pool gets a slot per concurrent run
    # (left at dagster.yaml's default_limit of 1, one fetching step would run at a time)
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        one_box_pools(instance)
    inbox_path = home / "inbox.sqlite3"
    Inbox(inbox_path, create=True).close()
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "LEDGERLAKE_HOME": str(home),
           "LEDGERLAKE_INBOX": str(inbox_path), "LEDGERLAKE_API_URL": box.url,
           "LEDGERLAKE_ENVIRONMENT": "sandbox", "LEDGERLAKE_SECRET_KEY": box.key}
    dagster, workspace = Path(sys.executable).with_name("dagster"), str(ROOT / "workspace.yaml")
    # the warehouse would follow the lake as it lands: real work, but not the peer's work
    subprocess.run([str(dagster), "sensor", "stop", "warehouse_follows_lake", "-w", workspace],
                   cwd=home, env=env, check=True, capture_output=True)
    log = open(home / "daemon.log", "wb")  # noqa: SIM115
    daemon = subprocess.Popen([str(dagster.with_name("dagster-daemon")), "run", "-w", workspace],
                              cwd=home, env=env, stdout=log, stderr=log)
    lake = Lake(root=str(home / "lake"))
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    try:
        time.sleep(15)  # the daemon up and its sensor ticking on an empty inbox
        with Inbox(inbox_path) as inbox:
            t0 = time.perf_counter()
            for start in range(0, len(records), 500):
                bodies = [ready(r, start + i) for i, r in enumerate(records[start:start + 500])]
                inbox.add_described([(describe(b), orjson.dumps(b)) for b in bodies])
        deadline = time.monotonic() + timeout_s
        while not set(records) <= set(partitions(lake, "transactions")):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("launched runs did not land every record:\n"
                                   + (home / "daemon.log").read_text()[-3000:])
            time.sleep(0.5)
        seconds = time.perf_counter() - t0
        with DagsterInstance.get() as instance:  # runs launched after the last record landed
            while instance.get_runs_count(RunsFilter(statuses=[
                    DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED,
                    DagsterRunStatus.STARTING, DagsterRunStatus.STARTED])):
                if time.monotonic() > deadline:
                    raise RuntimeError("launched runs did not finish")
                time.sleep(0.5)
    finally:
        stop_process(daemon, timeout_s=30)
        log.close()
    with DagsterInstance.get() as instance:
        runs = instance.get_run_records(RunsFilter(job_name="ingest_job"))
        failed = [r for r in runs if r.dagster_run.status != DagsterRunStatus.SUCCESS]
        start_cost, plan_cost, steps = [], [], []
        for r in runs:
            events = {e.dagster_event.event_type.name: e.timestamp for e in reversed(
                instance.all_logs(r.dagster_run.run_id)) if e.dagster_event}
            if "RUN_STARTING" in events and "RUN_START" in events:
                start_cost.append(events["RUN_START"] - events["RUN_STARTING"])
            if "STEP_START" in events:
                plan_cost.append(events["STEP_START"] - events["RUN_START"])
            if r.start_time and r.end_time:
                steps.append(r.end_time - r.start_time)
    del os.environ["DAGSTER_HOME"]
    return {"seconds": seconds, "runs": len(runs), "failed_runs": len(failed),
            "concurrent_runs": concurrent_runs,
            "launch_to_run_start_s": harness.spread(start_cost, 2),
            "run_start_to_first_step_s": harness.spread(plan_cost, 2),
            "run_wall_s": harness.spread(steps, 2)}


STAGES = {"interpreter": "pass", "dagster": "import dagster",
          "code location": "import pipeline.definitions"}


def start_cost(times: int = 5) -> dict:
    """What a new process pays before its run can start, stage by stage (each stage includes
    the ones before it): CPU (user + system) and wall seconds, medians of `times`."""
    out = {}
    for stage, code in STAGES.items():
        cpu, wall = [], []
        for _ in range(times):
            started, before = time.perf_counter(), os.times()
            subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                           env={**os.environ, "LEDGERLAKE_HOME": tempfile.gettempdir()})
            after = os.times()
            wall.append(time.perf_counter() - started)
            cpu.append(after.children_user + after.children_system
                       - before.children_user - before.children_system)
        out[stage] = {"cpu_s": round(statistics.median(cpu), 2),
                      "wall_s": round(statistics.median(wall), 2)}
    return out


def table_md(result: dict) -> str:
    names = [n for n in ("floor", "in_process", "launched", "dlt") if n in result]
    floor_s = result["floor"]["seconds"]
    rows = [(n.replace("_", " "), round(result[n]["seconds"], 1),
             f"{result[n]['rows_per_s']:,}", round(floor_s / result[n]["seconds"], 2),
             result[n].get("runs", "")) for n in names]
    start = result["launched"]["launch_to_run_start_s"]
    return (harness.table([f"{result['records']:,} records, {result['rows']:,} rows", "seconds",
                           "rows/s", "over the floor", "runs"], rows)
            + f"\n\nLaunched: {result['launched']['concurrent_runs']} runs at once; launch to "
              f"RUN_START median {start['median']} s, p90 {start['p90']} s.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--rows-per-record", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--dlt", action="store_true", help="dlt too (installed with uv)")
    ap.add_argument("--concurrent-runs", type=int, default=2,
                    help="the launched runs' max_concurrent_runs (default: this machine's 2 cores)")
    harness.arguments(ap, "launched_runs")
    args = ap.parse_args(argv)

    from pipeline.sensors import NEW_PER_RUN

    result: dict = {"what": __doc__.splitlines()[0], "records": args.records,
                    "rows_per_record": args.rows_per_record, "new_per_run": NEW_PER_RUN}
    with tempfile.TemporaryDirectory(prefix="ledgerlake-launched-",
                                     ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        with harness.sandbox(work, args.seed, *harness.STILL) as box:
            records, total = run.make_records(box, args.records, args.rows_per_record, args.seed)
            result["rows"] = total
            print(f"[launched] {len(records)} records, {total:,} transactions", flush=True)
            job = {"url": box.url, "key": box.key, "records": records}
            result["start_cost"] = start_cost()
            print(f"[launched] start cost: {result['start_cost']}", flush=True)
            for name in ("floor", "in_process", "launched", "dlt"):
                if name == "launched":
                    result[name] = launched(box, records, work, timeout_s=3600,
                                            concurrent_runs=args.concurrent_runs)
                elif name == "dlt" and not (args.dlt and run.dlt_available()):
                    continue
                else:
                    child = "ledgerlake" if name == "in_process" else name
                    result[name] = run.run_child(child, job, work, timeout_s=3600)
                result[name]["rows_per_s"] = round(total / result[name]["seconds"])
                print(f"[launched] {name}: {result[name]['seconds']:.1f}s", flush=True)
    for name, peer in (("launched", "in_process"), ("in_process", "floor"),
                       ("launched", "floor"), ("launched", "dlt")):
        if peer in result:  # how many times faster than the peer
            result[f"{name}_over_{peer}"] = round(
                result[peer]["seconds"] / result[name]["seconds"], 3)
    harness.publish(result, args, "launched_runs", table_md(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
