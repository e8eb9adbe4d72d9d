"""Where a callback becomes a run: read the inbox by cursor, add partitions, request runs.

A ready product asks for a run of the assets that fetch it, keyed by the inbox event id, so a
sensor tick that is retried, or an event delivered twice, never starts a second run. A record's
callbacks in one tick make one run for that record; records of one tick that want the same
products and sit side by side in partition order (new records do: they are added in order)
share a run, at most NEW_PER_RUN of them, so two hundred new connections cost a dozen runs,
which the run launcher spreads over processes or pods. The periodic callbacks the service sends
for every record once a day are batched the same way, in ranges of at most RECORDS_PER_RUN.
Failures start nothing: they are reported as observations of the product, so they show in
the Dagster UI beside the data they concern. A connection event (a disconnect, a
reauthentication) refreshes `record_status`, and with it the warehouse.

The warehouse follows the lake by itself: `warehouse_follows_lake` rebuilds `record_status`
and `warehouse` when a lake table has moved past the version the last build read (its
`lake_versions`), one build at a time, so a thousand landed records cause a handful of builds
and a record that lands while a build runs is in the next one.
"""

from __future__ import annotations

from collections.abc import Iterable

from dagster import (
    AssetKey,
    AssetObservation,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    MetadataValue,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.partitions import RECORDS_PER_RUN, batches, records
from assets.warehouse import LAKE_TABLES
from resources.lake import Lake

from .config import Settings
from .forget import forget_disconnected
from .inbox import CONNECTED, Event
from .inbox_resource import InboxResource
from .jobs import forget_job, ingest_job, warehouse_job

BATCH = 500  # events per tick; a backlog drains over consecutive ticks
# records per run for callbacks of new records: small enough that a burst of connections is
# spread over several runs (the engine's parallelism), large enough that a run's start-up cost
# (a process, the code location loaded) is shared; bench/README.md measures the start cost
NEW_PER_RUN = 20
MIN_INTERVAL_S = 5
STATUS_ASSET = "record_status"

# (method, code) of a ready product -> the assets that fetch it. One line per product; an asset
# not (yet) in the Definitions is skipped, so a line may name a product before it exists.
READY: dict[tuple[str, str], tuple[str, ...]] = {
    ("AUTH", "AUTH_SUCCESS"): (),  # the connection exists: a partition, nothing to fetch yet
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
# the asset a failure of each method is reported on
FAILED_ON = {"INCOME": "income", "PAYMENT": "payments", "PAYMENT_RECURRING": "payments",
             "IDENTITY": "identity", "ACCOUNTS": "accounts", "BALANCE": "balances",
             "PERIODIC_BALANCE": "balances", "TRANSACTIONS": "transactions",
             "PERIODIC_TRANSACTIONS": "transactions"}
FAILED_CODES = {"INCOME_FAILED", "PAYMENT_FAILED"}
PERIODIC = {"PERIODIC_BALANCE", "PERIODIC_TRANSACTIONS"}  # sent for every record once a day


def is_failure(ev: Event) -> bool:
    return ev.status == "is_failed" or ev.code in FAILED_CODES


def plan(events: Iterable[Event], existing: set[str], status: dict[str, str],
         fetchable: set[str] | None = None, order: list[str] | None = None,
         forget: bool = False
         ) -> tuple[list[str], list[RunRequest], list[AssetObservation], list[str]]:
    """Partitions to add, runs to request, observations to report and lines to log.

    `existing` holds the asset names in the Definitions, `fetchable` those `ingest_job` can run
    (default: all of them); `status` each record's current status; `order` the records
    partition in its order (the partitions added here follow it), for batched ranges.
    `forget`: a USER_DISCONNECT also asks for a run of `forget_job` for its records.
    Within a batch, every event of one record (a connection's AUTH, ACCOUNTS, one BALANCE per
    account, TRANSACTIONS, INCOME...) makes one run of all the assets they ask for, keyed by
    the newest of them: a new record costs one run, and its income is checked against the
    transactions fetched in the same run. Records with nothing but periodic callbacks share
    batched runs.
    """
    fetchable = existing if fetchable is None else fetchable
    partitions: list[str] = []
    wanted: dict[str, tuple[dict[str, None], list[Event]]] = {}
    periodic: dict[str, tuple[dict[str, None], list[Event]]] = {}
    observations: list[AssetObservation] = []
    notes: list[str] = []
    moved: list[Event] = []  # connection events: record_status must be rebuilt
    requests_forget: list[RunRequest] = []
    for ev in events:
        if ev.kind == "connection":
            for record in ev.records:
                observations.append(_observe(STATUS_ASSET, None, ev, record=record,
                                             status=status.get(record, "unknown")))
            notes.append(f"event {ev.id}: {ev.method} for {', '.join(ev.records) or 'no record'}")
            moved.append(ev)
            if forget and ev.method == "USER_DISCONNECT" and ev.records:
                requests_forget.append(RunRequest(
                    run_key=f"forget-{ev.id}", job_name=forget_job.name,
                    run_config={"ops": {forget_disconnected.name: {
                        "config": {"records": list(ev.records)}}}},
                    tags={"ledgerlake/inbox_event": str(ev.id),
                          "ledgerlake/method": ev.method}))
            continue
        if ev.record is None:
            notes.append(f"event {ev.id}: {ev.method} {ev.code} names no record; ignored")
            continue
        if ev.record not in partitions:
            partitions.append(ev.record)
        if is_failure(ev):
            asset = FAILED_ON.get(ev.method)
            target = asset if asset in existing else STATUS_ASSET
            observations.append(_observe(target, ev.record if target == asset else None, ev,
                                         record=ev.record))
            notes.append(f"event {ev.id}: {ev.method} {ev.code} failed for {ev.record}")
            continue
        assets = READY.get((ev.method, ev.code))
        if assets is None:
            notes.append(f"event {ev.id}: {ev.method} {ev.code} is not a product we fetch")
            continue
        present = tuple(a for a in assets if a in fetchable)
        if not present:
            continue
        if status.get(ev.record, CONNECTED) != CONNECTED:
            notes.append(f"event {ev.id}: record {ev.record} is {status[ev.record]}; "
                         f"{ev.method} not fetched")
            continue
        into = periodic if ev.method in PERIODIC else wanted
        assets_of, evs = into.setdefault(ev.record, ({}, []))
        assets_of.update(dict.fromkeys(present))
        evs.append(ev)
    for record in [r for r in periodic if r in wanted]:  # it has a run of its own anyway
        assets, evs = periodic.pop(record)
        wanted[record][0].update(assets)
        wanted[record][1].extend(evs)
        wanted[record][1].sort(key=lambda e: e.id)
    observations = [o for o in observations if o.asset_key.to_user_string() in existing]
    requests = _batched_runs(wanted, order or [], partitions, size=NEW_PER_RUN, prefix="inbox",
                             alone_by_partition=True)
    requests += _batched_runs(periodic, order or [], partitions)
    if moved and STATUS_ASSET in existing:
        requests.append(RunRequest(
            run_key=f"status-{moved[-1].id}", job_name=warehouse_job.name,
            asset_selection=[AssetKey(STATUS_ASSET)],
            tags={"ledgerlake/inbox_event": str(moved[-1].id),
                  "ledgerlake/method": moved[-1].method or ""}))
    return partitions, requests + requests_forget, observations, notes


def _tags(evs: list[Event]) -> dict[str, str]:
    last = evs[-1]
    return {"ledgerlake/inbox_event": str(last.id), "ledgerlake/method": last.method or "",
            "ledgerlake/methods": ",".join(dict.fromkeys(e.method or "" for e in evs))[:1000],
            "ledgerlake/inbox_events": ",".join(str(e.id) for e in evs)[:1000]}


def _record_run(record: str, assets: dict[str, None], evs: list[Event]) -> RunRequest:
    return RunRequest(run_key=f"inbox-{evs[-1].id}", job_name=ingest_job.name,
                      partition_key=record, asset_selection=[AssetKey(a) for a in assets],
                      tags=_tags(evs))


def _batched_runs(wanted: dict[str, tuple[dict[str, None], list[Event]]], order: list[str],
                  added: list[str], *, size: int = RECORDS_PER_RUN, prefix: str = "periodic",
                  alone_by_partition: bool = False) -> list[RunRequest]:
    """The callbacks of many records: one run per product set and contiguous range of records
    in partition order (a range never takes in a record that did not call). With
    `alone_by_partition`, a record alone in its range is a run of its partition, keyed
    `inbox-<event>` as ever."""
    known = set(order)
    keys = list(order) + [p for p in added if p not in known]
    where = {k: i for i, k in enumerate(keys)}
    by_products: dict[tuple[str, ...], list[str]] = {}
    for record, (assets, _) in wanted.items():
        by_products.setdefault(tuple(sorted(assets)), []).append(record)
    requests = []
    for products, members in by_products.items():
        for start, end, n in batches(keys, set(members), size):
            if n == 1 and alone_by_partition:
                requests.append(_record_run(start, wanted[start][0], wanted[start][1]))
                continue
            span = keys[where[start]: where[end] + 1]  # every record in it called
            evs = sorted((e for r in span for e in wanted[r][1]), key=lambda e: e.id)
            requests.append(RunRequest(
                run_key=f"{prefix}-{evs[-1].id}-{'-'.join(products)}-{start}-{end}",
                job_name=ingest_job.name, asset_selection=[AssetKey(a) for a in products],
                tags={**_tags(evs), "dagster/asset_partition_range_start": start,
                      "dagster/asset_partition_range_end": end, "ledgerlake/records": str(n)}))
    return requests


def _observe(asset: str, partition: str | None, ev: Event, **extra) -> AssetObservation:
    body = ev.body
    message = body.get("message") if isinstance(body.get("message"), str) else ""
    return AssetObservation(
        asset_key=asset, partition=partition,
        metadata={"inbox_event": ev.id, "method": ev.method or "", "code": ev.code or "",
                  "callback_status": ev.status or "", "message": message[:500],
                  **{k: MetadataValue.text(str(v)) for k, v in extra.items()}},
    )


def asset_names(context: SensorEvaluationContext) -> tuple[set[str], set[str]]:
    """The assets in the Definitions, and those of them `ingest_job` can run."""
    repo = context.repository_def
    if repo is None:
        raise ValueError("the inbox sensor needs its Definitions to know which assets exist")
    job = repo.get_job(ingest_job.name)
    return ({key.to_user_string() for key in repo.asset_graph.get_all_asset_keys()},
            {key.to_user_string() for key in job.asset_layer.executable_asset_keys})


@sensor(jobs=[ingest_job, warehouse_job, forget_job], minimum_interval_seconds=MIN_INTERVAL_S,
        default_status=DefaultSensorStatus.RUNNING)
def inbox_sensor(context: SensorEvaluationContext, inbox: InboxResource):
    """Turn ready-product callbacks from the inbox into runs of the matching assets."""
    cursor = int(context.cursor or 0)
    with inbox.open() as db:
        events = db.after(cursor, BATCH)
        named = {r for ev in events for r in ev.records}
        status = {r: s.status for r, s in db.records(named).items()}
    if not events:
        return SkipReason(f"no inbox events after {cursor}")
    known, fetchable = asset_names(context)
    instance = context.instance
    order = instance.get_dynamic_partitions(records.name)
    partitions, requests, observations, notes = plan(
        events, known, status, fetchable, order,
        forget=Settings.from_env().forget_on_disconnect)
    for line in notes:
        context.log.info(line)
    existing = set(order)
    new = [p for p in partitions if p not in existing]
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[records.build_add_request(new)] if new else [],
        asset_events=observations,
        cursor=str(events[-1].id),
    )


BUILDING = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
            DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


def lake_versions(lake: Lake) -> dict[str, int]:
    """The current version of each lake table that exists (what a build would read)."""
    return {t: v for t in LAKE_TABLES if (v := lake.version(t)) is not None}


def built_versions(instance: DagsterInstance) -> dict[str, int] | None:
    """The lake table versions the last published warehouse read, None if it was never
    built (or its build named none)."""
    event = instance.get_latest_materialization_event(AssetKey("warehouse"))
    meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
    versions = getattr(meta.get("lake_versions"), "value", None)
    return versions if isinstance(versions, dict) else None


# New lake data reaches the views without a click. Versions, not times, say what is stale: the
# build reads the lake when it starts, so a record landing while it runs is not in the file it
# publishes; Dagster's automation conditions, which compare the times of materializations,
# counted such a build as newer than the landing and never built again (the chaos suite found
# the warehouse missing the last records of a burst until the next landing).
@sensor(job=warehouse_job, minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING)
def warehouse_follows_lake(context: SensorEvaluationContext, lake: Lake):
    """Rebuild record_status and the warehouse when the lake moved past the last build."""
    if context.instance.get_run_records(RunsFilter(job_name=warehouse_job.name,
                                                   statuses=BUILDING), limit=1):
        return SkipReason("a build is queued or running; the next tick compares again")
    now = lake_versions(lake)
    built = built_versions(context.instance)
    moved = sorted(t for t in now if built is None or built.get(t) != now[t])
    if built is not None and not moved:
        return SkipReason("the warehouse was built over the lake's latest versions")
    # never built: the views exist (empty) before anything lands
    return RunRequest(tags={"ledgerlake/lake_moved": ",".join(
        f"{t}={now[t]}" for t in moved)[:1000] or "never built"})
