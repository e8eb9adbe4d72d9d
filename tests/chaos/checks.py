"""What the chaos suite (tests/chaos/run.py) checks once the system has settled, and the figures it
reports. Every check reads a real store: the sandbox's API with each environment's secret key
(the ground truth, tests/ground_truth.py), the lake's Delta tables and their logs, the
warehouse file, each deployment's inbox and Dagster instance, and every file the deployments
wrote (for secrets)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.sensors import BUILDING, built_versions, lake_versions, stale_views
from resources.lake import Lake
from tests.ground_truth import duplicates, lake_rows, pictures, truth

FETCHED = ("accounts", "balances", "transactions", "income", "identity")


# -- the lake's own log --------------------------------------------------------------------------

def log_adds(table: Path) -> set[str]:
    """Every data file any version of a Delta table ever added (its commits and checkpoints)."""
    names = set()
    for entry in sorted((table / "_delta_log").iterdir()):
        if entry.name.endswith(".json"):
            for line in entry.read_bytes().splitlines():
                action = orjson.loads(line) if line.strip() else {}
                if "add" in action:
                    names.add(unquote(action["add"]["path"]))
        elif entry.name.endswith(".checkpoint.parquet"):
            adds = pq.read_table(entry, columns=["add"]).column("add").to_pylist()
            names |= {unquote(a["path"]) for a in adds if a}
    return names


def referenced(table: Path, name: str) -> bool:
    """Whether a data file was committed by some version of its table."""
    return name in log_adds(table)


def lake_leftovers(lake: Path) -> tuple[list[str], dict[str, int]]:
    """Problems (a temporary file in a Delta log that nothing removes, a file the latest
    version names but that is missing) and what killed writers left that the lake's vacuum
    removes once older than its retention: data files no version ever committed, and files
    under object_store's staging names (`part-...parquet#1`, `_delta_log/N.json#1`)."""
    from deltalake import DeltaTable

    from resources.delta import STAGED

    problems, left = [], {"data files never committed": 0, "staged files": 0}
    for table in sorted(p for p in lake.iterdir() if (p / "_delta_log").is_dir()):
        for p in (table / "_delta_log").iterdir():
            if STAGED.search(p.name):
                left["staged files"] += 1
            elif ".tmp" in p.name:
                problems.append(f"{table.name}: temporary log file {p.name} left behind")
        problems += [f"{table.name}: its latest version names {Path(f).name}, which is missing"
                     for f in DeltaTable(str(table)).file_uris()
                     if not Path(f.removeprefix("file://")).exists()]
        adds = log_adds(table)
        for p in table.iterdir():
            if STAGED.search(p.name):
                left["staged files"] += 1
            elif p.suffix == ".parquet" and p.name not in adds:
                left["data files never committed"] += 1
    return problems, left


# -- settled? --------------------------------------------------------------------------------------

def sensor_cursor(instance) -> int:
    from dagster._core.scheduler.instigation import InstigatorType

    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.name == "inbox_sensor":
            return int(getattr(state.instigator_data, "cursor", None) or 0)
    return 0


def quiet(dep) -> bool | str:
    """True once the deployment has nothing left to do: its processes up, its inbox read to
    the end, no run queued or in progress, every view built over the lake's latest
    versions. Otherwise what it is still doing."""
    from dagster import RunsFilter

    from resources.inbox import open_inbox

    if dep.daemon is None or dep.daemon.poll() is not None:
        return "its daemon is down"
    if not dep.receivers_up():
        return "a receiver does not answer"
    with dep.instance() as instance:
        cursor = sensor_cursor(instance)
        with open_inbox(dep.inbox) as inbox:
            unread = inbox.after(cursor, 1)
        if unread:
            return f"inbox events after the sensor's cursor {cursor}"
        busy = instance.get_run_records(RunsFilter(statuses=BUILDING))
        if busy:
            return f"{len(busy)} run(s) queued or in progress"
        built = built_versions(instance)
    now = lake_versions(Lake(root=str(dep.lake)))
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
    records_checked = mismatches = 0
    orphans: dict[str, dict[str, int]] = {}
    received = dead = 0
    for env, dep in chaos.world.deployments.items():
        api = chaos.api(env)
        rows = lake_rows(Lake(root=str(dep.lake)))
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
        leftover, orphans[env] = lake_leftovers(dep.lake)
        problems += [f"{env}: {p}" for p in leftover]
        problems += [f"{env}: {p}" for p in warehouse(dep)]
        read, letters, said = inbox_read(dep)
        received += read
        dead += letters
        problems += [f"{env}: {p}" for p in said]
    problems += secrets_shown(chaos, personal_values(chaos))
    deliveries = chaos.world.delivery_log()
    report = chaos.api("sandbox").get("sandbox/faults").json()["data"]
    return {
        "problems": problems,
        "records_checked": records_checked,
        "mismatches": mismatches,
        "events": {
            "received": received,  # stored in the inboxes: each once
            "deliveries": len(deliveries),
            "redelivered": sum(1 for d in deliveries if d[4] > 1),
            "attempts": sum(d[4] for d in deliveries),
            "dropped": sum(1 for d in deliveries if d[3] == "dropped"),
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
    table = Lake(root=str(dep.lake)).read("payments", schema=pa.schema(
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
    table = Lake(root=str(dep.lake)).read("landings", schema=pa.schema([
        ("record_id", pa.string()), ("product", pa.string()), ("run_id", pa.string()),
        ("outcome", pa.string()), ("landed_at", pa.timestamp("ms", "UTC"))]))
    return [] if table is None else table.to_pylist()


def statuses(chaos, env: str, dep) -> list[str]:
    """Disconnected and reauthenticated records: their status in the inbox, and no run created
    after the inbox heard of it fetched them (the lake's `landings`: which run fetched which
    record, and the instance: when that run was created)."""
    from resources.inbox import open_inbox

    moved = {r: rec for r, rec in chaos.records.items() if rec.env == env
             and rec.state != "connected"}
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
    table = Lake(root=str(dep.lake)).read("balance_history", schema=pa.schema(
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
        con = duckdb.connect(str(dep.warehouse), read_only=True)
        try:
            (n,) = con.execute("select count(*) from transactions").fetchone()
        finally:
            con.close()
    except duckdb.Error as exc:
        return [*out, f"the warehouse does not answer: {exc}"]
    rows = Lake(root=str(dep.lake)).read("transactions", schema=pa.schema(
        [("transaction_id", pa.string())]))
    if n != (0 if rows is None else rows.num_rows):
        out.append(f"the warehouse's transactions view holds {n} rows, the lake "
                   f"{rows.num_rows if rows is not None else 0}")
    return out


def inbox_read(dep) -> tuple[int, int, list[str]]:
    """Events stored, dead letters, and problems: an event the sensor never read, a dead
    letter kept without its reason."""
    from resources.inbox import open_inbox

    with open_inbox(dep.inbox) as inbox:
        events = inbox.after(0, 10_000_000)
        letters = inbox.dead_letters()
    with dep.instance() as instance:
        cursor = sensor_cursor(instance)
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
        ("restarts (after a SIGKILL, or an outage)", t["restarts"]),
        ("events received (stored once each) / deliveries / redelivered",
         f"{t['events_received']} / {t['deliveries']} / {t['redelivered']}"),
        ("records checked against the sandbox", t["records_checked"]),
        ("mismatches", t["mismatches"]),
        ("time to settle after the last fault (min / median / max)",
         f"{out['settle_s']['min']:.0f} / {out['settle_s']['median']:.0f} / "
         f"{out['settle_s']['max']:.0f} s"),
        ("wall time", f"{out['wall_s'] / 60:.0f} min, measured {out['measured_at']} "
                      f"({out['machine']['cpus']} cores, shared)"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
