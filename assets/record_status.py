"""Each record's connection status and last callback, from the inbox, as the `records` table."""

import pyarrow as pa
from dagster import AssetExecutionContext, MaterializeResult, asset

from resources.callbacks import CallbackLog
from resources.lake import Lake

from .metadata import describe

UTC_MS = pa.timestamp("ms", tz="UTC")
SCHEMA = pa.schema([
    ("record_id", pa.string()),
    ("status", pa.string()),
    ("status_at", UTC_MS),
    ("last_method", pa.string()),
    ("last_code", pa.string()),
    ("last_callback_at", UTC_MS),
])


@asset(group_name="warehouse", kinds={"parquet"})
def record_status(context: AssetExecutionContext, callback_log: CallbackLog, lake: Lake):
    """Connected, disconnected or needing reauthentication, with the last callback seen."""
    rows = callback_log.record_status()
    table = pa.table({
        "record_id": pa.array([r["record"] for r in rows], pa.string()),
        "status": pa.array([r["status"] for r in rows], pa.string()),
        "status_at": pa.array([r["status_at"] for r in rows], pa.string()).cast(UTC_MS),
        "last_method": pa.array([r["method"] for r in rows], pa.string()),
        "last_code": pa.array([r["code"] for r in rows], pa.string()),
        "last_callback_at": pa.array([r["occurred_at"] for r in rows], pa.string()).cast(UTC_MS),
    }, schema=SCHEMA)
    path = lake.write("records", None, table, schema=SCHEMA)
    return MaterializeResult(metadata=describe(table, [path]))
