"""The lake's tables as Delta tables (delta-rs): one atomic commit per write, time travel, upkeep.

A record's rerun replaces exactly its rows with a predicate overwrite: the files holding them
are rewritten without them and the new rows added, in one commit, so a reader sees the table
before or after, never between. Writers do not lock: delta-rs rebases a commit over the ones
that landed since it read the table when they cannot conflict (appends), and refuses one that
might (`CommitFailedError`, e.g. two predicate overwrites at once, even of different records);
`replace` then runs the whole write again on the new version, a bounded number of times.
Where a table lives (a path or `s3://...`) is resources/object_store.py's business.

Every write (append, replace, overwrite, erase, compaction) leaves its files in the table's own
Arrow types (`stored`: `string`, never `large_string` or `string_view`), so that any Parquet
reader gets what the table declares; readers read each file in those types whatever it holds
(another Delta writer's files, delta-rs's DELETE's, hold `string_view`).
"""

from __future__ import annotations

import random
import re
import shutil
import tempfile
import time
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from urllib.parse import unquote

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import (
    BloomFilterProperties,
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    Transaction,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from .inbox.callbacks import RECORD_ID  # the inbox's rule: ids are quoted into predicates
from .locks import machine_lock
from .object_store import connect as _connect
from .object_store import filesystem as _filesystem
from .object_store import shown as _shown
from .object_store import where as _where

ATTEMPTS = 8          # commits lost to concurrent writers before giving up
BACKOFF_S = 0.05      # first wait; doubles, jittered, capped at MAX_BACKOFF_S
MAX_BACKOFF_S = 2.0
LOADS = 5             # a table read again while erasures cut its log (`_table`)
# no dictionaries: most columns are ids, dates and amounts that repeat little, and delta-rs
# tries a dictionary for each before it falls back (files ~15% smaller, writes ~25% cheaper).
# Row groups of 128k rows, not delta-rs's million: a lookup of one record reads its row
# group whole, and compaction's clustered files hold ~1,900 records a million rows (one
# record's lines by hand at 10k records: 0.34 s in a million-row group, 0.09 s in 128k).
# A streamed write's writer also holds only one row group, encoded, until it is full.
# A bloom filter in each row group of the two columns questions look up by one value lets
# DuckDB skip the row groups holding none of it, where min/max cannot (~2.4 KB a row group,
# sized for 2,000 values a group at 1% false positives):
# - `customer_id`: the lake is clustered by record, so one customer's rows lie anywhere (a
#   customer's transactions over 6M rows: 46 row groups read without, 3 with);
# - `record_id`: a replace's copy-on-write rewrites the files it touches in one stream that
#   interleaves them, so between compactions a record's id falls within the min/max of most
#   row groups (1M records after 24 hourly runs: 2,927 of 4,280; one record's transactions
#   3.5 s, and 0.2 s for one customer's, found by its bloom filter).
LOOKED_UP = ColumnProperties(dictionary_enabled=False, bloom_filter_properties=(
    BloomFilterProperties(True, fpp=0.01, ndv=2000)))
ZSTD = WriterProperties(compression="ZSTD", max_row_group_size=128 * 1024,
                        default_column_properties=ColumnProperties(dictionary_enabled=False),
                        column_properties={"record_id": LOOKED_UP, "customer_id": LOOKED_UP})
DEFAULT_TARGET = 100 * 2**20  # delta-rs's own default file size for compaction
SCAN_ROWS = 32 * 1024  # rows a batch of `scan` holds
# a streamed write's files: a huge record's rows in several, by date as they came, so that a
# window's replace rewrites the last of them, not the record (compaction merges them later)
STREAMED_FILE = 32 * 2**20


class CommitConflict(RuntimeError):
    """A write kept losing to concurrent writers of the same table."""


def replace(uri: str, schema: pa.Schema, parts: Mapping[str, pa.Table], *,
            window: Mapping[str, date | datetime] | None = None,
            stats: Sequence[str] | None = None) -> int:
    """Replace the rows of each record in `parts` with its table, in one commit; returns the
    committed version. With `window[record]` only that record's rows with
    `trans_date >= window[record]` are replaced (a windowed pull: older rows stay), and its new
    rows must all fall in the window. The table is created on first write. `stats`: the only
    columns the log keeps statistics of (default: delta-rs's, the first 32)."""
    window = dict(window or {})
    ids = _replaced(parts, window)
    schema = with_record_id(schema)
    # sorted by record: each file's record ids span a narrow range, so a lookup skips it
    data = pa.concat_tables([_conform(parts[r], schema, r, window.get(r)) for r in sorted(ids)])
    return _write(uri, schema, data, "overwrite", _predicate(ids, window), stats)


def replace_batches(uri: str, schema: pa.Schema,
                    parts: Mapping[str, Callable[[], Iterable[pa.RecordBatch]]], *,
                    window: Mapping[str, date | datetime] | None = None,
                    stats: Sequence[str] | None = None) -> int:
    """`replace`, the rows not held: `parts[record]()` gives a record's rows batch by batch
    (again at each try of the commit), each conformed to `schema` on its way into the one
    commit. Memory is a few batches', whatever the records' size."""
    window = dict(window or {})
    ids = _replaced(parts, window)
    schema = with_record_id(schema)

    def rows(own: pa.Schema) -> Iterator[pa.RecordBatch]:
        for rid in sorted(ids):  # by record, as `replace` writes them
            for batch in parts[rid]():
                yield from _conform(pa.Table.from_batches([batch]), schema, rid,
                                    window.get(rid)).cast(own).to_batches()

    return _stream(uri, schema, rows, _predicate(ids, window), stats)


def _replaced(parts: Mapping[str, object], window: Mapping[str, date | datetime]) -> list[str]:
    """The records a replace names, checked, each window's record among them."""
    ids = [check_record_id(r) for r in parts]
    if not ids:
        raise ValueError("replace needs at least one record")
    if stray := sorted(set(window) - set(ids)):
        raise ValueError(f"window names records with no rows given: {stray}")
    return ids


def replace_stream(uri: str, schema: pa.Schema, record_ids: Sequence[str],
                   rows: Callable[[], Iterable[pa.RecordBatch]], *,
                   stats: Sequence[str] | None = None) -> int:
    """Replace every row of `record_ids` with `rows()` (batches carrying their `record_id`,
    each of one of `record_ids`, sorted by it), in one commit, never held at once; `rows` is
    called again at each try. A record `rows` gives nothing for loses its rows."""
    ids = sorted({check_record_id(r) for r in record_ids})
    if not ids:
        raise ValueError("replace needs at least one record")
    return _stream(uri, with_record_id(schema), _conformed(schema, rows, set(ids)),
                   _predicate(ids, {}), stats)


def overwrite_stream(uri: str, schema: pa.Schema,
                     rows: Callable[[], Iterable[pa.RecordBatch]], *,
                     stats: Sequence[str] | None = None) -> int:
    """Replace the whole table with `rows()` (as `replace_stream`'s), in one commit."""
    return _stream(uri, with_record_id(schema), _conformed(schema, rows, None), None, stats)


def _conformed(schema: pa.Schema, rows: Callable[[], Iterable[pa.RecordBatch]],
               ids: set[str] | None) -> Callable[[pa.Schema], Iterator[pa.RecordBatch]]:
    """`rows()` in the table's types, each batch's records checked against `ids`."""
    full = with_record_id(schema)

    def conformed(own: pa.Schema) -> Iterator[pa.RecordBatch]:
        for batch in rows():
            if not batch.num_rows:
                continue
            if ids is not None and (stray := set(pc.unique(batch["record_id"]).to_pylist())
                                    - ids):
                raise ValueError(f"rows of records the replace does not name: "
                                 f"{sorted(stray)[:3]}")
            yield from _conform(pa.Table.from_batches([batch]), full).cast(own).to_batches()

    return conformed


def _stream(uri: str, schema: pa.Schema, rows: Callable[[pa.Schema], Iterable[pa.RecordBatch]],
            predicate: str | None, stats: Sequence[str] | None) -> int:
    """One commit of `rows(stored types)`, streamed (`predicate`: the rows it replaces; None:
    the whole table), retried on a lost race; the committed version."""

    def write() -> int:
        table = _open_or_create(uri, schema, stats)
        _rows_fit_table(table, schema.empty_table())
        failed: list[BaseException] = []
        own = _stored_for(table, schema)  # the file in the table's types, as `_write`'s

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                yield from rows(own)
            except BaseException as exc:  # raised to the caller as it is, not as delta-rs's
                failed.append(exc)
                raise

        try:
            write_deltalake(table, pa.RecordBatchReader.from_batches(own, batches()),
                            mode="overwrite", predicate=predicate,
                            schema_mode="merge", writer_properties=ZSTD,
                            target_file_size=STREAMED_FILE, commit_properties=once.properties)
        except Exception:
            if failed:
                raise failed[0] from None
            raise
        return table.version()

    once = _Once()
    return _retrying(uri, write, once)


def scan(uri: str, record_ids: str | Sequence[str], columns: Sequence[str] | None = None,
         where: pc.Expression | None = None, version: int | None = None
         ) -> Iterator[pa.RecordBatch]:
    """A record's rows (or several records'; those `where` keeps), batch by batch, at the
    latest version (or `version`): records read without being held. Nothing if the table
    does not exist."""
    table = _open(uri, version)
    if table is None:
        return
    ids = sorted({check_record_id(r) for r in (
        [record_ids] if isinstance(record_ids, str) else record_ids)})
    if not ids:
        return
    keep = _of_records(ids)
    yield from _dataset(uri, table, ids).to_batches(
        columns=columns, filter=keep if where is None else keep & where,
        batch_size=SCAN_ROWS, batch_readahead=1, fragment_readahead=1)


def count_rows(uri: str, record_ids: Sequence[str]) -> dict[str, int]:
    """How many rows each of `record_ids` has (those with none are left out)."""
    table = _open(uri, None)
    ids = sorted({check_record_id(r) for r in record_ids})
    got = None if table is None or not ids else _of_ids(
        uri, table, ids, "record_id, count(*) as n", "group by record_id")
    return {} if got is None else dict(zip(got["record_id"].to_pylist(),
                                           got["n"].to_pylist(), strict=True))


def append(uri: str, schema: pa.Schema, data: pa.Table, stats: Sequence[str] | None = None
           ) -> int:
    """Add rows (balance snapshots): concurrent appends all land. Returns the committed version."""
    data = _conform(data, schema)
    if "record_id" in schema.names:
        data = data.sort_by("record_id")  # a file's record ids in a narrow range: lookups skip it
    return _write(uri, schema, data, "append", None, stats)


def overwrite(uri: str, schema: pa.Schema, data: pa.Table, stats: Sequence[str] | None = None
              ) -> int:
    """Replace the whole table (one not kept by record, e.g. `records`) in one commit."""
    return _write(uri, schema, _conform(data, schema), "overwrite", None, stats)


def _write(uri: str, schema: pa.Schema, data: pa.Table, mode: str, predicate: str | None,
           stats: Sequence[str] | None) -> int:
    """One commit of `data` (`predicate`: the rows it replaces), retried on a lost race;
    returns the committed version."""

    def write() -> int:
        table = _open_or_create(uri, schema, stats)
        _rows_fit_table(table, data)
        write_deltalake(table, _as_stored(table, data), mode=mode, predicate=predicate,
                        schema_mode="merge", writer_properties=ZSTD,
                        commit_properties=once.properties)
        return table.version()

    once = _Once()
    return _retrying(uri, write, once)


def stored(table: DeltaTable) -> pa.Schema:
    """The Arrow schema of every data file of `table`: its Delta schema, each Delta type as
    its one Arrow type (`string`, never `large_string` or `string_view`; timestamps in
    microseconds; a list's item named `element`)."""
    return pa.schema(table.schema().to_arrow())


def _stored_for(table: DeltaTable, schema: pa.Schema) -> pa.Schema:
    """`schema`'s columns in the table's own types (`stored`): delta-rs writes the Arrow
    types it is given (a `large_string` or `string_view` column would be one in the file).
    A column the table lacks yet (a schema merge) stays as it is."""
    own = stored(table)
    names = set(own.names)
    return pa.schema([own.field(f.name) if f.name in names else f for f in schema])


def _as_stored(table: DeltaTable, data: pa.Table) -> pa.Table:
    """`data` in the table's own types, so that the file written has them (`_stored_for`)."""
    target = _stored_for(table, data.schema)
    return data if data.schema == target else data.cast(target)


def read(uri: str, record_id: str | Sequence[str] | None = None,
         columns: Sequence[str] | None = None, version: int | datetime | None = None
         ) -> pa.Table | None:
    """The table (or the rows of one record, or of any of several, in one pass: files whose
    record range misses them all are skipped by their stats) at `version` (default: the
    latest), None if the table does not exist. Delta stores timestamps in microseconds: ms
    columns come back as us."""
    table = _open(uri, version)
    if table is None:
        return None
    if record_id is None:
        return _dataset(uri, table).to_table(columns=columns)
    several = isinstance(record_id, Iterable) and not isinstance(record_id, str | bytes)
    ids = record_id if several else [record_id]
    return _rows_of(uri, table, sorted({check_record_id(r) for r in ids}), columns)


def _rows_of(uri: str, table: DeltaTable, ids: list[str], columns: Sequence[str] | None
             ) -> pa.Table:
    """Rows of the (sorted) `ids` in the table's own types, in the order of the files and
    within them (`_of_ids`)."""
    own = stored(table)
    wanted = own if columns is None else pa.schema([own.field(c) for c in columns])
    chosen = ", ".join('"' + c.replace('"', '""') + '"' for c in wanted.names)
    got = _of_ids(uri, table, ids, chosen, "")
    return wanted.empty_table() if got is None else got.cast(wanted)


def _of_ids(uri: str, table: DeltaTable, ids: list[str], select: str, then: str
            ) -> pa.Table | None:
    """`select ... then` over the rows of the (sorted) `ids`, from the files whose record_id
    range holds one, through DuckDB (None: no file holds any). DuckDB skips each row group
    whose `record_id` bloom filter holds none of them, where pyarrow's `isin` decodes nearly
    every row group of those files: a run's 50 records at 1M records, after hourly runs, in
    611 of 1,000 files, read in 4.5 s against 108 s, counted in 0.6 s against 13 s."""
    _refuse_deletion_vectors(uri, table)
    uris = {_name(u): u.removeprefix("file://") for u in table.file_uris()}
    paths = [uris[_name(p)] for p in _holding(table, ids)]
    if not paths:
        return None
    listed = ", ".join(f"'{check_record_id(i)}'" for i in ids)  # nothing in them to quote
    with _connect(lake_root=uri) as con:
        con.execute("set TimeZone = 'UTC'")
        return con.sql(f"select {select} from read_parquet($paths, union_by_name = true)"
                       f" where record_id in ({listed}) {then}", params={"paths": paths}
                       ).to_arrow_table()


def _of_records(ids: list[str]) -> pc.Expression:
    """The filter of a read of `ids`' rows. `record_id` cast to the table's type: a file
    another writer made with `string_view` (delta-rs's own DELETE, DataFusion's) or
    `large_string` ids is read in the table's types, but pyarrow compares a filter with each
    row group's statistics in the file's type and has no kernel for mixed ones; with the
    cast, row groups are still skipped by their statistics."""
    return pc.field("record_id").cast(pa.string()).isin(pa.array(ids, pa.string()))


def _dataset(uri: str, table: DeltaTable, ids: list[str] | None = None) -> ds.Dataset:
    """The snapshot's Parquet files as a pyarrow dataset over pyarrow's own filesystem, not
    delta-rs's `to_pyarrow_dataset`: its Python filesystem leaves threads that abort the
    interpreter at exit now and then ("terminate called without an active exception").
    Read in the table's own types (`stored`), whatever Arrow types a file holds."""
    _refuse_deletion_vectors(uri, table)
    filesystem, base = _filesystem(uri)
    return ds.dataset([f"{base}/{unquote(p)}" for p in _holding(table, ids)],
                      schema=stored(table), format="parquet", filesystem=filesystem)


def _holding(table: DeltaTable, ids: list[str] | None) -> list[str]:
    """The log's paths of the snapshot's files, those whose record_id range holds one of the
    (sorted) `ids` when given."""
    adds = pa.table(table.get_add_actions(flatten=True))
    paths = adds["path"].to_pylist()
    if not ids or "min.record_id" not in adds.column_names:
        return paths
    lows, highs = adds["min.record_id"].to_pylist(), adds["max.record_id"].to_pylist()
    return [p for p, lo, hi in zip(paths, lows, highs, strict=True)
            if lo is None or hi is None or bisect_left(ids, lo) < bisect_right(ids, hi)]


def files(uri: str, version: int | datetime | None = None) -> list[str]:
    """Absolute URIs of the data files of a snapshot, for readers of plain Parquet (DuckDB's
    read_parquet), largest first. Refused when the snapshot has deletion vectors, which such
    readers ignore.

    DuckDB estimates a file list's rows as its first file's times the number of files. With
    a run's small file first, a join took the whole table for its small side: one customer's
    `landings` at 1M records, after 24 hourly runs, built a hash table of its 4M rows (1.35
    GB; 166 MB compacted into one file)."""
    table = _open(uri, version)
    if table is None:
        raise FileNotFoundError(f"no Delta table at {_shown(uri)}")
    _refuse_deletion_vectors(uri, table)
    adds = pa.table(table.get_add_actions(flatten=False))
    size = dict(zip([_name(p) for p in adds["path"].to_pylist()],
                    adds["size_bytes"].to_pylist(), strict=True))
    return sorted(table.file_uris(), key=lambda f: -size[_name(f)])


def _name(path: str) -> str:
    """A data file's name, from its path in the log or its URI (S3's may carry a query)."""
    return unquote(path.split("?", 1)[0].rsplit("/", 1)[-1])


class HistoryGone(ValueError):
    """Time travel to before the first commit the table's log still keeps."""


def _reaches_back(uri: str, table: DeltaTable, when: datetime) -> None:
    """Refuse a snapshot loaded as of `when` that is not the one of then: delta-rs answers a
    time before the log's first kept commit (an erasure cut the log, `erase`) with that
    commit's snapshot, silently. A table created after `when` (version 0) is not refused:
    then it did not exist."""
    loaded = table.version()
    if loaded == 0:
        return
    store, base = _filesystem(uri)
    try:  # the time delta-rs goes by: the commit file's (as the store dates it)
        this, before = store.get_file_info([f"{base}/_delta_log/{v:020d}.json"
                                            for v in (loaded, loaded - 1)])
    except OSError:
        return
    made = this.mtime
    if made is not None and made.timestamp() > when.timestamp() and \
            before.type == pafs.FileType.NotFound:
        raise _history_gone(uri, when, made)


def _history_gone(uri: str, when: datetime | int, made: datetime) -> HistoryGone:
    at = f"as of {when}" if isinstance(when, datetime) else f"at version {when}"
    return HistoryGone(f"{_shown(uri)} {at}: its history before "
                       f"{made:%Y-%m-%d %H:%M:%S} UTC is gone (an erasure cut the table's "
                       "log: `ledgerlake forget`); ask as of a later time")


def _cut_at(uri: str) -> tuple[int, datetime] | None:
    """The version and time an erasure cut the table's history at, if it did or is doing so
    now: a checkpoint with a commit before it missing (`_cut_history`)."""
    store, base = _filesystem(uri)
    try:
        listed = store.get_file_info(pafs.FileSelector(f"{base}/_delta_log",
                                                       allow_not_found=True))
    except OSError:
        return None
    commits = {int(i.base_name[:20]): i.mtime for i in listed
               if re.fullmatch(r"\d{20}\.json", i.base_name)}
    checkpoints = [int(i.base_name[:20]) for i in listed
                   if re.fullmatch(r"\d{20}\.checkpoint\.parquet", i.base_name)]
    for cut in sorted(checkpoints, reverse=True):
        if commits.get(cut) is not None and not set(range(cut)) <= commits.keys():
            return cut, commits[cut]
    return None


def cut_after(uri: str, version: int) -> bool:
    """Whether an erasure cut the table's history after `version`, or is cutting it now:
    that version is gone, and so may be files of its snapshot (`purge`). A reader pinned to
    it reads the table again at a later one."""
    cut = _cut_at(uri)
    return cut is not None and cut[0] > version


def _refuse_deletion_vectors(uri: str, table: DeltaTable) -> None:
    """Plain Parquet readers (DuckDB's, and the lake's own over the file list) would return
    rows a deletion vector deleted; delta-rs does not write them, other writers may."""
    if "deletionVectors" in (table.protocol().reader_features or []):
        if table.deletion_vectors().read_all().num_rows:
            raise ValueError(f"{_shown(uri)} version {table.version()} has deletion vectors: "
                             "its Parquet files hold deleted rows, which a Parquet reader "
                             "would return")


# how delta-rs writes a replace's predicate back into the log (DataFusion's rendering)
_NAMED_ONE = re.compile(r"record_id\s*=\s*'([^']*)'")
_NAMED_MANY = re.compile(r"record_id\s+IN\s*\(([^)]*)\)", re.IGNORECASE)
_QUOTED = re.compile(r"'([^']*)'")


def changed_records(uri: str, since: int) -> tuple[int, set[str]] | None:
    """(the latest version, the records whose rows the commits after version `since` changed),
    read from the table's log: the records a commit's predicate names (a replace, an erasure:
    rows it rewrote for other records are the same rows), or those in the files it added
    without one (an append). Compaction and vacuum change no data. None when the log no
    longer reaches back to `since` (an erasure cuts it: `erase`'s `before_cut`), or a commit
    changed rows it does not name: the caller must start over."""
    table = _open(uri, None)
    if table is None:
        return None
    latest = table.version()
    store, base = _filesystem(uri)
    changed: set[str] = set()
    for v in range(since + 1, latest + 1):
        entry = _log_entry(store, base, v)
        actions = None if entry is None else [orjson.loads(x) for x in entry.splitlines() if x]
        named = None if actions is None else _named_in(actions)
        if named is None:
            return None
        changed |= named
        if not any("commitInfo" in a and a["commitInfo"].get("operationParameters", {})
                   .get("predicate") for a in actions):
            added = _appended(store, base, actions)
            if added is None:
                return None
            changed |= added
    return latest, changed


def _log_entry(store, base: str, version: int) -> bytes | None:
    """The table's log entry of `version` (None: there is none, or no longer)."""
    try:
        with store.open_input_stream(f"{base}/_delta_log/{version:020d}.json") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _appended(store, base: str, actions: list[dict]) -> set[str] | None:
    """The records in the data files a commit without a predicate added; None if one has
    been vacuumed since (which records it held is lost)."""
    records: set[str] = set()
    for add in (a["add"] for a in actions if "add" in a and a["add"].get("dataChange")):
        try:
            records |= _records_in(store, f"{base}/{unquote(add['path'])}", add)
        except FileNotFoundError:
            return None
    return records


def _named_in(actions: list[dict]) -> set[str] | None:
    """The records a commit's predicate names; None when it changed data it does not name
    (rows removed without a predicate that names records)."""
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    if info.get("operation") in ("OPTIMIZE", "VACUUM START", "VACUUM END"):
        return set()
    predicate = (info.get("operationParameters") or {}).get("predicate") or ""
    named = set(_NAMED_ONE.findall(predicate))
    for listed in _NAMED_MANY.findall(predicate):
        named |= set(_QUOTED.findall(listed))
    removes = any("remove" in a and a["remove"].get("dataChange") for a in actions)
    if removes and not named:
        return None
    return named


def _records_in(store: pafs.FileSystem, path: str, add: dict) -> set[str]:
    """The records of an added file: from its statistics when it holds one, else read."""
    stats = orjson.loads(add["stats"]) if add.get("stats") else {}
    low = (stats.get("minValues") or {}).get("record_id")
    # a string statistic may be cut short (Delta's readers keep 32 characters): trusted below
    if low is not None and len(low) < 32 and low == (stats.get("maxValues") or {}).get(
            "record_id"):
        return {low}
    with store.open_input_file(path) as f:
        column = pq.read_table(f, columns=["record_id"])["record_id"]
    return set(pc.unique(column).to_pylist()) - {None}


def row_count(uri: str, version: int | None = None) -> int | None:
    """The rows of the table at `version` (None: its latest; 0 if there is no table yet),
    summed from its log's file statistics: no data file is read. None if a file has no count
    (the lake's writes always give one) or the version's history is gone."""
    try:
        table = _open(uri, version)
    except HistoryGone:
        return None
    if table is None:
        return 0
    counts = pa.table(table.get_add_actions(flatten=False))["num_records"]
    return None if counts.null_count else int(pc.sum(counts).as_py() or 0)


def column_names(uri: str, version: int | datetime | None = None) -> list[str]:
    """The table's columns at `version` (default: the latest); none if it does not exist."""
    table = _open(uri, version)
    return [] if table is None else stored(table).names


def files_alike(uri: str, files: Sequence[str]) -> bool:
    """Whether every one of a table's data files (as `files` names them) has the same Parquet
    schema: the columns, their order and types. Then a reader may take them by position, as
    DuckDB's plain read_parquet does; by name (union_by_name) it reads every footer before
    each query, ~0.15 s at a million records. One unreadable counts as unlike."""
    store, _ = _filesystem(uri)

    def schema_of(path: str) -> pa.Schema | None:
        try:
            return pq.read_schema(path.removeprefix("file://").removeprefix("s3://"),
                                  filesystem=store).remove_metadata()
        except (pa.ArrowInvalid, OSError):
            return None

    with ThreadPoolExecutor(8) as pool:  # a footer each: on S3, a round trip each
        schemas = list(pool.map(schema_of, files))
    return bool(schemas) and schemas[0] is not None and all(
        s is not None and s.equals(schemas[0]) for s in schemas[1:])


def version(uri: str) -> int | None:
    """The latest committed version, None if the table does not exist."""
    table = _open(uri, None)
    return None if table is None else table.version()


# A re-sort's memory: DataFusion's own default let a Z-order of 2.7 GB of transactions grow
# past 22 GB resident; held to this, it spills the rest to the temporary folder instead, about
# SPILL_PER_BYTE times the table's size on storage (270 MB of transactions spilled 1.95 GB).
SORT_MEMORY = 2**30
SPILL_PER_BYTE = 8


def compact(uri: str, *, target_size: int | None = None, order_by: str | None = None,
            cluster_max_bytes: int | None = None) -> dict:
    """Rewrite small files into large ones (one commit; the rows are unchanged). With
    `order_by`, once writes have left two or more small files, a table of up to
    `cluster_max_bytes` is rewritten whole sorted by that column (a Z-order on one column), so
    a lookup or a predicate replace by it opens few files; a larger one only has its small
    files packed (`_cluster_refused`), and a lookup reads more of their row groups.
    Returns versions, live files and bytes before and after, files added and removed, and
    `clustered`: "yes", "not needed", or why not (None without `order_by`)."""

    def run() -> dict:
        table = _table(uri)
        before, version_before = _live(table), table.version()
        clustered = None  # a table kept whole, not by record
        if order_by:
            clustered = ("not needed" if _small_files(table, target_size or DEFAULT_TARGET) < 2
                         else _cluster_refused(before[1], cluster_max_bytes) or "yes")
        if clustered == "yes":
            metrics = table.optimize.z_order([order_by], target_size=target_size,
                                             writer_properties=ZSTD,
                                             max_spill_size=SORT_MEMORY)
        else:
            metrics = table.optimize.compact(target_size=target_size, writer_properties=ZSTD)
        # a checkpoint of the new version: opening the table reads it, not every commit since
        table.create_checkpoint()
        after = _live(table)
        return {"version_before": version_before, "version_after": table.version(),
                "files_before": before[0], "files_after": after[0],
                "bytes_before": before[1], "bytes_after": after[1],
                "files_added": metrics["numFilesAdded"],
                "files_removed": metrics["numFilesRemoved"], "clustered": clustered}

    return _retrying(uri, run)


def _cluster_refused(size: int, cluster_max_bytes: int | None) -> str | None:
    """Why a table of `size` bytes is not re-sorted whole, None if it may be: past the limit,
    or when its sort would spill more than the temporary folder has free (a compaction that
    fills the disk fails after hours, and takes the machine's other work with it)."""
    gb = f"{size / 2**30:.1f} GB"
    if cluster_max_bytes is not None and size > cluster_max_bytes:
        return f"no: {gb}, over the {cluster_max_bytes // 2**20} MB limit"
    spill, free = size * SPILL_PER_BYTE, shutil.disk_usage(tempfile.gettempdir()).free
    if spill > free:
        return (f"no: {gb} would spill ~{spill / 2**30:.0f} GB to {tempfile.gettempdir()}, "
                f"which has {free / 2**30:.0f} GB free")
    return None


def vacuum(uri: str, retention_hours: int) -> dict:
    """Delete the data files no version younger than `retention_hours` refers to, and files no
    version ever did (left by commits that lost a race or were killed, under their own or
    their staging names) once older than that; then log entries past the table's log
    retention. Time travel further back than the retention stops working, and a write taking
    longer than it could lose its files: keep it hours, not minutes. Returns the versions, the
    live files and bytes (unchanged), and the files and bytes removed."""
    location, options = _where(uri)
    table = _table(uri)
    live, version_before = _live(table), table.version()
    settings = {"retention_hours": retention_hours, "enforce_retention_duration": False,
                "full": True}
    # delta-rs lists (and logs) files its tombstones name even when already deleted: count
    # only what is there
    store, base = _filesystem(uri)
    root = location.rstrip("/") + "/"
    candidates = [f"{base}/{p.removeprefix(root)}"
                  for p in table.vacuum(dry_run=True, **settings)]
    present = [i for i in store.get_file_info(candidates) if i.type == pafs.FileType.File]
    if present:
        table.vacuum(dry_run=False, **settings)
    staged = _staged_leftovers(store, base, retention_hours)
    for info in staged:
        store.delete_file(info.path)
    present += staged
    table.cleanup_metadata()
    return {"version_before": version_before, "version_after": table.version(),
            "files_before": live[0], "files_after": live[0],
            "bytes_before": live[1], "bytes_after": live[1],
            "files_removed": len(present), "bytes_removed": sum(i.size for i in present)}


def erase(uri: str, record_ids: Sequence[str],
          before_cut: Callable[[int], None] | None = None) -> dict:
    """Delete every row of `record_ids` in one commit (`delete_rows`), then purge every file
    that held one and cut the history there (`purge`). Returns the rows deleted, the files
    purged and the version the history now starts at."""
    deleted = delete_rows(uri, record_ids)
    return purge(uri, record_ids, before_cut, deleted)


def delete_rows(uri: str, record_ids: Sequence[str]) -> int:
    """Delete every row of `record_ids` in one commit: the files holding one rewritten
    without them. The older versions still show them until `purge`. Returns the rows
    deleted (0 when none is left, or the table does not exist)."""
    ids = sorted({check_record_id(r) for r in record_ids})
    if not ids or _open(uri, None) is None:
        return 0
    predicate = _predicate(ids, {})

    def delete() -> int:
        """A predicate overwrite with no rows, not delta-rs's DELETE: both rewrite the files
        holding a row of `ids` without it, in one commit, but DELETE writes them through
        DataFusion, in its Arrow types (`string_view`, `binary_view`) and its own Parquet
        settings; the writer every other write uses keeps the table's types (`stored`)."""
        table = _table(uri)
        doomed = _rows_of(uri, table, ids, ["record_id"]).num_rows  # of this same snapshot
        if doomed:
            write_deltalake(table, stored(table).empty_table(), mode="overwrite",
                            predicate=predicate, writer_properties=ZSTD)
        return doomed

    return int(_retrying(uri, delete))


def purge(uri: str, record_ids: Sequence[str],
          before_cut: Callable[[int], None] | None = None, deleted: int = 0) -> dict:
    """After `delete_rows`: purge every data file of any version that held a row of
    `record_ids`, then cut the table's history there (`_cut_history`): no version the table
    keeps can show them, and no log entry names them (time travel to before the erasure
    stops working, as it must). Idempotent: run again, it finds nothing more, or finishes a
    pass that was killed. Returns the rows deleted (`deleted`, as `delete_rows` said), the
    files purged and the version the history now starts at."""
    ids = sorted({check_record_id(r) for r in record_ids})
    if not ids:
        return {"rows_deleted": 0, "files_purged": 0, "version": None}
    # one purge of a table at a time: a second one's cut, between this one's commit and its
    # checkpoint, deletes that commit (forget crashed so in a chaos seed); both purging one
    # file, the second finds it gone
    with machine_lock("erase", _shown(uri)):
        table = _open(uri, None)
        if table is None:
            return {"rows_deleted": 0, "files_purged": 0, "version": None}
        store, base = _filesystem(uri)
        purged = _purge_files(store, base, table, ids)
        named = deleted or purged or _log_names(store, base, ids)
        return {"rows_deleted": int(deleted), "files_purged": purged,
                "version": _cut_history(uri, store, base, before_cut) if named
                else table.version()}


def _purge_files(store: pafs.FileSystem, base: str, table: DeltaTable, ids: list[str]) -> int:
    """Delete every data file no longer live that holds a row of `ids`; how many."""
    live = {unquote(p) for p in table.get_add_actions(flatten=True).column("path").to_pylist()}
    purged = 0
    for info in store.get_file_info(pafs.FileSelector(base, recursive=True,
                                                      allow_not_found=True)):
        name = info.path.removeprefix(base).lstrip("/")
        if (info.type != pafs.FileType.File or name.startswith("_delta_log/") or name in live
                or not name.endswith(".parquet")):
            continue
        if _holds(store, info.path, ids):
            store.delete_file(info.path)
            purged += 1
    return purged


def _log_names(store: pafs.FileSystem, base: str, ids: list[str]) -> bool:
    """Whether a commit of the log names one of `ids` (a replace's predicate)."""
    needles = [i.encode() for i in ids]
    for info in store.get_file_info(pafs.FileSelector(f"{base}/_delta_log",
                                                      allow_not_found=True)):
        if info.base_name.endswith(".json"):
            with store.open_input_stream(info.path) as f:
                text = f.read()
            if any(n in text for n in needles):
                return True
    return False


def _cut_history(uri: str, store: pafs.FileSystem, base: str,
                 before_cut: Callable[[int], None] | None = None) -> int:
    """A commit naming no row (the description), its checkpoint, every log file before it
    deleted: earlier commits named records (a replace's predicate, `record_id` statistics);
    the checkpoint lists only live files, none holding an erased row. Returns its version.
    `before_cut(version)` is called once the checkpoint is made and before the log goes: the
    last chance to read what the commits before `version` changed (`changed_records`)."""

    def commit() -> int:
        table = _table(uri)
        table.alter.set_table_description("its history starts at an erasure")
        return _table(uri).version()

    cut = _retrying(uri, commit)
    _table(uri, cut).create_checkpoint()
    if before_cut is not None:
        before_cut(cut)
    for info in store.get_file_info(pafs.FileSelector(f"{base}/_delta_log",
                                                      allow_not_found=True)):
        head = info.base_name.split(".")[0]
        if info.type == pafs.FileType.File and head.isdigit() and int(head) < cut:
            store.delete_file(info.path)
    return cut


def _holds(store: pafs.FileSystem, path: str, ids: list[str]) -> bool:
    """Whether a Parquet file has a row of `ids` (one that does not parse, damaged, is taken
    to: no version can read it anyway). Files still being written keep their staging names
    (`STAGED`) and are not looked at: the lake's vacuum removes a dead writer's."""
    try:
        with store.open_input_file(path) as f:
            column = pq.read_table(f, columns=["record_id"])["record_id"]
    except (pa.ArrowInvalid, KeyError, OSError):
        return True
    return bool(pc.any(pc.is_in(column, pa.array(ids, pa.string()))).as_py())


STAGED = re.compile(r"#\d+$")  # object_store's name for a local file still being written


def _staged_leftovers(store: pafs.FileSystem, base: str,
                      retention_hours: int) -> list[pafs.FileInfo]:
    """Files a writer killed mid-write left under their staging names (`part-...parquet#1`,
    `_delta_log/N.json#1`: a local lake's object_store writes each file so, then renames it
    when whole). No version names them and Delta's vacuum leaves them; older than the
    retention, no live writer can still be writing them."""
    cutoff = time.time() - retention_hours * 3600
    out = []
    for folder in (base, f"{base}/_delta_log"):
        try:
            listed = store.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        except OSError:
            continue
        out += [i for i in listed if i.type == pafs.FileType.File and STAGED.search(i.base_name)
                and i.mtime is not None and i.mtime.timestamp() < cutoff]
    return out


def check_record_id(record_id: str) -> str:
    """Record ids are quoted into predicates: refuse anything but ^[A-Za-z0-9_-]{1,64}$."""
    if not isinstance(record_id, str) or not RECORD_ID.fullmatch(record_id):
        raise ValueError(f"record id {record_id!r} is not of the form ^[A-Za-z0-9_-]{{1,64}}$")
    return record_id


class _Once:
    """A write's own transaction id, in each commit it tries (a Delta `txn` action). On S3 a
    commit is a conditional put: when the store took it but the answer was lost, the client
    puts again, gets 412, and delta-rs takes its own commit for a concurrent writer's. Its
    conflict check then finds this id in that commit and refuses to commit the same actions
    a second time; `_retrying` finds the id in the log and answers that version."""

    def __init__(self) -> None:
        self.app_id = f"ledgerlake-{uuid.uuid4()}"
        self.properties = CommitProperties(
            app_transactions=[Transaction(app_id=self.app_id, version=1)])

    def committed(self, uri: str) -> int | None:
        """The version that holds this write's commit, if one does."""
        return _reading(uri, lambda: self._committed(uri))

    def _committed(self, uri: str) -> int | None:
        table = _open(uri, None)
        if table is None or table.transaction_version(self.app_id) is None:
            return None
        store, base = _filesystem(uri)
        for v in range(table.version(), -1, -1):  # the latest few: it is one of them
            entry = _log_entry(store, base, v)
            if entry is None:
                break
            if self.app_id.encode() in entry:
                return v
        return table.version()


def _retrying(uri: str, attempt: Callable, once: _Once | None = None):
    """Run `attempt` until it commits; each try reads the table's latest version afresh. A try
    is made again when a concurrent writer won, and when an erasure cut the log under it: the
    commits since the version it read, which delta-rs checks it against, are gone ("Invalid
    table version", or a log file not found)."""
    for n in range(ATTEMPTS):
        started = time.time()
        try:
            return attempt()
        except Exception as exc:
            landed = once.committed(uri) if once is not None else None
            if landed is not None:  # the store took it; only its answer was lost
                return landed
            if not (isinstance(exc, CommitFailedError) or _cut_since(uri, exc, started)):
                raise
            if n == ATTEMPTS - 1:
                raise CommitConflict(f"{_shown(uri)}: {ATTEMPTS} commits in a row lost to "
                                     f"concurrent writers; nothing of this write landed") from exc
            time.sleep(min(MAX_BACKOFF_S, BACKOFF_S * 2**n) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


def _reading(uri: str, read: Callable):
    """`read()` of the latest version, again while an erasure cuts the log under it: delta-rs
    reads some of a loaded table's log only when asked (a transaction's version), by then
    perhaps deleted."""
    for n in range(LOADS):
        started = time.time()
        try:
            return read()
        except (DeltaError, OSError) as exc:
            if n == LOADS - 1 or not _cut_since(uri, exc, started):
                raise
            time.sleep(BACKOFF_S * 2**n * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


# how much earlier than a try's start a cut's commit may be dated and still have cut under it
# (the store's clock, and S3's whole seconds)
CUT_SLACK_S = 2.0


# how delta-rs names the version of the log it failed to read
_LOG_VERSION = re.compile(r"_delta_log/(\d{20})\.|Invalid table version: (\d+)")


def _cut_since(uri: str, exc: Exception, started: float) -> bool:
    """Whether `exc` is a read of the log that an erasure's cut took away under a try that
    started at `started`: it names a version the cut took, or the cut's commit is dated at or
    after the try's start."""
    if not isinstance(exc, DeltaError | OSError):
        return False
    cut = _cut_at(uri)
    if cut is None:
        return False
    named = _LOG_VERSION.search(str(exc))
    if named and int(named.group(1) or named.group(2)) < cut[0]:
        return True
    return cut[1] is not None and cut[1].timestamp() >= started - CUT_SLACK_S


STATS = "delta.dataSkippingStatsColumns"


def _open_or_create(uri: str, schema: pa.Schema,
                    stats: Sequence[str] | None = None) -> DeltaTable:
    """The table, created on first write; with `stats`, its log keeps statistics of those
    columns only (a table made before is told so, once, in a commit of its own)."""
    wanted = None if stats is None else ",".join(c for c in stats if c in schema.names)
    try:
        table = _table(uri)
    except TableNotFoundError:
        # two first writers race for version 0. delta-rs would retry the loser's create as
        # version 1 (a second CREATE TABLE, with a new table id): no retries, so it fails with
        # CommitFailedError and _retrying opens the winner's table
        location, options = _where(uri)
        return DeltaTable.create(location, schema, mode="ignore",
                                 configuration={STATS: wanted} if wanted else None,
                                 storage_options=options,
                                 commit_properties=CommitProperties(max_commit_retries=0))
    if wanted and table.metadata().configuration.get(STATS) != wanted:
        table.alter.set_table_properties({STATS: wanted})
    return table


def _open(uri: str, version: int | datetime | None) -> DeltaTable | None:
    """The table at `version` (default: the latest); None if there is none. A version before
    an erasure's cut is refused (`HistoryGone`), whether delta-rs fails to load it or answers
    a time before the cut with the cut's own snapshot (`_reaches_back`)."""
    try:
        table = _table(uri, version)
    except TableNotFoundError:
        return None
    if isinstance(version, datetime):
        _reaches_back(uri, table, version)
    return table


def _table(uri: str, version: int | datetime | None = None) -> DeltaTable:
    """The table loaded at `version`, read again (`LOADS` times at most) while erasures cut
    its log: delta-rs lists the log, then reads the commits it listed, which `_cut_history`
    may delete in between ("File not found: _delta_log/..."; as of a time, "No table metadata
    or protocol found", or a FileNotFoundError naming a commit). Read again, it starts from
    the cut's checkpoint. A version before the cut, or a time that still fails to load, is
    one the cut took: `HistoryGone`."""
    location, options = _where(uri)

    def load() -> DeltaTable:
        table = DeltaTable(location, storage_options=options)
        if version is not None:  # one the log no longer has: "No files in log segment"
            table.load_as_version(version)
        return table

    for n in range(LOADS):
        try:
            return load()
        except (DeltaError, FileNotFoundError) as exc:  # TableNotFoundError is a DeltaError
            _load_again(uri, version, exc, last=n == LOADS - 1)
            # read again once the log is cut (erasures cut in turn; one may follow another)
            time.sleep(BACKOFF_S * 2**n * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


def _load_again(uri: str, version: int | datetime | None, exc: Exception, last: bool) -> None:
    """Raise what a failed load of `version` means, unless an erasure's cut under it may
    have made it fail and it is worth reading again: `exc` itself, or `HistoryGone`."""
    cut = _cut_at(uri)
    if cut is None:
        raise exc
    if isinstance(version, int) and version < cut[0] or last and isinstance(version, datetime):
        raise _history_gone(uri, version, cut[1]) from None
    if last:
        raise exc


def _small_files(table: DeltaTable, target_size: int) -> int:
    """Files under half the target size: what writes left since the last compaction."""
    sizes = pa.table(table.get_add_actions(flatten=False))["size_bytes"]
    return pc.sum(pc.less(sizes, target_size // 2)).as_py() or 0


def _live(table: DeltaTable) -> tuple[int, int]:
    """Files and bytes of the table's current version."""
    adds = pa.table(table.get_add_actions(flatten=False))
    return adds.num_rows, int(pc.sum(adds["size_bytes"]).as_py() or 0)


def _rows_fit_table(table: DeltaTable, data: pa.Table) -> None:
    """The rows' money, and every column's kind, against the table's own columns (the schema
    given may be the rows'): refused here, before anything is written. delta-rs refuses a
    clash of kinds too, but at times only after it has written a data file, left behind."""
    columns = pa.schema(table.schema().to_arrow())
    _refuse_float_money(columns, data, " in the table")
    present = set(data.schema.names)
    for field in columns:
        if field.name in present:
            got = data.schema.field(field.name).type
            if not pa.types.is_null(got) and _kind(got) != _kind(field.type):
                raise TypeError(f"column {field.name} is {field.type} in the table "
                                f"but came as {got}")


def _kind(t: pa.DataType) -> str:
    """What a column holds, whatever its width or encoding (string and large_string are one
    kind, int32 and int64 another)."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    for kind, test in _KINDS:
        if test(t):
            return kind
    return str(t)  # anything else (times, durations, maps...) only as itself


_KINDS = tuple((kind, getattr(pa.types, f"is_{name}")) for kind, names in (
    ("text", ("string", "large_string", "string_view")), ("integer", ("integer",)),
    ("float", ("floating",)), ("decimal", ("decimal",)), ("timestamp", ("timestamp",)),
    ("date", ("date",)), ("boolean", ("boolean",)),
    ("binary", ("binary", "large_binary", "binary_view")),
    ("list", ("list", "large_list", "list_view")), ("struct", ("struct",))) for name in names)


def _refuse_float_money(schema: pa.Schema, data: pa.Table, where: str = "") -> None:
    """Refuse rows whose column is not decimal where `schema`'s is: delta-rs (and a cast)
    would turn a float into it quietly (0.105 landing as 0.11)."""
    present = set(data.schema.names)  # data.column_names builds a new list at each call
    for field in schema:
        if pa.types.is_decimal(field.type) and field.name in present:
            got = data.schema.field(field.name).type
            if not (pa.types.is_decimal(got) or pa.types.is_null(got)):
                raise TypeError(f"column {field.name} is money ({field.type}){where} "
                                f"but came as {got}")


def with_record_id(schema: pa.Schema) -> pa.Schema:
    """The table's schema: the product's columns, then the record's id."""
    if "record_id" in schema.names:
        return schema
    return schema.append(pa.field("record_id", pa.string(), nullable=False))


def _conform(data: pa.Table, schema: pa.Schema, record_id: str | None = None,
             since: date | datetime | None = None) -> pa.Table:
    """`data` in `schema`'s columns and types; money stays decimal (a float is refused)."""
    if record_id is not None:
        rid = pa.array([record_id] * data.num_rows, pa.string())
        if "record_id" in data.column_names:
            if pc.all(pc.equal(data["record_id"], rid)).as_py() is False:
                raise ValueError(f"the rows given for record {record_id} name other records")
            data = data.drop_columns(["record_id"])
        data = data.append_column("record_id", rid)
    if missing := [n for n in schema.names if n not in data.column_names]:
        raise ValueError(f"columns missing from the rows: {missing}")
    _refuse_float_money(schema, data)
    data = data.select(schema.names).cast(schema)
    if since is not None:
        if "trans_date" not in schema.names:
            raise ValueError("a window needs a trans_date column")
        inside = pc.greater_equal(data["trans_date"], pa.scalar(since, schema.field(
            "trans_date").type))
        if data.num_rows and not pc.all(pc.fill_null(inside, False)).as_py():
            raise ValueError(f"record {record_id}: rows dated before its window "
                             f"({since.isoformat()}) or undated")
    return data


def _predicate(ids: list[str], window: Mapping[str, date | datetime]) -> str:
    """Which rows the commit replaces, in delta-rs's SQL (ids are checked, so quoting is safe)."""
    whole = [r for r in ids if r not in window]
    terms = [f"record_id IN ({', '.join(_quote(r) for r in whole)})"] if whole else []
    for rid in ids:
        if rid in window:
            terms.append(f"(record_id = {_quote(rid)} AND trans_date >= "
                         f"{_quote(_day(window[rid]))})")
    return " OR ".join(terms)


def _day(when: date | datetime) -> str:
    if isinstance(when, datetime) and when.tzinfo is None:
        raise ValueError(f"window start {when.isoformat()} has no time zone")
    return when.isoformat()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
