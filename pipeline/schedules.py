"""Schedules: the daily refresh of every connected record, and the hourly replay.

The daily refresh fetches balances and transactions of every connected record, in batches;
each day it also pulls a seventh of the records' transaction histories whole (the full
reconcile that catches lines posted back-dated: assets/transactions.py), so every record is
reconciled once a week (LEDGERLAKE_RECONCILE_DAYS).

Disconnected records and those waiting for reauthentication are skipped (their data stays
in the lake). A batch is a contiguous range of the records partition, at most
RECORDS_PER_RUN long, so ten thousand records cost about a hundred runs.
"""

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from assets.partitions import batches, records

from .inbox_resource import InboxResource
from .jobs import refresh_job, replay_job

REFRESHABLE = {None, "connected"}  # None: a record the inbox never heard of (added by hand)


@schedule(job=refresh_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
          default_status=DefaultScheduleStatus.RUNNING)
def daily_refresh(context: ScheduleEvaluationContext, inbox: InboxResource):
    """Refresh balances and transactions of connected records, once a day."""
    keys = context.instance.get_dynamic_partitions(records.name)
    with inbox.open() as db:
        states = db.records(keys)
    eligible = {k for k in keys if (states[k].status if k in states else None) in REFRESHABLE}
    if not eligible:
        return SkipReason(f"none of {len(keys)} records is connected")
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return [
        RunRequest(
            run_key=f"refresh-{day}-{start}-{end}",
            tags={"dagster/asset_partition_range_start": start,
                  "dagster/asset_partition_range_end": end,
                  "ledgerlake/schedule": "daily_refresh", "ledgerlake/records": str(n),
                  "ledgerlake/refresh_day": day},
        )
        for start, end, n in batches(keys, eligible)
    ]


# Callbacks lost beyond the service's 72 hours of redelivery are asked for again, hourly;
# the inbox stores a re-sent callback once, so asking again costs only a call.
hourly_replay = ScheduleDefinition(
    name="hourly_replay", job=replay_job, cron_schedule="17 * * * *",
    execution_timezone="UTC", default_status=DefaultScheduleStatus.RUNNING,
    description="Re-trigger callbacks of records whose expected products never called back")
