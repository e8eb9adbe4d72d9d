"""Where a callback becomes a run: read the inbox by cursor, add partitions, request runs."""


from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.partitions import records

from .config import Settings
from .inbox import Inbox
from .jobs import accounts_job

BATCH = 500

# (method, code) of a ready product -> the job that fetches it
READY: dict[tuple[str, str], str] = {
    ("ACCOUNTS", "ACCOUNTS_SUCCESS"): accounts_job.name,
}


def plan(events) -> tuple[list[str], list[RunRequest]]:
    """New partitions and run requests for a batch of inbox events."""
    partitions: list[str] = []
    requests: list[RunRequest] = []
    for ev in events:
        job = READY.get((ev.method, ev.code))
        if job is None or ev.record is None or ev.status == "is_failed":
            continue
        if ev.record not in partitions:
            partitions.append(ev.record)
        requests.append(RunRequest(
            run_key=f"inbox-{ev.id}", job_name=job, partition_key=ev.record,
            tags={"ledgerlake/inbox_event": str(ev.id), "ledgerlake/method": ev.method},
        ))
    return partitions, requests


@sensor(jobs=[accounts_job], minimum_interval_seconds=5,
        default_status=DefaultSensorStatus.RUNNING)
def inbox_sensor(context: SensorEvaluationContext):
    """Turn ready-product callbacks from the inbox into runs of the matching assets."""
    cursor = int(context.cursor or 0)
    inbox = Inbox(Settings.from_env().inbox)
    try:
        events = inbox.after(cursor, BATCH)
    finally:
        inbox.close()
    if not events:
        return SkipReason(f"no inbox events after {cursor}")
    partitions, requests = plan(events)
    new = [p for p in partitions if not context.instance.has_dynamic_partition(records.name, p)]
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[records.build_add_request(new)] if new else [],
        cursor=str(events[-1].id),
    )
