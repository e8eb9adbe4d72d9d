"""Write, audit, publish: how a product asset lands records and tells Dagster, record by record.

A run may carry many records (a backfill batches 100). Each record's new rows are validated
and checked before they replace the published ones; a record that fails a blocking check keeps
its previous rows in view, and says so in its check. Dagster hears of each record on its own:
one materialization per published record with that record's row count and preview, and one
evaluation per check and record (the checks are partitioned like the asset). A record whose
fetch failed fails the step once the others are landed, so the engine's retry policy tries
again; a retry skips the records this run already published.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import dagster as dg
import pyarrow as pa
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluation
from dagster._core.events import DagsterEventType

from resources.errors import (
    ApiError,
    BankError,
    MalformedResponse,
    RateLimitExceeded,
    RecordError,
    ServiceError,
    TransportError,
)
from resources.lake import Lake

from .catalog import OWNERS, PRODUCT_TAGS, column_schema
from .partitions import batched, record_ids, records

PROBLEMS_SHOWN = 20


def _delay_s() -> float:
    # tests shorten it; a real outage is better waited out for minutes than seconds
    raw = os.environ.get("LEDGERLAKE_RETRY_DELAY_S", "30")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"LEDGERLAKE_RETRY_DELAY_S must be seconds, not {raw!r}") from None
    if not 0 <= value <= 3600:
        raise ValueError(f"LEDGERLAKE_RETRY_DELAY_S must be 0 to 3600, not {value:g}")
    return value


# The engine's retries (docs/operations.md, "Retries"): the client already retried each request
# (429, 5xx, timeouts) within seconds; this waits out what lasts longer (a bank down for
# minutes) with exponential backoff and jitter: 30 s, 60 s, 120 s by default.
FETCH_RETRY = dg.RetryPolicy(max_retries=3, delay=_delay_s(), backoff=dg.Backoff.EXPONENTIAL,
                             jitter=dg.Jitter.PLUS_MINUS)

# Every step that calls the service holds a slot of this pool while it runs, whatever run it is
# in: the instance's limit for it (`dagster instance concurrency set connection_service N`,
# stored in the instance's database) caps the callers of the upstream across all runs, where a
# client's own retries only pace itself. docs/operations.md, "From one box to many".
SERVICE_POOL = "connection_service"


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    blocking: bool = True


@dataclass
class Landing:
    """What happened to one record in a run."""
    record_id: str
    published: bool = False
    metadata: dict = field(default_factory=dict)
    problems: dict[str, list[dict] | None] = field(default_factory=dict)  # None: not evaluated
    error: str | None = None  # the fetch or validation failed: nothing was written
    retryable: bool = True  # whether trying again could help (see worth_retrying)
    rows: dict[str, pa.Table] = field(default_factory=dict)  # lake table -> rows to commit

    @classmethod
    def failed(cls, record_id: str, exc: BaseException) -> Landing:
        return cls(record_id, error=f"{type(exc).__name__}: {exc}",
                   retryable=worth_retrying(exc))


def worth_retrying(exc: BaseException) -> bool:
    """Whether the engine should try again: yes for the service or the network failing (the
    client's own retries are spent, a longer wait may do), a product not ready yet, or the
    lake's storage; no for bad data or a request the service refused for good."""
    if isinstance(exc, RateLimitExceeded | ApiError | BankError | TransportError
                  | MalformedResponse):
        return True
    if isinstance(exc, RecordError):
        return exc.error_code == "PRODUCT_NOT_READY"
    if isinstance(exc, ServiceError):
        return False  # refused for good: a bad key, token or request, a locked record
    return not isinstance(exc, ValueError | LookupError | TypeError)  # bad data, or a bug


def product(name: str, *, description: str, schema: pa.Schema, checks: Sequence[Check] = (),
            kinds: Iterable[str] = ("parquet",), table: str | None = None,
            tags: Mapping[str, str] | None = None) -> Callable:
    """A product asset partitioned by record, with partitioned checks, that reports each
    record itself (see the module's docstring). `schema`: its lake table's columns (`table`,
    by default the asset's name), shown on the asset with their descriptions."""
    spec = dg.AssetSpec(name, partitions_def=records, skippable=True, group_name="products",
                        kinds=set(kinds), description=description, owners=OWNERS,
                        tags={**PRODUCT_TAGS, **(tags or {})},
                        metadata={"dagster/column_schema": column_schema(
                            schema, table or name, record_id=True)})
    return dg.multi_asset(
        name=name, specs=[spec], can_subset=True, partitions_def=records,
        backfill_policy=batched, retry_policy=FETCH_RETRY, pool=SERVICE_POOL,
        check_specs=[dg.AssetCheckSpec(c.name, asset=name, description=c.description,
                                       blocking=c.blocking, partitions_def=records)
                     for c in checks])


def to_land(context: dg.AssetExecutionContext, asset: str) -> list[str]:
    """The run's records, less those an earlier try of this step already published."""
    ids = record_ids(context)
    if context.retry_number == 0:
        return ids
    done = set()
    conn = context.instance.get_records_for_run(
        context.run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION, limit=100_000)
    for rec in conn.records:
        mat = rec.event_log_entry.asset_materialization
        if mat is not None and mat.asset_key == dg.AssetKey(asset):
            done.add(mat.partition)
    if done:
        context.log.info("try %d: %d of %d records were published by an earlier try",
                         context.retry_number + 1, len(done & set(ids)), len(ids))
    return [r for r in ids if r not in done]


def land_each(context: dg.AssetExecutionContext, asset: str, land: Callable[[str], Landing],
              lake: Lake, tables: Mapping[str, pa.Schema], checks: Sequence[Check] = (),
              appended: Collection[str] = (),
              landed: Callable[[list[Landing]], None] | None = None) -> list[Landing]:
    """Fetch and check the run's records one by one with `land`, commit the rows of those
    that pass (one commit per table), then report them all (a record that raises is
    reported failed; the others still land). `landed` sees the landings once committed,
    before they are reported (to add to their metadata)."""
    landings = []
    for record_id in to_land(context, asset):
        try:
            landings.append(land(record_id))
        except Exception as exc:  # reported with the record; the step fails after the rest
            landings.append(Landing.failed(record_id, exc))
    commit(lake, landings, tables, appended)
    if landed is not None:
        landed(landings)
    report(context, asset, landings, checks)
    return landings


def commit(lake: Lake, landings: Iterable[Landing], tables: Mapping[str, pa.Schema],
           appended: Collection[str] = ()) -> None:
    """Write the published records' rows: one commit per table for all of them (a commit
    costs the same for one record as for a hundred), appended or replacing each record's
    rows. Each landing's metadata gets the table and version; if a commit fails, every
    record it carried is failed instead (retried by the engine: the commit is all or none)."""
    landings = [x for x in landings if x.published and x.rows]
    for table, schema in tables.items():
        parts = {x.record_id: x.rows[table] for x in landings if table in x.rows}
        if not parts:
            continue
        try:
            write = lake.append if table in appended else lake.replace
            version = write(table, parts, schema)
        except Exception as exc:
            for x in landings:
                x.published, x.error, x.retryable = False, f"{type(exc).__name__}: {exc}", True
            break
        where = dg.MetadataValue.path(lake.shown(table))
        for x in landings:
            if table in x.rows and "lake_table" not in x.metadata:
                x.metadata["lake_table"], x.metadata["lake_version"] = where, version
    for x in landings:
        x.rows = {}  # written: the run need not hold them any longer


def report(context: dg.AssetExecutionContext, asset: str, landings: Iterable[Landing],
           checks: Sequence[Check] = ()) -> None:
    """Tell Dagster of each record; raise (so the step is retried) if any record failed."""
    raise_failed(asset, announce(context, asset, landings, checks))


def announce(context: dg.AssetExecutionContext, asset: str, landings: Iterable[Landing],
             checks: Sequence[Check] = ()) -> list[Landing]:
    """Tell Dagster of each record: a materialization if it was published, an evaluation per
    check it ran. Returns the records that failed."""
    key = dg.AssetKey(asset)
    selected = {k.name for k in context.selected_asset_check_keys if k.asset_key == key}
    failed: list[Landing] = []
    for landing in landings:
        if landing.published:
            context.log_event(dg.AssetMaterialization(asset_key=key, partition=landing.record_id,
                                                      metadata=landing.metadata))
        for check in checks:
            problems = landing.problems.get(check.name)
            if check.name in selected and problems is not None:
                evaluate(context, asset, check, landing.record_id, problems,
                         published=landing.published)
        if landing.error:
            failed.append(landing)
            context.log.error("record %s: %s", landing.record_id, landing.error)
    return failed


def raise_failed(asset: str, failed: list[Landing]) -> None:
    """Fail the step for the records that failed (after the others were told), retried by
    the engine unless none of the failures is worth another try."""
    if not failed:
        return
    retry = any(f.retryable for f in failed)
    raise dg.Failure(
        description=f"{len(failed)} record(s) of {asset} failed and were not written "
                    f"(the records already landed are kept): "
                    + "; ".join(f"{f.record_id}: {f.error}" for f in failed[:3])
                    + ("" if retry else " -- bad data or a refusal: not retried"),
        metadata={"failed_records": dg.MetadataValue.json(
            {f.record_id: f.error for f in failed[:PROBLEMS_SHOWN]})},
        allow_retries=retry)


def evaluate(context: dg.AssetExecutionContext, asset: str, check: Check, record_id: str,
             problems: list[dict], *, published: bool = True) -> None:
    """One check's verdict on one record (a partition of the check)."""
    if problems and check.blocking and not published:
        description = "not published: the previous rows stay in view"
    elif problems:
        description = "failed"
    else:
        description = None
    context.log_event(AssetCheckEvaluation(
        asset_key=dg.AssetKey(asset), check_name=check.name, passed=not problems,
        partition=record_id, blocking=check.blocking, severity=dg.AssetCheckSeverity.ERROR,
        description=description,
        metadata={"problems": dg.MetadataValue.json(problems[:PROBLEMS_SHOWN]),
                  "problem_count": len(problems), "published": published}))
