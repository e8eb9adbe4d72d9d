"""What a whole-table materialization shows in the Dagster UI: rows, columns, a preview, the
lake table and its version."""

import pyarrow as pa
from dagster import MetadataValue

from .catalog import column_schema

PREVIEW_ROWS = 5


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


def describe(table: pa.Table, name: str, location: str, version: int) -> dict:
    """Metadata for a materialization that wrote the whole of lake table `name`."""
    return {
        "dagster/row_count": table.num_rows,
        "dagster/column_schema": column_schema(table.schema, name),
        "preview": MetadataValue.md(preview(table)),
        "lake_table": MetadataValue.path(location),
        "lake_version": version,
    }
