"""Every column described once, shown where people look.

A lake column is described where it is declared (resources/tables.py); what a view adds or
derives, beside the views' SQL (assets/sql/columns.toml); a view's own description is the
first paragraph of the comment heading its SQL file. From there they reach the Dagster UI's
column tables (`column_schema`), DuckDB's comments on every view and column
(assets/warehouse.py) and docs/columns.md.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from dagster import TableColumn, TableSchema

from resources.privacy import CLASSES, classify
from resources.tables import CLASS_ORDER, columns

# Who answers for the assets, and the tags the catalog filters on (`tag:product`, `tag:pii`)
OWNERS = ["team:data-engineering"]
PRODUCT_TAGS = {"product": ""}  # a product of the service, landed per record
PII = {"pii": ""}  # personal data: names, BVN, NIN, birth date, contacts

# view -> the columns it adds or derives, described (assets/sql/columns.toml, beside the
# views' SQL); the rest are the lake's
VIEW_COLUMNS: dict[str, dict[str, str]] = tomllib.loads(
    (Path(__file__).parent / "sql" / "columns.toml").read_text())
Reads = Mapping[str, tuple[set[str], tuple[str, ...]]]  # view -> (lake tables, views needed)


def lake_descriptions(table: str) -> dict[str, str]:
    """A lake table's columns -> descriptions (with `record_id`, where the lake adds it)."""
    return {name: c.description for name, c in columns(table).items()}


def view_descriptions(name: str, reads: Reads) -> dict[str, str]:
    """A view's columns -> descriptions: what the view adds or derives (VIEW_COLUMNS) first,
    then the columns of the lake tables it reads, directly or through the views it needs.
    `reads`: as the SQL files say."""
    out = dict(VIEW_COLUMNS.get(name, {}))
    tables, needs = reads[name]
    for told in [*map(lake_descriptions, sorted(tables)),
                 *(view_descriptions(v, reads) for v in needs)]:
        for column, text in told.items():
            out.setdefault(column, text)
    return out


def column_schema(schema: pa.Schema, table: str, *, record_id: bool = False) -> TableSchema:
    """A lake table's columns as Dagster shows them: name, Arrow type, description, and the
    column's class as a tag (`class: personal`; resources/tables.py)."""
    declared = columns(table)
    names = [*schema.names, *(["record_id"] if record_id and "record_id" not in schema.names
                              else [])]
    return TableSchema(columns=[TableColumn(
        name=n, type=str(declared[n].type), description=declared[n].description,
        tags={"class": classify(table, n)}) for n in names])


def view_classes(name: str, reads: Reads) -> dict[str, str]:
    """A view's columns -> the class of the lake column they show (the most guarded one where
    lake tables share a name); what the view derives is public unless a lake column of its
    name is not."""
    out: dict[str, str] = {}
    tables, needs = reads[name]
    for classes in [*(CLASSES[t] for t in sorted(tables)),
                    *(view_classes(v, reads) for v in needs)]:
        for column, cls in classes.items():
            if column not in out or CLASS_ORDER.index(cls) > CLASS_ORDER.index(out[column]):
                out[column] = cls
    return out
