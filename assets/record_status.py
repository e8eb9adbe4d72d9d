"""Each record's connection status and last callbacks, from the inbox, as the `records` table.

One row per record: connected, disconnected or reauth_required; the last callback of all;
and per product (auth, identity, accounts, balance, transactions, income, payment) the code
and time of its last callback, so `INCOME_FAILED` or a missing TRANSACTIONS shows at a glance.
"""

import pyarrow as pa
from dagster import AssetExecutionContext, MaterializeResult, asset

from resources.callbacks import CallbackLog
from resources.lake import Lake
from resources.tables import schema

from .catalog import OWNERS, column_schema
from .metadata import describe

PRODUCT_ASSETS = ["accounts", "balances", "transactions", "income", "identity", "payments"]

# product -> the callback methods that report it (the spec's Events table)
PRODUCTS = {
    "auth": ("AUTH",), "identity": ("IDENTITY",), "accounts": ("ACCOUNTS",),
    "balance": ("BALANCE", "PERIODIC_BALANCE"),
    "transactions": ("TRANSACTIONS", "PERIODIC_TRANSACTIONS"),
    "income": ("INCOME",), "payment": ("PAYMENT", "PAYMENT_RECURRING"),
}
SCHEMA = schema("records")


def last_per_product(methods: dict[str, tuple[str, str]]) -> dict[str, str | None]:
    """The newest callback code and time of each product, over the methods reporting it."""
    out: dict[str, str | None] = {}
    for product, names in PRODUCTS.items():
        seen = sorted((at, code) for m, (code, at) in methods.items() if m in names and at)
        out[f"{product}_code"], out[f"{product}_at"] = (seen[-1][1], seen[-1][0]) if seen \
            else (None, None)
    return out


# after products land (their callbacks moved the inbox), and on connection events (the inbox
# sensor asks for a run), the statuses are rebuilt from the inbox
@asset(group_name="warehouse", kinds={"parquet"}, deps=PRODUCT_ASSETS,
       owners=OWNERS,
       metadata={"dagster/column_schema": column_schema(SCHEMA, "records")})
def record_status(context: AssetExecutionContext, callback_log: CallbackLog, lake: Lake):
    """Connected, disconnected or needing reauthentication, with the last callback seen."""
    rows = [{"record_id": r["record"], "status": r["status"], "status_at": r["status_at"],
             "last_method": r["method"], "last_code": r["code"],
             "last_callback_at": r["occurred_at"], **last_per_product(r["methods"])}
            for r in callback_log.record_status()]
    table = pa.table({
        f.name: pa.array([r[f.name] for r in rows], pa.string()).cast(f.type) for f in SCHEMA
    }, schema=SCHEMA)
    version = lake.write("records", None, table, schema=SCHEMA)
    return MaterializeResult(metadata=describe(table, "records", lake.shown("records"), version))
