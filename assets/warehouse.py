"""The warehouse: a DuckDB file of views over the lake, rebuilt aside and published atomically.

Analysts open the published file read-only; a refresh builds a new file next to it and
renames it into place, so they never see a half-built one and never block a refresh.
"""


import os
from pathlib import Path

import duckdb
from dagster import AssetExecutionContext, ConfigurableResource, MaterializeResult, asset

from resources.lake import Lake

from .accounts import accounts

SQL_DIR = Path(__file__).parent / "sql"


class Warehouse(ConfigurableResource):
    path: str


def build(lake_root: Path, target: Path) -> list[str]:
    """Write a DuckDB file at `target` with a view per lake table present; return the views."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    created = []
    try:
        with duckdb.connect(str(tmp)) as con:
            for sql_file in sorted(SQL_DIR.glob("*.sql")):
                table = sql_file.stem
                if not any((lake_root / table).glob("*/*.parquet")):
                    continue
                con.execute(sql_file.read_text().replace("{lake}", str(lake_root)))
                created.append(table)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return created


@asset(deps=[accounts], pool="duckdb", group_name="warehouse", kinds={"duckdb"})
def warehouse(context: AssetExecutionContext, lake: Lake,
              warehouse_db: Warehouse) -> MaterializeResult:
    """DuckDB views over the lake, for analysts (`ledgerlake sql`)."""
    lake_root = Path(lake.root).resolve()
    target = Path(warehouse_db.path).resolve()
    views = build(lake_root, target)
    context.log.info("published %s with views %s", target, views)
    return MaterializeResult(metadata={"path": str(target), "views": ", ".join(views)})
