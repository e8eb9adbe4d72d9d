"""Write, audit, publish: how a product asset lands a batch of records and tells Dagster.

A run carries a batch of records (assets/batch.py). Each record's new rows are fetched,
validated and checked on its own, and published only if they pass: those that do replace
their previous rows, one commit per table for the batch (for transactions, per chunk of it);
a record that fails a blocking check keeps its previous rows in view.

What happened to each record goes where a million records fit: a row per record in the lake's
`landings` table and one per check in `checks` (`ledgerlake sql`), and its latest state in the
inbox (`ledgerlake status RECORD`). Dagster hears of the batch: one materialization per asset
and run with its counts, and one evaluation per check, failed when any record failed it,
naming the first few. A record whose fetch failed fails the step once the others are landed,
so the engine's retry policy tries again; a retry skips the records this run already landed.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import dagster as dg
import orjson
import pyarrow as pa

from resources.client.errors import (
    ApiError,
    BankError,
    MalformedResponse,
    RateLimitExceeded,
    RecordError,
    ServiceError,
    TransportError,
)
from resources.config import Tuning
from resources.inbox import FAILED, HELD, LANDED_OK, Inbox, InboxUnavailable, LandingState
from resources.lake import Lake
from resources.privacy import Keys, KeyUnusable
from resources.staging import Staged
from resources.tables import schema

from .batch import NAME_THEM, Batch
from .catalog import OWNERS, PRODUCT_TAGS, column_schema
from .checks import Check
from .derived import carry

SHOWN = 20  # records a batch's metadata names (by number), of those that failed
PROBLEMS_KEPT = 20  # problems a check keeps per record in the lake (the count is whole)
STATE_PROBLEMS = 3  # and in the record's state in the inbox
LANDINGS, CHECKS = schema("landings"), schema("checks")
# waits for an inbox that went away before asking it what was forgotten (~1 min in all)
FORGOTTEN_WAITS_S = (2, 4, 8, 16, 30)


class FetchRetry(dg.RetryPolicy):
    """The engine's retries (docs/operations.md, "Retries"): the client already retried each
    request (429, 5xx, timeouts) within seconds; this waits out what lasts longer (a bank down
    for minutes) with exponential backoff and jitter: 30 s, 90 s, 210 s (each ± 30 s) by
    default.

    Its first wait (LEDGERLAKE_RETRY_DELAY_S) is handed in after the policy is made: Dagster
    takes an asset's policy when the asset is defined, at import of its module, before
    pipeline/definitions.py reads the settings, and no public API gives a defined asset
    another one (`with_attributes` and `map_asset_specs` reach its specs, not its op). So the
    definitions give this policy the wait they read (`set_first_wait`) before any step runs;
    until then it is the default."""

    first_wait_s: float = Tuning.retry_delay_s

    def set_first_wait(self, seconds: float) -> None:
        self.first_wait_s = seconds

    def calculate_delay(self, attempt_num: int) -> float:
        return dg.RetryPolicy(self.max_retries, self.first_wait_s, self.backoff,
                              self.jitter).calculate_delay(attempt_num)


FETCH_RETRY = FetchRetry(max_retries=3, delay=Tuning.retry_delay_s,
                         backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)

# Every step that calls the service holds a slot of this pool while it runs, whatever run it is
# in: the instance's limit for it (`dagster instance concurrency set connection_service N`,
# stored in the instance's database) caps the callers of the upstream across all runs, where a
# client's own retries only pace itself. docs/operations.md, "From one box to many".
SERVICE_POOL = "connection_service"


@dataclass(frozen=True)
class Landing:
    """What happened to one record in a run (a new one for each step of its landing)."""
    record_id: str
    published: bool = False
    row_count: int = 0
    problems: dict[str, list[dict] | None] = field(default_factory=dict)  # None: not evaluated
    error: str | None = None  # the fetch or validation failed: nothing was written
    retryable: bool = True  # whether trying again could help (see worth_retrying)
    # lake table -> rows to commit (held, or Streamed from disk)
    rows: dict[str, pa.Table | Streamed] = field(default_factory=dict)
    fetched_rows: int | None = None
    pull: str | None = None
    lake_table: str | None = None
    lake_version: int | None = None
    number: int | None = None  # what Dagster is told of it (assets/batch.py)

    @property
    def label(self) -> str:
        return record_label(self.number)

    @property
    def dagster_error(self) -> str | None:  # the error, the record named by its number
        return self.error and self.error.replace(self.record_id, self.label)

    @classmethod
    def failed(cls, record_id: str, exc: BaseException) -> Landing:
        return cls(record_id, error=f"{type(exc).__name__}: {exc}",
                   retryable=worth_retrying(exc))

    @property
    def outcome(self) -> str:
        return LANDED_OK if self.published else FAILED if self.error else HELD


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


TABLES: dict[str, str] = {}  # product asset -> its lake table, whose size it reports
# on each product's page: the UI names records by number, and this is how to find one's runs
FIND_A_RECORD = (
    ". To find record #N: Runs, filtered by tag ledgerlake/record-N=carried, lists the runs "
    "of at most 10 records that carried it (every run's ledgerlake/record_numbers tag holds "
    "its records' ranges); `ledgerlake status '#N'` tells its id, the last landing of each "
    "product and its checks.")


@dataclass(frozen=True)
class Run:
    """A run's batch as a product lands it: the records still to land (id -> number), the
    inbox (open, holding the erasure lock) and the lake."""
    ids: Mapping[str, int]
    inbox: Inbox
    lake: Lake
    _once: dict = field(default_factory=dict, repr=False, compare=False)

    def once(self, name: str, fn: Callable[[], object]):
        """`fn()`, computed for the run's first record only and kept under `name` for the
        others (one scan for all its records, not one each)."""
        if name not in self._once:
            self._once[name] = fn()
        return self._once[name]


Chunk = tuple[list[Landing], list["Verdict"]]  # landings committed, other assets' verdicts


@dataclass(frozen=True)
class Lands:
    """How a product asset lands its run: `land` one record (committed with the others, one
    commit per table), or `chunks`, the run's records landed and committed chunk by chunk,
    each with the verdicts it gave on other assets' checks. `metadata`: the batch's own,
    for its materialization."""
    land: Callable[[str, Run], Landing] | None = None
    chunks: Callable[[Run], Iterable[Chunk]] | None = None
    metadata: Callable[[list[Landing]], Mapping[str, object] | None] = lambda landings: None


def product(*, description: str, tables: Mapping[str, pa.Schema] | None = None,
            checks: Sequence[Check] = (), appended: Collection[str] = (),
            table: str | None = None, tags: Mapping[str, str] | None = None,
            first: bool = False) -> Callable:
    """A product asset, named as the decorated function (as `dg.asset` names one): that
    function gives how its run lands (`Lands`, or the function landing one record), and this
    runs write, audit, publish around it (see the module's docstring). Its columns are its
    lake table's (`table`, by default its name). It writes `tables` (name -> columns; by
    default that table alone); those `appended` to are added to, the others replace each
    record's rows. `first`: a run lands it before the others (a priority, not a dependency:
    a product that failed for one record of the batch must not skip the others' products)."""
    def decorate(fn: Callable[..., Lands | Callable[[str, Run], Landing]]) -> dg.AssetsDefinition:
        name = fn.__name__
        TABLES[name] = own = table or name
        writes = {own: schema(own)} if tables is None else tables

        @functools.wraps(fn)  # Dagster reads the resources it asks for from fn's signature
        def body(context: dg.AssetExecutionContext, **resources):
            lands = fn(context, **resources)
            lands = lands if isinstance(lands, Lands) else Lands(land=lands)
            with resources["inbox"].open() as db:
                run = Run(to_land(context, resources["batch"], db, name), db, resources["lake"])
                chunks = lands.chunks(run) if lands.chunks else [
                    (land_each(run, lands.land, writes, appended), [])]
                landings, rechecked = [], []
                for chunk, verdicts in chunks:  # noted while the next chunk lands
                    try:
                        record_outcomes(context, run.lake, db, name, chunk, checks,
                                        extra=verdicts)
                    finally:  # whatever of the chunk was written
                        erase_forgotten(context, db, run.lake, {x.record_id for x in chunk} |
                                        {v.record_id for v in verdicts},
                                        [*writes, "landings", "checks"])
                    landings += chunk
                    rechecked += verdicts
            log_rechecks(context, rechecked)
            yield from dagster_results(context, name, landings, checks,
                                       lands.metadata(landings), lake=run.lake)

        # blocking per record, not per batch: a record that fails is held back by the asset
        # itself, and the others of its batch land
        return dg.multi_asset(
            name=name, specs=[_spec(name, own, description, tags)], can_subset=True,
            retry_policy=FETCH_RETRY, pool=SERVICE_POOL,
            op_tags={"dagster/priority": "1"} if first else None,
            check_specs=[dg.AssetCheckSpec(c.name, asset=name, description=c.description,
                                           blocking=False) for c in checks])(body)
    return decorate


def _spec(name: str, table: str, description: str, tags: Mapping[str, str] | None
          ) -> dg.AssetSpec:
    """A product asset's spec: its lake table's columns, how to find a record's runs."""
    return dg.AssetSpec(name, skippable=True, group_name="products", kinds={"delta"},
                        description=description + FIND_A_RECORD, owners=OWNERS,
                        tags={**PRODUCT_TAGS, **(tags or {})},
                        metadata={"dagster/column_schema": column_schema(
                            schema(table), table, record_id=True)})


def keys(local_lake: bool = True) -> Keys:
    """The personal-data key; without one the step fails at once: a retry would not find it."""
    try:
        return Keys.from_env(local_lake=local_lake)
    except KeyUnusable as exc:
        raise dg.Failure(str(exc), allow_retries=False) from None


def record_label(number: int | None) -> str:  # a record as Dagster may name it: by its number
    return f"record #{number}" if number is not None else "a record"


def to_land(context: dg.AssetExecutionContext, batch: Batch, inbox: Inbox,
            asset: str) -> dict[str, int]:
    """The batch's records (id -> number), less those an earlier try of this step landed and
    those forgotten; holds the erasure lock until `inbox` closes (Inbox.hold_landing)."""
    if not batch.records:  # launched by hand with the default config: say how, land nothing
        raise dg.Failure(NAME_THEM, allow_retries=False)
    inbox.hold_landing()
    by_number = inbox.ids_of(batch.records)
    if gone := len(set(batch.records)) - len(by_number):
        context.log.warning("%d of the batch's record numbers name no record (forgotten, or "
                            "never known): not fetched", gone)
    ids = {r: n for n, r in sorted(by_number.items())}
    if context.retry_number == 0 or not ids:
        return ids
    done = {s.record for s in inbox.landings(ids, run_id=context.run.run_id, product=asset,
                                             outcomes=[LANDED_OK, HELD])}
    if done:
        context.log.info("try %d: %d of %d records were landed by an earlier try",
                         context.retry_number + 1, len(done & set(ids)), len(ids))
    return {r: n for r, n in ids.items() if r not in done}


def erase_forgotten(context: dg.AssetExecutionContext, inbox: Inbox, lake: Lake,
                    records: Collection[str], tables: Sequence[str]) -> None:
    """After a step's writes to `tables`: erase from them the rows of those of `records` the
    inbox forgot meanwhile. The step's erasure lock (`to_land`) keeps a forget out, unless
    the lock went with its Postgres session (a restart) while the step ran on: then a whole
    forget fits between the step reading its records and writing them. A forget marks the
    records forgotten before it deletes any row, so asked after the writes, the inbox names
    every record whose rows may have come after their delete."""
    for wait in (*FORGOTTEN_WAITS_S, None):  # the inbox may be restarting still
        try:
            gone = sorted(inbox.forgotten(records))
            break
        except InboxUnavailable:
            if wait is None:
                raise
            time.sleep(wait)
    if not gone:
        return
    context.log.warning("%d of the run's records were forgotten while it wrote them (its "
                        "erasure lock was lost): their rows are erased again", len(gone))
    for table in tables:
        lake.erase(table, gone, carry(lake, table, gone))


def land_each(run: Run, land: Callable[[str, Run], Landing],
              tables: Mapping[str, pa.Schema], appended: Collection[str] = ()
              ) -> list[Landing]:
    """Fetch and check the run's records one by one with `land`, and commit the rows of
    those that pass (one commit per table); a record that raises is failed, the others
    still land."""
    landings = []
    for record_id, number in run.ids.items():
        try:
            landing = land(record_id, run)
        except Exception as exc:  # noted with the record; the step fails after the rest
            landing = Landing.failed(record_id, exc)
        landings.append(replace(landing, number=number))
    return commit(run.lake, landings, tables, appended)


def commit(lake: Lake, landings: Iterable[Landing], tables: Mapping[str, pa.Schema],
           appended: Collection[str] = ()) -> list[Landing]:
    """Write the published records' rows: one commit per table for all of them (a commit
    costs the same for one record as for a hundred), appended or replacing each record's
    rows; the landings as they stand after it, each with its table and version, their rows
    let go. If a commit fails, every record it carried is failed instead (retried by the
    engine: the commit is all or none). Rows that are `Streamed`, not held, are streamed
    into the commit, then discarded."""
    given = list(landings)
    out = given
    try:
        for table, columns in tables.items():
            out = _commit_table(lake, table, columns, out, table in appended)
    finally:  # written or not, staged rows are deleted
        for part in (p for x in given for p in x.rows.values() if isinstance(p, Streamed)):
            part.staged.discard()
    return [replace(x, rows={}) for x in out]  # written: the run need not hold them


def _commit_table(lake: Lake, table: str, columns: pa.Schema, landings: list[Landing],
                  appended: bool) -> list[Landing]:
    """One commit of the published landings' rows of `table`, each told its version; if it
    fails, every landing with rows to write is failed."""
    parts = {x.record_id: x.rows[table] for x in landings if x.published and table in x.rows}
    if not parts:
        return landings
    try:
        version = _write(lake, table, parts, columns, appended)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        return [replace(x, published=False, error=error, retryable=True)
                if x.published and x.rows else x for x in landings]
    return [replace(x, lake_table=lake.shown(table), lake_version=version)
            if x.published and table in x.rows and x.lake_table is None else x
            for x in landings]


def _write(lake: Lake, table: str, parts: Mapping[str, pa.Table | Streamed],
           columns: pa.Schema, appended: bool) -> int:
    """One commit of `parts`; streamed from where they are staged if any is not held."""
    if all(isinstance(p, pa.Table) for p in parts.values()):
        return (lake.append if appended else lake.replace)(table, parts, columns)
    if appended:
        raise ValueError(f"{table} is appended to: its rows are held, not streamed")
    return lake.replace_batches(
        table, {r: p.staged.batches if isinstance(p, Streamed) else p.to_batches
                for r, p in parts.items()}, columns,
        window={r: p.since for r, p in parts.items()
                if isinstance(p, Streamed) and p.since is not None})


@dataclass(frozen=True)
class Streamed:
    """A record's rows of one table that are not held but staged (resources/staging.py),
    read batch by batch into their commit (again if it is tried again). `since`: only the
    record's rows dated from then on are replaced (a window); None: all of them."""
    staged: Staged
    since: dt.datetime | None = None


@dataclass(frozen=True)
class Verdict:
    """One check's verdict on one record (its problems: none when it passed)."""
    record_id: str
    product: str
    check: Check
    problems: list[dict]
    number: int | None = None


def verdicts(asset: str, landings: Iterable[Landing], checks: Sequence[Check]) -> list[Verdict]:
    """The verdicts the landings carry, of the checks they evaluated."""
    return [Verdict(x.record_id, asset, c, x.problems[c.name], x.number) for x in landings
            for c in checks if x.problems.get(c.name) is not None]


def record_outcomes(context: dg.AssetExecutionContext, lake: Lake, inbox: Inbox, asset: str,
         landings: Sequence[Landing], checks: Sequence[Check] = (),
         extra: Sequence[Verdict] = ()) -> None:
    """Each record's landing and check verdicts as rows of the lake's `landings` and `checks`
    (one commit each), then as its state in the inbox. `extra`: verdicts on other assets'
    checks this step evaluated (income's, when transactions land)."""
    if not landings and not extra:
        return
    run_id = context.run.run_id
    now = dt.datetime.now(dt.UTC)
    if landings:
        lake.append_rows("landings", pa.table({
            "product": [asset] * len(landings), "run_id": [run_id] * len(landings),
            "landed_at": pa.array([now] * len(landings), LANDINGS.field("landed_at").type),
            "outcome": [x.outcome for x in landings],
            "row_count": pa.array([x.row_count for x in landings], pa.int64()),
            "fetched_rows": pa.array([x.fetched_rows for x in landings], pa.int64()),
            "pull": pa.array([x.pull for x in landings], pa.string()),
            "lake_table": pa.array([x.lake_table for x in landings], pa.string()),
            "lake_version": pa.array([x.lake_version for x in landings], pa.int64()),
            "error": pa.array([x.error for x in landings], pa.string()),
            "record_id": [x.record_id for x in landings]}), LANDINGS)
    judged = [*verdicts(asset, landings, checks), *extra]
    if judged:
        lake.append_rows("checks", pa.table({
            "product": [v.product for v in judged],
            "check_name": [v.check.name for v in judged],
            "run_id": [run_id] * len(judged),
            "evaluated_at": pa.array([now] * len(judged), CHECKS.field("evaluated_at").type),
            "passed": [not v.problems for v in judged],
            "blocking": [v.check.blocking for v in judged],
            "problem_count": pa.array([len(v.problems) for v in judged], pa.int64()),
            "problems": pa.array([orjson.dumps(v.problems[:PROBLEMS_KEPT]).decode()
                                  if v.problems else None for v in judged], pa.string()),
            "record_id": [v.record_id for v in judged]}), CHECKS)
    inbox.save_landings([*(LandingState(
        x.record_id, asset, x.outcome, run_id, now.timestamp(), row_count=x.row_count,
        detail=_detail(x, checks)) for x in landings), *_rejudged(inbox, extra)])


def _rejudged(inbox: Inbox, extra: Sequence[Verdict]) -> list[LandingState]:
    """The states of the records whose other product `extra` judged, each with that
    verdict in place of the one its own landing left (or could not give)."""
    out = []
    for product in sorted({v.product for v in extra}):
        judged = {v.record_id: v for v in extra if v.product == product}
        for state in inbox.landings(judged, product=product):
            v = judged[state.record]
            detail = {**state.detail, "checks": {**state.detail.get("checks", {}),
                                                 v.check.name: len(v.problems)}}
            detail.pop("problems", None)
            if v.problems:
                detail["problems"] = v.problems[:STATE_PROBLEMS]
            out.append(replace(state, detail=detail))
    return out


def _detail(x: Landing, checks: Sequence[Check]) -> dict:
    """What the inbox keeps of a landing: how it was pulled, where it went, each check's
    count of problems and the first few problems, or why it failed."""
    judged = {c.name: len(x.problems[c.name]) for c in checks
              if x.problems.get(c.name) is not None}
    problems = [p for c in checks for p in (x.problems.get(c.name) or [])][:STATE_PROBLEMS]
    return {k: v for k, v in (("pull", x.pull), ("lake_version", x.lake_version),
                              ("error", x.error), ("checks", judged), ("problems", problems))
            if v}


def dagster_results(context: dg.AssetExecutionContext, asset: str, landings: Sequence[Landing],
           checks: Sequence[Check] = (), extra: Mapping[str, object] | None = None, *,
           lake: Lake | None = None) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """The batch as Dagster hears of it: a materialization when any record was published,
    one result per check the batch evaluated; then the step fails (and is retried) if any
    record failed. Its `dagster/row_count`, which Dagster and its users read as the asset's
    size, is the asset's lake table's rows as this run's commit left it; the batch's own
    counts have their own names (`rows_landed`, `records`, `published`...). Without a `lake`
    (a bench's stand-in asset) the table's count is left out."""
    if not landings and context.retry_number == 0:
        context.log.warning("none of this run's records is known any more (forgotten): "
                            "nothing was fetched")
    published = [x for x in landings if x.published]
    held = [x.number for x in landings if x.outcome == HELD]
    failed = [x for x in landings if x.error]
    run_id = context.run.run_id
    if published:
        table = TABLES.get(asset, asset)
        versions = [x.lake_version for x in published if lake and x.lake_version is not None
                    and x.lake_table == lake.shown(table)]
        rows = lake.row_count(table, max(versions) if versions else None) if lake else None
        meta = {**({"dagster/row_count": rows} if rows is not None else {}),
                "rows_landed": sum(x.row_count for x in published),
                "records": len(landings), "published": len(published), "held": len(held),
                "failed": len(failed),
                "lake_table": dg.MetadataValue.path(published[0].lake_table or ""),
                "lake_version": max(x.lake_version or 0 for x in published),
                "each_record": dg.MetadataValue.text(
                    f"select * from landings where run_id = '{run_id}' and product = "
                    f"'{asset}'"), **(extra or {})}
        if held:
            meta["held_records"] = dg.MetadataValue.json(held[:SHOWN])
        if failed:
            meta["failed_records"] = dg.MetadataValue.json([x.number for x in failed[:SHOWN]])
        yield dg.MaterializeResult(asset_key=asset, metadata=meta)
    selected = {k.name for k in context.selected_asset_check_keys
                if k.asset_key == dg.AssetKey(asset)}
    yield from check_results(asset, verdicts(asset, landings, checks),
                             [c for c in checks if c.name in selected], run_id)
    for x in failed:
        context.log.error("%s: %s", x.label, x.dagster_error)
    raise_failed(asset, failed)


def check_results(asset: str, judged: Sequence[Verdict], checks: Sequence[Check],
                  run_id: str) -> Iterator[dg.AssetCheckResult]:
    """Per check the batch evaluated: passed when every record did, else the records that
    did not (the first few named; all of them in the lake's `checks`)."""
    for check in checks:
        if fields := _verdict(check, judged, run_id):
            yield dg.AssetCheckResult(asset_key=asset, check_name=check.name, **fields)


def log_rechecks(context: dg.AssetExecutionContext, judged: Sequence[Verdict]) -> None:
    """Verdicts this step gave on other assets' checks (income's, when transactions land
    after it), told as evaluations, which Dagster counts for that asset's latest
    materialization: its check shows the verdict, not a skip for want of transactions."""
    for asset, check in dict.fromkeys((v.product, v.check) for v in judged):
        if fields := _verdict(check, judged, context.run.run_id):
            context.log_event(dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey(asset), check_name=check.name, **fields))


def _verdict(check: Check, judged: Sequence[Verdict], run_id: str) -> dict | None:
    """One check's result over the records it judged (None: it judged none)."""
    of_check = [v for v in judged if v.check == check]
    if not of_check:
        return None
    bad = [v.number for v in of_check if v.problems]
    return dict(
        passed=not bad, severity=dg.AssetCheckSeverity.ERROR,
        description=None if not bad else f"{len(bad)} of {len(of_check)} records failed"
        + ("; their previous rows stay in view" if check.blocking else ""),
        metadata={"records_checked": len(of_check), "records_failed": len(bad),
                  "failing_records": dg.MetadataValue.json(bad[:SHOWN]),
                  "each_record": dg.MetadataValue.text(
                      f"select * from checks where run_id = '{run_id}' and check_name = "
                      f"'{check.name}' and not passed")})


def raise_failed(asset: str, failed: list[Landing]) -> None:
    """Fail the step for the records that failed (after the others were told), retried by
    the engine unless none of the failures is worth another try."""
    if not failed:
        return
    retry = any(f.retryable for f in failed)
    raise dg.Failure(
        description=f"{len(failed)} record(s) of {asset} failed and were not written "
                    f"(the records already landed are kept): "
                    + "; ".join(f"{f.label}: {f.dagster_error}" for f in failed[:3])
                    + ("" if retry else " -- bad data or a refusal: not retried"),
        metadata={"failed_records": dg.MetadataValue.json(
            {str(f.number): f.dagster_error for f in failed[:SHOWN]})},
        allow_retries=retry)
