"""The net under lost runs: a product called back for, then never landed, is fetched again.

The inbox sensor turns a callback into a run once (its cursor moves on), and Dagster retries a
run that dies; but a run can still be lost before any step writes: the queue fails a run it
cannot launch, Dagster makes a run retry once and never again if that fails (both while
Postgres restarts under the code server: a chaos seed lost a batch's accounts, identity and
income so), an operator deletes a queued run. Transactions and balances come back with the next
day's periodic callbacks; accounts, identity and income would not.

So, once no fetching run is queued or in progress, `lost_fetches` reads the callbacks of
connected records received since it last looked (each once, GRACE_S after it came, so the
inbox sensor has long asked for its run) and asks again for each product whose landing (the
inbox's `landings`, written by every run that reaches the product, whatever its outcome)
is older than the callback, by the inbox sensor's own rules (`route`, `batched_runs`). A
product that keeps failing is a landing (`failed`) and an alert, not a loss: it is not asked
for again here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from dagster import (
    DefaultSensorStatus,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from resources.inbox import CONNECTED, Event, Inbox, Product
from resources.inbox.resource import InboxResource

from .jobs import ingest_job, refresh_job
from .sensors import NEW_PER_RUN, PARALLEL, Ask, asset_names, batched_runs, route
from .watch import RUNNING

GRACE_S = 120.0  # a callback this old has had its run asked for (the inbox sensor ticks: 5 s)
INTERVAL_S = 30
LIMIT = 10_000  # callbacks read a tick; more wait for the next


def undone(announced: Iterable[tuple[str, str, Product]], landed: Mapping[tuple[str, str], float],
           numbers: Mapping[str, int], known: set[str], fetchable: set[str]) -> list[Ask]:
    """The fetches these callbacks ask for (by `route`) whose every product's last landing
    (`landed`: by record and product, when) is older than the callback, or missing."""
    asks = []
    for record, method, p in announced:
        ev = Event(p.event, "callback", method, p.code, p.status, record, None, {},
                   p.received_at)
        ask = route(ev, known, fetchable, {record: CONNECTED}, numbers)
        if ask.kind in ("fetch", "periodic") and all(
                landed.get((record, a), float("-inf")) < p.received_at for a in ask.assets):
            asks.append(ask._replace(kind="fetch"))
    return asks


def read(db: Inbox, since: float, until: float) -> tuple[list[tuple[str, str, Product]], float]:
    """The callbacks received in (since, until] this look reads, and how far it reached:
    `until`, or, when LIMIT cut it, the last time it read whole. A batch of callbacks is
    stored at one time, so a cut inside it ends the look before it (the next look reads it
    whole), unless the batch alone fills the limit: then it is read whole now."""
    announced = db.announced(since, until, LIMIT)
    if len(announced) < LIMIT:
        return announced, until
    last = announced[-1][2].received_at
    whole = [a for a in announced if a[2].received_at < last]
    if whole:
        return whole, whole[-1][2].received_at
    return db.announced(since, last, 2**31 - 1), last


def look(db: Inbox, since: float, until: float, known: set[str], fetchable: set[str]
         ) -> tuple[list[Ask], dict[str, int], float]:
    """The lost fetches among callbacks received in (since, until], the records' numbers,
    and how far this look reached (see `read`)."""
    announced, reached = read(db, since, until)
    records = {r for r, _, _ in announced}
    landed = {(s.record, s.product): s.at for s in db.landings(records)}
    numbers = db.numbers(records)
    return undone(announced, landed, numbers, known, fetchable), numbers, reached


@sensor(job=ingest_job, minimum_interval_seconds=INTERVAL_S,
        default_status=DefaultSensorStatus.RUNNING)
def lost_fetches(context: SensorEvaluationContext, inbox: InboxResource):
    """Ask again for products called back for and never landed, once no fetch is under way."""
    for job in (ingest_job, refresh_job):
        if context.instance.get_run_records(RunsFilter(job_name=job.name, statuses=RUNNING),
                                            limit=1):
            return SkipReason(f"{job.name} runs are queued or in progress: what they fetch "
                              "may still land")
    since, until = float(context.cursor or 0), time.time() - GRACE_S
    if until <= since:
        return SkipReason("no callback has come since the last look")
    known, fetchable = asset_names(context)
    with inbox.open() as db:
        asks, numbers, reached = look(db, since, until, known, fetchable)
    requests = batched_runs(asks, numbers, NEW_PER_RUN, "lost", PARALLEL)
    if asks:
        context.log.warning(f"{len(asks)} fetch(es) asked for by callbacks never landed: "
                            f"asked again in {len(requests)} run(s)")
    return SensorResult(run_requests=requests, cursor=repr(reached))
