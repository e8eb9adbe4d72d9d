"""What an operator watches: the pipeline's state in counts and times, read from the inbox and
the Dagster instance, for the alerts (pipeline/alerts.py) and the metrics (pipeline/metrics.py).

Nothing here names a record: counts, ages, run ids and jobs. Each read is a handful of
aggregate queries, whatever the number of records.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import httpx
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from .local import CURSOR_KEY

INBOX_SENSOR = "inbox_sensor"
REFRESH_TAG = ("ledgerlake/schedule", "daily_refresh")  # pipeline/schedules.py's runs
RUNNING = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
           DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
HEALTH_TIMEOUT_S = 5.0


def inbox_cursor(instance: DagsterInstance) -> int:
    """The last inbox event the inbox sensor read: its cursor under the daemon, or the one
    `ledgerlake demo` and the tests keep when they tick it in process (pipeline/local.py);
    0 when it never read."""
    cursors = []
    with contextlib.suppress(Exception):  # an instance without schedule storage has none
        cursors += [state.instigator_data.cursor for state in instance.all_instigator_state()
                    if state.name == INBOX_SENSOR and state.instigator_data is not None]
    cursors.append(instance.run_storage.get_cursor_values({CURSOR_KEY}).get(CURSOR_KEY))
    return max((int(c) for c in cursors if c and str(c).isdigit()), default=0)


def last_success(instance: DagsterInstance, *, job: str | None = None,
                 tag: tuple[str, str] | None = None) -> float | None:
    """When the latest successful run of `job` (or bearing `tag`) ended, in seconds since
    the epoch; None when none did."""
    records = instance.get_run_records(RunsFilter(
        job_name=job, tags=dict([tag]) if tag else None,
        statuses=[DagsterRunStatus.SUCCESS]), limit=1)
    if not records:
        return None
    ended = records[0].end_time
    return ended if ended is not None else records[0].update_timestamp.timestamp()


def running(instance: DagsterInstance) -> list[str]:
    """The ids of the runs queued or under way (a step of theirs may still try again)."""
    return [r.dagster_run.run_id for r in instance.get_run_records(
        RunsFilter(statuses=RUNNING), limit=1000)]


def finished_runs(instance: DagsterInstance, after: float, limit: int = 500) -> list:
    """Runs that succeeded or failed and were last updated after `after` (seconds since the
    epoch), oldest first."""
    records = instance.get_run_records(RunsFilter(
        statuses=[DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE],
        updated_after=datetime.fromtimestamp(after, UTC)), limit=limit)
    return sorted(records, key=lambda r: r.update_timestamp)


def receiver_answers(url: str) -> str | None:
    """None when the receiver at `url` answers its /health with 200, else why not (its
    status, or that it did not answer), in words an alert may carry."""
    try:
        resp = httpx.get(url.rstrip("/") + "/health", timeout=HEALTH_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return f"it does not answer ({type(exc).__name__})"
    if resp.status_code != 200:
        with contextlib.suppress(Exception):
            return f"{resp.status_code}: {str(resp.json().get('error'))[:80]}"
        return f"it answers {resp.status_code}"
    return None
