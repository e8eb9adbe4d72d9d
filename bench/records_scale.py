"""A million linked records: what the orchestrator pays at 1k, 10k, 100k and 1M records.

On a Postgres instance (deploy/dagster.yaml, the inbox in the same private cluster) and the
default SQLite one. One sandbox makes every record (`records/bulk_create`), their AUTH_SUCCESS
callbacks go into the inbox as the receiver stores them, and each size grows the same inbox
and instance. At each: `daily_refresh` evaluated (seconds, requests, serialized size); a
refresh day executed in process (at the refresh sizes `--real-runs` runs fetch over HTTP, the
rest are stand-ins yielding what `publish.dagster_results()` yields) with Dagster's rows and bytes
before and after; an `inbox_sensor` tick over 500 new callbacks; with `dagster-webserver`, run
launch and the GraphQL the UI sends for the transactions asset's Overview, Events and Checks
tabs, cold and warm. Then the daily refresh of 1M extrapolated from the real runs' per-record
and the stand-ins' per-run costs: the fleet that fits 2 hours, the orchestrator's share.

    .venv/bin/python bench/records_scale.py                  # everything: 1-2 hours here
    .venv/bin/python bench/records_scale.py --quick --instances sqlite   # smoke, to /tmp
"""

import argparse
import datetime as dt
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import closing, contextmanager, suppress
from pathlib import Path

import dagster as dg
import harness
import orjson
from harness import ROOT
from launched_runs import ready, start_cost

sys.path.insert(0, str(ROOT))  # tests/postgres.py: the private cluster the tests use

from assets.batch import RECORDS_PER_RUN, Batch  # noqa: E402
from assets.publish import Landing, dagster_results  # noqa: E402
from pipeline.local import QUIET, stop_process  # noqa: E402
from resources.inbox import describe, kept_body, open_inbox  # noqa: E402
from resources.lake import Lake  # noqa: E402
from tests.ground_truth import holding  # noqa: E402
from tests.postgres import INSTALL, PostgresServer, find_bin, free_port, pg_env  # noqa: E402

TICK_CALLBACKS, FILL_CHUNK, WINDOW_S = 500, 5000, 2 * 3600
UI = [("overview", "AssetViewDefinitionQuery", False), ("overview", "AssetGraphLiveQuery", False),
      ("overview", "AssetOverviewMetadataEventsQuery", False),
      ("overview", "RecentAssetEventsQuery", True),  # the 7-day timeline: pages until short
      ("events", "RecentAssetEventsQuery", False),  # the event list's first page of 100
      ("checks", "AssetChecksQuery", False), ("checks", "AssetCheckDetailsQuery", False)]
NOTES = [
    "The inbox is filled with Inbox.add_described (an AUTH_SUCCESS a record; 500 TRANSACTIONS "
    "callbacks a tick): the sandbox's paced webhooks (~100/s) would take ~3 h a million.",
    "Refresh days run in process; at the refresh sizes --real-runs requests fetch for real "
    "(window pulls of records landed before), the rest are stand-in runs (see the docstring).",
    "Not stored: the daemon's schedule tick, one row a day holding the day's run ids and keys "
    "(~100 B a run: 0.1 B a record-day).",
    "Per run, creation is counted twice (launch, and inside the in-process run): an upper "
    "bound. Walls are taken on 2 shared cores beside the sandbox; CPU is this process's own."]


def bulk_ids(first: str, start: int, stop: int) -> list[str]:
    """Bulk records start..stop-1 (docs/interface.md, "Records in bulk": ids from `first`)."""
    base = int(first[2:12], 16)
    return [first[:2] + format(base + i, "010x") + first[12:] for i in range(start, stop)]


# -- instances and what they hold ------------------------------------------------------------

@contextmanager
def instance_env(kind: str, work: Path):
    """The environment of `kind`'s instance (DAGSTER_HOME and its settings) and inbox."""
    home = work / kind / "dagster"
    home.mkdir(parents=True)
    if kind == "sqlite":
        shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
        yield {"DAGSTER_HOME": str(home), "LEDGERLAKE_INBOX": str(work / kind / "inbox.sqlite3")}
        return
    if (folder := find_bin()) is None:
        raise SystemExit(INSTALL)
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    server = PostgresServer(folder).start()
    try:
        dagster = server.create_database("dagster")
        yield {"DAGSTER_HOME": str(home), **pg_env(dagster), "BENCH_DAGSTER_DB": dagster,
               "LEDGERLAKE_INBOX": server.create_database("inbox"),
               "BENCH_PG_PID": (server.data / "postmaster.pid").read_text().split()[0]}
    finally:
        server.remove()


def postgres_cpu(env: dict) -> float:
    """CPU seconds of the cluster: its processes, and the backends gone (the postmaster's
    children's time)."""
    pid = int(env["BENCH_PG_PID"])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    gone = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return harness.cpu_seconds(harness.family(pid)) + gone


def sql(url: str, query: str) -> list[tuple]:
    import psycopg2

    with closing(psycopg2.connect(url)) as con, con.cursor() as cur:
        cur.execute(query)
        return cur.fetchall()


def storage(env: dict) -> dict:
    """Rows of every table of the Dagster instance, bytes of every table (Postgres) or file
    (SQLite: runs.db, index.db, an event log file per run, schedules.db), and compute logs."""
    rows, size, home = Counter(), Counter(), Path(env["DAGSTER_HOME"])
    if url := env.get("BENCH_DAGSTER_DB"):
        tables = sql(url, "select tablename from pg_tables where schemaname = 'public'")
        for table, n, b in sql(url, " union all ".join(
                f"select '{t}', count(*), pg_total_relation_size('\"{t}\"') from \"{t}\""
                for (t,) in tables)):
            rows[table], size[table] = n, b
    for path in [] if url else sorted(home.rglob("*.db")):
        part = "event log files (one a run)" if path.parent.name == "runs" \
            and path.name != "index.db" else path.name
        wal = path.with_name(path.name + "-wal")
        size[part] += path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as con:
            for (table,) in con.execute("select name from sqlite_master where type = 'table'"):
                rows[table] += con.execute(f'select count(*) from "{table}"').fetchone()[0]
    size["compute logs (files)"] = folder_bytes(home / "storage")
    return {"rows": rows, "bytes": size}


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def inbox_bytes(env: dict) -> int:
    inbox = env["LEDGERLAKE_INBOX"]
    if "://" in inbox:
        return sql(inbox, "select pg_database_size(current_database())")[0][0]
    return sum(p.stat().st_size for p in Path(inbox).parent.glob(Path(inbox).name + "*"))


def grown(before: dict, after: dict, records: int) -> dict:
    """What a day's runs added to the instance, in all and per record refreshed."""
    delta = {k: {t: v - before[k].get(t, 0) for t, v in after[k].items()
                 if v != before[k].get(t, 0)} for k in ("rows", "bytes")}
    rows, size = sum(delta["rows"].values()), sum(delta["bytes"].values())
    return {"records": records, "rows": rows, "bytes": size,
            "rows_per_record_day": round(rows / records, 4),
            "bytes_per_record_day": round(size / records, 1), "by_table": delta}


# -- the schedule, the sensor, launching -----------------------------------------------------

def schedule(defs, instance, when: dt.datetime, repeats: int) -> tuple[dict, list]:
    from pipeline.schedules import daily_refresh

    def evaluate():
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=when,
                                       resources={"inbox": defs.resources["inbox"]}) as ctx:
            return daily_refresh(ctx)

    times, requests = harness.timed(evaluate, repeats)
    took, sent = harness.timed(lambda: [dg.serialize_value(r) for r in requests], 1)
    return {"requests": len(requests), "seconds": harness.spread(times),
            "per_request_ms": round(1000 * statistics.median(times) / len(requests), 3),
            "serialize_s": round(took[0], 5), "serialized_bytes": sum(map(len, sent))}, requests


def sensor_tick(defs, instance, inbox: str, records: list[str], k: int, repeats: int) -> dict:
    """TICK_CALLBACKS new callbacks spread over the records, then the sensor over them."""
    picked = [records[i * len(records) // TICK_CALLBACKS] for i in range(TICK_CALLBACKS)]
    bodies = [{**ready(r, i), "ended_at": f"2026-02-{k + 1:02d}T{i // 3600:02d}:"
               f"{i // 60 % 60:02d}:{i % 60:02d}.000Z"} for i, r in enumerate(picked)]
    with open_inbox(inbox) as db:
        ids = [i for i, _ in db.add_described([(describe(b), kept_body(b)) for b in bodies])]
    sensor = defs.resolve_sensor_def("inbox_sensor")

    def evaluate():
        with dg.build_sensor_context(instance=instance, cursor=str(min(ids) - 1), definitions=defs,
                                     resources={"inbox": defs.resources["inbox"]}) as ctx:
            return sensor(ctx)

    evaluate()  # the repository's jobs and asset graph, built once in a code server
    times, result = harness.timed(evaluate, repeats)
    assert result.cursor == str(max(ids)) and result.run_requests, "the tick read its events"
    n = len(result.run_requests)
    return {"callbacks": len(ids), "requests": n, "seconds": harness.spread(times),
            "per_request_ms": round(1000 * statistics.median(times) / n, 3)}


# -- a refresh day ---------------------------------------------------------------------------

def stand_in_defs() -> dg.Definitions:
    """refresh_job whose steps fetch nothing and report, with publish.dagster_results(), a batch whose
    every record was published: a real run's events, Dagster's work alone."""
    from assets.balances import balances
    from assets.transactions import RUNNING_BALANCE, transactions

    def stand_in(real, checks, extra):
        name = real.key.path[-1]

        @dg.multi_asset(name=name, specs=list(real.specs), check_specs=list(real.check_specs),
                        can_subset=True)
        def body(context: dg.AssetExecutionContext, batch: Batch):
            landings = [Landing(r, published=True, row_count=930, lake_table=f"lake/{name}",
                                lake_version=1, problems={c.name: [] for c in checks})
                        for r in map(str, batch.records)]
            yield from dagster_results(context, name, landings, checks, extra=extra(len(landings)))
        return body

    return dg.Definitions(
        assets=[stand_in(balances, [], lambda n: {"source": "schedule"}),
                stand_in(transactions, [RUNNING_BALANCE],
                         lambda n: {"fetched_rows": 250 * n, "pulled_whole": n // 7})],
        jobs=[dg.define_asset_job("refresh_job", selection=["balances", "transactions"])],
        resources={"batch": Batch.configure_at_launch()}, executor=dg.in_process_executor)


def execute(job, instance, rr, **tags) -> dict:
    t0, c0 = time.perf_counter(), os.times()
    out = job.execute_in_process(instance=instance, run_config={**QUIET, **rr.run_config},
                                 tags={**rr.tags, "dagster/run_key": rr.run_key, **tags},
                                 raise_on_error=False)
    c1 = os.times()
    if not out.success:
        raise RuntimeError(f"run {out.run_id} of {rr.run_key} failed")
    meta = {k: sum(getattr(e.materialization.metadata.get(k), "value", 0)
                   for e in out.get_asset_materialization_events())
            for k in ("fetched_rows", "pulled_whole")}
    meta["records"] = int(rr.tags["ledgerlake/records"])
    return {"run_id": out.run_id, "wall": time.perf_counter() - t0,
            "cpu": c1.user + c1.system - c0.user - c0.system, **meta}


def summed(runs: list[dict]) -> dict:
    wall, cpu = (sum(r[k] for r in runs) for k in ("wall", "cpu"))
    return {"runs": len(runs), "records": sum(r["records"] for r in runs),
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "run_wall_s": harness.spread([r["wall"] for r in runs]),
            "run_cpu_s": harness.spread([r["cpu"] for r in runs])}


def refresh_day(defs, stand_ins, instance, env, box, requests, when, real_runs) -> dict:
    """The day's requests: the first `real_runs` for real, the others as stand-ins."""
    lake = Path(os.environ["LEDGERLAKE_HOME"]) / "lake"
    job, out = defs.resolve_job_def("refresh_job"), {}
    real, rest = requests[:real_runs], requests[real_runs:]

    def lacking(rr) -> bool:
        with open_inbox(env["LEDGERLAKE_INBOX"]) as db:
            ids = list(db.ids_of(rr.run_config["resources"]["batch"]["config"]["records"]).values())
        return len(holding(Lake(root=str(lake)), "transactions", ids)) < len(ids)

    first = [execute(job, instance, rr, **{"ledgerlake/bench": "first landing"})
             for rr in real if lacking(rr)]
    if first:  # records the lake lacked: their first landing is not a daily refresh
        out["first_landing"] = summed(first)
    pg = (lambda: postgres_cpu(env)) if "BENCH_PG_PID" in env else None
    for part, todo, run in (("real", real, job), ("stand_in", rest,
                                                  stand_ins.resolve_job_def("refresh_job"))):
        if not todo:
            continue
        before = storage(env)
        base = (folder_bytes(lake), harness.cpu_seconds(harness.family(box.pid)), pg and pg())
        done = [execute(run, instance, rr) for rr in todo]
        out[part] = summed(done)
        if part == "real":
            out[part].update({k: sum(r[k] for r in done) for k in ("fetched_rows", "pulled_whole")})
            out[part]["lake_bytes"] = folder_bytes(lake) - base[0]
            out[part]["sandbox_cpu_s"] = round(
                harness.cpu_seconds(harness.family(box.pid)) - base[1], 2)
        if pg:
            out[part]["postgres_cpu_s"] = round(pg() - base[2], 2)
        out[part]["storage"] = grown(before, storage(env), out[part]["records"])
    return out


# -- the asset's pages -----------------------------------------------------------------------

def ui_documents() -> dict:
    """Every query and fragment of the installed UI, parsed from its bundle, by name."""
    import dagster_webserver
    import graphql

    found, literal = {}, re.compile(r'"(\\n\s*(?:query|fragment)\s(?:[^"\\]|\\.)*)"')
    chunks = Path(dagster_webserver.__file__).parent / "webapp/build/_next/static/chunks"
    for path in chunks.rglob("*.js"):
        for match in literal.finditer(path.read_text(errors="replace")):
            with suppress(graphql.GraphQLError, orjson.JSONDecodeError):  # not a whole document
                for d in graphql.parse(orjson.loads(f'"{match.group(1)}"')).definitions:
                    found.setdefault(d.name.value, graphql.print_ast(d))
    return found


def document(found: dict, name: str) -> str:
    """An operation with every fragment it spreads, as the UI sends it."""
    out, todo, seen = [], [name], {name}
    while todo:
        out.append(found[todo.pop()])
        for spread_ in re.findall(r"\.\.\.\s*([A-Za-z_]\w*)", out[-1]):
            if spread_ != "on" and spread_ not in seen:
                seen.add(spread_)
                todo.append(spread_)
    return "\n\n".join(out)


@contextmanager
def webserver(env: dict, work: Path):
    """dagster-webserver over the instance, its code location loaded: an httpx client of it."""
    import httpx

    port = free_port()
    log = open(work / f"webserver-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(Path(sys.executable).with_name("dagster-webserver")), "-h",
                             "127.0.0.1", "-p", str(port), "-w", str(ROOT / "workspace.yaml")],
                            cwd=ROOT, env={**os.environ, **env}, stdout=log, stderr=log)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as http:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"dagster-webserver exited: see {log.name}")
                with suppress(httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
                    if http.post("/graphql", json={"query": "{ workspaceOrError { ... on "
                                 "Workspace { locationEntries { loadStatus } } } }"}).json()[
                            "data"]["workspaceOrError"]["locationEntries"][0][
                            "loadStatus"] == "LOADED":
                        break
                time.sleep(0.5)
            yield http, port
    finally:
        stop_process(proc)
        log.close()


def pages(http, warm: int) -> dict:
    """Each UI query, cold (the first after the start) and warm, and its sizes."""
    found, key = ui_documents(), {"path": ["transactions"]}
    events = {"assetKey": key, "limit": 100,
              "eventTypeSelectors": ["MATERIALIZATION", "FAILED_TO_MATERIALIZE", "OBSERVATION"]}
    variables = {"AssetGraphLiveQuery": {"assetKeys": [key]}, "RecentAssetEventsQuery": events,
                 "AssetCheckDetailsQuery": {"assetKey": key, "limit": 30,
                                            "checkName": "running_balance_reconciles"}}

    def page(op: str, timeline: bool) -> list[tuple[float, int]]:
        """Each request's seconds and bytes; the timeline asks for pages until one is short."""
        took, cursor = [], None
        while True:
            more = {"cursor": cursor, "after": str(int((time.time() - 7 * 86400) * 1000))}
            started = time.perf_counter()
            resp = http.post("/graphql", json={
                "query": document(found, op), "operationName": op, "variables": {
                    **variables.get(op, {"assetKey": key}), **(more if timeline else {})}})
            took.append((time.perf_counter() - started, len(resp.content)))
            if resp.status_code != 200 or resp.json().get("errors"):
                raise RuntimeError(f"{op}: {resp.status_code} {resp.text[:2000]}")
            history = (resp.json()["data"].get("assetOrError") or {}).get("assetEventHistory")
            if not timeline or len(history["results"]) < 100:
                return took
            cursor = history["cursor"]

    cold = [page(op, timeline) for _, op, timeline in UI]
    rounds = [[page(op, timeline) for _, op, timeline in UI] for _ in range(warm)]
    out = {}
    for n, (tab, op, timeline) in enumerate(UI):
        warm_runs = [r[n] for r in rounds]
        out[f"{tab}: {op}" + (" (7-day timeline)" if timeline else "")] = {
            "requests": len(cold[n]), "bytes": sum(b for _, b in cold[n]),
            "max_request_bytes": max(b for _, b in cold[n]),
            "cold_s": round(sum(s for s, _ in cold[n]), 3),
            "warm_s": harness.spread([sum(s for s, _ in r) for r in warm_runs]),
            "warm_max_request_s": round(statistics.median(
                max(s for s, _ in r) for r in warm_runs), 3)}
    return out


def launch(port: int, instance, requests: list, when: dt.datetime, runs: int) -> dict:
    """Per run request, what the schedule daemon does: look for its run by run key, then have
    the run made (its plan from the code server) and submitted through the queued coordinator:
    here by the webserver's launchRun (dagster_graphql's client). The runs are deleted after."""
    from dagster_graphql import DagsterGraphQLClient

    client = DagsterGraphQLClient("127.0.0.1", port_number=port)
    keys = ("dagster/schedule_name", "dagster/scheduled_execution_time", "dagster/run_key")
    times, made = [], []
    for i in range(runs):
        rr = requests[i % len(requests)]
        tags = {**rr.tags, **dict(zip(keys, ("daily_refresh", when.isoformat(),
                                             f"{rr.run_key}-launch-{i}"), strict=True))}
        t0 = time.perf_counter()
        assert not instance.get_runs(dg.RunsFilter(tags={k: tags[k] for k in keys}))
        made.append(client.submit_job_execution(
            "refresh_job", repository_location_name="pipeline.definitions",
            repository_name="__repository__", run_config=rr.run_config, tags=tags))
        times.append(time.perf_counter() - t0)
    assert all(r.status == dg.DagsterRunStatus.QUEUED for r in instance.get_runs(
        dg.RunsFilter(run_ids=made)))
    for run_id in made:
        instance.delete_run(run_id)
    return {"runs": runs, "seconds_per_run": harness.spread(times),
            "per_record_us": round(1e6 * statistics.median(times) / RECORDS_PER_RUN, 2)}


# -- one instance, size after size -----------------------------------------------------------

def one_instance(kind: str, args, work: Path, box, first: str) -> dict:
    from pipeline.definitions import defs

    stand_ins, out, done = stand_in_defs(), {}, 0
    base = dt.datetime.now(dt.UTC).replace(hour=2, minute=0, second=0, microsecond=0)
    with instance_env(kind, work) as env:
        os.environ.update(env)  # read by the instance's settings and the inbox resource
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            for k, n in enumerate(args.sizes):
                t0, new = time.perf_counter(), bulk_ids(first, done, n)
                with open_inbox(env["LEDGERLAKE_INBOX"], create=True) as db:
                    for at in range(0, len(new), FILL_CHUNK):
                        db.add_described([(describe(b), kept_body(b)) for b in (
                            {**ready(r, i), "method": "AUTH", "callback_type": "AUTH",
                             "callback_code": "AUTH_SUCCESS", "code": "AUTH_SUCCESS"}
                            for i, r in enumerate(new[at:at + FILL_CHUNK], done + at))])
                fill = time.perf_counter() - t0
                size = {"records": n, "inbox_fill": {"callbacks": len(new), "seconds": round(
                    fill, 2), "per_s": round(len(new) / fill)}}
                done, when = n, base + dt.timedelta(days=k)
                size["schedule"], requests = schedule(defs, instance, when, args.repeats)
                real = min(args.real_runs, len(requests)) if n in args.refresh_sizes else 0
                size["refresh"] = refresh_day(defs, stand_ins, instance, env, box, requests,
                                              when, real)
                size["sensor_tick"] = sensor_tick(defs, instance, env["LEDGERLAKE_INBOX"],
                                                  bulk_ids(first, 0, n), k, args.repeats)
                size["inbox_bytes"] = inbox_bytes(env)
                with webserver(env, work / kind) as (http, port):
                    size["run_launch"] = launch(port, instance, requests, when, args.launch_runs)
                    size["pages"] = {"queries": pages(http, args.warm)}
                out[str(n)] = size
                print(f"[{kind} {n:,}] schedule {size['schedule']['seconds']['median']} s, tick "
                      f"{size['sensor_tick']['seconds']['median']} s, launch "
                      f"{size['run_launch']['seconds_per_run']['median']} s/run; " + ", ".join(
                          f"{p} {v['runs']} runs {v['wall_s']} s" for p, v in
                          size["refresh"].items()), flush=True)
    for key in env:
        os.environ.pop(key, None)
    return out


# -- the 1M refresh, the targets, the table --------------------------------------------------

def extrapolate(sizes: dict, start: dict, records: int = 1_000_000) -> dict:
    """The daily refresh of `records`: per record (real runs) and per run (the rest)."""
    real = [s for s in sizes.values() if "real" in s["refresh"]]
    stood = [s for s in sizes.values() if "stand_in" in s["refresh"]]
    if not real or not stood:
        return {}
    r, s, top = real[-1]["refresh"]["real"], stood[-1]["refresh"]["stand_in"], \
        list(sizes.values())[-1]
    run_wall, run_cpu = s["run_wall_s"]["median"], s["run_cpu_s"]["median"]
    per_run = {"schedule evaluation, per request": top["schedule"]["per_request_ms"] / 1000,
               "look up, create, enqueue": top["run_launch"]["seconds_per_run"]["median"],
               "launched process start": start["code location"]["wall_s"],
               "the run's own Dagster work (stand-in run)": run_wall}
    runs = -(-records // RECORDS_PER_RUN)
    work_s = max(0.0, r["wall_s"] - r["runs"] * run_wall) / r["records"] * records
    orchestrator_s = sum(per_run.values()) * runs
    per_record_cpu = max(0.0, r["cpu_s"] - r["runs"] * run_cpu) / r["records"]
    cpu_s = per_record_cpu * records + runs * (  # launching and evaluating: CPU as long as wall
        start["code location"]["cpu_s"] + run_cpu + per_run["look up, create, enqueue"]
        + per_run["schedule evaluation, per request"])
    slots = -(-(work_s + orchestrator_s) * 1.25 // WINDOW_S)  # a quarter spare: retries, tails
    machines = int(max(1, -(-max(slots, cpu_s / 0.75 / WINDOW_S) // 2)))
    dagster_b = max(d["storage"]["bytes_per_record_day"] for d in (r, s))
    lake_b = r["lake_bytes"] / r["records"]
    out = {"records": records, "runs": runs, "per_record_measured_at": real[-1]["records"],
           "per_record_ms": round(1000 * work_s / records, 2),
           "per_record_cpu_ms": round(1000 * per_record_cpu, 2),
           "sandbox_cpu_per_record_ms": round(1000 * r["sandbox_cpu_s"] / r["records"], 2),
           "per_run_s": {k: round(v, 3) for k, v in per_run.items()},
           "records_run_hours": round(work_s / 3600, 2),
           "orchestrator_run_hours": round(orchestrator_s / 3600, 2),
           "cpu_hours": round(cpu_s / 3600, 2), "run_slots": int(slots),
           "fleet": {"machines": machines, "cores_each": 2, "runs_at_once_each": 2,
                     "hours": round((work_s + orchestrator_s) / (2 * machines) / 3600, 2),
                     "dagster_gb_per_day": round(dagster_b * records / 1e9, 2),
                     "inbox_gb": round(top["inbox_bytes"] / top["records"] * records / 1e9, 1)},
           "orchestrator_share": {"time": round(orchestrator_s / (work_s + orchestrator_s), 3),
                                  "storage": round(dagster_b / (dagster_b + lake_b), 4)},
           "lake_bytes_per_record_day": round(lake_b), "dagster_bytes_per_record_day": dagster_b}
    if "postgres_cpu_s" in r:  # the cluster's CPU for a day, at half its cores
        pg = r["postgres_cpu_s"] / r["records"] * records + s["postgres_cpu_s"] / s["runs"] * runs
        out["fleet"]["postgres_cpu_hours"] = round(pg / 3600, 2)
        out["fleet"]["postgres_cores"] = max(2, int(-(-pg / (WINDOW_S * 0.5) // 1)))
    return out


def targets(kind: str, sizes: dict, ex: dict) -> list[list]:
    first, top = list(sizes.values())[0], list(sizes.values())[-1]
    at, tick, sched = f"{top['records']:,}", top["sensor_tick"], top["schedule"]
    days = [s["refresh"][p]["storage"] for s in sizes.values() for p in ("real", "stand_in")
            if p in s["refresh"]]
    b, rows = (max(d[k] for d in days) for k in ("bytes_per_record_day", "rows_per_record_day"))
    out = [(f"sensor tick at {at} <= 1 s", tick["seconds"]["median"] <= 1,
            f"{tick['seconds']['median']} s"),
           (f"schedule evaluation at {at} <= 10 s, no error", sched["seconds"]["median"] <= 10
            and sched["serialized_bytes"] < 100e6, f"{sched['seconds']['median']} s, "
            f"{sched['serialized_bytes'] / 1e6:.1f} MB sent (gRPC limit 100 MB)"),
           ("Dagster storage <= 1 KB and <= 1 row per record-day (worst day)",
            b <= 1024 and rows <= 1, f"{b:,.0f} B, {rows} rows")]
    if "pages" in top:
        q = top["pages"]["queries"].values()
        slow, big = max(x["warm_max_request_s"] for x in q), max(x["max_request_bytes"] for x in q)
        out.append((f"asset pages' queries at {at} <= 3 s warm, <= 1 MB", slow <= 3 and big
                    <= 1e6, f"slowest request {slow} s, largest {big / 1e3:,.0f} KB"))
    if ex:
        out.append(("1M daily refresh in 2 h", ex["fleet"]["hours"] <= 2,
                    f"{ex['fleet']['hours']} h on {ex['fleet']['machines']} machines x 2 cores"))
    for name, part in (("sensor tick", "sensor_tick"), ("schedule", "schedule")):
        g = top[part]["per_request_ms"] / first[part]["per_request_ms"]
        out.append((f"{name} per request, {first['records']:,} -> {at}: <= 3x", g <= 3,
                    f"{g:.2f}x"))
    return [[f"{kind}: {t}", ok, fig] for t, ok, fig in out]


def table_md(result: dict) -> str:
    rows = []
    for kind, sizes in result["instances"].items():
        for n, s in sizes.items():
            day = (s["refresh"].get("real") or s["refresh"]["stand_in"])["storage"]
            q, sc = s.get("pages", {}).get("queries", {}).values(), s["schedule"]
            rows.append((kind, f"{int(n):,}", f"{s['sensor_tick']['seconds']['median']:.3f} · "
                         f"{s['sensor_tick']['per_request_ms']:.1f}",
                         f"{sc['seconds']['median']:.2f} · {sc['requests']} · "
                         f"{sc['per_request_ms']:.1f} · {sc['serialized_bytes'] / 1e6:.1f}",
                         f"{1000 * s['run_launch']['seconds_per_run']['median']:.0f}",
                         f"{day['bytes_per_record_day']:.0f} · {day['rows_per_record_day']:.3f}",
                         f"{max(x['warm_max_request_s'] for x in q):.2f} · "
                         f"{max(x['max_request_bytes'] for x in q) / 1e3:.0f} · "
                         f"{max(x['requests'] for x in q)}" if q else "",
                         " + ".join(f"{v['runs']} {p.replace('_', ' ')}"
                                    for p, v in s["refresh"].items())))
    text = harness.table(
        ["instance", "records", "sensor tick s · ms/request", "schedule s · requests · "
         "ms/request · MB", "run launch ms", "Dagster B · rows per record-day",
         "pages: slowest warm s · largest KB · timeline requests", "refresh day: runs"],
        rows, left=2)
    ex = [(k, f"{e['per_record_ms']} ({e['per_record_cpu_ms']})",
           f"{sum(e['per_run_s'].values()):.2f}",
           f"{e['records_run_hours']} + {e['orchestrator_run_hours']}",
           f"{e['fleet']['machines']} × 2 cores, 2 runs each: {e['fleet']['hours']} h"
           + (f"; Postgres {e['fleet']['postgres_cores']} cores" if "postgres_cores" in
              e["fleet"] else ""),
           f"{100 * e['orchestrator_share']['time']:.1f}% · "
           f"{100 * e['orchestrator_share']['storage']:.2f}%")
          for k, e in result["extrapolation"].items() if e]
    text += "\n\nDaily refresh of 1,000,000 records, extrapolated:\n\n" + harness.table(
        ["instance", "per record ms (CPU)", "per run s", "run-hours: records + runs", "fleet",
         "orchestrator's share: time · storage"], ex)
    return text + "\n\n" + "\n".join(f"- {'✓' if ok else '✗'} {t}: {fig}"
                                     for t, ok, fig in result["targets"])


def main(argv: list[str] | None = None) -> int:
    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x]

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=ints, help="records (default 1000,10000,100000,1000000)")
    ap.add_argument("--instances", default="sqlite,postgres")
    ap.add_argument("--refresh-sizes", type=ints,
                    help="sizes whose refresh fetches for real (default 10000,100000)")
    ap.add_argument("--real-runs", type=int, default=10,
                    help="at most this many of those sizes' runs for real; the rest stand in")
    ap.add_argument("--volume", type=int, help="lines a day a record (default 30, quick 2)")
    ap.add_argument("--repeats", type=int, help="evaluations timed (default 5)")
    ap.add_argument("--launch-runs", type=int, help="runs launched per size (default 10)")
    ap.add_argument("--warm", type=int, help="warm rounds of the UI's queries (default 5)")
    ap.add_argument("--seed", type=int, default=20261127)
    ap.add_argument("--quick", action="store_true", help="a smoke: 10 and 30 records, to /tmp")
    harness.arguments(ap, "records_scale")
    args = ap.parse_args(argv)
    if args.quick and not args.out:
        args.out = Path(tempfile.gettempdir()) / "records_scale_quick.json"
    for name, full, smoke in (("sizes", [1000, 10_000, 100_000, 1_000_000], [10, 30]),
                              ("refresh_sizes", [10_000, 100_000], [30]), ("volume", 30, 2),
                              ("repeats", 5, 2), ("launch_runs", 10, 2), ("warm", 5, 1)):
        setattr(args, name, getattr(args, name) or (smoke if args.quick else full))
    result: dict = {"what": __doc__.splitlines()[0], "sizes": args.sizes,
                    "refresh_sizes": args.refresh_sizes, "real_runs_at_most": args.real_runs,
                    "records_per_run": RECORDS_PER_RUN, "tick_callbacks": TICK_CALLBACKS,
                    "ui_queries": [f"{tab}: {op}" for tab, op, _ in UI], "notes": NOTES,
                    "instances": {}, "extrapolation": {}, "targets": []}
    with tempfile.TemporaryDirectory(prefix="ledgerlake-records-scale-",
                                     ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        os.environ.update({"LEDGERLAKE_HOME": str(work), "LEDGERLAKE_ENVIRONMENT": "sandbox"})
        options = ("--rate-limit", "0", "--addition-limit", str(max(args.sizes) + 1000),
                   "--freeze-clock")
        with harness.sandbox(work, args.seed, *options) as box, box.api() as api:
            body = {"count": max(args.sizes), "volume": args.volume, "callbacks": "none"}
            took, resp = harness.timed(lambda: api.post("sandbox/records/bulk_create",
                                                        json=body).raise_for_status(), 1)
            result["sandbox"] = {**body, "accounts": 2, "days": 31, "seconds": round(took[0], 3)}
            os.environ.update({"LEDGERLAKE_API_URL": box.url, "LEDGERLAKE_SECRET_KEY": box.key})
            result["start_cost"] = start_cost(1 if args.quick else 3)
            for kind in args.instances.split(","):
                sizes = one_instance(kind, args, work, box, resp.json()["data"]["first"])
                result["instances"][kind] = sizes
                result["extrapolation"][kind] = extrapolate(sizes, result["start_cost"])
                result["targets"] += targets(kind, sizes, result["extrapolation"][kind])
    harness.publish(result, args, "records_scale", table_md(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
