"""Freshness: every connected record's balances and transactions landed within 26 hours.

The service calls back with each record's periodic products daily and `daily_refresh` fetches
every connected record besides, so 26 hours leaves two of slack; a disconnected record, one
waiting for reauthentication and one whose product never landed are never stale. Dagster's
own freshness judges an asset by its latest materialization, where a batch of fresh records
would hide stale ones, so each product gets an asset check that asks per record, in one
indexed read of the inbox (docs/operations.md, "Charts and freshness").
"""

# no `from __future__ import annotations`: Dagster reads the context's type hint at runtime
import time
from datetime import timedelta

import dagster as dg

from resources.inbox.resource import InboxResource

MAX_AGE = timedelta(hours=26)
CHECKED = ("balances", "transactions")
CHECK_NAME = "connected_records_fresh"
SHOWN = 20
clock = time.time  # the checks' "now" (a test moves it a day on)


def freshness_check(asset: str) -> dg.AssetChecksDefinition:
    hours = int(MAX_AGE.total_seconds() // 3600)

    @dg.asset_check(asset=asset, name=CHECK_NAME, blocking=False,
                    description=f"every connected record's {asset} landed within the last "
                                f"{hours} hours (disconnected records, and those waiting "
                                f"for reauthentication, are not expected to refresh)")
    def check(context: dg.AssetCheckExecutionContext,
              inbox: InboxResource) -> dg.AssetCheckResult:
        cutoff = clock() - MAX_AGE.total_seconds()
        with inbox.open() as db:
            expected, stale, first = db.stale(asset, cutoff, SHOWN)
            numbers = db.numbers(first)  # Dagster names a record by its number
        return dg.AssetCheckResult(
            passed=not stale, severity=dg.AssetCheckSeverity.WARN,
            description=None if not stale else
            f"{stale} of {expected} connected records not refreshed in {hours} hours",
            metadata={"connected_records": expected, "stale_records": stale,
                      "stale": dg.MetadataValue.json([numbers[r] for r in first if r in numbers]),
                      "cutoff": dg.MetadataValue.timestamp(cutoff)})

    return check


freshness_checks = [freshness_check(a) for a in CHECKED]
freshness_job = dg.define_asset_job(
    "freshness_job", selection=dg.AssetSelection.checks(*freshness_checks),
    description="Every connected record's balances and transactions younger than "
                f"{int(MAX_AGE.total_seconds() // 3600)} hours (pipeline/freshness.py)")
hourly_freshness = dg.ScheduleDefinition(
    name="hourly_freshness", job=freshness_job, cron_schedule="41 * * * *",
    execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Evaluate the freshness checks of balances and transactions")
