"""One record (a user's connection to one bank) is one dynamic partition, keyed by its id.

A run may carry many records: the backfill policy batches partitions, so thousands of
records cost tens of runs, not thousands.
"""

import warnings

from dagster import AssetExecutionContext, BackfillPolicy, BetaWarning, DynamicPartitionsDefinition

from resources.lake import check_record_id

records = DynamicPartitionsDefinition(name="records")

RECORDS_PER_RUN = 100
# backfill_policy is beta in Dagster 1.13; we rely on it on purpose, so say it once, not per asset
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=BetaWarning)
batched = BackfillPolicy.multi_run(max_partitions_per_run=RECORDS_PER_RUN)

# where a run was asked for, from the tag the sensor and schedule set
SOURCES = {"BALANCE": "callback", "PERIODIC_BALANCE": "periodic", "schedule": "schedule"}


def record_ids(context: AssetExecutionContext) -> list[str]:
    """The records this run materializes, each checked before it names a file."""
    return [check_record_id(k) for k in context.partition_keys]


def source_of(context: AssetExecutionContext) -> str:
    """Why this run happened: callback, periodic, schedule, or manual (UI, backfill)."""
    tags = context.run.tags
    if tags.get("ledgerlake/schedule"):
        return "schedule"
    return SOURCES.get(tags.get("ledgerlake/method", ""), "manual")
