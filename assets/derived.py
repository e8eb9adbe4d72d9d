"""Lake tables derived from others, kept up to date for the records whose rows moved:
`daily_balances` (from transactions and balance_periodic), `monthly_cashflow` (from
transactions) and `latest_balances` (the newest of balance_history).
docs/decisions/0014-derived-tables.md says why they are tables, not views.

Their SQL is in sql/derived/, written as the views are, over `{lake:TABLE}`: here it runs over
the rows of the records to recompute, and its answer replaces their rows, one commit a table.
The warehouse's build calls `refresh` before it publishes the views, which then read the
sources at the very versions the derived tables were computed from (`Refresh.versions`), so
a reader's transactions and daily_balances always agree.

Which records: those whose rows the sources' commits since the last refresh changed, as the
Delta log names them (`Lake.changed_records`), and those an erasure carried over when it cut
a source's log (`carry`); every record when nothing was derived yet, the zone changed, or the
log cannot say. Forgotten records (the lake's `erasures`) are never derived again. The state,
the sources' versions and the zone, lives beside the lake's tables in `_derived/`, written
once the tables are: a refresh killed half-way is done again, whole, by the next.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from resources import object_store
from resources.lake import Lake
from resources.tables import TABLES, schema

from .schemas import model, validate
from .views import SQL_DIR, View, check_timezone, listed, load_views, quote, render

DERIVED_DIR = SQL_DIR / "derived"
# the source columns the derivations read (the rest of a source is never fetched)
READS = {"transactions": ["account_id", "trans_date", "cleared_date", "transaction_id",
                          "balance", "credit", "debit", "currency"],
         "balance_periodic": ["account_id", "date", "available_balance", "ledger_balance"],
         "balance_history": schema("balance_history").names}  # latest_balances: all of it
CHUNK = 1_000  # records derived at a time when some changed: read through the lake's scan
FULL_CHUNK = 20_000  # records at a time when all are: a range of the sorted ids
# a change to more than this share of the records, and more than MOST_SOME: derive them all
FULL_SHARE, MOST_SOME = 0.2, 5_000
STATE, PENDING = "_derived/state.json", "_derived/pending"
_CREATE = re.compile(r"^create or replace view \w+ as\s", re.MULTILINE | re.IGNORECASE)
AUDITED = 1_000  # records a refresh's audit checks at most
ATTEMPTS = 5  # refreshes begun again when erasures cut sources' logs under one (a pass
# cuts each source in turn: a refresh may meet each cut once)

DAY_IS_LAST_LINE_TEXT = (
    "Each day with posted lines holds the running balance of the day's last line (by "
    "cleared_date, then transaction_id), and each account's days run without a gap: checked "
    "on up to 1,000 of the records a refresh derived, against the transactions it read")


@dataclass(frozen=True)
class Derived:
    name: str  # the lake table, and the view that shows it
    view: View  # its SQL, rendered as a view's over the sources' rows

    @property
    def sources(self) -> list[str]:
        return sorted(self.view.tables | self.view.optional)

    def select(self, sources: dict[str, str], zone: str) -> str:
        """Its SQL as a query over `sources` (the relation each source is read through), to
        derive it as it is read (a warehouse as of a time: `build`)."""
        sql = render(self.view, sources, zone)
        head = _CREATE.search(sql)
        if head is None or not sql.rstrip().endswith(";"):
            raise ValueError(f"{DERIVED_DIR / self.name}.sql is not one `create or replace "
                             f"view {self.name} as ...;`")
        return sql[head.end():].rstrip().removesuffix(";")


DERIVED: dict[str, Derived] = {v.name: Derived(v.name, v) for v in load_views(DERIVED_DIR)}
SOURCES = tuple(sorted({t for d in DERIVED.values() for t in d.sources}))


@dataclass
class Refresh:
    """What one refresh did: the sources' versions the derived tables now reflect."""
    versions: dict[str, int | None]
    mode: str  # "none" (nothing moved), "records" (those that did) or "all"
    records: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # rows written, per table
    versions_written: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    sample: list[str] = field(default_factory=list)  # records the audit checks


def refresh(lake: Lake, zone: str, progress: Callable[[str], None] = lambda _: None
            ) -> Refresh:
    """Bring the derived tables up to the sources' latest versions, for the records whose
    rows moved since the last refresh (all, when that cannot be told)."""
    gone = forgotten(lake)
    for attempt in range(ATTEMPTS):
        pinned: dict[str, int | None] = {}
        try:
            done = _refresh(lake, zone, gone, pinned, progress)
            break
        except Exception:
            # an erasure cut a source's log under this refresh: the version it read is gone
            # (HistoryGone), or files of its snapshot (purged). What it committed stands (rows
            # of that version); it starts again from the state. Anything else is raised
            if attempt == ATTEMPTS - 1 or not _cut_under(lake, pinned):
                raise
            progress("a source's history was cut by an erasure: deriving again")
    # a record forgotten while this ran may have been derived from rows read before: erased
    # again, so no derived table keeps what forget took (forget erases them last, too)
    if late := sorted(forgotten(lake) - gone):
        for d in DERIVED:
            lake.erase(d, late)
    return done


def _refresh(lake: Lake, zone: str, gone: set[str], pinned: dict[str, int | None],
             progress: Callable[[str], None]) -> Refresh:
    """One refresh, reading the sources at their latest versions, told in `pinned`."""
    started = time.monotonic()
    with duckdb.connect() as con:
        check_timezone(con, zone)  # before anything is written
    state, pending = _get(lake, STATE), _read_pending(lake)
    now = {t: lake.version(t) for t in SOURCES}
    pinned.update(now)
    gone = gone | forgotten(lake)
    changed = _changed(lake, state, pending, now, zone)
    done = Refresh(now, "none")
    known = (state or {}).get("records") or 0  # as the last refresh of all counted them
    if changed is None or len(changed) > max(FULL_SHARE * known, MOST_SOME):
        done.mode = "all"
        progress("derived tables: every record")
        for d in DERIVED.values():
            rows = _all_rows(lake, d, now, zone, gone)
            done.versions_written[d.name] = lake.overwrite_stream(d.name, rows.batches,
                                                                  schema(d.name))
            done.rows[d.name] = rows.count
            done.records = max(done.records, rows.all_records)
            done.sample = done.sample or rows.sample
        known = done.records
    elif changed := sorted(changed - gone):
        done.mode, done.records = "records", len(changed)
        done.sample = changed[::max(1, len(changed) // AUDITED)]
        progress(f"derived tables: {len(changed)} records")
        made = _some_rows(lake, changed, now, zone)
        for d in DERIVED.values():
            rows = made[d.name]
            done.versions_written[d.name] = lake.replace_stream(d.name, changed, rows.batches,
                                                                schema(d.name))
            done.rows[d.name] = rows.count
    _put(lake, STATE, {"zone": zone, "versions": now, "records": known})
    _drop(lake, pending)
    done.seconds = time.monotonic() - started
    return done


def _cut_under(lake: Lake, pinned: dict[str, int | None]) -> bool:
    """Whether an erasure cut a table's history after the version read of it."""
    return any(lake.cut_after(t, v) for t, v in pinned.items() if v is not None)


def carry(lake: Lake, table: str, erased: Collection[str]) -> Callable[[int], None] | None:
    """`Lake.erase`'s `before_cut` for a source table: keeps, beside the state, which records
    the commits the cut takes had changed (less the erased), for the next refresh to derive."""
    if table not in SOURCES:
        return None
    erased = set(erased)

    def before_cut(cut: int) -> None:
        state = _get(lake, STATE)
        since = (state or {}).get("versions", {}).get(table)
        if since is None:  # nothing derived from this table yet: the next refresh takes all
            return
        got = lake.changed_records(table, since)
        if got is None:  # the log did not reach back already: the next refresh takes all
            return
        until, records = got
        _put(lake, f"{PENDING}/{uuid.uuid4().hex}.json",
             {"table": table, "since": since, "until": until,
              "records": sorted(records - erased)})

    return before_cut


def forgotten(lake: Lake) -> set[str]:
    """The records `ledgerlake forget` erased, or is erasing (the lake's `erasures`)."""
    rows = lake.read("erasures", schema=pa.schema([("record_id", pa.string())]))
    return set() if rows is None else set(pc.drop_null(rows["record_id"]).to_pylist())


def derive(tables: dict[str, pa.RecordBatchReader | pa.Table], zone: str, name: str
           ) -> pa.Table:
    """The derived table `name`'s rows from the given source rows (each with `record_id`),
    sorted by record: what `refresh` writes, for a chart or a test."""
    with duckdb.connect() as con:
        return _run(con, DERIVED[name], tables, zone)


def audit(lake: Lake, done: Refresh, zone: str) -> tuple[int, list[dict]]:
    """`DAY_IS_LAST_LINE_TEXT` on the refresh's sample: (records checked, problems). None
    checked when an erasure cut the versions the refresh read and wrote since: the rows to
    check are gone with them (the next refresh's audit checks its own)."""
    if not done.sample or done.versions.get("transactions") is None:
        return 0, []
    pinned = {"daily_balances": done.versions_written.get("daily_balances"),
              "transactions": done.versions["transactions"]}
    try:
        daily = _scanned(lake, "daily_balances", done.sample, pinned["daily_balances"],
                         schema("daily_balances").names)
        lines = _scanned(lake, "transactions", done.sample, pinned["transactions"])
    except Exception:
        if _cut_under(lake, pinned):
            return 0, []
        raise
    with duckdb.connect() as con:
        con.register("daily", daily)
        con.register("lines", lines)
        tz = quote(zone)
        wrong = con.execute(f"""
            with last_line as (
                select record_id, account_id, timezone({tz}, cleared_date)::date as date,
                       balance,
                       row_number() over (partition by record_id, account_id,
                                          timezone({tz}, cleared_date)::date
                                          order by cleared_date desc, transaction_id desc) as n
                from lines where cleared_date is not null and balance is not null)
            select 'day' as kind, d.account_id, d.date::varchar as date,
                   d.balance::varchar as balance, l.balance::varchar as last_line
            from daily as d join last_line as l using (record_id, account_id, date)
            where l.n = 1 and d.balance is distinct from l.balance
            union all
            select 'gap', account_id, min(date)::varchar, null, null
            from daily group by record_id, account_id
            having count(*) <> max(date) - min(date) + 1 or count(distinct date) <> count(*)
            order by 2, 3""").fetchall()
    keys = ("kind", "account_id", "date", "balance", "last_line")
    return len(done.sample), [dict(zip(keys, row, strict=True)) for row in wrong]


# -- which records -------------------------------------------------------------------------

def _changed(lake: Lake, state: dict | None, pending: list[dict], now: dict[str, int | None],
             zone: str) -> set[str] | None:
    """The records whose source rows changed since the state's versions; None: all."""
    if state is None or state.get("zone") != zone:
        return None
    out: set[str] = set()
    for table in SOURCES:
        if now[table] is None:
            continue
        since = state["versions"].get(table)
        since = -1 if since is None else since  # a source newer than the state: all of it
        while since < now[table]:
            got = lake.changed_records(table, since)
            if got is not None:
                out |= got[1]
                break
            # an erasure cut the log: what it took was carried over, or nothing can be told
            carried = next((p for p in pending if p["table"] == table
                            and p["since"] <= since < p["until"]), None)
            if carried is None:
                return None
            out |= set(carried["records"])
            since = carried["until"]
    return out


# -- rows ----------------------------------------------------------------------------------

@dataclass
class _Rows:
    """A derived table's rows, made batch by batch as the commit reads them (again at each
    try); how many, once read."""
    make: Callable[[], Iterator[pa.RecordBatch]]
    count: int = 0
    all_records: int = 0  # of a refresh of all: the records it read
    sample: list[str] = field(default_factory=list)  # and some of them, for the audit

    def batches(self) -> Iterator[pa.RecordBatch]:
        self.count = 0
        for batch in self.make():
            self.count += batch.num_rows
            yield batch


def _some_rows(lake: Lake, records: Sequence[str], now: dict[str, int | None], zone: str
               ) -> dict[str, _Rows]:
    """Each derived table's rows of `records` (at most MOST_SOME: a few hundred thousand
    rows, held), CHUNK records at a time, each source read once for all (through the lake's
    scan, its files picked by their record ranges) at the versions `now`. Made before the
    commits read them: delta-rs, which runs a commit, cannot be called from inside it."""
    made: dict[str, list[pa.RecordBatch]] = {name: [] for name in DERIVED}
    for at in range(0, len(records), CHUNK):
        chunk = records[at:at + CHUNK]
        tables = {t: _scanned(lake, t, chunk, now[t]) for t in SOURCES if now[t] is not None}
        for d in DERIVED.values():
            made[d.name] += _derived(d, {t: r for t, r in tables.items() if t in d.sources},
                                     zone)
    return {name: _Rows(lambda b=batches: iter(b)) for name, batches in made.items()}


def _all_rows(lake: Lake, d: Derived, now: dict[str, int | None], zone: str,
              gone: set[str]) -> _Rows:
    """`d`'s rows of every record, FULL_CHUNK records at a time: each a range of the sorted
    ids, which DuckDB reads only the row groups of (the lake is clustered by record). Only
    DuckDB runs as the commit reads them (the files are listed before)."""
    files = {t: lake.files(t, now[t]) for t in d.sources if now[t] is not None}
    files = {t: f for t, f in files.items() if f}

    def make() -> Iterator[pa.RecordBatch]:
        with object_store.connect(lake_root=lake.root) as con:  # s3:// files through pyarrow
            ids = sorted(set(_ids(con, files)) - gone)
            out.all_records = len(ids)
            out.sample = ids[::max(1, len(ids) // AUDITED)]
            for at in range(0, len(ids), FULL_CHUNK):
                chunk = ids[at:at + FULL_CHUNK]
                con.register("chunk_ids", pa.table({"record_id": chunk}))
                tables = {t: con.sql(
                    f"select {', '.join([*READS[t], 'record_id'])} from read_parquet("
                    f"{listed(f)}, union_by_name = true) where record_id between "
                    f"{quote(chunk[0])} and {quote(chunk[-1])} and record_id in "
                    f"(select record_id from chunk_ids)").to_arrow_table()
                    for t, f in files.items()}
                con.unregister("chunk_ids")
                yield from _derived(d, tables, zone)

    out = _Rows(make)
    return out


def _derived(d: Derived, tables: dict[str, pa.Table | pa.RecordBatchReader], zone: str
             ) -> Iterator[pa.RecordBatch]:
    """`d`'s rows from `tables`, validated (its pandera model: a derivation that broke its
    declared checks writes nothing)."""
    with duckdb.connect() as con:
        rows = _run(con, d, tables, zone)
    if rows.num_rows:
        validate(model(d.name, records=True), rows, d.name)
    yield from rows.to_batches(max_chunksize=64 * 1024)


def _run(con: duckdb.DuckDBPyConnection, d: Derived,
         tables: dict[str, pa.Table | pa.RecordBatchReader], zone: str) -> pa.Table:
    sources = {}
    for table, rows in tables.items():
        con.register(f"source_{table}", rows)
        sources[table] = f"source_{table}"
    con.execute(render(d.view, sources, zone))
    out = schema(d.name).append(pa.field("record_id", pa.string()))
    return con.sql(f"select {', '.join(out.names)} from {d.name} order by "
                   f"{', '.join(['record_id', *TABLES[d.name].key])}").to_arrow_table().cast(out)


def _scanned(lake: Lake, table: str, records: Sequence[str], version: int | None,
             names: Sequence[str] | None = None) -> pa.Table:
    """The records' rows of a lake table at `version`, with their ids, in the columns `names`
    (default: those derivations read of a source)."""
    want = schema(table)
    cols = pa.schema([*(want.field(c) for c in names or READS[table]),
                      pa.field("record_id", pa.string())])
    return pa.Table.from_batches(list(lake.scan(table, records, cols, version=version)), cols)


def _ids(con: duckdb.DuckDBPyConnection, files: dict[str, list[str]]) -> list[str]:
    """Every record with rows in the sources' files."""
    ids: set[str] = set()
    for paths in files.values():
        ids |= {r for (r,) in con.execute(
            f"select distinct record_id from read_parquet({listed(paths)})").fetchall()}
    return sorted(ids)


# -- the state, beside the lake's tables ---------------------------------------------------

def _get(lake: Lake, name: str) -> dict | None:
    store, base = object_store.filesystem(lake.root)
    try:
        with store.open_input_stream(f"{base}/{name}") as f:
            return orjson.loads(f.read())
    except FileNotFoundError:
        return None


def _put(lake: Lake, name: str, value: dict) -> None:
    """Written whole or not at all: a local file aside and renamed, an object in one put."""
    store, base = object_store.filesystem(lake.root)
    path = f"{base}/{name}"
    store.create_dir(path.rsplit("/", 1)[0], recursive=True)
    local = isinstance(store, pafs.LocalFileSystem)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp" if local else path
    with store.open_output_stream(tmp) as f:
        f.write(orjson.dumps(value))
    if local:
        store.move(tmp, path)


def _read_pending(lake: Lake) -> list[dict]:
    store, base = object_store.filesystem(lake.root)
    found = store.get_file_info(pafs.FileSelector(f"{base}/{PENDING}", allow_not_found=True))
    out = []
    for info in found:
        if info.type == pafs.FileType.File and info.base_name.endswith(".json"):
            with store.open_input_stream(info.path) as f:
                out.append(orjson.loads(f.read()) | {"path": info.path})
    return out


def _drop(lake: Lake, pending: list[dict]) -> None:
    """The carried-over changes a refresh has derived."""
    store, _ = object_store.filesystem(lake.root)
    for p in pending:
        try:
            store.delete_file(p["path"])
        except FileNotFoundError:
            pass
