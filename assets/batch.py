"""A run's batch of records: the unit of orchestration.

A record (a user's connection to one bank) is fetched and audited on its own, but Dagster is
paid per run: the sensor and the schedules start runs over batches of records, each run given
its records through its `batch` resource (`resources.batch.config.records` in the run's
config), so a million records cost a thousand runs, not a million partitions and their events
(docs/decisions/0010-unit-of-orchestration.md).

A run names its records by their inbox numbers, never their ids: forgetting a record leaves
nothing in Dagster's storage, and its number names nothing any more (docs/privacy.md).
"""

from __future__ import annotations

from dagster import AssetExecutionContext, ConfigurableResource, InitResourceContext
from pydantic import Field

# records per run of the daily refresh and the periodic callbacks: a run's start (a process,
# the code location loaded) and its few events are then shared by this many records
RECORDS_PER_RUN = 1000


class Batch(ConfigurableResource):
    """The records this run lands (set per run by the sensor, the schedules and `ledgerlake
    rerun`; a run launched by hand names them in the launchpad). As its steps start, the run
    is tagged with who launched it (`ledgerlake/launched`: manual, schedule or sensor)."""

    def setup_for_execution(self, context: InitResourceContext) -> None:
        run, instance = context.run, context.instance
        if run is not None and instance is not None and LAUNCHED_TAG not in run.tags:
            instance.add_run_tags(run.run_id, {LAUNCHED_TAG: launched_by(run.tags)})

    # required: the Launchpad's default config, which names no record, is refused before a
    # run starts (Dagster says which entry is missing); bound as Batch.configure_at_launch()
    records: list[int] = Field(description=(
        "the numbers of the records this run fetches, each on its own (`ledgerlake status` "
        "lists every record's number), e.g. [1, 2]; a run that names none fails at once, "
        "saying so, and lands nothing"))


# what a run launched by hand without records is told (its product steps fail with it)
NAME_THEM = (
    "this run names no record, so it would land nothing: a run of the product assets lands "
    "the records its config names, by number, under resources: batch: config: records: "
    "[1, 2] (`ledgerlake status` lists each record's number). To refresh every connected "
    "record, start the daily_refresh schedule's tick (its page, Preview tick result, "
    "Launch all): one run per 1000 records.")


def batch_config(numbers: list[int]) -> dict:
    """The run config that gives a run its batch."""
    return {"resources": {"batch": {"config": {"records": list(numbers)}}}}


# a run of at most this many records gets a tag per record, which the UI's run filter finds
# (`ledgerlake/record-22`); a bigger run (the daily refresh's, a burst's) only its ranges.
# The sensor ticks every 30 s at most, so such tags cost at most TAGGED rows a tick,
# whatever the number of records (bench/record_tags.py measures it at a million)
TAGGED = 10
RANGES_CHARS = 1000  # of the ranges tag, cut with "..." beyond


def ranges(numbers: list[int]) -> str:
    """Record numbers as ranges, `1-250,252,300-1000`: a run's records in a few bytes."""
    out: list[str] = []
    ordered = sorted(set(numbers))
    start = prev = None
    for n in [*ordered, None]:
        if n is not None and prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = n
    text = ",".join(out)
    return text if len(text) <= RANGES_CHARS else text[:RANGES_CHARS - 3] + "..."


def record_tags(numbers: list[int]) -> dict[str, str]:
    """A run's tags naming its records by number: how many, their ranges, and for a small run
    one tag each (`ledgerlake/record-22: carried`), so Runs, filtered by that tag, lists every
    run that carried record #22."""
    tags = {"ledgerlake/records": str(len(numbers)), "ledgerlake/record_numbers": ranges(numbers)}
    if len(numbers) <= TAGGED:
        tags.update({f"ledgerlake/record-{n}": "carried" for n in numbers})
    return tags


LAUNCHED_TAG = "ledgerlake/launched"  # manual, schedule or sensor: set on every product run


def launched_by(tags: dict[str, str]) -> str:
    """Who started a run: `schedule` (daily_refresh), `sensor` (the inbox's callbacks), or
    `manual`: the Launchpad, a schedule's or a sensor's preview, `ledgerlake rerun`.

    Both previews copy the request's tags into the runs a person launches from them,
    `ledgerlake/schedule` or `ledgerlake/methods` included, and the name of their schedule
    or sensor (`dagster/schedule_name`, `dagster/sensor_name`), but never the run key, which
    only the daemon gives the runs it starts (daily_refresh and the inbox sensor key each
    of theirs): a run named for either without its key was launched by hand."""
    instigated = tags.get("dagster/schedule_name") or tags.get("dagster/sensor_name")
    if instigated and not tags.get("dagster/run_key"):
        return "manual"
    if tags.get("ledgerlake/schedule"):
        return "schedule"
    if tags.get("ledgerlake/inbox_event") and tags.get("dagster/run_key"):
        return "sensor"
    return "manual"


def source_of(context: AssetExecutionContext) -> str:
    """Why this run fetched balances: callback, periodic, schedule, or manual (UI, rerun).

    The sensor tags a run with every callback method it serves (`ledgerlake/methods`), the
    schedule with its name; a copy of either launched by hand is manual (`launched_by`).
    """
    tags = context.run.tags
    launched = launched_by(tags)
    if launched != "sensor":
        return launched
    methods = set((tags.get("ledgerlake/methods") or tags.get("ledgerlake/method", "")).split(","))
    if "BALANCE" in methods:
        return "callback"
    if "PERIODIC_BALANCE" in methods:
        return "periodic"
    return "manual"
