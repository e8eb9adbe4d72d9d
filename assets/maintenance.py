"""Upkeep of the lake's Delta tables: small files compacted, unreferenced files vacuumed.

Each night `lake_maintenance` rewrites each table's small files (every write leaves some) into
large ones, rows unchanged, in one commit, then deletes the files no version younger than the
retention refers to; its metadata is a row per table and totals the UI plots over time.
Its settings come in the `tuning` resource, which pipeline/definitions.py reads once at load:
LEDGERLAKE_LAKE_RETENTION_HOURS (how long superseded files stay, so `--as-of` reaches that far
back), LEDGERLAKE_LAKE_TARGET_MB (the size compaction writes files up to) and
LEDGERLAKE_LAKE_CLUSTER_MAX_MB (the largest table it re-sorts whole by record; a larger one has
its small files packed, since a re-sort spills ~8x the table to the temporary folder);
LEDGERLAKE_TIMEZONE is the schedule's clock (docs/lake.md). No lock against writers: a
compaction that loses a race to a replace runs again on the new version (resources/delta.py),
and vacuum takes only files older than the retention.
"""

# no `from __future__ import annotations`: Dagster reads the context's type hint at runtime

from dagster import (
    AssetExecutionContext,
    AssetSelection,
    DefaultScheduleStatus,
    Failure,
    MaterializeResult,
    MetadataValue,
    ResourceParam,
    ScheduleDefinition,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
    define_asset_job,
)

from resources import delta
from resources.config import Tuning
from resources.lake import Lake

from .catalog import OWNERS
from .warehouse import LAKE_TABLES, UNPARTITIONED

MB = 1024 * 1024

# One row per table in the UI; files/bytes are of the current version (vacuum leaves it as it
# is), `files_compacted` the small files compaction rewrote, `*_removed` what vacuum deleted.
COLUMNS = [
    ("table", "string"), ("status", "string"), ("clustered", "string"),
    ("version_before", "int"), ("version_after", "int"),
    ("files_before", "int"), ("files_after", "int"),
    ("bytes_before", "int"), ("bytes_after", "int"),
    ("files_compacted", "int"), ("files_removed", "int"), ("bytes_removed", "int"),
]
TOTALS = ["files_before", "files_after", "bytes_before", "bytes_after", "files_compacted",
          "files_removed", "bytes_removed"]


def _maintain(lake: Lake, table: str, hours: int, target: int, cluster_max: int) -> dict:
    """Compact, then vacuum, one table; the row the UI shows for it."""
    uri = lake.table_uri(table)
    # clustered by record: a record's lookup and its next replace touch one file, not all
    packed = delta.compact(uri, target_size=target, cluster_max_bytes=cluster_max,
                           order_by=None if table in UNPARTITIONED else "record_id")
    # The files compaction just superseded stay until a later pass finds them older than
    # the retention: time travel to before this compaction keeps working that long.
    swept = delta.vacuum(uri, hours)
    return {"table": table, "status": "maintained", "clustered": packed["clustered"],
            "version_before": packed["version_before"], "version_after": swept["version_after"],
            "files_before": packed["files_before"], "files_after": swept["files_after"],
            "bytes_before": packed["bytes_before"], "bytes_after": swept["bytes_after"],
            "files_compacted": packed["files_removed"],
            "files_removed": swept["files_removed"], "bytes_removed": swept["bytes_removed"]}


def _blank(table: str, status: str) -> dict:
    return {name: None for name, _ in COLUMNS} | {"table": table, "status": status}


# In a pool (limited to one by dagster.yaml's default_limit): a manual pass and the nightly
# one never compact the same tables at once, which would only make one of them redo its work.
@asset(group_name="maintenance", pool="lake_maintenance", kinds={"delta"}, owners=OWNERS)
def lake_maintenance(context: AssetExecutionContext, lake: Lake,
                     tuning: ResourceParam[Tuning]) -> MaterializeResult:
    """Compact each lake table's small files and vacuum files past the retention."""
    # the retention (default a week) is never less than the longest run, nor than the time
    # from a compaction to the warehouse's next build: a write's files are on storage before
    # its commit names them, and the warehouse's views name the files of the snapshot they
    # were built on, so vacuum must not take a file younger than either (full vacuum deletes
    # uncommitted files by their age)
    hours, target = tuning.retention_hours, tuning.target_mb * MB
    cluster_max = tuning.cluster_max_mb * MB
    rows = []
    for table in LAKE_TABLES:
        try:
            if lake.version(table) is None:
                context.log.info("%s: not landed, skipped", lake.shown(table))
                rows.append(_blank(table, "not landed"))
                continue
            row = _maintain(lake, table, hours, target, cluster_max)
        except Exception as exc:  # the other tables still get their pass; failed at the end
            context.log.error("%s: maintenance failed: %s: %s", lake.shown(table),
                              type(exc).__name__, exc)
            rows.append(_blank(table, f"failed: {type(exc).__name__}"))
            continue
        context.log.info(
            "%s: files %d -> %d (%d compacted, clustered: %s), bytes %d -> %d, vacuum removed "
            "%d files (%d bytes), version %d -> %d", lake.shown(table), row["files_before"],
            row["files_after"], row["files_compacted"], row["clustered"] or "-",
            row["bytes_before"], row["bytes_after"], row["files_removed"], row["bytes_removed"],
            row["version_before"], row["version_after"])
        rows.append(row)

    metadata = {
        "tables": MetadataValue.table(
            records=[TableRecord(data=r) for r in rows],
            schema=TableSchema(columns=[TableColumn(n, t) for n, t in COLUMNS])),
        **{k: MetadataValue.int(sum(r[k] or 0 for r in rows)) for k in TOTALS},
        "retention_hours": MetadataValue.int(hours),
        "target_mb": MetadataValue.int(target // MB),
        "cluster_max_mb": MetadataValue.int(cluster_max // MB),
        "not_landed": ", ".join(r["table"] for r in rows if r["status"] == "not landed"),
    }
    if failed := [r["table"] for r in rows if r["status"].startswith("failed")]:
        raise Failure(description=f"lake maintenance failed for {', '.join(failed)} (the "
                      "run's log has why); the other tables were maintained", metadata=metadata)
    return MaterializeResult(metadata=metadata)


lake_maintenance_job = define_asset_job(
    "lake_maintenance_job", selection=AssetSelection.assets(lake_maintenance),
    description="Compact the lake's small files and vacuum files past the retention")


def nightly_lake_maintenance(timezone: str) -> ScheduleDefinition:
    """The nightly pass, at 02:30 on the customers' clock (`timezone`: LEDGERLAKE_TIMEZONE, read
    once by pipeline/definitions.py): 01:30 UTC in Lagos, before the daily refresh's commits at
    02:00 UTC; overlapping them is safe, only slower (a commit that loses a race runs again)."""
    return ScheduleDefinition(
        name="nightly_lake_maintenance", job=lake_maintenance_job, cron_schedule="30 2 * * *",
        execution_timezone=timezone, default_status=DefaultScheduleStatus.RUNNING,
        description="Compact and vacuum every lake table, nightly")
