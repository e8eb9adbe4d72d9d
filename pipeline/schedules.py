"""Schedules: the daily refresh of every connected record, and the hourly replay.

The daily refresh fetches balances and transactions of every connected record, in batches;
each day it also pulls a seventh of the records' transaction histories whole (the full
reconcile that catches lines posted back-dated: assets/transactions.py), so every record is
reconciled once a week (LEDGERLAKE_RECONCILE_DAYS).

Disconnected records and those waiting for reauthentication are skipped (their data stays
in the lake). The connected records are read from the inbox a page at a time, each page a run
of RECORDS_PER_RUN records: a million records cost a thousand runs, and the evaluation reads
each record id once, never all of them at once.
"""

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from assets.batch import RECORDS_PER_RUN, batch_config, record_tags
from resources.inbox import CONNECTED
from resources.inbox.resource import InboxResource

from .jobs import refresh_job, replay_job


@schedule(job=refresh_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
          default_status=DefaultScheduleStatus.RUNNING)
def daily_refresh(context: ScheduleEvaluationContext, inbox: InboxResource):
    """Refresh balances and transactions of connected records, once a day."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    requests, after = [], 0
    with inbox.open() as db:
        while page := db.numbered(after, RECORDS_PER_RUN, status=CONNECTED):
            requests.append(RunRequest(
                run_key=f"refresh-{day}-{page[0]}", run_config=batch_config(page),
                tags={"ledgerlake/schedule": "daily_refresh", **record_tags(page),
                      "ledgerlake/refresh_day": day}))
            after = page[-1]
    return requests or SkipReason("no record is connected")


# Callbacks lost beyond the service's 72 hours of redelivery are asked for again, hourly;
# the inbox stores a re-sent callback once, so asking again costs only a call.
hourly_replay = ScheduleDefinition(
    name="hourly_replay", job=replay_job, cron_schedule="17 * * * *",
    execution_timezone="UTC", default_status=DefaultScheduleStatus.RUNNING,
    description="Re-trigger callbacks of records whose expected products never called back")
