"""The pandera models of the lake's tables, built from their declarations (resources/tables.py)
and checked before anything is written.

Arrow schemas already fix the types; these check the values: each column's declared check, its
nulls, the table's key, and the rules below that span columns (exactly one of debit and
credit, amount = credit - debit). `validate` raises ValidationFailed naming the failing rows,
and the caller writes nothing.

Only the validated columns reach pandas (`topics`, a list a row, would cost time), text as
Arrow-backed strings (`string[pyarrow]`), not Python objects: `isin`/`str_matches` run in Arrow.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
import pyarrow as pa_arrow
from pandera.errors import SchemaErrors

from resources.tables import MONEY, TABLES, Col

# money stays exact decimal(18,2) in pandas too (Arrow-backed), so checks compare exactly
TO_PANDAS = {pa_arrow.string(): pd.StringDtype("pyarrow"),
             pa_arrow.large_string(): pd.StringDtype("pyarrow"),
             MONEY: pd.ArrowDtype(MONEY)}.get

# checks across a table's columns: (the columns they read, what they require, the test)
RULES = {
    "transactions": [
        (("debit", "credit"), "exactly one of debit and credit must be set",
         lambda df: df["debit"].isna() != df["credit"].isna()),
        (("amount", "credit", "debit"), "amount must be credit minus debit",
         lambda df: df["amount"] == df["credit"].fillna(0) - df["debit"].fillna(0)),
    ],
    "income_streams": [
        (("first_date", "last_date"), "a stream's first date must not follow its last date",
         lambda df: df["first_date"].isna() | df["last_date"].isna()
         | (df["first_date"] <= df["last_date"])),
    ],
}


class ValidationFailed(ValueError):
    """A table broke its model; nothing was written. The message names the failing rows."""


def _checks(col: Col) -> list[pa.Check]:
    """The column's declared checks, by pandera's names; a date bound in the column's zone."""
    zone = getattr(col.type, "tz", None)
    return [getattr(pa.Check, name)(pd.Timestamp(value, tz=zone)
                                    if pa_arrow.types.is_temporal(col.type) else value)
            for name, value in (col.check or {}).items()]


def model(table: str, *, records: bool = False) -> pa.DataFrameSchema:
    """The table as sent, validated: its columns with something to check, and its rules.
    `records`: rows of several records, each with its `record_id` (a key is unique within
    a record's rows)."""
    key, rules = TABLES[table].key, RULES.get(table, [])
    columns = {c.name: pa.Column(nullable=c.nullable and c.name not in key,
                                 unique=(c.name,) == key, checks=_checks(c))
               for c in TABLES[table].columns
               if c.only != "lake" and (c.check or not c.nullable or c.name in key)}
    for reads, _, _ in rules:
        columns |= {name: pa.Column(nullable=True) for name in reads if name not in columns}
    if records:
        columns["record_id"] = pa.Column(nullable=False)
        for name in key:  # unique with the record's id, not alone
            columns[name] = pa.Column(nullable=False, checks=columns[name].checks)
        return pa.DataFrameSchema(columns, unique=["record_id", *key],
                                  checks=[pa.Check(test, error=error) for _, error, test in rules])
    return pa.DataFrameSchema(columns, unique=list(key) if len(key) > 1 else None,
                              checks=[pa.Check(test, error=error) for _, error, test in rules])


Accounts, BalanceHistory, BalancePeriodic, Transactions = map(model, [
    "accounts", "balance_history", "balance_periodic", "transactions"])
Income, IncomeStreams, Identity, Payments = map(model, [
    "income", "income_streams", "identity", "payments"])


def checked_columns(model: pa.DataFrameSchema) -> list[str]:
    return list(model.columns)


def validate(model: pa.DataFrameSchema, table: pa_arrow.Table, what: str,
             first_row: int = 0) -> pd.DataFrame:
    """Validate `table` against `model`; raise ValidationFailed naming the failing rows
    (numbered from `first_row`: a piece of a record is named by the record's rows)."""
    df = table.select([c for c in model.columns if c in table.schema.names]).to_pandas(
        date_as_object=False, types_mapper=TO_PANDAS)
    if first_row:
        df.index = pd.RangeIndex(first_row, first_row + len(df))
    try:
        return model.validate(df, lazy=True)
    except SchemaErrors as err:
        cases = err.failure_cases
        rows = sorted({int(i) for i in cases["index"].dropna()}) if "index" in cases else []
        checks = sorted({f"{col}: {check}" if ctx == "Column" else str(check)
                         for ctx, col, check in zip(cases["schema_context"], cases["column"],
                                                    cases["check"], strict=True)})
        shown = ", ".join(map(str, rows[:20])) + (" ..." if len(rows) > 20 else "")
        raise ValidationFailed(
            f"{what}: {len(rows)} row(s) fail validation [{'; '.join(checks)}]; "
            f"rows {shown or '(table-wide)'}; nothing was written") from None
