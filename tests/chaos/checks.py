"""What the chaos suite (tests/chaos/run.py) checks once the system has settled, and the figures it
reports. Every check reads a real store: the sandbox's API with each environment's secret key
(the ground truth, tests/ground_truth.py), the lake's Delta tables and their logs, the
warehouse file, each deployment's inbox and Dagster instance, and every file the deployments
wrote (for secrets)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from urllib.parse import unquote

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.sensors import BUILDING, built_versions, lake_versions, stale_views
from resources.lake import Lake
from resources.object_store import connect
from tests.chaos import readers
from tests.ground_truth import duplicates, lake_rows, pictures, truth

FETCHED = ("accounts", "balances", "transactions", "income", "identity")


# -- the lake's own log --------------------------------------------------------------------------

def log_adds(table: Path | str, store: pafs.FileSystem | None = None) -> set[str]:
    """Every data file any version of a Delta table ever added (its commits and checkpoints);
    `table`: a local folder, or with `store` the table's path in it."""
    if store is None:
        store, table = pafs.LocalFileSystem(), str(table)
    return log_history(table, store)[0]


def log_history(table: Path | str, store: pafs.FileSystem | None = None
                ) -> tuple[set[str], bool]:
    """`log_adds`, and whether a version the log keeps is a vacuum's (which removes files
    that earlier versions added, by design)."""
    if store is None:
        store, table = pafs.LocalFileSystem(), str(table)
    names, vacuumed = set(), False
    for entry in sorted(store.get_file_info(pafs.FileSelector(f"{table}/_delta_log")),
                        key=lambda i: i.path):
        if entry.base_name.endswith(".json"):
            with store.open_input_stream(entry.path) as f:
                text = f.read()
            for line in text.splitlines():
                action = orjson.loads(line) if line.strip() else {}
                if "add" in action:
                    names.add(unquote(action["add"]["path"]))
                elif "VACUUM" in str(action.get("commitInfo", {}).get("operation", "")):
                    vacuumed = True
        elif entry.base_name.endswith(".checkpoint.parquet"):
            with store.open_input_file(entry.path) as f:
                adds = pq.read_table(f, columns=["add"]).column("add").to_pylist()
            names |= {unquote(a["path"]) for a in adds if a}
    return names, vacuumed


def referenced(table: Path, name: str) -> bool:
    """Whether a data file was committed by some version of its table."""
    return name in log_adds(table)


def lake_objects(root: str) -> tuple[pafs.FileSystem, str, dict[str, list[pafs.FileInfo]]]:
    """Every file of a lake (a folder or an s3:// prefix, read past any proxy), by table:
    the store, the lake's path in it, and each table's files (its log's among them)."""
    from resources.object_store import filesystem

    store, base = filesystem(root)
    tables: dict[str, list[pafs.FileInfo]] = {}
    for info in store.get_file_info(pafs.FileSelector(base, recursive=True,
                                                      allow_not_found=True)):
        if info.type == pafs.FileType.File:
            rel = info.path.removeprefix(base).lstrip("/")
            tables.setdefault(rel.split("/", 1)[0], []).append(info)
    return store, base, tables


def lake_leftovers(root: str) -> tuple[list[str], dict[str, int]]:
    """Problems (a temporary file in a Delta log that nothing removes, a file the latest
    version names but that is missing) and what killed writers left that the lake's vacuum
    removes once older than its retention: data files no version ever committed, and files
    under object_store's staging names (`part-...parquet#1`, `_delta_log/N.json#1`, a local
    lake's only)."""
    from resources import delta
    from resources.delta import STAGED
    from resources.object_store import absent

    lake = Lake(root=root)
    store, base, tables = lake_objects(root)
    problems, left = [], {"data files never committed": 0, "staged files": 0}
    for name, infos in sorted(tables.items()):
        if not any("/_delta_log/" in i.path for i in infos):
            continue
        for p in infos:
            in_log = "/_delta_log/" in p.path
            if STAGED.search(p.base_name):
                left["staged files"] += 1
            elif in_log and ".tmp" in p.base_name:
                problems.append(f"{name}: temporary log file {p.base_name} left behind")
        problems += [f"{name}: its latest version names {f.rsplit('/', 1)[-1]}, which is "
                     f"missing" for f in absent(lake.table_uri(name),
                                                delta.files(lake.table_uri(name)))]
        adds, vacuumed = log_history(f"{base}/{name}", store)
        present = set()
        for p in infos:
            rel = p.path.removeprefix(f"{base}/{name}/")
            present.add(rel)
            if "/_delta_log/" not in p.path and p.base_name.endswith(".parquet") \
                    and rel not in adds:
                left["data files never committed"] += 1
        if not vacuumed:  # a commit whose data files are not all in the store: half written
            problems += [f"{name}: a version its log keeps adds {f}, which the store lacks "
                         f"(a commit half written)" for f in sorted(adds - present)]
    return problems, left


def file_schemas(root: str) -> tuple[int, list[str]]:
    """Every Parquet file of the lake (live, superseded or never committed) against its
    table's declared schema (`resources.tables.lake_schema`): files read, and problems."""
    from resources.delta import STAGED
    from resources.tables import TABLES, lake_schema

    store, _base, tables = lake_objects(root)
    read, out = 0, []
    for name, infos in sorted(tables.items()):
        if name not in TABLES:  # the lake's own state (`_derived/`) holds no table's files
            if not name.startswith("_"):
                out.append(f"a folder {name} in the lake that is no table of it")
            continue
        declared = lake_schema(name)
        for info in infos:
            if "/_delta_log/" in info.path or not info.base_name.endswith(".parquet") \
                    or STAGED.search(info.base_name):
                continue
            with store.open_input_file(info.path) as f:
                got = pq.read_schema(f)
            read += 1
            if not got.equals(declared):
                diff = [f"{f.name}: {f.type}" for f in got
                        if f.name not in declared.names or
                        declared.field(f.name).type != f.type]
                out.append(f"{name}/{info.base_name} is not in the declared schema: "
                           f"{', '.join(diff) or got.names}")
    return read, out


# -- settled? --------------------------------------------------------------------------------------

def sensor_cursor(instance, name: str = "inbox_sensor") -> float:
    """A sensor's cursor (the inbox sensor's: an event id; lost_fetches': a time), 0 if none."""
    from dagster._core.scheduler.instigation import InstigatorType

    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.name == name:
            return float(getattr(state.instigator_data, "cursor", None) or 0)
    return 0


def quiet(dep, daemon: bool = True) -> bool | str:
    """True once the deployment has nothing left to do: its processes up (its daemon too,
    unless `daemon` is false: held still for the final checks), its inbox read to the end, no
    run queued or in progress, every view built over the lake's latest versions. Otherwise
    what it is still doing."""
    from dagster import RunsFilter

    from resources.inbox import open_inbox

    if daemon and (dep.daemon is None or dep.daemon.poll() is not None):
        return "its daemon is down"
    if not dep.receivers_up():
        return "a receiver does not answer"
    with dep.instance() as instance:
        cursor = int(sensor_cursor(instance))
        with open_inbox(dep.inbox) as inbox:
            unread = inbox.after(cursor, 1)
            newest = inbox.vitals(cursor).last_received_at or 0
        if unread:
            return f"inbox events after the sensor's cursor {cursor}"
        busy = instance.get_run_records(RunsFilter(statuses=BUILDING))
        if busy:
            return f"{len(busy)} run(s) queued or in progress"
        # the net under lost runs looks at a callback once it is 2 minutes old, when no
        # fetch is under way: until it has looked past the newest, a lost fetch may be asked
        if (looked := sensor_cursor(instance, "lost_fetches")) < newest:
            return f"lost_fetches has looked at callbacks up to {looked}, not {newest} yet"
        built = built_versions(instance)
    now = lake_versions(dep.store())
    if stale := stale_views(now, built):
        return f"views {', '.join(stale)} were built over older versions than the lake's {now}"
    return True


def diagnose(dep, path: Path) -> None:
    """Every run of the deployment, one line each, failures with their message: what a
    failing seed leaves to read beside its logs."""
    from dagster import DagsterEventType

    lines = []
    with dep.instance() as instance:
        for rec in instance.get_run_records():
            run = rec.dagster_run
            tags = {k: v for k, v in run.tags.items() if k.startswith(("ledgerlake/",
                                                                       "dagster/retry"))}
            batch = ((run.run_config or {}).get("resources", {}).get("batch", {})
                     .get("config", {}).get("records", []))
            lines.append(f"{rec.create_timestamp:%H:%M:%S} {run.run_id} {run.job_name} "
                         f"{run.status.value} {tags} records {batch[:5]}"
                         + (f" and {len(batch) - 5} more" if len(batch) > 5 else ""))
            if run.status.value == "FAILURE":
                for entry in instance.all_logs(run.run_id, of_type={
                        DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE,
                        DagsterEventType.ENGINE_EVENT}):
                    text = entry.message or ""
                    error = entry.dagster_event and entry.dagster_event.event_specific_data
                    lines.append(f"    {text[:300]} {str(getattr(error, 'error', ''))[:600]}")
    path.write_text("\n".join(lines) + "\n")


# -- the checks ------------------------------------------------------------------------------------

def run_all(chaos) -> dict:
    """Every check over both deployments; the figures and the problems found."""
    problems: list[str] = []
    records_checked = mismatches = files_read = 0
    orphans: dict[str, dict[str, int]] = {}
    received = dead = 0
    erased = chaos.erased()
    final_landings: dict[str, dict[tuple, set[str]]] = {}
    for env, dep in chaos.world.deployments.items():
        api = chaos.api(env)
        rows = lake_rows(dep.store())
        problems += [f"{env}: {d}" for d in duplicates(rows)]
        mismatches += len(duplicates(rows))
        connected = [r for r, rec in chaos.records.items()
                     if rec.env == env and rec.state == "connected"]
        lake = pictures(rows, connected)
        for record in connected:
            differences = truth(api, record).differences(lake[record])
            records_checked += 1
            if differences:
                mismatches += 1
                problems += [f"{env}: {d}" for d in differences]
        problems += [f"{env}: {p}" for p in payments_landed(chaos, env, dep)]
        problems += [f"{env}: {p}" for p in statuses(chaos, env, dep)]
        problems += [f"{env}: {p}" for p in refreshed(chaos, env, dep, connected)]
        leftover, orphans[env] = lake_leftovers(dep.store_root)
        problems += [f"{env}: {p}" for p in leftover]
        read, wrong = file_schemas(dep.store_root)
        files_read += read
        problems += [f"{env}: {p}" for p in wrong]
        problems += [f"{env}: {p}" for p in warehouse(dep)]
        read, letters, said = inbox_read(dep)
        received += read
        dead += letters
        problems += [f"{env}: {p}" for p in said]
        gone = sorted(r for r, (e, _) in erased.items() if e == env)
        problems += [f"{env}: {p}" for p in erasures(chaos, dep, gone)]
        problems += [f"{env}: {p}" for p in told_stored(chaos, env, dep, gone)]
        problems += [f"{env}: {p}" for p in reveals_and_reports(chaos, dep, connected)]
        final_landings[env] = landing_batches(dep)
    problems += secrets_shown(chaos, personal_values(chaos))
    said, readers = chaos.readers.check(final_landings, erased)
    problems += said
    deliveries = chaos.world.delivery_log()
    report = chaos.api("sandbox").get("sandbox/faults").json()["data"]
    return {
        "problems": problems,
        "records_checked": records_checked,
        "mismatches": mismatches,
        "erasures": {"customers_forgotten": chaos.landed.get("erasure", {}).get(
                         "forget --customer", 0),
                     "records_erased": len(erased),
                     "by_disconnect": sum(1 for r in chaos.records.values()
                                          if r.erased_by == "disconnect"),
                     "lake_files_schema_checked": files_read},
        "postgres_restarts": len(chaos.postgres_restarts),
        # the harness's own holds (a commit held to kill its writer) are not the store's faults
        "s3_faults": {k: v for k, v in chaos.world.s3_faults.report().items()
                      if not k.endswith(" hold")},
        "s3_requests": dict(chaos.world.s3_faults.seen),
        "readers": readers,
        "events": {
            "received": received,  # stored in the inboxes: each once
            "deliveries": len(deliveries),
            "redelivered": sum(1 for d in deliveries if len(d[4]) > 1),
            "attempts": sum(len(d[4]) for d in deliveries),
            "dropped": sum(1 for d in deliveries if d[3] == "dropped"),
            # of them, disconnects and reauthentications ledgerlake never heard of
            "connection_events_unheard": len(chaos.unheard),
            "stored_twice_refused": duplicates_refused(chaos),
            "dead_letters": dead,
        },
        # removed by the lake's vacuum past its retention (resources/delta.py)
        "left_by_killed_writers": orphans,
        "injected": report["injected"],
    }


def payments_landed(chaos, env: str, dep) -> list[str]:
    """The payments the suite took landed, each once, in its record's rows."""
    wanted = {r: set(rec.payments) for r, rec in chaos.records.items()
              if rec.env == env and rec.payments}
    if not wanted:
        return []
    table = dep.store().read("payments", schema=pa.schema(
        [("payment_id", pa.string()), ("record_id", pa.string())]))
    got: dict[str, list[str]] = {}
    for row in [] if table is None else table.to_pylist():
        got.setdefault(row["record_id"], []).append(row["payment_id"])
    out = []
    for record, ids in wanted.items():
        if chaos.records[record].state != "connected":
            continue
        if sorted(got.get(record, [])) != sorted(ids):
            out.append(f"{record} payments {sorted(got.get(record, []))} against {sorted(ids)}")
    return out


def _connection_events(dep) -> dict[str, float]:
    """When the inbox stored each record's first disconnect or reauthentication."""
    from resources.inbox import open_inbox

    out: dict[str, float] = {}
    with open_inbox(dep.inbox) as inbox:
        for ev in inbox.after(0, 10_000_000):
            if ev.kind == "connection" and ev.method in ("USER_DISCONNECT", "USER_REAUTH"):
                for record in ev.records:
                    out[record] = min(out.get(record, ev.received_at), ev.received_at)
    return out


FETCHED_OUTCOMES = ("landed", "held")  # the service answered with the record's data


def landings(dep) -> list[dict]:
    """Every landing of every run, from the lake's `landings` table: one row per record,
    product and try (assets/publish.py)."""
    table = dep.store().read("landings", schema=pa.schema([
        ("record_id", pa.string()), ("product", pa.string()), ("run_id", pa.string()),
        ("outcome", pa.string()), ("landed_at", pa.timestamp("ms", "UTC"))]))
    return [] if table is None else table.to_pylist()


def statuses(chaos, env: str, dep) -> list[str]:
    """Disconnected and reauthenticated records: their status in the inbox, and no run created
    after the inbox heard of it fetched them (the lake's `landings`: which run fetched which
    record, and the instance: when that run was created)."""
    from resources.inbox import open_inbox

    moved = {r: rec for r, rec in chaos.records.items() if rec.env == env
             and rec.state in ("disconnected", "reauth")}
    if not moved:
        return []
    heard = _connection_events(dep)
    with open_inbox(dep.inbox) as inbox:
        states = inbox.records(list(moved))
    out = []
    with dep.instance() as instance:
        created: dict[str, float] = {}
        for row in landings(dep):
            record = row["record_id"]
            if record not in moved or record not in heard or row["product"] not in FETCHED \
                    or row["outcome"] not in FETCHED_OUTCOMES:
                continue
            run_id = row["run_id"]
            if run_id not in created:
                found = instance.get_run_record_by_id(run_id)
                if found is None:
                    out.append(f"{record} was fetched ({row['product']}) by run {run_id}, "
                               f"which the instance does not know")
                    continue
                created[run_id] = found.create_timestamp.timestamp()
            line = (f"{record} ({moved[record].state}) was fetched ({row['product']}) by run "
                    f"{run_id}, created after the inbox stored its connection event")
            if created[run_id] > heard[record] and line not in out:  # once, however many tries
                out.append(line)
    for record, rec in moved.items():
        want = "disconnected" if rec.state == "disconnected" else "reauth_required"
        got = states[record].status if record in states else None
        if record not in heard:
            out.append(f"{record}: its {want} event never reached the inbox")
        elif got != want:
            out.append(f"{record} is {got} in the inbox, not {want}")
    return out


def refreshed(chaos, env: str, dep, connected: list[str]) -> list[str]:
    """Every connected record (reauthenticated users' new records among them) has a balance
    fetched by the settling daily refresh."""
    since = chaos.settled["refresh_at"] * 1000
    table = dep.store().read("balance_history", schema=pa.schema(
        [("record_id", pa.string()), ("source", pa.string()),
         ("fetched_at", pa.timestamp("ms", "UTC"))]))
    fresh = set()
    if table is not None:
        for row in table.to_pylist():
            if row["source"] == "schedule" and row["fetched_at"].timestamp() * 1000 >= since:
                fresh.add(row["record_id"])
    return [f"{r} was not refreshed by the daily refresh" for r in connected if r not in fresh]


def warehouse(dep) -> list[str]:
    """The published file opens and answers what the lake holds; no build left its temporary
    file behind."""
    out = [f"orphaned temporary file {p.name}"
           for p in dep.warehouse.parent.glob(f".{dep.warehouse.name}.*")]
    try:
        con = connect(str(dep.warehouse), dep.store_root, read_only=True)
        try:
            (n,) = con.execute("select count(*) from transactions").fetchone()
        finally:
            con.close()
    except duckdb.Error as exc:
        return [*out, f"the warehouse does not answer: {exc}"]
    rows = dep.store().read("transactions", schema=pa.schema(
        [("transaction_id", pa.string())]))
    if n != (0 if rows is None else rows.num_rows):
        out.append(f"the warehouse's transactions view holds {n} rows, the lake "
                   f"{rows.num_rows if rows is not None else 0}")
    return out


def landing_batches(dep) -> dict[tuple, set[str]]:
    """The settled `landings` table by commit: (run, product, when) -> the records it names
    (what the readers' answers are compared with)."""
    out: dict[tuple, set[str]] = {}
    with connect() as con:
        table = dep.store().read("landings", schema=pa.schema([
            ("record_id", pa.string()), ("product", pa.string()), ("run_id", pa.string()),
            ("landed_at", pa.timestamp("ms", "UTC"))]))
        if table is None:
            return out
        con.register("landings", table)
        con.execute("set TimeZone = 'UTC'")
        for run_id, product, at, records in con.execute(
                "select run_id, product, landed_at::varchar, list(record_id) from landings "
                "group by all").fetchall():
            out[(run_id, product, at)] = set(records)
    return out


# the lake tables whose rows an erasure leaves by design: its own audit, and the reveals'
AUDITS = ("erasures", "reveals")


def erasures(chaos, dep, gone: list[str]) -> list[str]:
    """Forgotten records reach no store: no row in any lake table (any file, any version
    kept, committed or not), no log entry naming them, no row in any view of the warehouse,
    none through `--as-of` (refused, or empty), nothing in the inbox but their tombstones."""
    from resources.inbox import open_inbox
    from resources.tables import TABLES, lake_schema

    if not gone:
        return []
    out = []
    wanted = pa.array(gone, pa.string())
    store, _base, tables = lake_objects(dep.store_root)
    for name, infos in sorted(tables.items()):
        if name in AUDITS or name not in TABLES or "record_id" not in lake_schema(name).names:
            continue
        for info in infos:
            if "/_delta_log/" in info.path:
                if info.base_name.endswith(".json"):
                    with store.open_input_stream(info.path) as f:
                        text = f.read()
                    out += [f"{name}'s log entry {info.base_name} names erased record {r}"
                            for r in gone if r.encode() in text]
                continue
            if not info.base_name.endswith(".parquet"):
                continue
            with store.open_input_file(info.path) as f:
                ids = pq.read_table(f, columns=["record_id"])["record_id"]
            if held := sorted(set(ids.filter(pc.is_in(ids, wanted)).to_pylist())):
                out.append(f"{name}/{info.base_name} holds rows of erased record(s) {held}")
    try:
        con = connect(str(dep.warehouse), dep.store_root, read_only=True)
    except duckdb.Error as exc:
        return [*out, f"the warehouse does not open: {exc}"]
    listed = ", ".join(f"'{r}'" for r in gone)
    try:
        for view in readers.NAMING:
            (n,) = con.execute(f"select count(*) from {view} where record_id in "
                               f"({listed})").fetchone()
            if n:
                out.append(f"the {view} view shows {n} rows of erased records")
    finally:
        con.close()
    # time travel: to before the first fault, just before each erasure, to version 0
    moments = [dt.datetime.fromtimestamp(chaos.readers.started_at, dt.UTC).isoformat()]
    moments += [dt.datetime.fromtimestamp(at - 1, dt.UTC).isoformat()
                for r, (e, at) in chaos.erased().items() if e == dep.name and at]
    for as_of in [*moments, "transactions=0,identity=0,accounts=0"]:
        query = " union all ".join(f"select '{v}' as t, count(*) as n from {v} where "
                                   f"record_id in ({listed})"
                                   for v in ("transactions", "identity", "accounts"))
        done = dep.cli("sql", query, "--format", "json", "--as-of", as_of)
        if done.returncode == 0:
            shown = {r["t"]: r["n"] for r in orjson.loads(done.stdout or b"[]") if r["n"]}
            if shown:
                out.append(f"--as-of {as_of} shows rows of erased records: {shown}")
        elif readers.classify(done.stderr)[0] == "undocumented":
            out.append(f"--as-of {as_of} failed: {done.stderr.strip()[-300:]}")
    with open_inbox(dep.inbox) as inbox:
        if kept := inbox.records(gone):
            out.append(f"the inbox still knows erased records {sorted(kept)}")
        named = [e.id for e in inbox.after(0, 10_000_000) if set(e.records or []) & set(gone)]
        if named:
            out.append(f"inbox events {named[:5]} still name erased records")
    return out


def told_stored(chaos, env: str, dep, gone: list[str]) -> list[str]:
    """Every callback the service was answered 200 for is in the inbox (what a receiver
    acknowledged it had stored, it had: no false 200, Postgres restarting or not); the
    erased records' left the inbox with them."""
    from resources.inbox import open_inbox

    with open_inbox(dep.inbox) as inbox:
        stored = {(r, e.method) for e in inbox.after(0, 10_000_000) for r in (e.records or [])}
    told = {(record, method) for e, record, method, state, _tries in chaos.world.delivery_log()
            if e == env and state == "acknowledged" and record and record not in gone}
    return [f"the service was told {method} of {record} was stored, and the inbox lacks it"
            for record, method in sorted(told - stored)]


def reveals_and_reports(chaos, dep, connected: list[str], sample: int = 2) -> list[str]:
    """A few records that were not erased still reveal (`ledgerlake reveal`) and report
    (`ledgerlake report`)."""
    out = []
    for record in sorted(connected)[:sample]:
        done = dep.cli("reveal", "--record", record)
        if done.returncode != 0 or not done.stdout.strip():
            out.append(f"ledgerlake reveal --record {record}: {done.stderr.strip()[-300:]}")
        page = chaos.work / f"report-{dep.name}-{record}.html"
        done = dep.cli("report", record, "--output", str(page))
        if done.returncode != 0 or record not in page.read_text(errors="replace"):
            out.append(f"ledgerlake report {record}: {done.stderr.strip()[-300:]}")
        page.unlink(missing_ok=True)
    return out


def inbox_read(dep) -> tuple[int, int, list[str]]:
    """Events stored, dead letters, and problems: an event the sensor never read, a dead
    letter kept without its reason."""
    from resources.inbox import open_inbox
    from tests.conftest import dead_letters

    with open_inbox(dep.inbox) as inbox:
        events = inbox.after(0, 10_000_000)
        letters = dead_letters(inbox)
    with dep.instance() as instance:
        cursor = int(sensor_cursor(instance))
    out = [f"inbox event {e.id} ({e.method}) was never read by the sensor"
           for e in events if e.id > cursor]
    out += [f"a dead letter without a reason: {body[:80]!r}" for reason, body in letters
            if not reason.strip()]
    return len(events), len(letters), out


def duplicates_refused(chaos) -> int:
    """Deliveries the receivers answered as already stored (a redelivery, a doubled webhook)."""
    n = 0
    for dep in chaos.world.deployments.values():
        for log in dep.logs.glob("receiver-*.log"):
            n += log.read_text(errors="replace").count(" duplicate ")
    return n


def personal_values(chaos) -> list[str]:
    """Every record's BVN, NIN, phones and emails as the sandbox holds them (issue 20: none may
    appear in clear in a log, the Dagster event log, the inbox or the lake)."""
    out: set[str] = set()
    for record, rec in chaos.records.items():
        resp = chaos.api(rec.env).post("identity/get", json={"record": record})
        if resp.status_code != 200:  # a removed record's identity is not served any more
            continue
        for person in resp.json()["data"]["identity"]:
            out |= {person.get("bvn"), person.get("nin"), *(person.get("phone") or []),
                    *(person.get("email") or [])}
    return sorted(v for v in out if isinstance(v, str) and len(v) >= 6)


def secrets_shown(chaos, personal: list[str] = ()) -> list[str]:
    """Any secret (keys, webhook tokens, the database password) or personal value (`personal`)
    in a file the deployments wrote (logs, Dagster's storage and compute logs, inboxes,
    lakes) or in the production instance's event log in Postgres."""
    import psycopg2

    shown = [s.encode() for s in [*chaos.world.secrets, *personal] if s]
    out = []
    for dep in chaos.world.deployments.values():
        for path in dep.home.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                out += [f"a secret or personal value appears in {path.relative_to(chaos.work)}"
                        for s in shown if s in data][:1]
        if dep.on_s3:  # the lake's objects, read from the store
            store, _base, tables = lake_objects(dep.store_root)
            for info in (i for infos in tables.values() for i in infos):
                with store.open_input_stream(info.path) as f:
                    data = f.read()
                if any(sec in data for sec in shown):
                    out.append(f"a secret or personal value appears in {dep.name}'s lake "
                               f"object {info.path}")
        if dep.profile == "postgres":
            s = dep.settings
            con = psycopg2.connect(host=s["DAGSTER_PG_HOST"], port=s["DAGSTER_PG_PORT"],
                                   user=s["DAGSTER_PG_USER"], password=s["DAGSTER_PG_PASSWORD"],
                                   dbname=s["DAGSTER_PG_DB"])
            try:
                cur = con.cursor()
                for table, column in (("event_logs", "event"), ("runs", "run_body")):
                    cur.execute(f"select {column} from {table}")  # noqa: S608
                    for (text,) in cur:
                        if any(sec.decode() in (text or "") for sec in shown):
                            out.append(f"a secret or personal value appears in the Dagster "
                                       f"{table} table")
                            break
            finally:
                con.close()
    return out


# -- the table in docs/operations.md ------------------------------------------------------------

def table(out: dict) -> str:
    """The figures of a `make chaos` run, for docs/operations.md."""
    t = out["totals"]
    faults = ", ".join(f"{k} {v}" for k, v in sorted(t["faults"].items()))
    rows = [
        ("seeds", f"{len(out['seeds'])} ({', '.join(map(str, out['seeds']))}); "
                  f"{'all passed' if out['passed'] else 'FAILED'}"),
        ("faults injected, by kind", faults),
        ("restarts (after a SIGKILL, an outage, or an exit)", t["restarts"]),
        ("production's S3 store: faults injected / requests", f"{t['s3_faults']} / "
                                                              f"{t['s3_requests']}"),
        ("Postgres stopped hard and started again", t["postgres_restarts"]),
        ("erasures: customers forgotten / records erased (with production's disconnects)",
         f"{t['customers_forgotten']} / {t['records_erased']}"),
        ("lake files checked against their declared schema", t["lake_files_schema_checked"]),
        ("readers: questions / answered (accounts compared)",
         f"{t['reader_queries']} / {t['reader_answers']} ({t['reader_accounts_compared']})"),
        ("readers: seconds per question, median / slowest (a figure, not a check)",
         ", ".join(f"{q} {v['median']:.0f} / {v['max']:.0f}"
                   for q, v in t.get("reader_seconds", {}).items()) or "not measured"),
        ("readers' documented errors, by kind",
         ", ".join(f"{k} {v}" for k, v in sorted(t["reader_errors"].items())) or "none"),
        ("events received (stored once each) / deliveries / redelivered",
         f"{t['events_received']} / {t['deliveries']} / {t['redelivered']}"),
        ("records checked against the sandbox", t["records_checked"]),
        ("mismatches", t["mismatches"]),
        ("time to settle after the last fault (min / median / max)",
         f"{out['settle_s']['min']:.0f} / {out['settle_s']['median']:.0f} / "
         f"{out['settle_s']['max']:.0f} s"),
        ("wall time", f"{out['wall_s'] / 60:.0f} min, measured {out['measured_at']} "
                      f"({out['machine']['cpus']} cores, shared)"),
        ("code", f"{out['commit']}; changed since: "
                 f"{', '.join(out.get('changed_since', [])) or 'nothing the seeds ran'}"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
