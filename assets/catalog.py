"""Every column described once, shown where people look.

A lake column is described where it is declared (resources/tables.py); what a view adds or
derives is described here (VIEW_COLUMNS); a view's own description is the first paragraph of
the comment heading its SQL file. From there they reach the Dagster UI's column tables
(`column_schema`), DuckDB's comments on every view and column (assets/warehouse.py) and
docs/columns.md.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from dagster import TableColumn, TableSchema

from resources.privacy import CLASSES, classify
from resources.tables import CLASS_ORDER, columns

# Who answers for the assets, and the tags the catalog filters on (`tag:product`, `tag:pii`)
OWNERS = ["team:data-engineering"]
PRODUCT_TAGS = {"product": ""}  # a product of the service, landed per record
PII = {"pii": ""}  # personal data: names, BVN, NIN, birth date, contacts

# view -> the columns it adds or derives (assets/sql/*.sql); the rest are the lake's
VIEW_COLUMNS: dict[str, dict[str, str]] = {
    "transactions": {
        "pending": "true for a line authorised but not posted yet (no cleared_date, no "
                   "balance): it may post under a new id or be reversed"},
    "payments": {"amount_kobo": "the amount as the service sent it, integer kobo"},
    "records": {
        "is_connected": "status is connected: the daily refresh keeps it fresh",
        "needs_reauth": "status is reauth_required: the user must log in again before "
                        "anything is fetched"},
    "daily_balances": {
        "date": "the customer's day (LEDGERLAKE_TIMEZONE, Africa/Lagos by default)",
        "balance": "the ledger balance at the end of the day, naira: the running balance of "
                   "the day's last posted line, else the service's periodic figure, else "
                   "carried forward",
        "available_balance": "the available balance at the end of the day, naira, from the "
                             "service's periodic history (null on days it has none)",
        "source": "where the balance comes from: transactions or periodic",
        "carried_forward": "true on a day with neither a posted line nor a periodic figure: "
                           "the last known balance before it"},
    "monthly_cashflow": {
        "account_id": "the account (accounts.account_id)",
        "month": "the month's first day, in the customer's time zone, by value date",
        "transactions": "posted lines in the month",
        "inflow": "sum of the month's credits, naira (exact)",
        "outflow": "sum of the month's debits, positive naira (exact)",
        "net": "inflow - outflow, naira"},
}
Reads = Mapping[str, tuple[set[str], tuple[str, ...]]]  # view -> (lake tables, views needed)


def lake_descriptions(table: str) -> dict[str, str]:
    """A lake table's columns -> descriptions (with `record_id`, where the lake adds it)."""
    return {name: c.description for name, c in columns(table).items()}


def view_descriptions(name: str, reads: Reads) -> dict[str, str]:
    """A view's columns -> descriptions: what the view adds or derives (VIEW_COLUMNS) first,
    then the columns of the lake tables it reads, directly or through the views it needs.
    `reads`: as the SQL files say."""
    out = dict(VIEW_COLUMNS.get(name, {}))
    tables, needs = reads[name]
    for told in [*map(lake_descriptions, sorted(tables)),
                 *(view_descriptions(v, reads) for v in needs)]:
        for column, text in told.items():
            out.setdefault(column, text)
    return out


def column_schema(schema: pa.Schema, table: str, *, record_id: bool = False) -> TableSchema:
    """A lake table's columns as Dagster shows them: name, Arrow type, description, and the
    column's class as a tag (`class: personal`; resources/tables.py)."""
    declared = columns(table)
    names = [*schema.names, *(["record_id"] if record_id and "record_id" not in schema.names
                              else [])]
    return TableSchema(columns=[TableColumn(
        name=n, type=str(declared[n].type), description=declared[n].description,
        tags={"class": classify(table, n)}) for n in names])


def view_classes(name: str, reads: Reads) -> dict[str, str]:
    """A view's columns -> the class of the lake column they show (the most guarded one where
    lake tables share a name); what the view derives is public unless a lake column of its
    name is not."""
    out: dict[str, str] = {}
    tables, needs = reads[name]
    for classes in [*(CLASSES[t] for t in sorted(tables)),
                    *(view_classes(v, reads) for v in needs)]:
        for column, cls in classes.items():
            if column not in out or CLASS_ORDER.index(cls) > CLASS_ORDER.index(out[column]):
                out[column] = cls
    return out
