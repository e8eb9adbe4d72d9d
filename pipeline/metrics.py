"""The pipeline's state as Prometheus metrics: `ledgerlake metrics` serves them on /metrics.

Its own small process rather than the receiver: the receiver faces the service, must start
without Dagster (an import-linter contract) and may run as several copies, while this state
lives in the inbox and the Dagster instance and is the same whoever reads it, so one process
beside the daemon serves it, and a scrape reads it then (a few aggregate queries: nothing is
kept between scrapes, so a restart loses nothing). The receiver's own counters (callbacks,
dead letters, commits) are on each receiver's /metrics (pipeline/receiver.py).

No label holds a record: labels are products, statuses and outcomes, a few dozen series
whatever the number of records. Times that an alert compares to now are exported as
timestamps (`_timestamp_seconds`, Prometheus's convention: `time() - x` is the age); ages
over many records (landing ages, the callbacks waiting) as seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from dagster import DagsterInstance
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from resources.config import Settings
from resources.inbox import FAILED, HELD, open_inbox

from . import watch
from .jobs import warehouse_job
from .status import PRODUCTS

log = logging.getLogger("ledgerlake.metrics")

STATUSES = ("connected", "disconnected", "reauth_required")
NAMESPACE = "ledgerlake"


def _gauge(name: str, doc: str, value: float | None = None, labels: tuple = ()
           ) -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"{NAMESPACE}_{name}", doc, labels=list(labels) or None)
    if value is not None:
        family.add_metric([], value)
    return family


class PipelineCollector(Collector):
    """Reads the inbox and the Dagster instance at each scrape."""

    def __init__(self, instance: Callable[[], DagsterInstance], settings: Settings) -> None:
        self.instance, self.settings = instance, settings

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.time()
        instance = self.instance()
        try:
            db = open_inbox(self.settings.inbox)
        except Exception as exc:  # the inbox's own state is unknown: say so, and go on
            log.error("metrics: the inbox does not answer: %s", exc)
            yield _gauge("inbox_up", "1 when the inbox answered this scrape", 0)
            db = None
        if db is not None:
            try:
                yield _gauge("inbox_up", "1 when the inbox answered this scrape", 1)
                yield from self._inbox(db, instance, now)
            finally:
                db.close()
        yield _gauge("daily_refresh_last_success_timestamp_seconds",
                     "End of the latest successful run of the daily refresh (0: none yet)",
                     watch.last_success(instance, tag=watch.REFRESH_TAG) or 0)
        yield _gauge("warehouse_last_build_timestamp_seconds",
                     "End of the latest successful warehouse build (0: none yet)",
                     watch.last_success(instance, job=warehouse_job.name) or 0)
        if self.settings.alerting.receiver_url:
            why = watch.receiver_answers(self.settings.alerting.receiver_url)
            yield _gauge("receiver_healthy", "1 when LEDGERLAKE_RECEIVER_URL's /health "
                         "answered 200 at this scrape", 0 if why else 1)

    def _inbox(self, db, instance: DagsterInstance, now: float) -> Iterator[GaugeMetricFamily]:
        vitals = db.vitals(watch.inbox_cursor(instance))
        yield _gauge("callbacks_waiting", "Callbacks stored that the inbox sensor has not "
                     "read yet (none of them is a run yet)", vitals.waiting)
        yield _gauge("callbacks_waiting_oldest_age_seconds", "Age of the oldest callback the "
                     "inbox sensor has not read (0: none waits)",
                     now - vitals.oldest_waiting_at if vitals.oldest_waiting_at else 0)
        yield _gauge("callbacks_last_received_timestamp_seconds", "When the newest callback "
                     "was stored (0: none yet)", vitals.last_received_at or 0)
        yield _gauge("inbox_events", "Events the inbox holds (its newest id)", vitals.last_event)
        yield _gauge("dead_letters", "Bodies the receivers kept as dead letters, in all",
                     vitals.dead_letters)
        records = _gauge("records", "Records by connection status", labels=("status",))
        for status in sorted({*STATUSES, *vitals.statuses}):
            records.add_metric([status], vitals.statuses.get(status, 0))
        yield records
        failing = _gauge("records_not_landed", "Records whose product's latest landing "
                         "failed (after every retry) or was held (a blocking check failed)",
                         labels=("product", "outcome"))
        landed = _gauge("records_landed", "Connected records whose product has landed",
                        labels=("product",))
        median = _gauge("landing_age_median_seconds", "Median, over connected records whose "
                        "product has landed, of the time since it last landed",
                        labels=("product",))
        oldest = _gauge("landing_age_max_seconds", "The longest, over connected records, "
                        "since a product last landed", labels=("product",))
        for product in PRODUCTS:
            for outcome in (FAILED, HELD):
                failing.add_metric([product, outcome], vitals.outcomes.get((product, outcome),
                                                                           0))
            count, mid, first = db.landing_ages(product)
            landed.add_metric([product], count)
            if count:  # no age where nothing landed: a rule sees no series, not a zero
                median.add_metric([product], now - mid)
                oldest.add_metric([product], now - first)
        yield from (failing, landed, median, oldest)


def registry(instance: Callable[[], DagsterInstance], settings: Settings) -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(PipelineCollector(instance, settings))
    return reg


def create_app(instance: DagsterInstance, settings: Settings):
    """The ASGI app: GET /metrics (each scrape reads the state then), GET /health."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    reg = registry(lambda: instance, settings)

    async def scrape(request):
        text = await run_in_threadpool(generate_latest, reg)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    async def health(request):
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/metrics", scrape, methods=["GET"]),
                             Route("/health", health, methods=["GET"])])
