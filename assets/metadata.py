"""What every materialization shows in the Dagster UI: rows, a preview, the path; the columns
are the asset's, declared once on its definition (described in assets/schemas.py)."""

import pyarrow as pa
from dagster import MetadataValue

from .catalog import column_schema

PREVIEW_ROWS = 5
# A run over many partitions stores its metadata once per partition (Dagster copies it into
# each partition's event), so lists are capped: 100 paths in 100 events cost ~0.2 s a run.
LISTED = 10


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")[:60]


def preview(table: pa.Table, rows: int = PREVIEW_ROWS) -> str:
    """A markdown table of the first rows (no extra dependency for formatting)."""
    names = table.column_names
    head = table.slice(0, rows).to_pylist()
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join(_cell(r[n]) for n in names) + " |" for r in head]
    return "\n".join(lines)


def record_metadata(table: pa.Table, **extra) -> dict:
    """Metadata of one record's materialization: its own rows and preview (the commit adds
    the lake table and version). Not its columns: they are the asset's (`product(schema=)`),
    and a column table stored in each of a backfill's thousand events would be most of what
    the run spends telling Dagster."""
    return {"dagster/row_count": table.num_rows,
            "preview": MetadataValue.md(preview(table)), **extra}


def describe(table: pa.Table, name: str, location: str, version: int) -> dict:
    """Metadata for a materialization that wrote the whole of lake table `name`."""
    return {
        "dagster/row_count": table.num_rows,
        "dagster/column_schema": column_schema(table.schema, name),
        "preview": MetadataValue.md(preview(table)),
        "lake_table": MetadataValue.path(location),
        "lake_version": version,
    }
