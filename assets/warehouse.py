"""The warehouse: a DuckDB file of views over the lake, rebuilt aside and published atomically.

Each view is one file in `sql/`, named after the view. In the SQL, `{lake:TABLE}` stands for
the lake table (read_parquet over its snapshot's data files, `union_by_name`); when the lake
has no file of it yet, an empty relation with the table's columns and types stands in, so
every view exists over any lake with the same typed columns (`{lake:TABLE?}` means the same).
A `-- needs: view, ...` line names views the file reads; a view is created after them.
A refresh builds a new file beside the published one and renames it into place, never opening
the published file: readers never see a half-built one nor block a refresh (docs/lake.md).
"""

# no `from __future__ import annotations`: Dagster reads the context's type hint at runtime
import contextlib
import fcntl
import glob
import graphlib
import itertools
import os
import re
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa
from dagster import (
    AssetExecutionContext,
    ConfigurableResource,
    MaterializeResult,
    MetadataValue,
    asset,
)

from resources import object_store
from resources.lake import Lake, fsync
from resources.tables import TABLES, columns, schema

from .catalog import OWNERS, view_classes, view_descriptions
from .record_status import PRODUCT_ASSETS, record_status

SQL_DIR = Path(__file__).parent / "sql"
DOC = Path(__file__).resolve().parents[1] / "docs" / "columns.md"

# tables not kept by record: the lake adds no `record_id` to their rows (docs/lake.md)
UNPARTITIONED = {t for t, declared in TABLES.items() if not declared.by_record}

# the lake's tables as their assets write them (resources/tables.py)
LAKE_TABLES: dict[str, pa.Schema] = {t: schema(t) for t in TABLES}

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
    comment: str = ""           # its description: the first paragraph heading the file

    @classmethod
    def load(cls, path: Path) -> "View":
        sql = path.read_text()
        refs = _LAKE_REF.findall(sql)
        needs = tuple(v.strip() for m in _NEEDS.findall(sql) for v in m.split(",") if v.strip())
        return cls(path.stem, sql, frozenset(t for t, q in refs if not q),
                   frozenset(t for t, q in refs if q), needs, heading(sql, path.stem))


def heading(sql: str, name: str) -> str:
    """The first paragraph of the comment a view's file opens with, less `name: ` (a `-- needs:`
    line ends a paragraph, as an empty one does)."""
    comment = itertools.takewhile(lambda line: line.startswith("--"), sql.splitlines())
    texts = ["" if _NEEDS.match(line) else line[2:].strip() for line in comment]
    para = itertools.takewhile(bool, itertools.dropwhile(lambda text: not text, texts))
    return " ".join(para).removeprefix(f"{name}:").strip()


def load_views(sql_dir: Path | None = None) -> list[View]:
    """The views in dependency order (each after the views it needs)."""
    views = {p.stem: View.load(p) for p in sorted((sql_dir or SQL_DIR).glob("*.sql"))}
    for view in views.values():
        for name in view.needs:
            if name not in views:
                raise ValueError(f"view {view.name!r} needs {name!r}, which has no {name}.sql")
    graph = graphlib.TopologicalSorter({name: view.needs for name, view in views.items()})
    try:
        return [views[name] for name in graph.static_order()]
    except graphlib.CycleError as exc:  # its second argument: the views of the cycle, in turn
        raise ValueError(f"views need each other in a cycle: {' -> '.join(exc.args[1])}") \
            from None


def _quote(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


AsOf = datetime | Mapping[str, int] | None  # a time, or versions of some tables


def snapshot_files(lake: Lake, table: str, as_of: AsOf = None) -> list[str]:
    """The data files of the table's snapshot: the latest, the one standing at a time, or a
    version of it; none when the table does not exist (yet, or then) or holds no rows."""
    pinned = as_of.get(table) if isinstance(as_of, Mapping) else as_of
    if pinned is not None and (erased := erasures_since(lake, table, pinned)):
        raise ValueError(f"lake table {table} as of {pinned}: its history before {erased} is "
                         "gone (`ledgerlake forget`: no version may show the rows it erased, "
                         "no log entry name them; the lake's erasures table says more)")
    try:
        files = lake.files(table, pinned)  # before its first commit: version 0, no files
    except FileNotFoundError:
        if isinstance(pinned, int):
            raise ValueError(f"lake table {table} does not exist, so has no version {pinned}") \
                from None
        return []
    except Exception as exc:  # delta-rs: a version it does not have
        if not isinstance(pinned, int):
            raise
        raise ValueError(f"lake table {table} has no version {pinned} (latest: "
                         f"{lake.version(table)}, or vacuumed)") from exc
    if pinned is not None and (gone := object_store.absent(lake.table_uri(table), files)):
        raise ValueError(f"lake table {table} as of {pinned}: {len(gone)} of its {len(files)} "
                         "files were removed by the lake's vacuum (time travel reaches back "
                         "LEDGERLAKE_LAKE_RETENTION_HOURS)")
    return files


def erasures_since(lake: Lake, table: str, pinned: datetime | int) -> str:
    """The erasures that cut the history of `table` after `pinned` (a time, or a version
    before the one its history starts at since), as a message names them; "" for none."""
    rows = lake.read("erasures")
    rows = [] if rows is None else [
        r for r in rows.to_pylist() if r["lake_table"] == table and r["lake_version"] is not None
        and (r["lake_version"] > pinned if isinstance(pinned, int) else
             r["finished_at"] > pinned)]
    return ", ".join(f"erasure {r['erasure_id']} (of {r['subject']} {r['subject_id']}, "
                     f"{r['finished_at']:%Y-%m-%d %H:%M:%S} UTC, {r['reason']})" for r in rows)


def lake_source(files: list[str]) -> str:
    """The read_parquet call a view reads a lake table's snapshot through: its file list,
    so a view costs what its rows cost, whatever the number of records."""
    listed = ", ".join(_quote(f.removeprefix("file://")) for f in files)
    return f"read_parquet([{listed}], union_by_name = true)"


def duckdb_type(t: pa.DataType) -> str:
    """The DuckDB type a Parquet column of Arrow type `t` reads as."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "varchar"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return duckdb_type(t.value_type) + "[]"
    simple = {pa.bool_(): "boolean", pa.int32(): "integer", pa.int64(): "bigint",
              pa.binary(): "blob", pa.float64(): "double", pa.date32(): "date"}
    if t in simple:
        return simple[t]
    raise ValueError(f"no DuckDB type known for the lake's Arrow type {t}")


def stand_in(table: str) -> str:
    """An empty relation with the lake table's columns, for a table not in the lake yet."""
    cols = ", ".join(f'null::{duckdb_type(c.type)} as "{name}"'
                     for name, c in columns(table).items())
    return f"(select {cols} limit 0)"


def lake_sources(lake: Lake, tables: Iterable[str] = LAKE_TABLES,
                 as_of: AsOf = None) -> dict[str, str]:
    """How a view reads each of `tables` the lake has rows of (the rest are stood in for)."""
    if isinstance(as_of, Mapping) and (unknown := sorted(set(as_of) - set(LAKE_TABLES))):
        raise ValueError(f"no lake table {', '.join(unknown)}; the tables: "
                         f"{', '.join(LAKE_TABLES)}")
    found = {t: snapshot_files(lake, t, as_of) for t in tables}
    # with the stand-in's columns by name: files that lack a column of the table's schema
    # still bind every view, the column null on their rows
    return {t: f"(select * from {lake_source(files)} union all by name {stand_in(t)})"
            for t, files in found.items() if files}


def render(view: View, sources: dict[str, str], timezone: str = DEFAULT_TIMEZONE) -> str:
    """The view's SQL, each lake table read through its relation in `sources`, or stood in
    for when it has none."""
    def sub(m: re.Match) -> str:
        return sources.get(m[1]) or stand_in(m[1])

    return _LAKE_REF.sub(sub, view.sql).replace("{timezone}", _quote(timezone))


def build(lake_root: Path | str, target: Path | str, timezone: str = DEFAULT_TIMEZONE,
          sources: dict[str, str] | None = None, as_of: AsOf = None) -> list[str]:
    """Publish at `target` a DuckDB file with every view, over any lake; return their names.

    The views read each table's current snapshot (or the one `as_of` names), or `sources`: the
    relation each lake table is read through (a table missing from it is stood in for). The
    file is built under a temporary name in the same folder and renamed over `target` only
    once complete; on any error the published file is left as it was.
    """
    target = Path(target).resolve()
    views = load_views()
    reads = {v.name: (set(v.tables | v.optional), v.needs) for v in views}
    if sources is None:
        sources = lake_sources(Lake(root=str(lake_root)),
                               {t for v in views for t in v.tables | v.optional}, as_of)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(target)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    created: list[str] = []
    try:
        with object_store.connect(str(tmp), str(lake_root), config=FILE_CONFIG) as con:
            check_timezone(con, timezone)
            con.execute("begin")  # one commit for every view and comment: ~0.1 s less
            for view in views:  # a view is built once the views it reads are
                if not set(view.needs) <= set(created):
                    continue
                try:
                    con.execute(render(view, sources, timezone))
                except duckdb.Error as exc:
                    raise RuntimeError(f"view {view.name} ({SQL_DIR / view.name}.sql) "
                                       f"does not build over "
                                       f"{object_store.shown(str(lake_root))}: {exc}") from exc
                created.append(view.name)
                describe_view(con, view, reads)
            con.execute("commit")
            con.execute("checkpoint")
        fsync(tmp)
        os.replace(tmp, target)
        fsync(target.parent)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
    return created


def describe_view(con: duckdb.DuckDBPyConnection, view: View,
                  reads: dict[str, tuple[set[str], tuple[str, ...]]]) -> None:
    """COMMENT ON the view and each of its columns (assets/catalog.py): any DuckDB client
    reads them from duckdb_views() and duckdb_columns(), DuckDB 1.0 included."""
    told = view_descriptions(view.name, reads)
    statements = [f'comment on view "{view.name}" is {_quote(view.comment)}'] if \
        view.comment else []
    for (column,) in con.execute("select column_name from duckdb_columns() where "
                                 "table_name = ? order by column_index", [view.name]).fetchall():
        if told.get(column):
            statements.append(f'comment on column "{view.name}"."{column}" is '
                              f'{_quote(told[column])}')
    if statements:
        con.execute(";\n".join(statements))


def warehouse_columns(target: Path | str) -> dict[str, list[tuple[str, str, str | None]]]:
    """Each view's columns in a built file: (name, DuckDB type, description)."""
    with duckdb.connect(str(target), read_only=True) as con:
        rows = con.execute("select c.table_name, c.column_name, c.data_type, c.comment "
                           "from duckdb_columns() c join duckdb_views() v "
                           "on v.view_name = c.table_name and v.database_name = "
                           "c.database_name and not v.internal "
                           "order by c.table_name, c.column_index").fetchall()
    out: dict[str, list[tuple[str, str, str | None]]] = {}
    for view, column, kind, comment in rows:
        out.setdefault(view, []).append((column, kind, comment))
    return out


def _remove_stale(target: Path, quiet_s: float = 2.0, older_than_s: float = 3600.0) -> None:
    """Temporary files of builds that died (killed mid-build) before they could clean up.

    A build's DuckDB holds a lock on its file for as long as it is open, so a file that no
    process locks and that nobody wrote for `quiet_s` (the instants between DuckDB creating
    it and locking it, or closing it and renaming it) is a dead build's, whichever process
    made it; a locked one is never touched. Where the lock cannot be asked about, files older
    than `older_than_s` go.
    """
    now = time.time()
    for path in target.parent.glob(f".{glob.escape(target.name)}.*.tmp*"):
        database = path.with_name(path.name.removesuffix(".wal"))  # a WAL goes with its file
        with contextlib.suppress(FileNotFoundError):  # gone meanwhile
            age = now - path.stat().st_mtime
            held = _locked(database) if database.exists() else False
            if age > (older_than_s if held is None else quiet_s) and not held:
                path.unlink()


def _locked(path: Path) -> bool | None:
    """Whether a process (this one too) holds a lock on the file, as DuckDB does on a database
    it has open; None where the system cannot say (no open-file-description locks)."""
    if not hasattr(fcntl, "F_OFD_GETLK"):
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        asked = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)  # struct flock
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, asked)
        return struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK
    finally:
        os.close(fd)


# the views read what these write; the warehouse is rebuilt after them, never during
# after maintenance too: compaction retires the files the views name, vacuum removes them
@asset(deps=[*PRODUCT_ASSETS, record_status, "lake_maintenance"],
       pool="duckdb", group_name="warehouse", kinds={"duckdb"}, owners=OWNERS)
def warehouse(context: AssetExecutionContext, lake: Lake,
              warehouse_db: Warehouse) -> MaterializeResult:
    """DuckDB views over the lake, for analysts (`ledgerlake sql`)."""
    target = Path(warehouse_db.path).resolve()
    versions = {t: lake.version(t) for t in LAKE_TABLES}  # read before the snapshots: at most
    views = build(lake.root, target, warehouse_db.timezone)  # as new as what the views read
    empty = sorted(t for t, v in versions.items() if v is None)
    context.log.info("published %s with views %s", target, views)
    return MaterializeResult(metadata={
        "path": str(target),
        "views": ", ".join(views),
        "lake_tables_not_landed": ", ".join(empty),  # their views exist, empty
        "lake_versions": MetadataValue.json({t: v for t, v in versions.items() if v is not None}),
    })


def markdown() -> str:
    """docs/columns.md: every view and its columns, with their DuckDB types, as the warehouse
    built over an empty lake has them (the same as over any lake)."""
    views = {v.name: v for v in load_views()}
    reads = {v.name: (set(v.tables | v.optional), v.needs) for v in views.values()}
    with tempfile.TemporaryDirectory(prefix="ledgerlake-columns-") as scratch:
        target = Path(scratch) / "w.duckdb"
        build(Path(scratch) / "lake", target)
        shown = warehouse_columns(target)
    lines = [
        "# The warehouse's columns",
        "",
        "Written by `python -m assets.warehouse` from the lake's column declarations",
        "(`resources/tables.py`), what each view adds (`assets/sql/columns.toml`) and the comment",
        "heading each view's SQL file (`assets/sql/`); a test fails when this file differs.",
        "The same text is on every view and column in DuckDB (`select * from duckdb_columns()`)",
        "and in the Dagster UI's column tables.",
        "Money is `decimal(18,2)` naira; times are UTC (`timestamp with time zone`).",
        "A column's class (`public`, `personal`, `sensitive`) is that of the lake column it",
        "shows (docs/privacy.md): sensitive columns hold masked values.",
    ]
    for name in sorted(views):
        lines += ["", f"## `{name}`", "", views[name].comment, "",
                  "| column | type | class | description |", "|---|---|---|---|"]
        classes = view_classes(name, reads)
        lines += [f"| `{c}` | {t.lower()} | {classes.get(c, 'public')} | {_cell(d)} |"
                  for c, t, d in shown[name]]
    return "\n".join(lines) + "\n"


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


if __name__ == "__main__":  # python -m assets.warehouse [--check]: docs/columns.md
    text = markdown()
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if DOC.read_text() == text else f"{DOC} is stale: python -m assets.warehouse")
    DOC.write_text(text)
    print(f"wrote {DOC}")
