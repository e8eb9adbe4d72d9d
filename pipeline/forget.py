"""Forgetting a person: their records' rows out of the inbox and every lake table (the
per-record bookkeeping and `records` included), the warehouse rebuilt, and what was erased
(ids and counts, nothing personal) kept in the lake's `erasures` table.

Each table's rows go in one commit (`resources/delta.delete_rows`); once they are gone from
every table and the warehouse is rebuilt, every file of any version that held them is purged
and each log cut (`delta.purge`). The inbox's go in one transaction (`Inbox.forget`). Each step is
idempotent: a pass killed half-way is finished by running it again. With
LEDGERLAKE_FORGET_ON_DISCONNECT=true a USER_DISCONNECT forgets the record by itself
(docs/privacy.md, "Forget").
"""

# no `from __future__ import annotations`: Dagster reads the op's type hints at runtime
import contextlib
import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from dagster import Backoff, Config, OpExecutionContext, RetryPolicy, op

from assets.derived import DERIVED, carry
from assets.publish import record_label
from assets.warehouse import LAKE_TABLES, Warehouse, publish
from resources import delta
from resources.inbox import DISCONNECTED, Inbox
from resources.inbox.resource import InboxResource
from resources.lake import Lake, check_record_id
from resources.privacy import stats_columns

AUDIT = "erasures"
AUDIT_SCHEMA = LAKE_TABLES[AUDIT]
# the lake tables a record's rows are erased from: every one but the audits
AUDITS = (AUDIT, "reveals")
TABLES = tuple(t for t in LAKE_TABLES if t not in AUDITS)
# the tables that name a customer, where `--customer` looks for their records
BY_CUSTOMER = ("identity", "accounts", "income", "transactions")


@dataclass
class Erasure:
    """What one pass erased: per lake table, rows deleted and files purged."""
    erasure_id: str
    subject: str
    subject_id: str | None  # None: records, each its own subject (the audit names each)
    records: list[str]
    tables: dict[str, dict] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(t["rows_deleted"] for t in self.tables.values())

    @property
    def files(self) -> int:
        return sum(t["files_purged"] for t in self.tables.values())


def records_of(lake: Lake, customer: str) -> list[str]:
    """Every record whose rows in a table that names customers name `customer`."""
    check_record_id(customer)  # the service's customer ids have the same shape
    found: set[str] = set()
    for table in BY_CUSTOMER:
        rows = delta.read(lake.table_uri(table), columns=["customer_id", "record_id"])
        if rows is not None and rows.num_rows:
            hit = rows.filter(pc.equal(rows["customer_id"], customer))
            found |= set(hit["record_id"].to_pylist())
    return sorted(found)


def records_for(lake: Lake, customer: str, inbox: Inbox | None = None) -> list[str]:
    """The records `forget --customer` erases: those the lake's rows or the inbox name, and
    those an unfinished pass named (killed after the last table that names customers, its
    records are found nowhere else)."""
    known = inbox.of_customer(customer) if inbox is not None else []
    return sorted(set(records_of(lake, customer)) | unfinished(lake, customer) | set(known))


def forget(lake: Lake, tables: Sequence[str], *, record: str | None = None,
           customer: str | None = None, records: Sequence[str] | None = None,
           reason: str = "request", rebuild: Callable[[], object] | None = None,
           progress: Callable[[str], None] = lambda _: None,
           inbox: Inbox | None = None) -> Erasure:
    """Erase a record's, a customer's records' or `records`' rows from the inbox (first: no
    status left to land them by) and `tables`, append what was erased to the audit table, then
    rebuild the warehouse (`rebuild`). The rows go from every table before any file is purged,
    with a rebuild between, so a question on the views meets a purged file only if it was
    already running. `records` with a customer: the customer's, as `records_for` found them
    already (default: found here); alone: records each erased as its own subject, in one pass
    (a pass rewrites every table: one for many costs about what one for one does)."""
    if (record is not None and customer is not None) or \
            (record is None and customer is None and not records):
        raise ValueError("forget takes a record, a customer or records, one of them")
    requested = dt.datetime.now(dt.UTC)
    if record is not None:
        subject, subject_id, records = "record", check_record_id(record), [record]
    elif customer is None:
        subject, subject_id = "record", None
        records = sorted({check_record_id(r) for r in records})
    else:
        subject, subject_id = "customer", check_record_id(customer)
        records = records_for(lake, customer, inbox) if records is None else list(records)
    done = Erasure(uuid.uuid4().hex, subject, subject_id, records)
    if records:  # what is about to go, first: a pass killed half-way still says so
        _write_audit(lake, done, requested, None, reason,
                     [{"record_id": r, "lake_table": None, "rows_deleted": None,
                       "files_purged": None} for r in records])
    # the tables naming customers last: a pass stopped half-way leaves the records findable
    # (records_of) until every other table is erased, so running it again finishes it; the
    # derived tables after their sources, so no refresh derives the rows again from them
    order = sorted(tables, key=lambda t: (t in DERIVED, t in BY_CUSTOMER))
    deleted = _delete(lake, order, done, customer, inbox, progress)
    if records and rebuild is not None:
        # before the purge: the views stop naming files that hold the records, so only the
        # questions already running on the last build meet a purged file
        rebuild()
        progress("warehouse rebuilt without the records")
    for table in order:
        # a source's log, cut by its erasure, first hands on what it knew the derived tables
        # have yet to catch up with (derived.carry)
        done.tables[table] = delta.purge(lake.table_uri(table), records,
                                         carry(lake, table, records), deleted[table])
        progress(f"{table}: {done.tables[table]['files_purged']} files purged")
    _audit(lake, done, requested, reason)
    if rebuild is not None:  # after the audit: the erasures view shows this pass finished
        rebuild()
        progress("warehouse rebuilt")
    return done


def _delete(lake: Lake, order: Sequence[str], done: Erasure, customer: str | None,
            inbox: Inbox | None, progress: Callable[[str], None]) -> dict[str, int]:
    """The records' rows out of the inbox, then out of each table in `order` (one commit a
    table; older versions still hold them until the purge): rows deleted, per table. Landings
    wait meanwhile (`Inbox.erasing`): their commits would beat the deletes'."""
    with inbox.erasing() if inbox is not None else contextlib.nullcontext():
        if inbox is not None:
            # a customer's: also their events that name no record (one heard before any was)
            done.tables["inbox"] = {"rows_deleted": inbox.forget(
                done.records, customers=[customer] if customer is not None else []),
                "files_purged": 0, "version": None}
            progress(f"inbox: {done.tables['inbox']['rows_deleted']} rows deleted")
        deleted = {}
        for table in order:
            deleted[table] = delta.delete_rows(lake.table_uri(table), done.records)
            progress(f"{table}: {deleted[table]} rows deleted")
    return deleted


def unfinished(lake: Lake, customer: str) -> set[str]:
    """Records named by passes of `customer` that started and never finished."""
    return _unfinished(lake, lambda r: r["subject"] == "customer"
                       and r["subject_id"] == customer)[0]


def unfinished_disconnects(lake: Lake) -> set[str]:
    """Records named by disconnect passes that started and never finished (a failed or killed
    `forget_job` run: the inbox may have forgotten them already, so its records' numbers no
    longer name them), less those a later pass erased whole (or each run would again)."""
    left, erased = _unfinished(lake, lambda r: r["reason"] == "disconnect")
    return left - erased


def _unfinished(lake: Lake, of: Callable[[dict], bool]) -> tuple[set[str], set[str]]:
    """The records of the passes `of` picks (by an audit row) that never finished, and every
    record some pass finished."""
    table = audit(lake)
    rows = [] if table is None else table.to_pylist()
    finished = {r["erasure_id"] for r in rows if r["finished_at"] is not None}
    left = {r["record_id"] for r in rows if of(r) and r["erasure_id"] not in finished
            and r["record_id"] is not None}
    return left, {r["record_id"] for r in rows if r["erasure_id"] in finished}


def _audit(lake: Lake, done: Erasure, requested: dt.datetime, reason: str) -> None:
    """One row per record and table (one row for a customer with no record left)."""
    rows = [{"record_id": r, "lake_table": t,
             "rows_deleted": None, "files_purged": None} for r in done.records
            for t in done.tables] or [{"record_id": None, "lake_table": None,
                                       "rows_deleted": 0, "files_purged": 0}]
    for row in rows:  # the counts are per table: on the table's first record's row
        if row["lake_table"] is not None:
            first = row["record_id"] == done.records[0]
            counts = done.tables[row["lake_table"]]
            row["rows_deleted"] = counts["rows_deleted"] if first else 0
            row["files_purged"] = counts["files_purged"] if first else 0
            row["lake_version"] = counts["version"] if first else None
    _write_audit(lake, done, requested, dt.datetime.now(dt.UTC), reason, rows)


def _write_audit(lake: Lake, done: Erasure, requested: dt.datetime,
                 finished: dt.datetime | None, reason: str, rows: list[dict]) -> None:
    """Rows of the pass: with `finished` None, the records it is about to erase."""
    data = pa.Table.from_pylist([{"erasure_id": done.erasure_id, "requested_at": requested,
                                  "finished_at": finished, "subject": done.subject,
                                  "subject_id": done.subject_id or row["record_id"],
                                  "reason": reason, **row}
                                 for row in rows], schema=AUDIT_SCHEMA)
    delta.append(lake.table_uri(AUDIT), AUDIT_SCHEMA, data, stats=stats_columns(AUDIT))


def audit(lake: Lake) -> pa.Table | None:
    """The audit table, None before the first erasure."""
    return delta.read(lake.table_uri(AUDIT))


class ForgetConfig(Config):
    records: list[int]  # numbers (assets/batch.py): a run's config never names a record


# in the warehouse's pool: its rebuild derives the derived tables, one writer at a time.
# Retried in the run: a pass fails on the store's or the database's faults, and Dagster does
# not retry a run whose op failed; each try finishes what an earlier one started.
@op(description="Forget records the service disconnected (LEDGERLAKE_FORGET_ON_DISCONNECT)",
    pool="duckdb", retry_policy=RetryPolicy(max_retries=4, delay=30, backoff=Backoff.EXPONENTIAL))
def forget_disconnected(context: OpExecutionContext, config: ForgetConfig, lake: Lake,
                        inbox: InboxResource, warehouse_db: Warehouse) -> None:
    """Erase the records still disconnected when the run starts, in one pass (each its own
    subject in the audit): one connected again since the event (a newer login) keeps its
    data. The records of disconnect passes that never finished are erased with them."""
    with inbox.open() as db:
        ids = db.ids_of(config.records)
        gone = {n: r for n, r in ids.items() if db.status(r) == DISCONNECTED}
        if kept := sorted(set(ids) - set(gone)):
            context.log.info("connected again since the disconnect, kept: "
                             + ", ".join(record_label(n) for n in kept))
        records = set(gone.values()) | (left := unfinished_disconnects(lake))
        if left:
            context.log.info(f"finishing {len(left)} record(s) of disconnect passes that "
                             "never finished")
        if not records:
            return
        # the derived tables too: views of the sources and of them must agree
        done = forget(lake, TABLES, records=sorted(records), reason="disconnect",
                      rebuild=lambda: publish(lake.root, warehouse_db.path,
                                              warehouse_db.timezone),
                      progress=context.log.info, inbox=db)
        context.log.info(f"forgot {len(records)} record(s) "
                         f"({', '.join(map(record_label, sorted(gone)))}"
                         f"{' and those of unfinished passes' if left else ''}): {done.rows} "
                         f"rows deleted, {done.files} files purged (erasure {done.erasure_id})")
