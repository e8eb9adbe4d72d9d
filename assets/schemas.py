"""pandera models of the lake's tables (docs/lake.md), checked before anything is written.

Arrow schemas already fix the types; these models check the values: NUBANs of 10 digits,
currency codes, exactly one of debit and credit, ids unique in a partition, dates that
parse. `validate` raises ValidationFailed naming the failing rows, and the caller writes
nothing.

They are also where every column is described, once: each field carries the `description`
analysts read in the Dagster UI's column tables, in DuckDB (`COMMENT ON COLUMN`, so
`duckdb_columns()` shows it) and in docs/columns.md (assets/catalog.py spreads them). A
column the ingest does not check is declared with `_doc`: described, not validated (its
type comes from the table's Arrow schema, so validating it would only cost time).

Text columns reach pandas as Arrow-backed strings (`string[pyarrow]`), not Python objects:
pandera then checks their dtype once, not every value, and `isin`/`str_matches` run in
Arrow; validating transactions went from ~1.5 to ~0.4 us a row (bench/README.md).
"""

from __future__ import annotations

import functools

import pandas as pd
import pandera.pandas as pa
import pyarrow as pa_arrow
from pandera.errors import SchemaErrors
from pandera.typing import Series

CURRENCIES = ["NGN", "USD", "GBP", "EUR", "GHS", "KES", "ZAR"]
EARLIEST = pd.Timestamp("1900-01-01", tz="UTC")
TS = {"unit": "ms", "tz": "UTC"}


class ValidationFailed(ValueError):
    """A table broke its model; nothing was written. The message names the failing rows."""


def _ts(description: str, **kw):
    return pa.Field(dtype_kwargs=TS, ge=EARLIEST, description=description, **kw)


def _text(description: str, **kw):
    return pa.Field(dtype_kwargs={"storage": "pyarrow"}, description=description, **kw)


def _doc(description: str, **kw):
    """A column described, not checked: `validate` leaves it out (see checked_schema)."""
    return pa.Field(nullable=True, description=description, metadata={"checked": False},
                    **kw)


def _doc_text(description: str):
    return _doc(description, dtype_kwargs={"storage": "pyarrow"})


def _doc_ts(description: str):
    return _doc(description, dtype_kwargs=TS)


Text = Series[pd.StringDtype]
# money stays exact decimal(18,2) in pandas too (Arrow-backed), so checks compare exactly
MONEY = pd.ArrowDtype(pa_arrow.decimal128(18, 2))
Money = Series[MONEY]
ARROW_TYPES = {pa_arrow.string(): pd.StringDtype("pyarrow"),
               pa_arrow.large_string(): pd.StringDtype("pyarrow"),
               pa_arrow.decimal128(18, 2): MONEY}.get


Stamp = Series[pd.DatetimeTZDtype]
Day = Series[pd.Timestamp]
Strings = Series[object]  # a list of strings per row

# the record's own column, added to every table kept by record (docs/lake.md)
RECORD_ID = ("the record: one user's connection to one bank, the unit of work (a Dagster "
             "partition)")
ENV = "the service's environment the row came from (production, production-sandbox)"
CURRENCY = "ISO 4217 code of the account's currency (NGN)"


class Accounts(pa.DataFrameModel):
    account_id: Text = _text("the service's id of the account", unique=True,
                             str_matches=r"^[A-Za-z0-9_-]{1,64}$")
    nuban: Text = _text("the account number (NUBAN), 10 digits", str_matches=r"^\d{10}$")
    name: Text = _text("the account holder's name as the bank shows it", nullable=True)
    type: Text = _text("the kind of account, e.g. Savings, Current", nullable=True)
    currency: Text = _text(CURRENCY, isin=CURRENCIES)
    bank_id: Text = _doc_text("the service's id of the bank holding the account")
    customer_id: Text = _text("the service's id of the customer who owns the account")
    customer_name: Text = _doc_text("the customer's name as the service knows it")
    balance_id: Text = _doc_text("the service's id of the account's balance document")
    env: Text = _doc_text(ENV)
    created_at: Stamp = _ts("when the service first saw the account (UTC)", nullable=True)
    last_updated: Stamp = _doc_ts("when the service last changed the account (UTC)")

    class Config:
        strict = False


class Transactions(pa.DataFrameModel):
    transaction_id: Text = _text("the service's id of the transaction line", unique=True)
    account_id: Text = _text("the account the line is on (accounts.account_id)")
    customer_id: Text = _doc_text("the service's id of the account's customer")
    bank_id: Text = _doc_text("the service's id of the bank")
    trans_date: Stamp = _ts("the value date: when the money moved as the bank dates it (UTC)")
    cleared_date: Stamp = _doc_ts("when the line posted (UTC); null while it is pending")
    debit: Money = pa.Field(nullable=True, ge=0,
                            description="money out, positive naira; null on a credit line")
    credit: Money = pa.Field(nullable=True, ge=0,
                             description="money in, positive naira; null on a debit line")
    amount: Money = pa.Field(description="the signed amount in naira: credit positive, "
                                         "debit negative (credit - debit, exactly)")
    balance: Money = pa.Field(nullable=True,  # null: a pending line
                              description="the running balance after the line, naira; null "
                                          "while the line is pending")
    currency: Text = _text(CURRENCY, isin=CURRENCIES)
    narration: Text = _text("what the bank wrote on the line (the service's notes.desc)",
                            nullable=True)
    topics: Strings = _doc("the service's tags of the line (notes.topics), e.g. income, "
                           "airtime")
    ref: Text = _doc_text("the bank's reference of the line")
    branch: Text = _doc_text("the bank branch that posted the line")
    code: Text = _doc_text("the bank's transaction code")
    env: Text = _doc_text(ENV)
    created_at: Stamp = _doc_ts("when the service first saw the line (UTC)")
    last_updated: Stamp = _doc_ts("when the service last changed the line (UTC)")

    class Config:
        strict = False

    @pa.dataframe_check(error="exactly one of debit and credit must be set")
    def one_of_debit_credit(cls, df: pd.DataFrame) -> Series[bool]:
        return df["debit"].isna() != df["credit"].isna()

    @pa.dataframe_check(error="amount must be credit minus debit")
    def signed_amount(cls, df: pd.DataFrame) -> Series[bool]:
        return df["amount"] == df["credit"].fillna(0) - df["debit"].fillna(0)


class BalanceHistory(pa.DataFrameModel):
    account_id: Text = _text("the account the snapshot is of (accounts.account_id)")
    fetched_at: Stamp = _ts("when ledgerlake fetched the snapshot (UTC, to the millisecond)")
    available_balance: Money = pa.Field(nullable=True, description=(
        "what the customer could spend then, naira (ledger balance less holds)"))
    ledger_balance: Money = pa.Field(nullable=True, description=(
        "the booked balance then, naira: the last posted line's running balance"))
    currency: Text = _text(CURRENCY, isin=CURRENCIES, nullable=True)
    source: Text = _text("what caused the fetch: callback, periodic, schedule or manual",
                         isin=["callback", "periodic", "schedule", "manual"])
    service_updated_at: Stamp = _doc_ts("when the service last updated the balance (UTC)")

    class Config:
        strict = False
        unique = ["account_id", "fetched_at"]


class BalancePeriodic(pa.DataFrameModel):
    account_id: Text = _text("the account (accounts.account_id)")
    date: Day = pa.Field(description="the day, as the service dates its periodic history")
    available_balance: Money = pa.Field(nullable=True, description=(
        "available balance at the end of that day, naira"))
    ledger_balance: Money = pa.Field(nullable=True, description=(
        "ledger balance at the end of that day, naira"))

    class Config:
        strict = False
        unique = ["account_id", "date"]


class Income(pa.DataFrameModel):
    income_id: Text = _doc_text("the service's id of the income estimate")
    customer_id: Text = _text("the customer the estimate is of", unique=True)
    confidence: Series[float] = pa.Field(nullable=True, ge=0, le=100, description=(
        "how sure the service is of the estimate, percent"))
    number_of_transactions: Series[int] = pa.Field(ge=0, description=(
        "income-tagged posted credits the estimate counts"))
    average_monthly_income: Money = pa.Field(nullable=True, ge=0,
                                             description="average income a month, naira")
    last_year_income: Money = _doc("income over the last year, naira")
    account_age_months: Series[int] = _doc("months of history the estimate saw")
    number_of_streams: Series[int] = pa.Field(ge=0, description=(
        "income streams found (rows of income_streams)"))
    past_three_months_total: Money = _doc("income over the past three months, naira")
    past_six_months_total: Money = _doc("income over the past six months, naira")
    past_twelve_months_total: Money = _doc("income over the past twelve months, naira")
    past_twelve_months_average: Money = _doc("average income a month over the past twelve "
                                             "months, naira")
    created_at: Stamp = _doc_ts("when the service made the estimate (UTC)")

    class Config:
        strict = False


class IncomeStreams(pa.DataFrameModel):
    stream_id: Text = _text("the service's id of the income stream", unique=True)
    account_ids: Strings = _doc("the accounts the stream's credits arrive on")
    type: Text = _doc_text("the kind of stream, e.g. Salary, Recurrent Credit")
    monthly_amount: Money = pa.Field(ge=0, description="what the stream pays a month, naira")
    number_of_transactions: Series[int] = pa.Field(ge=0, description=(
        "the stream's credits among the record's transactions"))
    source_name: Text = _doc_text("who pays: the employer or payer as the narrations name it")
    source_type: Text = _doc_text("the kind of payer, as the service classes it")
    first_date: Day = pa.Field(nullable=True, description="the day of the stream's first credit")
    last_date: Day = pa.Field(nullable=True, description="the day of the stream's latest credit")
    total_count: Series[int] = _doc("credits the stream has had in all")
    primary_stream: Series[bool] = _doc("whether this is the customer's main income stream")

    class Config:
        strict = False

    @pa.dataframe_check(error="a stream's first date must not follow its last date")
    def ordered_dates(cls, df: pd.DataFrame) -> Series[bool]:
        return df["first_date"].isna() | df["last_date"].isna() | (
            df["first_date"] <= df["last_date"])


class Identity(pa.DataFrameModel):
    """Validated as the service sends it; the lake keeps the sensitive columns protected
    (resources/privacy.py): what each column holds there is what is described."""

    customer_id: Text = _text("the service's id of the customer", unique=True)
    bvn: Text = _text("Bank Verification Number, masked to its last 4 digits (sensitive: the "
                      "number is sealed)", nullable=True, str_matches=r"^\d{11}$")
    bvn_hash: Text = _doc_text("keyed hash (HMAC-SHA256) of the BVN: equal for equal BVNs, "
                               "to join on; the number cannot be read from it")
    nin: Text = _doc_text("National Identification Number, masked to its last 4 digits "
                          "(sensitive: the number is sealed)")
    nin_hash: Text = _doc_text("keyed hash (HMAC-SHA256) of the NIN, to join on")
    firstname: Text = _doc_text("first name")
    middlename: Text = _doc_text("middle name")
    lastname: Text = _doc_text("last name")
    fullname: Text = _text("full name as the bank holds it", nullable=True)
    dob: Day = pa.Field(nullable=True, ge=pd.Timestamp("1900-01-01"),
                        description="date of birth (sensitive: sealed; the lake keeps "
                                    "birth_year)")
    birth_year: Series[int] = _doc("year of birth (the date itself is sealed)")
    gender: Text = _doc_text("gender as the bank holds it")
    marital_status: Text = _doc_text("marital status as the bank holds it")
    nationality: Text = _doc_text("nationality")
    state_of_origin: Text = _doc_text("Nigerian state of origin")
    state_of_residence: Text = _doc_text("Nigerian state of residence")
    lga_of_origin: Text = _doc_text("local government area of origin")
    lga_of_residence: Text = _doc_text("local government area of residence")
    phones: Strings = _doc("phone numbers, masked to their last 4 digits (sensitive: sealed)")
    emails: Strings = _doc("email addresses, masked to a***@domain (sensitive: sealed)")
    addresses: Strings = _doc("postal addresses, masked to their last part (sensitive: sealed)")
    aliases: Strings = _doc("other names the customer is known by")
    sealed: Series[object] = _doc("the raw BVN, NIN, date of birth, phones, emails and "
                                  "addresses, encrypted (AES-256-GCM); `ledgerlake reveal` "
                                  "opens it with LEDGERLAKE_PII_KEY. Not in the warehouse")

    class Config:
        strict = False


class Payments(pa.DataFrameModel):
    payment_id: Text = _text("the service's id of the payment", unique=True)
    callback_type: Text = _text("PAYMENT (one-off) or PAYMENT_RECURRING (made by a schedule)",
                                isin=["PAYMENT", "PAYMENT_RECURRING"])
    status: Text = _text("the payment's latest status, e.g. success, failed, pending")
    amount: Money = pa.Field(ge=0, description="the amount paid, naira (the service sends kobo)")
    fee: Money = pa.Field(nullable=True, ge=0,
                          description="the fee charged, naira (the service sends kobo)")
    currency: Text = _text(CURRENCY, isin=CURRENCIES, nullable=True)
    ref: Text = _doc_text("the payment's reference")
    debit_account: Text = _doc_text("the account paid from")
    credit_account: Text = _doc_text("the account paid to")
    source: Text = _doc_text("how the payment was started, e.g. link")
    interbank_response_code: Text = _doc_text("the interbank network's response code")
    bank_response_code: Text = _doc_text("the bank's response code")
    bank_response_message: Text = _doc_text("the bank's response message")
    schedule_interval: Text = _doc_text("a recurring payment's interval, e.g. monthly")
    created_at: Stamp = _doc_ts("when the payment was made (UTC)")
    last_updated: Stamp = _doc_ts("when the payment last changed (UTC)")

    class Config:
        strict = False


class Records(pa.DataFrameModel):
    """The `records` table, rebuilt whole from the inbox (not validated: the inbox is ours)."""

    record_id: Text = _doc_text(RECORD_ID)
    status: Text = _doc_text("the connection: connected, disconnected or reauth_required")
    status_at: Stamp = _doc_ts("when the connection took that status (UTC)")
    last_method: Text = _doc_text("the method of the last callback received, e.g. BALANCE")
    last_code: Text = _doc_text("the code of the last callback received, e.g. BALANCE_SUCCESS")
    last_callback_at: Stamp = _doc_ts("when the last callback came (UTC)")
    auth_code: Text = _doc_text("code of the last auth callback")
    auth_at: Stamp = _doc_ts("when the last auth callback came (UTC)")
    identity_code: Text = _doc_text("code of the last identity callback")
    identity_at: Stamp = _doc_ts("when the last identity callback came (UTC)")
    accounts_code: Text = _doc_text("code of the last accounts callback")
    accounts_at: Stamp = _doc_ts("when the last accounts callback came (UTC)")
    balance_code: Text = _doc_text("code of the last balance callback")
    balance_at: Stamp = _doc_ts("when the last balance callback came (UTC)")
    transactions_code: Text = _doc_text("code of the last transactions callback")
    transactions_at: Stamp = _doc_ts("when the last transactions callback came (UTC)")
    income_code: Text = _doc_text("code of the last income callback")
    income_at: Stamp = _doc_ts("when the last income callback came (UTC)")
    payment_code: Text = _doc_text("code of the last payment callback")
    payment_at: Stamp = _doc_ts("when the last payment callback came (UTC)")


class Erasures(pa.DataFrameModel):
    """The `erasures` table, written by `ledgerlake forget` (not validated: ledgerlake's own)."""

    erasure_id: Text = _doc_text("one pass of `ledgerlake forget`")
    requested_at: Stamp = _doc_ts("when the pass started (UTC)")
    finished_at: Stamp = _doc_ts("when the pass had erased every table (UTC; the warehouse "
                                 "is rebuilt next); null on the rows written first, naming "
                                 "the records it was about to erase")
    subject: Text = _doc_text("what was asked to be forgotten: customer or record")
    subject_id: Text = _doc_text("the service's id of that customer or record")
    record_id: Text = _doc_text("a record erased (null when the customer had none left)")
    lake_table: Text = _doc_text("the lake table the counts are of (null on the first rows)")
    rows_deleted: Series[int] = _doc("rows the pass deleted from the table (on the first "
                                     "record's row of the pass; 0 on the others)")
    files_purged: Series[int] = _doc("data files of older versions the pass removed because "
                                     "they held the rows")
    reason: Text = _doc_text("why: request, disconnect, or what the operator wrote")


# -- what the views add to the lake's columns (assets/sql/*.sql) ------------------------------

class TransactionsView(pa.DataFrameModel):
    pending: Series[bool] = _doc("true for a line authorised but not posted yet (no "
                                 "cleared_date, no balance): it may post under a new id or "
                                 "be reversed")


class PaymentsView(pa.DataFrameModel):
    amount_kobo: Series[int] = _doc("the amount as the service sent it, integer kobo")


class RecordsView(pa.DataFrameModel):
    is_connected: Series[bool] = _doc("status is connected: the daily refresh keeps it fresh")
    needs_reauth: Series[bool] = _doc("status is reauth_required: the user must log in again "
                                      "before anything is fetched")


class DailyBalances(pa.DataFrameModel):
    record_id: Text = _doc_text(RECORD_ID)
    account_id: Text = _doc_text("the account (accounts.account_id)")
    date: Day = _doc("the customer's day (LEDGERLAKE_TIMEZONE, Africa/Lagos by default)")
    balance: Money = _doc("the ledger balance at the end of the day, naira: the running "
                          "balance of the day's last posted line, else the service's periodic "
                          "figure, else carried forward")
    available_balance: Money = _doc("the available balance at the end of the day, naira, "
                                    "from the service's periodic history (null on days it "
                                    "has none)")
    source: Text = _doc_text("where the balance comes from: transactions or periodic")
    carried_forward: Series[bool] = _doc("true on a day with neither a posted line nor a "
                                         "periodic figure: the last known balance before it")


class MonthlyCashflow(pa.DataFrameModel):
    record_id: Text = _doc_text(RECORD_ID)
    account_id: Text = _doc_text("the account (accounts.account_id)")
    month: Day = _doc("the month's first day, in the customer's time zone, by value date")
    currency: Text = _doc_text(CURRENCY)
    transactions: Series[int] = _doc("posted lines in the month")
    inflow: Money = _doc("sum of the month's credits, naira (exact)")
    outflow: Money = _doc("sum of the month's debits, positive naira (exact)")
    net: Money = _doc("inflow - outflow, naira")


# lake table -> its model (assets/warehouse.py LAKE_TABLES holds the same names)
LAKE_MODELS: dict[str, type[pa.DataFrameModel]] = {
    "accounts": Accounts, "balance_history": BalanceHistory, "balance_periodic": BalancePeriodic,
    "transactions": Transactions, "income": Income, "income_streams": IncomeStreams,
    "identity": Identity, "payments": Payments, "records": Records, "erasures": Erasures,
}
# view -> the columns it adds or derives (the rest are the lake's, described there)
VIEW_MODELS: dict[str, type[pa.DataFrameModel]] = {
    "transactions": TransactionsView, "payments": PaymentsView, "records": RecordsView,
    "daily_balances": DailyBalances, "monthly_cashflow": MonthlyCashflow,
}


def descriptions(model: type[pa.DataFrameModel]) -> dict[str, str]:
    """Column -> description, in the model's order."""
    return {n: c.description for n, c in model.to_schema().columns.items()}


@functools.cache
def checked_schema(model: type[pa.DataFrameModel]) -> pa.DataFrameSchema:
    """The model less its described-only columns (`_doc`): what `validate` checks."""
    schema = model.to_schema()
    return schema.remove_columns([n for n, c in schema.columns.items()
                                  if not (c.metadata or {}).get("checked", True)])


def checked_columns(model: type[pa.DataFrameModel]) -> list[str]:
    return list(checked_schema(model).columns)


def validate(model: type[pa.DataFrameModel], table: pa_arrow.Table, what: str) -> pd.DataFrame:
    """Validate `table` against `model`; raise ValidationFailed naming the failing rows."""
    df = table.to_pandas(date_as_object=False, types_mapper=ARROW_TYPES)
    try:
        return checked_schema(model).validate(df, lazy=True)
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
