"""Income of each record (`/income/get`): a summary row and one row per income stream."""

import pyarrow as pa
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    MaterializeResult,
    asset,
)

from resources.client import ConnectionClient
from resources.columns import ref
from resources.lake import Lake

from .checks import income_matches_transactions
from .metadata import describe
from .partitions import batched, record_ids, records
from .schemas import Income, IncomeStreams, validate
from .transactions import SCHEMA as TRANSACTIONS

UTC_MS = pa.timestamp("ms", tz="UTC")
SUMMARY = pa.schema([
    ("income_id", pa.string()),
    ("customer_id", pa.string()),
    ("confidence", pa.float64()),
    ("number_of_transactions", pa.int64()),
    ("average_monthly_income", pa.float64()),
    ("last_year_income", pa.float64()),
    ("account_age_months", pa.int64()),
    ("number_of_streams", pa.int64()),
    ("past_three_months_total", pa.float64()),
    ("past_six_months_total", pa.float64()),
    ("past_twelve_months_total", pa.float64()),
    ("past_twelve_months_average", pa.float64()),
    ("created_at", UTC_MS),
])
STREAMS = pa.schema([
    ("stream_id", pa.string()),
    ("account_ids", pa.list_(pa.string())),
    ("type", pa.string()),
    ("monthly_amount", pa.float64()),
    ("number_of_transactions", pa.int64()),
    ("source_name", pa.string()),
    ("source_type", pa.string()),
    ("first_date", pa.date32()),
    ("last_date", pa.date32()),
    ("total_count", pa.int64()),
    ("primary_stream", pa.bool_()),
])



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
    table = pa.table({k: pa.array([v], pa.string() if k == "created_at" else SUMMARY.field(k).type)
                      for k, v in row.items()})
    return table.set_column(table.schema.get_field_index("created_at"), "created_at",
                            table["created_at"].cast(UTC_MS))


def streams_table(income: dict) -> pa.Table:
    streams = income.get("streams") or []

    def occ(s, key):
        return (s.get("occurrence") or {}).get(key)

    return pa.table({
        "stream_id": [s.get("stream_id") for s in streams],
        "account_ids": [[ref(a) for a in (s.get("account") or [])] for s in streams],
        "type": [s.get("type") for s in streams],
        "monthly_amount": pa.array([s.get("monthly_amount") for s in streams], pa.float64()),
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


@asset(
    partitions_def=records, backfill_policy=batched, group_name="products",
    kinds={"parquet"}, deps=[AssetKey("transactions")],
    check_specs=[AssetCheckSpec("income_matches_transactions", asset="income", blocking=True,
                                description="income's stream counts equal the income-tagged "
                                            "credits among the record's transactions")],
)
def income(context: AssetExecutionContext, client: ConnectionClient, lake: Lake):
    """Income summary and streams (salary and recurrent credits) of the record."""
    tables, paths, problems = [], [], []
    for record_id in record_ids(context):
        data = client.income(record_id)
        summary, streams = summary_table(data), streams_table(data)
        validate(Income, summary, f"income of record {record_id}")
        validate(IncomeStreams, streams, f"income streams of record {record_id}")
        paths.append(lake.write("income", record_id, summary, schema=SUMMARY))
        lake.write("income_streams", record_id, streams, schema=STREAMS)
        tables.append(summary)
        problems += income_matches_transactions(
            record_id, summary, streams,
            lake.read("transactions", record_id, schema=TRANSACTIONS))
    total = pa.concat_tables(tables) if tables else SUMMARY.empty_table()
    yield MaterializeResult(metadata=describe(total, paths))
    yield AssetCheckResult(check_name="income_matches_transactions", passed=not problems,
                           metadata={"problems": problems[:50]})
