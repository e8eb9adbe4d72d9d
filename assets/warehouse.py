"""The warehouse: a DuckDB file of views over the lake (assets/views.py), rebuilt aside and
published atomically, each view its own asset.

A refresh builds a new file beside the published one and renames it into place, never opening
the published file: readers never see a half-built one nor block a refresh (docs/lake.md).
"""

# no `from __future__ import annotations`: Dagster reads the context's type hint at runtime
import contextlib
import fcntl
import functools
import glob
import os
import shutil
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    ConfigurableResource,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableColumnDep,
    TableColumnLineage,
    TableSchema,
    multi_asset,
)

from resources import delta, object_store
from resources.delta import HistoryGone
from resources.lake import Lake, fsync
from resources.locks import machine_lock
from resources.tables import TABLES, columns, schema

from . import derived
from .catalog import OWNERS, view_classes, view_descriptions
from .charts import summary_chart
from .derived import DERIVED
from .record_status import PRODUCT_ASSETS
from .views import (
    DEFAULT_TIMEZONE,
    SQL_DIR,
    View,
    check_timezone,
    listed,
    load_views,
    quote,
    render,
    stand_in,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "columns.md"

# tables not kept by record: the lake adds no `record_id` to their rows (docs/lake.md)
UNPARTITIONED = {t for t, declared in TABLES.items() if not declared.by_record}

# the lake's tables as their assets write them (resources/tables.py)
LAKE_TABLES: dict[str, pa.Schema] = {t: schema(t) for t in TABLES}

# Views need no newer storage: written as DuckDB 1.0 reads it, any DuckDB from 1.0 on (the
# `duckdb` CLI, other drivers) opens the file, not only the version that built it.
FILE_CONFIG = {"storage_compatibility_version": "v1.0.0"}


class Warehouse(ConfigurableResource):
    """Where the published DuckDB file lives, and whose days its views count in."""

    path: str
    timezone: str = DEFAULT_TIMEZONE  # days and months of the customers (LEDGERLAKE_TIMEZONE)


AsOf = datetime | Mapping[str, int] | None  # a time, or versions of some tables
ABSENT = -1  # the version pinned of a table that did not exist yet: read as empty
PUBLISH_ATTEMPTS = 3  # builds of one publish: its lake moved, or its store failed, under it


class LakeMoved(RuntimeError):
    """A view did not build: a file of the snapshot listed was removed since."""


class StoreFailed(OSError):
    """A view did not build: the lake's store failed past its client's retries (a 503, a
    reset connection). One line: the store's own words, not DuckDB's traceback of them."""


def snapshot_files(lake: Lake, table: str, as_of: AsOf = None) -> list[str]:
    """The data files of the table's snapshot: the latest, the one standing at a time, or a
    version of it; none when the table does not exist (yet, or then) or holds no rows."""
    pinned = as_of.get(table) if isinstance(as_of, Mapping) else as_of
    if pinned == ABSENT:
        return []
    if pinned is not None and (erased := erasures_since(lake, table, pinned)):
        raise HistoryGone(f"lake table {table} as of {pinned}: its history before {erased} is "
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
        if not isinstance(pinned, int) or isinstance(exc, ValueError):  # HistoryGone says why
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


def lake_source(files: list[str], alike: bool = False) -> str:
    """The read_parquet call a view reads a lake table's snapshot through: its file list,
    so a view costs what its rows cost, whatever the number of records. Files `alike` (one
    schema) are read by position: by name, DuckDB reads every footer before each query."""
    return f"read_parquet({listed(files)}{'' if alike else ', union_by_name = true'})"


def lake_sources(lake: Lake, tables: Iterable[str] = LAKE_TABLES,
                 as_of: AsOf = None) -> dict[str, str]:
    """How a view reads each of `tables` the lake has rows of (the rest are stood in for)."""
    if isinstance(as_of, Mapping) and (unknown := sorted(set(as_of) - set(LAKE_TABLES))):
        raise ValueError(f"no lake table {', '.join(unknown)}; the tables: "
                         f"{', '.join(LAKE_TABLES)}")
    found = {t: snapshot_files(lake, t, as_of) for t in tables}
    return {t: _relation(lake, t, files, as_of) for t, files in found.items() if files}


def _relation(lake: Lake, table: str, files: list[str], as_of: AsOf) -> str:
    """The table's files as a view reads them. Where the table's schema lacks a declared
    column (a table written before the column was), by name with the stand-in's columns, so
    every view still binds, the column null; otherwise the files alone, so that DuckDB
    answers a `count(*)` from their footers (a union reads every row)."""
    pinned = as_of.get(table) if isinstance(as_of, Mapping) else as_of
    uri = lake.table_uri(table)
    if set(columns(table)) <= set(delta.column_names(uri, pinned)):
        return f"(select * from {lake_source(files, delta.files_alike(uri, files))})"
    return f"(select * from {lake_source(files)} union all by name {stand_in(table)})"


def build(lake_root: Path | str, target: Path | str, timezone: str = DEFAULT_TIMEZONE,
          sources: dict[str, str] | None = None, as_of: AsOf = None,
          only: Collection[str] | None = None, pins: Mapping[str, int] | None = None
          ) -> list[str]:
    """Publish at `target` a DuckDB file with every view, over any lake; return the names of
    those built: all, or `only` these (and any the published file lacks), the others kept
    (`publish` widens `only` to the views built together).

    The views read each table's current snapshot (or the one `pins` names: `publish` pins the
    sources of the derived tables at the versions they were derived from), or `sources`: the
    relation each lake table is read through (a table missing from it is stood in for). With
    `as_of` (time travel) every table reads as it stood then, and a derived table is derived
    as the view is read, from its sources as they stood (the lake's derived table holds what
    was derived when, not what the sources said then). The file is built under a temporary
    name in the same folder and renamed over `target` only once complete; on any error the
    published file is left as it was.
    """
    target = Path(target).resolve()
    views = load_views()
    reads = {v.name: (set(v.tables | v.optional), v.needs) for v in views}
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(target)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        kept = _kept(target, tmp, only)
        views = [v for v in views if v.name not in kept]
        if sources is None:
            sources = _sources(lake_root, views, as_of, pins, timezone)
        with object_store.connect(str(tmp), str(lake_root), config=FILE_CONFIG) as con:
            check_timezone(con, timezone)
            con.execute("begin")  # one commit for every view and comment: ~0.1 s less
            created = _create(con, views, sources, timezone, kept, reads, lake_root)
            con.execute("commit")
            con.execute("checkpoint")
        fsync(tmp)
        os.replace(tmp, target)
        fsync(target.parent)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
    return created


def _kept(target: Path, tmp: Path, only: Collection[str] | None) -> set[str]:
    """The views a build of `only` some keeps from the published file, copied to `tmp`
    (a copy of a file at rest: no reader blocks it); none for a whole build."""
    if only is None or not target.exists():
        return set()
    shutil.copyfile(target, tmp)
    with duckdb.connect(str(tmp), read_only=True) as con:
        return {n for (n,) in con.execute("select view_name from duckdb_views() "
                                          "where not internal").fetchall()} - set(only)


def _sources(lake_root: Path | str, views: list[View], as_of: AsOf,
             pins: Mapping[str, int] | None, timezone: str) -> dict[str, str]:
    """The relation each lake table the views read is read through; at `as_of`, a derived
    table is derived on the fly from its sources as they stood."""
    read = {t for v in views for t in v.tables | v.optional}
    on_the_fly = read & set(DERIVED) if as_of is not None else set()
    read = (read - on_the_fly) | {s for t in on_the_fly for s in DERIVED[t].sources}
    sources = lake_sources(Lake(root=str(lake_root)), read,
                           as_of if as_of is not None else pins)
    for t in on_the_fly:
        sources[t] = f"({DERIVED[t].select(sources, timezone)})"
    return sources


def _create(con: duckdb.DuckDBPyConnection, views: list[View], sources: dict[str, str],
            timezone: str, kept: set[str], reads: dict, lake_root: Path | str) -> list[str]:
    """Create each view once the views it reads are (in the order they come), described;
    the names of those created."""
    created: list[str] = []
    for view in views:
        if not set(view.needs) <= kept | set(created):
            continue
        try:
            con.execute(render(view, sources, timezone))
        except duckdb.Error as exc:
            gone = isinstance(exc, duckdb.IOException) and any(
                w in str(exc) for w in ("No files found", "No such file", "FileNotFoundError"))
            failed = object_store.failure_of(str(exc))
            raise (LakeMoved if gone else StoreFailed if failed else RuntimeError)(
                f"view {view.name} ({SQL_DIR / view.name}.sql) does not build over "
                f"{object_store.shown(str(lake_root))}: {failed or exc}") from exc
        created.append(view.name)
        describe_view(con, view, reads)
    return created


def publish(lake_root: Path | str, target: Path | str, timezone: str = DEFAULT_TIMEZONE,
            only: Collection[str] | None = None, refresh: bool = False,
            progress: Callable[[str], None] = lambda _: None
            ) -> tuple[list[str], "derived.Refresh | None"]:
    """`build`, the derived lake tables the views read brought up to date first (a write to
    the lake: one publisher at a time, as the warehouse asset's pool makes it), and the views
    reading the sources at the versions those were derived from. Returns the views built and
    what the refresh did (None when no view built reads a derived table, and `refresh` does
    not ask for one)."""
    lake = Lake(root=str(lake_root))
    only = None if only is None else built_together(only)
    views = [v for v in VIEWS if only is None or v.name in only]
    once = functools.partial(_publish_once, lake, target, timezone, only,
                             refresh or bool(derived_of(views)), progress)
    # one publisher of a lake at a time on this machine: the daemon's warehouse runs take
    # turns by their pool, but `ledgerlake forget` publishes from its own process, and two
    # refreshes at once let one overwrite the derived tables with rows older than the sources
    # the other's views pin (a reader saw lines with no daily balance)
    with machine_lock("publish", lake.root):
        for _ in range(PUBLISH_ATTEMPTS - 1):
            try:
                return once()
            except LakeMoved:
                # an erasure purged files of the snapshot it listed (`forget` runs beside
                # it, its purges not under this lock): the lake's new versions, again
                progress("a file the build listed was purged under it: building again")
            except HistoryGone:
                # an erasure cut a log after the refresh read it: the views cannot read the
                # sources as derived. Derived again from the versions after the cut
                progress("an erasure cut the versions the refresh read: building again")
            except StoreFailed as exc:
                progress(f"{exc}: building again")
        return once()


def _publish_once(lake: Lake, target: Path | str, timezone: str,
                  only: Collection[str] | None, refresh: bool,
                  progress: Callable[[str], None]) -> tuple[list[str], "derived.Refresh | None"]:
    done = derived.refresh(lake, timezone, progress) if refresh else None
    # a source the refresh found absent stays so: its first rows, landed since, are in
    # neither the derived tables nor the views until the next build
    pins = {t: ABSENT if v is None else v for t, v in (done.versions if done else {}).items()}
    return build(lake.root, target, timezone, only=only, pins=pins or None), done


def describe_view(con: duckdb.DuckDBPyConnection, view: View,
                  reads: dict[str, tuple[set[str], tuple[str, ...]]]) -> None:
    """COMMENT ON the view and each of its columns (assets/catalog.py): any DuckDB client
    reads them from duckdb_views() and duckdb_columns(), DuckDB 1.0 included."""
    told = view_descriptions(view.name, reads)
    statements = [f'comment on view "{view.name}" is {quote(view.comment)}'] if \
        view.comment else []
    for (column,) in con.execute("select column_name from duckdb_columns() where "
                                 "table_name = ? order by column_index", [view.name]).fetchall():
        if told.get(column):
            statements.append(f'comment on column "{view.name}"."{column}" is '
                              f'{quote(told[column])}')
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


def _remove_stale(target: Path) -> None:
    """Temporary files of builds that died (killed mid-build) before they could clean up.

    A build's DuckDB holds a lock on its file for as long as it is open, so a file that no
    process locks and that nobody wrote for 2 s (the instants between DuckDB creating it and
    locking it, or closing it and renaming it) is a dead build's, whichever process made it;
    a locked one is never touched. Where the lock cannot be asked about, files older than an
    hour go.
    """
    now = time.time()
    for path in target.parent.glob(f".{glob.escape(target.name)}.*.tmp*"):
        database = path.with_name(path.name.removesuffix(".wal"))  # a WAL goes with its file
        with contextlib.suppress(FileNotFoundError):  # gone meanwhile
            age = now - path.stat().st_mtime
            held = _locked(database) if database.exists() else False
            if age > (3600.0 if held is None else 2.0) and not held:
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


VIEWS = load_views()
# the assets that write each lake table, where not the asset of its name; every product's
# landing writes `landings` and `checks`; forget and reveal (no assets) the last two; the
# derived tables are the warehouse's own (assets/derived.py)
WRITERS = {"balance_history": ["balances"], "balance_periodic": ["balances"],
           "income_streams": ["income"], "records": ["record_status"],
           "landings": PRODUCT_ASSETS, "checks": PRODUCT_ASSETS, "erasures": [], "reveals": []}
DAY_IS_LAST_LINE = "balance_is_last_line"


def view_key(name: str) -> AssetKey:
    return AssetKey(["warehouse", name])


def view_tables(view: View) -> list[str]:
    """The lake tables the view's SQL reads."""
    return sorted(view.tables | view.optional)


def view_reads(view: View) -> list[str]:
    """The lake tables whose moves make the view stale: those it reads and, for a derived
    table, the tables it is derived from (the build derives it again first)."""
    return sorted({*view_tables(view),
                   *(s for t in view_tables(view) if t in DERIVED for s in DERIVED[t].sources)})


def built_together(names: Iterable[str]) -> list[str]:
    """`names` and every view reading a derived table, or a source of one, that one of them
    reads, in the order of VIEWS. A build reads those sources at the versions the derived
    tables were derived from: a view of either kept from an older build would disagree with
    one built now (the chaos suite's reader saw `transactions` rebuilt alone over lines that
    the kept `daily_balances` had no balance for)."""
    family = set(DERIVED) | set(derived.SOURCES)
    out, more = set(), set(names)
    while more:
        out |= more
        shared = {t for v in VIEWS if v.name in out for t in view_reads(v)} & family
        more = {v.name for v in VIEWS if set(view_reads(v)) & shared} - out
    return [v.name for v in VIEWS if v.name in out]


def derived_of(views: Iterable[View]) -> list[str]:
    """The derived lake tables the views read."""
    return sorted({t for v in views for t in view_tables(v) if t in DERIVED})


def _spec(view: View) -> AssetSpec:
    writers = sorted({a for t in view_tables(view) for a in WRITERS.get(t, [t])})
    return AssetSpec(view_key(view.name), description=view.comment or None, kinds={"duckdb"},
                     group_name="warehouse", owners=OWNERS, skippable=True,
                     deps=[*writers, *map(view_key, view.needs)])


def _derived_spec(name: str) -> AssetSpec:
    writers = sorted({a for t in DERIVED[name].sources for a in WRITERS.get(t, [t])})
    return AssetSpec(AssetKey(name), description=DERIVED[name].view.comment or None,
                     kinds={"delta"}, group_name="warehouse", owners=OWNERS, skippable=True,
                     deps=writers)


def lineage(view: View, shown: Mapping[str, list]) -> TableColumnLineage:
    """Each column of the view from the lake columns, or the columns of the views it reads,
    of its name: what the view passes on; a column it derives names none."""
    deps: dict[str, list[TableColumnDep]] = {}
    for column, _, _ in shown[view.name]:
        deps[column] = [TableColumnDep(a, column) for t in view_tables(view)
                        if column in columns(t) for a in WRITERS.get(t, [t])] + \
            [TableColumnDep(view_key(n), column) for n in view.needs
             if any(c == column for c, _, _ in shown.get(n, []))]
    return TableColumnLineage({c: d for c, d in deps.items() if d})


# Each view its own asset, rebuilt when the lake tables it reads move (pipeline/sensors.py) or
# when picked in the UI, with the views it must agree with (`built_together`): the others stay
# as published. The derived lake tables the picked views read are brought up to date first,
# and the views then read the sources at the versions they were derived from. One build at a
# time (the pool).
@multi_asset(specs=[*map(_derived_spec, DERIVED), *(_spec(v) for v in VIEWS)],
             check_specs=[AssetCheckSpec(DAY_IS_LAST_LINE, asset="daily_balances",
                                         description=derived.DAY_IS_LAST_LINE_TEXT)],
             can_subset=True, pool="duckdb", name="warehouse")
def warehouse(context: AssetExecutionContext, lake: Lake, warehouse_db: Warehouse):
    """DuckDB views over the lake, for analysts (`ledgerlake sql`), and the lake tables
    derived for them."""
    target = Path(warehouse_db.path).resolve()
    keys = context.selected_asset_keys
    picked = {v.name for v in VIEWS if view_key(v.name) in keys}
    made = {n for n in DERIVED if AssetKey(n) in keys}
    if made and not picked:  # the derived tables alone, picked in the UI
        done = derived.refresh(lake, warehouse_db.timezone, context.log.info)
        yield from _derived_results(lake, made, done, warehouse_db.timezone, context)
        return
    # read before the snapshots: at most as new as what the views read
    versions = {t: lake.version(t) for t in LAKE_TABLES}
    built, done = publish(lake.root, target, warehouse_db.timezone, only=picked,
                          refresh=bool(made), progress=context.log.info)
    if done is not None:
        context.log.info("derived tables: %s (%d records) in %.1f s", done.mode, done.records,
                         done.seconds)
        # what the views read: the sources as derived, the derived tables as just written
        versions |= {t: v for t, v in done.versions.items() if v is not None}
        versions |= done.versions_written
        yield from _derived_results(lake, made, done, warehouse_db.timezone, context)
    context.log.info("published %s with views %s", target, ", ".join(built))
    shown = warehouse_columns(target)
    for view in VIEWS:
        if view.name not in picked:
            continue
        read = {t: versions[t] for t in view_reads(view)}
        yield MaterializeResult(asset_key=view_key(view.name), metadata={
            "path": str(target),
            "lake_tables_not_landed": ", ".join(t for t, v in read.items() if v is None),
            "lake_versions": MetadataValue.json({t: v for t, v in read.items() if v is not None}),
            "dagster/column_schema": TableSchema([TableColumn(c, t.lower(), d or None)
                                                  for c, t, d in shown[view.name]]),
            "dagster/column_lineage": lineage(view, shown),
            **summary_chart(context, target, view.name)})


def _derived_results(lake: Lake, made: set[str], done: "derived.Refresh", zone: str,
                     context: AssetExecutionContext):
    """The derived tables' materializations (those selected), and daily_balances' check."""
    for name in sorted(made):
        yield MaterializeResult(asset_key=AssetKey(name), metadata={
            "path": lake.shown(name),
            "refresh": done.mode,
            "records_derived": done.records,
            "rows_written": done.rows.get(name, 0),
            "lake_version": done.versions_written.get(name, lake.version(name)),
            "derived_from": MetadataValue.json({t: v for t, v in done.versions.items()
                                                if v is not None}),
            "seconds": round(done.seconds, 2)})
    if "daily_balances" in made:
        checked, problems = derived.audit(lake, done, zone)
        if problems:
            context.log.warning("%s: %d problems in %d records checked", DAY_IS_LAST_LINE,
                                len(problems), checked)
        yield AssetCheckResult(asset_key=AssetKey("daily_balances"),
                               check_name=DAY_IS_LAST_LINE, passed=not problems, metadata={
                                   "records_checked": checked,
                                   "problem_count": len(problems),
                                   "problems": MetadataValue.json(problems[:10])})


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
