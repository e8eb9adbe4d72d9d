"""`ledgerlake lake migrate`: convert a local lake from the folder layout to Delta tables, once.

The folder layout (before issue 13) kept a folder per record, `<root>/<table>/record_id=<id>/`,
holding `part-0.parquet` (`balance_history`: many `part-<time>-<random>.parquet`, together the
record's rows; the folder name gives `record_id`), and `records` as `<root>/records/
part-0.parquet` (its own `record_id` column). Names starting with a dot were temporary files.

Every table still in that layout is converted in three phases, so that a bad file anywhere
leaves the whole lake as it was:

1. build: each table's rows, read from every part file of every record, are written through
   `resources.lake.Lake` into `<root>/.<table>.migrating/<table>`, BATCH records a commit
   (fewer when they are large); then checked: per record, the row count and the sum of every
   decimal column, old against new, exactly. An unreadable file, a column that would lose
   data or a mismatch raises MigrationError and the staging folders of this run are removed;
2. swap, per table: `<table>` renamed to `.<table>.old-layout`, the new table renamed to
   `<table>`, the root synced, the emptied staging folder removed;
3. delete, per table: `.<table>.old-layout` renamed to `.<table>.old-layout.deleting`, synced,
   then deleted.

A crash (a kill, a power cut) leaves one of these states. A plain run refuses each (naming the
table and what it found); `resume=True` finishes it:

- in 1, or between tables in 2: `<table>` still the folder layout, `.migrating` partial or
  whole: the staging folder is deleted and the table built again;
- between the two renames of 2: no `<table>`, `.old-layout` and `.migrating`: the old layout
  is renamed back and the table built again (until the swap is whole, the old layout is the
  truth);
- after 2's renames: `<table>` a Delta table beside `.old-layout` (and perhaps an empty
  `.migrating`): the table is checked against the old layout again, then 3 runs;
- during 3: `<table>` a Delta table beside `.old-layout.deleting`: it is deleted.

Refused even with `resume`: a table folder holding a Delta log and the folder layout both (a
new pipeline wrote into a table never migrated), and any combination no crash leaves. Run it
with the pipeline stopped: a run landing rows between 2's renames would make such a state.
Object storage is refused: a rename there copies object by object, so no swap is atomic.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from assets import identity as identity_module
from assets.warehouse import LAKE_TABLES, UNPARTITIONED
from resources import delta
from resources.lake import Lake, check_record_id, fsync

# the tables the folder layout had, as it wrote them: identity in clear (before it was sealed;
# docs/privacy.md says how to protect a migrated lake's), and no `erasures` yet
OLD_TABLES = {**{t: s for t, s in LAKE_TABLES.items() if t != "erasures"},
              "identity": identity_module.RAW}

BATCH = 200          # records per commit: few commits, bounded memory...
BATCH_ROWS = 500_000  # ...also when records are large (a commit may hold fewer records)
PROGRESS = 1_000     # records between progress lines
LOG = "_delta_log"
OLD_PART = "part-0.parquet"  # what the folder layout's write() named a table's file
LOCK = ".migrate.lock"


class MigrationError(RuntimeError):
    """The lake cannot be converted as it stands; the message names the table and what to do."""


def migrate(root: str | Path, *, resume: bool = False,
            say: Callable[[str], object] = print) -> dict:
    """Convert the lake at `root` (a local path or file:// URI) to Delta tables, once.

    Returns per table what was done (`action`: converted, already converted, absent, empty,
    or how an interrupted run was finished), its `records` and `rows` (None where nothing was
    read) and `check` ("passed", or None where nothing needed checking). Raises MigrationError
    when the lake is refused (before changing anything) or a file or check fails (leaving
    every table's old layout in place)."""
    base = _local_root(root)
    if not base.is_dir():
        raise MigrationError(f"no lake at {base}")
    with _locked(base):
        plans = {table: _plan(base, table, resume) for table in OLD_TABLES}
        if refused := [why for why in plans.values() if why.startswith("refuse:")]:
            raise MigrationError("\n".join(why.removeprefix("refuse: ") for why in refused))
        report = {}
        # read-only first: a table swapped earlier must still agree with its old layout
        for table in [t for t, plan in plans.items() if plan == "check old"]:
            records, rows = _check(Lake(root=str(base)), table, _expected(
                base / f".{table}.old-layout", table))
            report[table] = _line("finished an interrupted swap", records, rows)
        for table, plan in plans.items():
            _tidy(base, table, plan)
            if plan in ("absent", "empty", "already converted"):
                report[table] = _line(plan)
                say(f"{table}: {plan}")
            elif plan == "clean":
                report[table] = _line("finished deleting the old layout", check="passed")
        building = [t for t, plan in plans.items() if plan in ("convert", "restart", "roll back")]
        built = []
        try:
            for table in building:
                (base / f".{table}.migrating").mkdir()
                built.append(table)
                records, rows = _build(base, table, say)
                report[table] = _line("converted" if plans[table] == "convert"
                                      else "converted again after an interrupted run",
                                      records, rows)
        except BaseException:
            for table in built:  # no staging left: every old layout stands as it was
                shutil.rmtree(base / f".{table}.migrating", ignore_errors=True)
            raise
        for table in building:
            _swap(base, table)
        checked = building + [t for t, plan in plans.items() if plan == "check old"]
        for table in checked + [t for t, plan in plans.items() if plan == "clean"]:
            _discard(base, table)
        for table in checked:
            line = report[table]
            say(f"{table}: {line['records']:,} records, {line['rows']:,} rows checked: "
                f"{line['action']}")
        for table in [t for t, plan in plans.items() if plan == "clean"]:
            say(f"{table}: {report[table]['action']}")
        return report


def main(argv: list[str]) -> int:
    """`ledgerlake lake migrate [--lake PATH] [--resume]`: 0 done, 1 refused, 2 bad arguments."""
    from .config import LAKE, ConfigError, Settings, location

    parser = argparse.ArgumentParser(
        prog="ledgerlake lake migrate",
        description="Convert a local lake from the folder-per-record layout to Delta tables, "
                    "checking every record's row count and money sums before the old files go. "
                    "Stop the pipeline first.")
    parser.add_argument("--lake", metavar="PATH",
                        help="the lake's folder (default $LEDGERLAKE_LAKE, else "
                             "$LEDGERLAKE_HOME/lake)")
    parser.add_argument("--resume", action="store_true",
                        help="finish a migration that was interrupted")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage and the error (2), or the help (0)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        lake = (Settings.from_env().lake if args.lake is None
                else location("--lake", args.lake, LAKE))
        root = _local_root(lake)
    except ConfigError as exc:
        print(f"ledgerlake: {exc}", file=sys.stderr)
        return 2
    except MigrationError as exc:
        print(f"ledgerlake: {exc}", file=sys.stderr)
        return 1
    if not root.is_dir():
        print(f"ledgerlake: no lake at {root} (--lake or LEDGERLAKE_LAKE)", file=sys.stderr)
        return 2
    try:
        migrate(root, resume=args.resume)
    except MigrationError as exc:
        print(f"ledgerlake: {exc}", file=sys.stderr)
        return 1
    return 0


def _local_root(root: str | Path) -> Path:
    from .config import local_path

    text = str(root)
    if text.lower().startswith("s3://"):
        raise MigrationError(
            "a lake in s3:// cannot be migrated in place: renames there copy object by object, "
            "so the swap would not be atomic. Copy the lake to a local folder (e.g. `aws s3 "
            "sync`), migrate that copy, upload it to a new prefix and point LEDGERLAKE_LAKE "
            "at it")
    path = local_path(text)
    if path is None:
        raise MigrationError("only a lake in a local folder (a path or file://) can be migrated")
    return path.resolve()


@contextmanager
def _locked(base: Path) -> Iterator[None]:
    """One migration of a lake at a time (the lock goes with the process, even a killed one)."""
    fd = os.open(base / LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MigrationError(f"another migration of {base} is running") from None
        yield
    finally:
        os.close(fd)


def _plan(base: Path, table: str, resume: bool) -> str:
    """What to do with `table`, or "refuse: <why>" (see the module's list of states)."""
    folder, staging = base / table, base / f".{table}.migrating"
    old, trash = base / f".{table}.old-layout", base / f".{table}.old-layout.deleting"
    kind = _kind(folder, table)
    if kind == "mixed":
        fix = ("the pipeline rewrites it whole, so delete part-0.parquet, the folder "
               "layout's older copy" if table in UNPARTITIONED else
               f"move {LOG} and the part files beside the record_id= folders out of it, "
               "migrate, then rerun the records they held (`ledgerlake rerun RECORD ...`)")
        return (f"refuse: {table}: {folder} holds a Delta table and the folder layout both (a "
                f"new pipeline wrote into it before it was migrated); nothing was done. Stop "
                f"the pipeline, then: {fix}")
    left = [p for p in (staging, old, trash) if p.exists()]
    if not left:
        return {"old": "convert", "delta": "already converted"}.get(kind, kind)
    real_staging = staging.exists() and any(staging.iterdir())
    if kind == "old" and old not in left and trash not in left:
        plan = "restart"
    elif kind == "absent" and old in left and trash not in left:
        plan = "roll back"
    elif kind == "delta" and not real_staging and (old in left) != (trash in left):
        plan = "check old" if old in left else "clean"
    else:
        plan = None
    found = ", ".join(p.name for p in left)
    state = {"absent": f"no {table} folder", "empty": f"an empty {table} folder",
             "delta": f"{table} a Delta table", "old": f"{table} still the folder layout"}[kind]
    if plan is None:
        return (f"refuse: {table}: found {found} with {state}: no interrupted migration leaves "
                "this, so nothing was done; compare the folders by hand and keep the one with "
                "the rows")
    if not resume:
        return (f"refuse: {table}: a migration was interrupted (found {found}, {state}). Run "
                "`ledgerlake lake migrate --resume` to finish it; the old layout stays until the "
                "Delta table checks out")
    return plan


def _kind(folder: Path, table: str) -> str:
    """absent, empty, delta, old (the folder layout) or mixed (a Delta log beside it)."""
    if not folder.exists():
        return "absent"
    has_log = (folder / LOG).is_dir()
    old = bool(_old_records(folder, table))
    return {(False, False): "empty", (True, False): "delta", (False, True): "old",
            (True, True): "mixed"}[(has_log, old)]


def _tidy(base: Path, table: str, plan: str) -> None:
    """Undo what an interrupted run left, back to a state the phases start from."""
    folder, staging, old = base / table, base / f".{table}.migrating", base / f".{table}.old-layout"
    if plan == "roll back":
        os.rename(old, folder)
        fsync(base)
    if plan in ("restart", "roll back", "check old", "clean") and staging.exists():
        shutil.rmtree(staging)
        fsync(base)


def _old_records(folder: Path, table: str) -> list[tuple[str | None, list[Path]]]:
    """The folder layout's records of `table` (None for `records`' one file) with their data
    files; those with none are skipped, as the folder layout's reader skipped them."""
    if not folder.is_dir():
        return []
    if table in UNPARTITIONED:
        if (folder / LOG).is_dir():  # a Delta table's own files are part-*.parquet too
            parts = [folder / OLD_PART] if (folder / OLD_PART).is_file() else []
        else:
            parts = _parts(folder)
        return [(None, parts)] if parts else []
    out = []
    for sub in sorted(folder.iterdir()):
        if sub.is_dir() and sub.name.startswith("record_id=") and (parts := _parts(sub)):
            rid = sub.name.split("=", 1)[1]
            try:
                check_record_id(rid)
            except ValueError as exc:
                raise MigrationError(f"{table}: {sub}: {exc}") from None
            out.append((rid, parts))
    return out


def _parts(folder: Path) -> list[Path]:
    """A folder's data files, oldest name first; temporary files start with a dot."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.startswith("part-")
                  and p.name.endswith(".parquet"))


def _batches(records: list[tuple[str | None, list[Path]]],
             table: str) -> Iterator[tuple[int, dict, pa.Table]]:
    """Up to BATCH records (or BATCH_ROWS rows) at a time: records so far, {record id: rows},
    the rows with record_id."""
    schema, parts, rows = OLD_TABLES[table], {}, 0
    for done, (rid, files) in enumerate(records, 1):
        parts[rid] = _read(files, schema, table)
        rows += parts[rid].num_rows
        if len(parts) == BATCH or rows >= BATCH_ROWS or done == len(records):
            if table in UNPARTITIONED:
                yield done, parts, parts[None]
            else:
                yield done, parts, pa.concat_tables([
                    data.append_column("record_id", pa.array([r] * data.num_rows, pa.string()))
                    for r, data in parts.items()])
            parts, rows = {}, 0


def _read(files: list[Path], schema: pa.Schema, table: str) -> pa.Table:
    """A record's rows from all its files, in `schema`'s columns and types."""
    out = []
    for path in files:
        try:
            data = pq.read_table(path, partitioning=None)
        except (OSError, pa.ArrowException) as exc:
            raise MigrationError(f"{table}: cannot read {path}: {exc}. Nothing was converted; "
                                 "restore the file from a backup (or move its record's folder "
                                 "out and rerun that record after migrating)") from None
        out.append(_conform(data, schema, f"{table}: {path}"))
    return pa.concat_tables(out)


def _conform(data: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """`data` in `schema`'s columns and types, refusing what would lose something: a column the
    table no longer has, money that is not decimal (a float would be rounded), a lossy cast."""
    if extra := [n for n in data.column_names if n not in schema.names]:
        raise MigrationError(f"{where} has columns the table has not: {extra}")
    columns = []
    for field in schema:
        if field.name not in data.column_names:  # written before the column was added
            columns.append(pa.nulls(data.num_rows, field.type))
            continue
        got = data[field.name]
        if pa.types.is_decimal(field.type) and not (pa.types.is_decimal(got.type)
                                                    or pa.types.is_null(got.type)):
            raise MigrationError(f"{where}: money column {field.name} is {got.type}, not "
                                 "decimal; converting it would round amounts")
        try:
            columns.append(got.cast(field.type))  # safe: refuses overflow and truncation
        except (pa.ArrowException, ValueError) as exc:
            raise MigrationError(f"{where}: column {field.name} ({got.type}) does not fit "
                                 f"{field.type}: {exc}") from None
    return pa.Table.from_arrays(columns, schema=schema)


def _sums(rows: pa.Table | None, money: list[str]) -> dict[str | None, tuple]:
    """Per record: its row count, then the sum of each money column (exact decimals)."""
    if rows is None or rows.num_rows == 0:
        return {}
    grouped = rows.group_by("record_id").aggregate(
        [([], "count_all"), *((name, "sum") for name in money)])
    return {r["record_id"]: (r["count_all"], *(r[f"{m}_sum"] for m in money))
            for r in grouped.to_pylist()}


def _money(table: str) -> list[str]:
    return [f.name for f in OLD_TABLES[table] if pa.types.is_decimal(f.type)]


def _expected(folder: Path, table: str) -> tuple[int, dict]:
    """The folder layout's record count and per-record sums, read without writing."""
    old, sums = _old_records(folder, table), {}
    for _, _, rows in _batches(old, table):
        sums.update(_sums(rows, _money(table)))
    return len(old), sums


def _build(base: Path, table: str, say: Callable[[str], object]) -> tuple[int, int]:
    """Write the table's rows into its (new, empty) staging folder and check them there;
    records and rows."""
    old = _old_records(base / table, table)
    lake = Lake(root=str(base / f".{table}.migrating"))
    schema, money = OLD_TABLES[table], _money(table)
    say(f"{table}: converting" + ("" if table in UNPARTITIONED else f" {len(old):,} records"))
    records, expected, shown = 0, {}, 0
    for records, parts, rows in _batches(old, table):
        if table in UNPARTITIONED:
            lake.write(table, None, rows, schema)
        else:
            lake.replace(table, parts, schema)
        expected.update(_sums(rows, money))
        if records // PROGRESS > shown:
            shown = records // PROGRESS
            say(f"{table}: {records:,} records written")
    return _check(lake, table, (records, expected))


def _check(lake: Lake, table: str, expected: tuple[int, dict]) -> tuple[int, int]:
    """Each record's row count and money sums in `lake`'s table equal `expected`'s; records
    and rows, or MigrationError naming records that differ."""
    records, want = expected
    money = _money(table)
    got = _sums(delta.read(lake.table_uri(table), columns=["record_id", *money]), money)
    if got != want:
        wrong = sorted(want.keys() ^ got.keys() | {r for r in want.keys() & got.keys()
                                                   if want[r] != got[r]}, key=str)
        first = wrong[0]
        raise MigrationError(
            f"{table}: the Delta table at {lake.table_uri(table)} disagrees with the folder layout "
            f"for {len(wrong)} records, e.g. {first}: (rows, {', '.join(money) or 'no money'} "
            f"sums) {want.get(first)} in the folder layout, {got.get(first)} in Delta. The "
            "folder layout is left in place")
    if table in UNPARTITIONED:
        records = len(want)
    return records, sum(v[0] for v in want.values())


def _swap(base: Path, table: str) -> None:
    """The checked Delta table into `<table>`'s place; the old layout kept aside."""
    staging = base / f".{table}.migrating"
    os.rename(base / table, base / f".{table}.old-layout")
    os.rename(staging / table, base / table)
    fsync(base)
    staging.rmdir()
    fsync(base)


def _discard(base: Path, table: str) -> None:
    """Delete the old layout once the Delta table is in place: renamed first, so a crash
    mid-delete leaves a name that says the rest may go."""
    old, trash = base / f".{table}.old-layout", base / f".{table}.old-layout.deleting"
    if old.exists():
        os.rename(old, trash)
        fsync(base)
    if trash.exists():
        shutil.rmtree(trash)
        fsync(base)


def _line(action: str, records: int | None = None, rows: int | None = None,
          check: str | None = None) -> dict:
    return {"action": action, "records": records, "rows": rows,
            "check": "passed" if records is not None else check}
