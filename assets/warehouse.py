"""The warehouse: a DuckDB file of views over the lake, rebuilt aside and published atomically.

Each view is one file in `sql/`, named after the view. In the SQL, `{lake:TABLE}` stands for
the lake table (read_parquet over absolute paths, `record_id` from the hive folder name,
`union_by_name` so partitions written before a column was added still read), and
`{lake:TABLE?}` for one that may be missing: an empty relation with the table's columns
stands in. A `-- needs: view, ...` line names views the file reads. A view is created only
when its lake tables exist (at least one, if all are optional) and the views it needs were
created; the rest wait for a later refresh.

Analysts open the published file read-only. A refresh builds a new file next to it and
renames it into place, so readers never see a half-built one, and since the build never
opens the published file, a reader holding it open never blocks a refresh (on POSIX the
reader keeps the old file until it reconnects).
"""

# no `from __future__ import annotations`: Dagster reads the context's type hint at runtime
import glob
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
from dagster import AssetExecutionContext, ConfigurableResource, MaterializeResult, asset

from resources.lake import Lake, fsync

from .accounts import accounts
from .balances import balances
from .identity import identity
from .income import income
from .payments import payments
from .publish import LAKE_CHANGED
from .record_status import record_status
from .transactions import transactions

SQL_DIR = Path(__file__).parent / "sql"

# tables kept as one file, `<lake>/<table>/part-0.parquet`, not one per record (docs/lake.md)
UNPARTITIONED = {"records"}

# Columns of the lake tables a view reads with `{lake:TABLE?}` (docs/lake.md): the stand-in
# when the table is not there yet, so the view binds and types the same as when it is.
STAND_INS = {
    "transactions": {
        "record_id": "varchar", "transaction_id": "varchar", "account_id": "varchar",
        "customer_id": "varchar", "trans_date": "timestamptz", "cleared_date": "timestamptz",
        "debit": "decimal(18,2)", "credit": "decimal(18,2)", "amount": "decimal(18,2)",
        "balance": "decimal(18,2)",
        "currency": "varchar", "narration": "varchar", "topics": "varchar[]",
        "ref": "varchar", "branch": "varchar", "code": "varchar", "env": "varchar",
        "created_at": "timestamptz", "bank_id": "varchar", "last_updated": "timestamptz",
    },
    "balance_periodic": {
        "record_id": "varchar", "account_id": "varchar", "date": "date",
        "available_balance": "decimal(18,2)", "ledger_balance": "decimal(18,2)",
    },
}

# Views need no newer storage: written as DuckDB 1.0 reads it, any DuckDB from 1.0 on (the
# `duckdb` CLI, other drivers) opens the file, not only the version that built it.
FILE_CONFIG = {"storage_compatibility_version": "v1.0.0"}

_LAKE_REF = re.compile(r"\{lake:([a-z][a-z0-9_]*)(\??)\}")
_NEEDS = re.compile(r"^--\s*needs:\s*(.+)$", re.MULTILINE)


DEFAULT_TIMEZONE = "Africa/Lagos"


class Warehouse(ConfigurableResource):
    """Where the published DuckDB file lives, and whose days its views count in."""

    path: str
    timezone: str = DEFAULT_TIMEZONE  # days and months of the customers (LEDGERLAKE_TIMEZONE)


def check_timezone(con: duckdb.DuckDBPyConnection, zone: str) -> str:
    """A time zone DuckDB knows (its ICU database), or a ValueError naming it."""
    if not isinstance(zone, str) or not con.execute(
            "select count(*) from pg_timezone_names() where name = ?", [zone]).fetchone()[0]:
        raise ValueError(f"time zone {zone!r} is not one DuckDB knows (an IANA name such as "
                         f"Africa/Lagos or UTC)")
    return zone


@dataclass(frozen=True)
class View:
    name: str
    sql: str
    tables: frozenset[str]      # lake tables it must have
    optional: frozenset[str]    # lake tables it reads if present
    needs: tuple[str, ...]      # views it reads

    @classmethod
    def load(cls, path: Path) -> "View":
        sql = path.read_text()
        refs = _LAKE_REF.findall(sql)
        needs = tuple(v.strip() for m in _NEEDS.findall(sql) for v in m.split(",") if v.strip())
        return cls(path.stem, sql, frozenset(t for t, q in refs if not q),
                   frozenset(t for t, q in refs if q), needs)


def load_views(sql_dir: Path | None = None) -> list[View]:
    """The views in dependency order (each after the views it needs)."""
    views = {p.stem: View.load(p) for p in sorted((sql_dir or SQL_DIR).glob("*.sql"))}
    ordered: list[View] = []
    state: dict[str, str] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == "done":
            return
        if name not in views:
            raise ValueError(f"view {chain[-1]!r} needs {name!r}, which has no {name}.sql")
        if state.get(name) == "visiting":
            raise ValueError(f"views need each other in a cycle: {' -> '.join(chain + (name,))}")
        state[name] = "visiting"
        for dep in views[name].needs:
            visit(dep, chain + (name,))
        state[name] = "done"
        ordered.append(views[name])

    for name in views:
        visit(name, ())
    return ordered


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def table_present(lake_root: Path, table: str) -> bool:
    if table in UNPARTITIONED:
        return (lake_root / table / "part-0.parquet").is_file()
    return any((lake_root / table).glob("record_id=*/*.parquet"))


def lake_source(lake_root: Path, table: str) -> str:
    """The read_parquet call a view reads a lake table through."""
    if table in UNPARTITIONED:
        return f"read_parquet({_quote(lake_root / table / 'part-0.parquet')})"
    glob = _quote(lake_root / table / "record_id=*" / "*.parquet")
    # record ids are strings even when one happens to be all digits
    return (f"read_parquet({glob}, hive_partitioning = true, "
            "hive_types = {'record_id': varchar}, union_by_name = true)")


def stand_in(table: str) -> str:
    if table not in STAND_INS:
        raise ValueError(f"no stand-in columns for optional lake table {table!r}")
    cols = ", ".join(f"null::{t} as {c}" for c, t in STAND_INS[table].items())
    return f"(select {cols} limit 0)"


def render(view: View, lake_root: Path, present: set[str],
           timezone: str = DEFAULT_TIMEZONE) -> str:
    def sub(m: re.Match) -> str:
        table = m.group(1)
        return lake_source(lake_root, table) if table in present else stand_in(table)

    zone = "'" + timezone.replace("'", "''") + "'"
    return _LAKE_REF.sub(sub, view.sql).replace("{timezone}", zone)


def buildable(view: View, present: set[str], created: set[str]) -> bool:
    if not view.tables <= present or not set(view.needs) <= created:
        return False
    if not view.tables and view.optional and not view.optional & present:
        return False
    return True


def build(lake_root: Path | str, target: Path | str,
          timezone: str = DEFAULT_TIMEZONE) -> list[str]:
    """Publish at `target` a DuckDB file with every view the lake can serve; return their names.

    The file is built under a temporary name in the same folder and renamed over `target`
    only once complete; on any error the published file is left as it was.
    """
    lake_root = Path(lake_root).resolve()
    target = Path(target).resolve()
    views = load_views()
    tables = {t for v in views for t in v.tables | v.optional}
    present = {t for t in tables if table_present(lake_root, t)}
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(target)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    created: list[str] = []
    try:
        with duckdb.connect(str(tmp), config=FILE_CONFIG) as con:
            check_timezone(con, timezone)
            for view in views:
                if not buildable(view, present, set(created)):
                    continue
                try:
                    con.execute(render(view, lake_root, present, timezone))
                except duckdb.Error as exc:
                    raise RuntimeError(f"view {view.name} ({SQL_DIR / view.name}.sql) "
                                       f"does not build over {lake_root}: {exc}") from exc
                created.append(view.name)
            con.execute("checkpoint")
        fsync(tmp)
        os.replace(tmp, target)
        fsync(target.parent)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
    return created


def _remove_stale(target: Path, older_than_s: float = 3600.0) -> None:
    """Temporary files of builds that died (killed mid-build) before they could clean up."""
    cutoff = time.time() - older_than_s
    for path in target.parent.glob(f".{glob.escape(target.name)}.*.tmp*"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
        except FileNotFoundError:
            pass


# the views read what these write; the warehouse is rebuilt after them, never during
@asset(deps=[accounts, balances, transactions, income, identity, payments, record_status],
       pool="duckdb", group_name="warehouse", kinds={"duckdb"},
       automation_condition=LAKE_CHANGED)
def warehouse(context: AssetExecutionContext, lake: Lake,
              warehouse_db: Warehouse) -> MaterializeResult:
    """DuckDB views over the lake, for analysts (`ledgerlake sql`)."""
    if "://" in lake.root:
        raise ValueError(f"the warehouse reads a local lake; {lake.root} needs DuckDB's httpfs "
                         "extension, which this build does not load")
    lake_root = Path(lake.root).resolve()
    target = Path(warehouse_db.path).resolve()
    views = build(lake_root, target, warehouse_db.timezone)
    waiting = sorted({v.name for v in load_views()} - set(views))
    context.log.info("published %s with views %s", target, views)
    return MaterializeResult(metadata={
        "path": str(target),
        "views": ", ".join(views),
        "waiting_for_lake_tables": ", ".join(waiting),
    })
