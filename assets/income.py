"""Income of each record (`/income/get`): a summary row and one row per income stream.

Income is derived from the record's transactions, so it is checked against them, but the two
arrive by separate callbacks, in any order: the check runs when the second of them lands
(here when transactions are already in the lake, else from the transactions asset). It
reports and does not hold income back: either side may be the stale one.
"""

import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetExecutionContext, ResourceParam

from resources.client import Client
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.tables import MONEY, UTC_MS, schema
from resources.wire import money, ref

from .batch import Batch
from .checks import Check, income_credits, income_matches_transactions
from .publish import Landing, Lands, Run, Verdict, product
from .schemas import Income, IncomeStreams, validate

INCOME_MATCHES = Check(
    "income_matches_transactions",
    "income's stream counts equal the income-tagged credits among the record's transactions; "
    "checked when both have landed, whichever came first", blocking=False)
SUMMARY, STREAMS = schema("income"), schema("income_streams")
TRANSACTIONS = schema("transactions")
CREDITS = pa.schema([pa.field("record_id", pa.string()), *(TRANSACTIONS.field(c) for c in (
    "account_id", "topics", "credit", "balance"))])


def _date(value) -> str | None:
    return str(value)[:10] if value else None


def summary_table(income: dict) -> pa.Table:
    s = income.get("summary") or {}

    def window(name, key):
        return (s.get(name) or {}).get(key)

    row = {
        "income_id": income.get("_id"),
        "customer_id": ref(income.get("customer")),
        "confidence": income.get("confidence"),
        "number_of_transactions": income.get("number_of_transactions"),
        "average_monthly_income": s.get("average_monthly_income"),
        "last_year_income": s.get("last_year_income"),
        "account_age_months": s.get("account_age_months"),
        "number_of_streams": s.get("number_of_streams"),
        "past_three_months_total": window("past_three_months", "total"),
        "past_six_months_total": window("past_six_months", "total"),
        "past_twelve_months_total": window("past_twelve_months", "total"),
        "past_twelve_months_average": window("past_twelve_months", "average_per_month"),
        "created_at": income.get("created_at"),
    }

    def column(name: str, value) -> pa.Array:
        kind = SUMMARY.field(name).type
        if kind == MONEY:
            return money([value])
        if kind == UTC_MS:
            return pa.array([value], pa.string()).cast(kind)
        return pa.array([value], kind)

    return pa.table({k: column(k, v) for k, v in row.items()}, schema=SUMMARY)


def streams_table(income: dict) -> pa.Table:
    streams = income.get("streams") or []

    def occ(s, key):
        return (s.get("occurrence") or {}).get(key)

    return pa.table({
        "stream_id": [s.get("stream_id") for s in streams],
        "account_ids": [[ref(a) for a in (s.get("account") or [])] for s in streams],
        "type": [s.get("type") for s in streams],
        "monthly_amount": money([s.get("monthly_amount") for s in streams]),
        "number_of_transactions": pa.array([s.get("number_of_transactions") for s in streams],
                                           pa.int64()),
        "source_name": [(s.get("source") or {}).get("name") for s in streams],
        "source_type": [(s.get("source") or {}).get("type") for s in streams],
        "first_date": pa.array([_date(occ(s, "first_date")) for s in streams],
                               pa.string()).cast(pa.date32()),
        "last_date": pa.array([_date(occ(s, "last_date")) for s in streams],
                              pa.string()).cast(pa.date32()),
        "total_count": pa.array([occ(s, "total_count") for s in streams], pa.int64()),
        "primary_stream": pa.array([s.get("primary_stream") for s in streams], pa.bool_()),
    }, schema=STREAMS)


def credits_in_lake(lake: Lake, record_ids: list[str]) -> dict[str, dict[str | None, int]]:
    """Per record with transactions in the lake, its income-tagged posted credits per
    account (`income_credits`), the records' lines read a batch at a time in one pass: a
    record may hold millions."""
    out: dict[str, dict[str | None, int]] = {r: {} for r in lake.row_counts(
        "transactions", record_ids)}
    if out:
        for batch in lake.scan("transactions", list(out), CREDITS, pc.is_valid(
                pc.field("credit")) & pc.is_valid(pc.field("balance"))):
            for record in pc.unique(batch["record_id"]).to_pylist():
                out[record] = income_credits(batch.filter(pc.equal(batch["record_id"], record)),
                                             out[record])
    return out


def recheck_income(lake: Lake, record_ids: list[str]) -> list[Verdict]:
    """The income check of records whose transactions just landed, where income is there
    (noted with the transactions' landings: the lake's `checks` and the inbox)."""
    summaries = lake.read_many("income", record_ids, SUMMARY)
    if not summaries:
        return []
    streams = lake.read_many("income_streams", list(summaries), STREAMS)
    credits = credits_in_lake(lake, list(summaries))
    return [Verdict(record_id, "income", INCOME_MATCHES, income_matches_transactions(
        record_id, summary, streams.get(record_id, STREAMS.empty_table()),
        credits.get(record_id, {})))
        for record_id, summary in summaries.items()]


@product(tables={"income": SUMMARY, "income_streams": STREAMS}, checks=[INCOME_MATCHES],
         description="Income summary and streams (salary and recurrent credits) of the record")
def income(context: AssetExecutionContext, batch: Batch, client: ResourceParam[Client],
           lake: Lake, inbox: InboxResource) -> Lands:
    def land(record_id: str, run: Run) -> Landing:
        data = client.income(record_id)
        summary, streams = summary_table(data), streams_table(data)
        validate(Income, summary, f"income of record {record_id}")
        validate(IncomeStreams, streams, f"income streams of record {record_id}")
        # the run's transactions counted once (one pass over the table, not one per record);
        # a record without its transactions yet is checked when they land
        credits = run.once("credits", lambda: credits_in_lake(lake, list(run.ids)))
        problems = None if record_id not in credits else income_matches_transactions(
            record_id, summary, streams, credits[record_id])
        return Landing(record_id, published=True, row_count=summary.num_rows,
                       problems={INCOME_MATCHES.name: problems},
                       rows={"income": summary, "income_streams": streams})

    def metadata(landings: list[Landing]) -> dict | None:
        waiting = sum(x.published and x.problems[INCOME_MATCHES.name] is None for x in landings)
        return {"checked_when_transactions_land": waiting} if waiting else None

    return Lands(land, metadata=metadata)
