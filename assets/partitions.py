"""One record (a user's connection to one bank) is one dynamic partition, keyed by its id.

A run may carry many records: the backfill policy batches partitions, so thousands of
records cost tens of runs, not thousands.
"""

import warnings
from collections.abc import Iterator

from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    BetaWarning,
    DynamicPartitionsDefinition,
    PreviewWarning,
)

from resources.lake import check_record_id

records = DynamicPartitionsDefinition(name="records")

RECORDS_PER_RUN = 100
# backfill_policy is beta in Dagster 1.13; we rely on it on purpose, so say it once, not per asset
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=BetaWarning)
batched = BackfillPolicy.multi_run(max_partitions_per_run=RECORDS_PER_RUN)
# checks partitioned like their assets (one verdict per record) are a preview in 1.13, used on
# purpose (assets/publish.py)
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec",
                        category=PreviewWarning)

def record_ids(context: AssetExecutionContext) -> list[str]:
    """The records this run materializes, each checked before it names a file."""
    return [check_record_id(k) for k in context.partition_keys]


def source_of(context: AssetExecutionContext) -> str:
    """Why this run fetched balances: callback, periodic, schedule, or manual (UI, backfill).

    The sensor tags a run with every callback method it serves (`ledgerlake/methods`), the
    schedule with its name.
    """
    tags = context.run.tags
    if tags.get("ledgerlake/schedule"):
        return "schedule"
    methods = set((tags.get("ledgerlake/methods") or tags.get("ledgerlake/method", "")).split(","))
    if "BALANCE" in methods:
        return "callback"
    if "PERIODIC_BALANCE" in methods:
        return "periodic"
    return "manual"


def batches(keys: list[str], eligible: set[str],
            size: int = RECORDS_PER_RUN) -> Iterator[tuple[str, str, int]]:
    """Contiguous runs of eligible keys, in partition order, at most `size` long: the
    partition ranges that batch many records into few runs without touching the others."""
    start = end = None
    count = 0
    for key in keys:
        if key in eligible and count < size:
            start = start or key
            end, count = key, count + 1
            continue
        if start is not None:
            yield start, end, count
        start, end, count = (key, key, 1) if key in eligible else (None, None, 0)
    if start is not None:
        yield start, end, count
