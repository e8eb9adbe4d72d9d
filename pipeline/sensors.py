"""Where a callback becomes a run: read the inbox by cursor, request runs over batches.

A tick reads the inbox's new events (at most BATCH), and asks only about the records they
name: its cost is that of its new callbacks, whatever the number of records. Ready products
ask for runs of the assets that fetch them, each run over a batch of records given in its
config (assets/batch.py), keyed by the newest inbox event it serves, so a tick that is retried,
or an event delivered twice, never starts a second run. A record's callbacks in one tick make
one run for that record's products, with the other records that want the same ones: a burst
of connections is spread over as many runs as the instance runs at once, which the run
launcher spreads over processes or pods; the periodic callbacks the service sends for every
record once a day are batched by RECORDS_PER_RUN. Failures start nothing: they are
reported as observations of the product, a tick's failures of one asset in one, so they show in
the Dagster UI beside the data they concern. A connection event (a disconnect, a
reauthentication) refreshes `record_status`, and with it the warehouse.

The warehouse follows the lake by itself: `warehouse_follows_lake` rebuilds `record_status`,
and each view whose lake tables moved past the versions its last build read (its
`lake_versions`), with the views that read it, one build at a time, so a thousand landed
records cause a handful of builds and a record that lands while a build runs is in the next.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Literal, NamedTuple

from dagster import (
    AssetKey,
    AssetObservation,
    DagsterInstance,
    DefaultSensorStatus,
    MetadataValue,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.batch import RECORDS_PER_RUN, batch_config, record_tags
from assets.publish import record_label
from assets.warehouse import LAKE_TABLES, VIEWS, built_together, derived_of, view_key, view_reads
from resources.inbox import CONNECTED, Event
from resources.inbox.resource import InboxResource
from resources.lake import Lake

from .forget import forget_disconnected
from .jobs import forget_job, ingest_job, warehouse_job
from .status import PRODUCTS
from .watch import RUNNING as BUILDING  # a build queued or under way

BATCH = 2000  # events per tick; a backlog drains over consecutive ticks
# A burst of new records' callbacks is spread over as many runs as the instance runs at once
# (the engine's parallelism), each of at least NEW_PER_RUN records, so that a run's start (a
# process, the code location loaded: seconds) is shared, and at most RECORDS_PER_RUN.
NEW_PER_RUN = 20
PARALLEL = 4  # runs at once where the instance sets no limit (dagster.yaml sets 4)
MIN_INTERVAL_S = 5
FIRST_EVENTS = 20  # failure callbacks an observation lists
STATUS_ASSET = "record_status"

# (method, code) of a ready product -> the assets that fetch it. One line per product; an asset
# not (yet) in the Definitions is skipped, so a line may name a product before it exists.
READY: dict[tuple[str, str], tuple[str, ...]] = {
    # a new connection: its payments, none yet, land empty (the service lists no payments:
    # they come with PAYMENT callbacks), so the asset says "0 payments", not "missing"
    ("AUTH", "AUTH_SUCCESS"): ("payments",),
    ("IDENTITY", "PRODUCT_IS_READY"): ("identity",),
    ("ACCOUNTS", "ACCOUNTS_SUCCESS"): ("accounts",),
    ("BALANCE", "BALANCE_SUCCESS"): ("balances",),
    ("PERIODIC_BALANCE", "BALANCE_SUCCESS"): ("balances",),
    ("TRANSACTIONS", "PRODUCT_IS_READY"): ("transactions",),
    ("PERIODIC_TRANSACTIONS", "PRODUCT_IS_READY"): ("transactions",),
    ("INCOME", "PRODUCT_IS_READY"): ("income",),
    ("PAYMENT", "PAYMENT_SUCCESS"): ("payments",),
    ("PAYMENT_RECURRING", "PAYMENT_SUCCESS"): ("payments",),
}
# the asset a failure of each method is reported on: the product the method announces
FAILED_ON = {method: asset for asset, methods in PRODUCTS.items() for method in methods}
FAILED_CODES = {"INCOME_FAILED", "PAYMENT_FAILED"}
PERIODIC = {"PERIODIC_BALANCE", "PERIODIC_TRANSACTIONS"}  # sent for every record once a day


class Ask(NamedTuple):
    """What one inbox event asks for: a fetch of `assets`, a periodic refresh of them, a
    failure to report on `assets[0]`, a connection change, or nothing; `why`: that, in a line
    (the sensor logs those of connection changes and of events that ask for nothing: runs and
    observations speak for the others)."""
    kind: Literal["fetch", "periodic", "failure", "connection", "nothing"]
    event: Event
    assets: tuple[str, ...]
    why: str


def plan(events: Iterable[Event], existing: set[str], status: dict[str, str],
         numbers: Mapping[str, int], fetchable: set[str] | None = None, forget: bool = False,
         parallel: int = PARALLEL
         ) -> tuple[list[RunRequest], list[AssetObservation], list[str]]:
    """Runs to request, observations to report and lines to log: what each event asks for
    (`route`), then the fetches grouped into runs, the failures into observations.

    `existing` holds the asset names in the Definitions, `fetchable` those `ingest_job` can run
    (default: all of them); `status` each record's status, `numbers` its number (none:
    forgotten). `forget`: a USER_DISCONNECT also asks for a run of `forget_job` for its
    records. `parallel`: the runs the instance runs at once, over which a burst of new records
    is spread.
    """
    fetchable = existing if fetchable is None else fetchable
    asks = [route(ev, existing, fetchable, status, numbers) for ev in events]
    fetches = [a for a in asks if a.kind == "fetch"]
    fresh = {a.event.record for a in fetches}
    refreshes = [a for a in asks if a.kind == "periodic"]
    # all a record's fetches (AUTH, ACCOUNTS, a BALANCE per account, TRANSACTIONS, INCOME...)
    # in one run, so its income is checked against the transactions fetched with it, and its
    # periodic refreshes along; records with only periodic refreshes share bigger batches
    runs = batched_runs(fetches + [a for a in refreshes if a.event.record in fresh], numbers,
                        NEW_PER_RUN, "inbox", parallel)
    runs += batched_runs([a for a in refreshes if a.event.record not in fresh], numbers,
                         RECORDS_PER_RUN, "periodic")
    failures: dict[str, list[Event]] = {}
    for ask in (a for a in asks if a.kind == "failure"):
        failures.setdefault(ask.assets[0], []).append(ask.event)
    observations = [_observe(asset, evs, status, numbers) for asset, evs in failures.items()
                    if asset in existing]
    lines = [a.why for a in asks if a.kind in ("connection", "nothing")] + [
        f"{len(evs)} failure callbacks reported on {asset}" for asset, evs in failures.items()]
    moved = [a.event for a in asks if a.kind == "connection"]
    return runs + _connection_runs(moved, existing, numbers, forget), observations, lines


def route(ev: Event, existing: set[str], fetchable: set[str], status: dict[str, str],
          numbers: Mapping[str, int]) -> Ask:
    """What one event asks for (the arguments as `plan`'s)."""
    if ev.kind == "connection":
        return Ask("connection", ev, (),
                   f"event {ev.id}: {ev.method} for {_record_names(ev.records, numbers)}")
    said = f"event {ev.id}: {ev.method} {ev.code}"
    if ev.record is None:
        return Ask("nothing", ev, (), f"{said} names no record; ignored")
    if ev.record not in numbers:
        return Ask("nothing", ev, (), f"{said}: its record was forgotten since; ignored")
    if ev.status == "is_failed" or ev.code in FAILED_CODES:
        asset = FAILED_ON.get(ev.method)
        on = asset if asset in existing else STATUS_ASSET
        return Ask("failure", ev, (on,), f"{said} failed; reported on {on}")
    assets = READY.get((ev.method, ev.code))
    if assets is None:
        return Ask("nothing", ev, (), f"{said} is not a product we fetch")
    present = tuple(a for a in assets if a in fetchable)
    if not present:
        return Ask("nothing", ev, (), f"{said}: {', '.join(assets)} not in this deployment's "
                                      f"{ingest_job.name}; ignored")
    if (state := status.get(ev.record, CONNECTED)) != CONNECTED:
        return Ask("nothing", ev, (), f"event {ev.id}: {_record_names([ev.record], numbers)} "
                                      f"is {state}; {ev.method} not fetched")
    kind = "periodic" if ev.method in PERIODIC else "fetch"
    return Ask(kind, ev, present, f"{said} asks for a {kind} of {', '.join(present)}")


def _record_names(records: Iterable[str], numbers: Mapping[str, int]) -> str:
    return ", ".join(record_label(numbers.get(r)) for r in records) or "no record"


def _connection_runs(moved: list[Event], existing: set[str], numbers: Mapping[str, int],
                     forget: bool) -> list[RunRequest]:
    """A rebuild of record_status after connection events, keyed by the last; with `forget`,
    one run of `forget_job` for the records the tick's USER_DISCONNECTs name, keyed by the
    last of them (a run each would queue behind each other, one erasure at a time)."""
    runs = []
    if moved and STATUS_ASSET in existing:
        last = moved[-1]
        runs.append(RunRequest(
            run_key=f"status-{last.id}", job_name=warehouse_job.name,
            asset_selection=[AssetKey(STATUS_ASSET)],
            tags={"ledgerlake/inbox_event": str(last.id), "ledgerlake/method": last.method or ""}))
    gone = [ev for ev in moved if forget and ev.method == "USER_DISCONNECT" and ev.records]
    if gone:
        once = dict.fromkeys(numbers[r] for ev in gone for r in ev.records if r in numbers)
        runs.append(RunRequest(
            run_key=f"forget-{gone[-1].id}", job_name=forget_job.name,
            run_config={"ops": {forget_disconnected.name: {"config": {"records": [*once]}}}},
            tags={"ledgerlake/inbox_event": str(gone[-1].id),
                  "ledgerlake/method": "USER_DISCONNECT"}))
    return runs


def batched_runs(asks: list[Ask], numbers: Mapping[str, int], least: int, prefix: str,
                 parallel: int = 1) -> list[RunRequest]:
    """The records that ask for a product set, in the order they first asked, spread over
    `parallel` runs of at least `least` and at most RECORDS_PER_RUN records; each keyed by the
    set and the newest event it serves."""
    wanted: dict[str, tuple[dict[str, None], list[Event]]] = {}
    for ask in asks:
        assets, evs = wanted.setdefault(ask.event.record or "", ({}, []))
        assets.update(dict.fromkeys(ask.assets))
        evs.append(ask.event)
    by_products: dict[tuple[str, ...], list[str]] = {}
    for record, (assets, _) in wanted.items():
        by_products.setdefault(tuple(sorted(assets)), []).append(record)
    requests = []
    for products, members in by_products.items():
        size = min(RECORDS_PER_RUN, max(least, -(-len(members) // max(parallel, 1))))
        for at in range(0, len(members), size):
            batch = members[at:at + size]
            evs = sorted((e for r in batch for e in wanted[r][1]), key=lambda e: e.id)
            last = evs[-1]
            requests.append(RunRequest(
                run_key=f"{prefix}-{last.id}-{'-'.join(products)}", job_name=ingest_job.name,
                asset_selection=[AssetKey(a) for a in products],
                run_config=batch_config([numbers[r] for r in batch]),
                tags={"ledgerlake/inbox_event": str(last.id), "ledgerlake/method": last.method
                      or "", "ledgerlake/methods": ",".join(dict.fromkeys(
                          e.method or "" for e in evs))[:1000],
                      **record_tags([numbers[r] for r in batch])}))
    return requests


def _observe(asset: str, evs: list[Event], status: dict[str, str],
             numbers: Mapping[str, int]) -> AssetObservation:
    """A tick's failure callbacks of one asset: how many, and the first few."""
    def message(ev: Event) -> str:
        text = ev.body.get("message")
        return text[:200] if isinstance(text, str) else ""

    return AssetObservation(asset_key=asset, metadata={
        "failure_callbacks": len(evs), "records": len({e.record for e in evs}),
        "first_events": MetadataValue.json([
            {"inbox_event": e.id, "record": numbers.get(e.record or ""), "method": e.method,
             "code": e.code,
             "callback_status": e.status, "message": message(e),
             "record_status": status.get(e.record or "", "unknown")}
            for e in evs[:FIRST_EVENTS]])})


def asset_names(context: SensorEvaluationContext) -> tuple[set[str], set[str]]:
    """The assets in the Definitions, and those of them `ingest_job` can run."""
    repo = context.repository_def
    if repo is None:
        raise ValueError("the inbox sensor needs its Definitions to know which assets exist")
    job = repo.get_job(ingest_job.name)
    return ({key.to_user_string() for key in repo.asset_graph.get_all_asset_keys()},
            {key.to_user_string() for key in job.asset_layer.executable_asset_keys})


def inbox_sensor(forget_on_disconnect: bool = False) -> SensorDefinition:
    """The sensor turning ready-product callbacks into runs. `forget_on_disconnect`
    (LEDGERLAKE_FORGET_ON_DISCONNECT, read once by pipeline/definitions.py): a tick's
    USER_DISCONNECTs also start a run of `forget_job` (`plan`'s `forget`)."""
    @sensor(name="inbox_sensor", jobs=[ingest_job, warehouse_job, forget_job],
            minimum_interval_seconds=MIN_INTERVAL_S, default_status=DefaultSensorStatus.RUNNING)
    def tick(context: SensorEvaluationContext, inbox: InboxResource):
        """Turn ready-product callbacks from the inbox into runs of the matching assets."""
        cursor = int(context.cursor or 0)
        with inbox.open() as db:
            events = db.after(cursor, BATCH)
            mentioned = {r for ev in events for r in ev.records}
            status = {r: s.status for r, s in db.records(mentioned).items()}
            numbers = db.numbers(mentioned)
        if not events:
            return SkipReason(f"no inbox events after {cursor}")
        known, fetchable = asset_names(context)
        # no run queue (an ephemeral instance, the default run coordinator): no limit to read
        queue = context.instance.get_concurrency_config().run_queue_config
        runs = queue.max_concurrent_runs if queue is not None else 0
        requests, observations, lines = plan(events, known, status, numbers, fetchable,
                                             forget=forget_on_disconnect,
                                             parallel=runs if runs > 0 else PARALLEL)
        for line in lines:
            context.log.info(line)
        return SensorResult(run_requests=requests, asset_events=observations,
                            cursor=str(events[-1].id))
    return tick


def lake_versions(lake: Lake) -> dict[str, int]:
    """The current version of each lake table that exists (what a build would read)."""
    return {t: v for t in LAKE_TABLES if (v := lake.version(t)) is not None}


def built_versions(instance: DagsterInstance) -> dict[str, dict[str, int] | None]:
    """Per view, the versions of the lake tables it reads that its last build read, None if
    it was never built."""
    events = instance.get_latest_materialization_events([view_key(v.name) for v in VIEWS])
    out = {}
    for view in VIEWS:
        event = events.get(view_key(view.name))
        meta = event.asset_materialization.metadata if event and event.asset_materialization \
            else {}
        versions = getattr(meta.get("lake_versions"), "value", None)
        out[view.name] = versions if isinstance(versions, dict) else None
    return out


def stale_views(now: Mapping[str, int], built: Mapping[str, dict | None],
                rewritten: Collection[str] = ()) -> list[str]:
    """The views never built or built over other versions of the tables they read, or
    reading a table in `rewritten`, with the views that read them (in dependency order)."""
    stale: list[str] = []
    for view in VIEWS:  # each after the views it needs
        was, reads = built.get(view.name), view_reads(view)
        if was is None or any(was.get(t) != now.get(t) for t in reads) or \
                set(view.needs) & set(stale) or set(reads) & set(rewritten):
            stale.append(view.name)
    return stale


# New lake data reaches the views without a click. Versions, not times, say what is stale: the
# build reads the lake when it starts, so a record landing while it runs is not in the file it
# publishes; Dagster's automation conditions, which compare the times of materializations,
# counted such a build as newer than the landing and never built again (the chaos suite found
# the warehouse missing the last records of a burst until the next landing).
@sensor(job=warehouse_job, minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING)
def warehouse_follows_lake(context: SensorEvaluationContext, lake: Lake):
    """Rebuild record_status, and the views whose lake tables moved past their last build."""
    if context.instance.get_run_records(RunsFilter(job_name=warehouse_job.name,
                                                   statuses=BUILDING), limit=1):
        return SkipReason("a build is queued or running; the next tick compares again")
    now = lake_versions(lake)
    built = built_versions(context.instance)
    if not stale_views(now, built):
        return SkipReason("every view was built over the lake's latest versions")
    # record_status rewrites `records` in the run: the views reading it are rebuilt after it
    stale = built_together(stale_views(now, built, rewritten={"records"}))
    # never built: the views exist (empty) before anything lands
    moved = sorted({f"{t}={now[t]}" for v in VIEWS if v.name in stale
                    and (was := built[v.name]) is not None
                    for t in view_reads(v) if t in now and was.get(t) != now[t]})
    # the derived lake tables those views read are derived again in the same run
    derived = derived_of(v for v in VIEWS if v.name in stale)
    return RunRequest(asset_selection=[AssetKey(STATUS_ASSET), *map(AssetKey, derived),
                                       *map(view_key, stale)], tags={
        "ledgerlake/lake_moved": ",".join(moved)[:1000] or "never built",
        "ledgerlake/views": ",".join(stale)[:1000]})
