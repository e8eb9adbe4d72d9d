"""Every column described once, shown where people look.

The descriptions live on the pandera models (assets/schemas.py: one per lake table, and what
each view adds); a view's own description is the first paragraph of the comment heading its
SQL file. From there they reach:

- the Dagster UI: each product asset's column table, and `record_status`'s
  (`dagster/column_schema`, built by `column_schema`);
- DuckDB: `COMMENT ON VIEW` and `COMMENT ON COLUMN` in every warehouse build, so
  `duckdb_columns()` and `duckdb_views()` show them to any client (assets/warehouse.py);
- docs/columns.md, written by `python -m assets.catalog` and checked against them by a test.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from dagster import TableColumn, TableSchema

from resources.privacy import CLASS_ORDER, CLASSES, classify

from .schemas import LAKE_MODELS, RECORD_ID, VIEW_MODELS, descriptions

DOC = Path(__file__).resolve().parents[1] / "docs" / "columns.md"

# Who answers for the assets, and the tags the catalog filters on (`tag:product`, `tag:pii`)
OWNERS = ["team:data-engineering"]
PRODUCT_TAGS = {"product": ""}  # a product of the service, landed per record
PII = {"pii": ""}  # personal data: names, BVN, NIN, birth date, contacts


def lake_descriptions(table: str) -> dict[str, str]:
    """A lake table's columns -> descriptions (with `record_id`, which the lake adds)."""
    if table not in LAKE_MODELS:
        raise ValueError(f"no model describes lake table {table!r} (assets/schemas.py)")
    return {**descriptions(LAKE_MODELS[table]), "record_id": RECORD_ID}


def view_descriptions(name: str, reads: Mapping[str, tuple[set[str], tuple[str, ...]]]
                      ) -> dict[str, str]:
    """A view's columns -> descriptions: what the view adds or derives (VIEW_MODELS) first,
    then the columns of the lake tables it reads, directly or through the views it needs.
    `reads`: view -> (lake tables, views needed), as the SQL files say."""
    out: dict[str, str] = dict(descriptions(VIEW_MODELS[name])) if name in VIEW_MODELS else {}
    tables, needs = reads[name]
    for table in sorted(tables):
        for column, text in lake_descriptions(table).items():
            out.setdefault(column, text)
    for view in needs:
        for column, text in view_descriptions(view, reads).items():
            out.setdefault(column, text)
    return out


def column_schema(schema: pa.Schema, table: str, *, record_id: bool = False) -> TableSchema:
    """A lake table's columns as Dagster shows them: name, Arrow type, description, and the
    column's class as a tag (`class: personal`; resources/privacy.py)."""
    told = lake_descriptions(table)
    names = [*schema.names, *(["record_id"] if record_id and "record_id" not in schema.names
                              else [])]
    types = {f.name: str(f.type) for f in schema} | {"record_id": "string"}
    return TableSchema(columns=[TableColumn(name=n, type=types[n], description=told.get(n),
                                            tags={"class": classify(table, n)})
                                for n in names])


def view_classes(name: str, reads: Mapping[str, tuple[set[str], tuple[str, ...]]]
                 ) -> dict[str, str]:
    """A view's columns -> the class of the lake column they show (the most guarded one where
    lake tables share a name); what the view derives is public unless a lake column of its
    name is not."""
    out: dict[str, str] = {}
    tables, needs = reads[name]
    sources = [CLASSES[t] for t in sorted(tables)]
    sources += [view_classes(v, reads) for v in needs]
    for classes in sources:
        for column, cls in classes.items():
            if column not in out or CLASS_ORDER.index(cls) > CLASS_ORDER.index(out[column]):
                out[column] = cls
    return out


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """docs/columns.md: every view and its columns, with their DuckDB types, as the warehouse
    built over an empty lake has them (the same as over any lake)."""
    from .warehouse import build, load_views, warehouse_columns

    views = {v.name: v for v in load_views()}
    reads = {v.name: (set(v.tables | v.optional), v.needs) for v in views.values()}
    with tempfile.TemporaryDirectory(prefix="ledgerlake-columns-") as scratch:
        target = Path(scratch) / "w.duckdb"
        build(Path(scratch) / "lake", target)
        columns = warehouse_columns(target)
    lines = [
        "# The warehouse's columns",
        "",
        "Written by `python -m assets.catalog` from the descriptions on the pandera models",
        "(`assets/schemas.py`) and the comment heading each view's SQL file (`assets/sql/`);",
        "a test checks this file against them. The same text is on every view and column in",
        "DuckDB (`select * from duckdb_columns()`) and in the Dagster UI's column tables.",
        "Money is `decimal(18,2)` naira; times are UTC (`timestamp with time zone`).",
        "A column's class (`public`, `personal`, `sensitive`) is that of the lake column it",
        "shows (`resources/privacy.py`; docs/privacy.md): sensitive columns hold masked values.",
    ]
    for name in sorted(views):
        lines += ["", f"## `{name}`", "", views[name].comment, "",
                  "| column | type | class | description |", "|---|---|---|---|"]
        classes = view_classes(name, reads)
        lines += [f"| `{c}` | {t.lower()} | {classes.get(c, 'public')} | {_cell(d)} |"
                  for c, t, d in columns[name]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m assets.catalog [--check]
    text = markdown()
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if DOC.read_text() == text else f"{DOC} is stale: python -m assets.catalog")
    DOC.write_text(text)
    print(f"wrote {DOC}")
