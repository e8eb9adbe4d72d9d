"""Every lake table, each column declared once: name, Arrow type, description, privacy class,
and the check its values must pass. The rest is derived from here: the Arrow schemas the
assets write, the pandera models that validate them (assets/schemas.py), the classes that
mask, seal and keep statistics (resources/privacy.py), the Dagster UI's column tables and the
warehouse's comments and typed stand-ins (assets/catalog.py, assets/warehouse.py), and
docs/columns.md.

A column is validated when it says something to check: `nullable=False`, a `check`, or a part
of its table's `key` (unique within a record's rows, never null); the rest are described only.
Checks are pandera's own, by name (`matches` is `str_matches`), so their failures read the
same. In the Arrow schemas every column may be null: validation refuses nulls, naming the
rows, not the writer. Every column has a class, none by default (docs/privacy.md): `public`,
the service's ids, amounts, dates and codes; `personal`, about a person, readable by analysts;
`sensitive`, identifies a person on its own, never stored in clear.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

PUBLIC, PERSONAL, SENSITIVE = "public", "personal", "sensitive"
CLASS_ORDER = (PUBLIC, PERSONAL, SENSITIVE)

TEXT, TEXTS = pa.string(), pa.list_(pa.string())
INT, DAY = pa.int64(), pa.date32()
UTC_MS, UTC_US = pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")
MONEY = pa.decimal128(18, 2)  # naira, exact to the kobo


def matches(pattern: str) -> dict:
    return {"str_matches": pattern}


def one_of(*values: str) -> dict:
    return {"isin": list(values)}


def at_least(low, at_most=None) -> dict:
    return {"ge": low} | ({} if at_most is None else {"le": at_most})


SINCE_1900 = at_least("1900-01-01")
CURRENCY = one_of("NGN", "USD", "GBP", "EUR", "GHS", "KES", "ZAR")


@dataclass(frozen=True)
class Col:
    name: str
    type: pa.DataType
    description: str
    privacy: str  # PUBLIC, PERSONAL or SENSITIVE: no default, each column is weighed
    check: dict | None = None
    nullable: bool = True
    only: str | None = None  # "sent": validated, then sealed, not kept; "lake": made to keep

    def __post_init__(self):
        if self.privacy not in CLASS_ORDER:
            raise ValueError(f"column {self.name}: class {self.privacy!r} is not one of "
                             f"{', '.join(CLASS_ORDER)}")


@dataclass(frozen=True)
class Table:
    columns: tuple[Col, ...]
    key: tuple[str, ...] = ()
    by_record: bool = True  # the lake adds `record_id`, after these columns


RECORD_ID = Col("record_id", TEXT, "the record: one user's connection to one bank, fetched "
                "and audited on its own", PUBLIC)
ENV = "the service's environment the row came from (production, production-sandbox)"
ISO = "ISO 4217 code of the account's currency (NGN)"

# a balance snapshot: balance_history's rows, and latest_balances' (the newest of each account)
SNAPSHOT = (
    Col("account_id", TEXT, "the account the snapshot is of (accounts.account_id)", PUBLIC),
    Col("fetched_at", UTC_MS, "when ledgerlake fetched the snapshot (UTC, to the "
        "millisecond)", PUBLIC, check=SINCE_1900),
    Col("available_balance", MONEY, "what the customer could spend then, naira (ledger "
        "balance less holds)", PUBLIC),
    Col("ledger_balance", MONEY, "the booked balance then, naira: the last posted line's "
        "running balance", PUBLIC),
    Col("currency", TEXT, ISO, PUBLIC, check=CURRENCY),
    Col("source", TEXT, "what caused the fetch: callback, periodic, schedule or manual",
        PUBLIC, check=one_of("callback", "periodic", "schedule", "manual"), nullable=False),
    Col("service_updated_at", UTC_MS, "when the service last updated the balance (UTC)",
        PUBLIC))

TABLES: dict[str, Table] = {
    "accounts": Table(key=("account_id",), columns=(
        Col("account_id", TEXT, "the service's id of the account", PUBLIC,
            check=matches(r"^[A-Za-z0-9_-]{1,64}$")),
        Col("nuban", TEXT, "the account number (NUBAN), 10 digits", PERSONAL,
            check=matches(r"^\d{10}$"), nullable=False),
        Col("name", TEXT, "the account holder's name as the bank shows it", PERSONAL),
        Col("type", TEXT, "the kind of account, e.g. Savings, Current", PUBLIC),
        Col("currency", TEXT, ISO, PUBLIC, check=CURRENCY, nullable=False),
        Col("bank_id", TEXT, "the service's id of the bank holding the account", PUBLIC),
        Col("customer_id", TEXT, "the service's id of the customer who owns the account",
            PUBLIC, nullable=False),
        Col("customer_name", TEXT, "the customer's name as the service knows it", PERSONAL),
        Col("balance_id", TEXT, "the service's id of the account's balance document", PUBLIC),
        Col("env", TEXT, ENV, PUBLIC),
        Col("created_at", UTC_MS, "when the service first saw the account (UTC)", PUBLIC,
            check=SINCE_1900),
        Col("last_updated", UTC_MS, "when the service last changed the account (UTC)", PUBLIC))),
    "balance_history": Table(key=("account_id", "fetched_at"), columns=SNAPSHOT),
    "balance_periodic": Table(key=("account_id", "date"), columns=(
        Col("account_id", TEXT, "the account (accounts.account_id)", PUBLIC),
        Col("date", DAY, "the day, as the service dates its periodic history", PUBLIC),
        Col("available_balance", MONEY, "available balance at the end of that day, naira",
            PUBLIC),
        Col("ledger_balance", MONEY, "ledger balance at the end of that day, naira", PUBLIC))),
    # the pages' columns (resources/wire.py builds them in this order)
    "transactions": Table(key=("transaction_id",), columns=(
        Col("transaction_id", TEXT, "the service's id of the transaction line", PUBLIC),
        Col("account_id", TEXT, "the account the line is on (accounts.account_id)", PUBLIC,
            nullable=False),
        Col("customer_id", TEXT, "the service's id of the account's customer", PUBLIC),
        Col("bank_id", TEXT, "the service's id of the bank", PUBLIC),
        Col("trans_date", UTC_MS, "the value date: when the money moved as the bank dates it "
            "(UTC)", PUBLIC, check=SINCE_1900, nullable=False),
        Col("cleared_date", UTC_MS, "when the line posted (UTC); null while it is pending",
            PUBLIC),
        Col("debit", MONEY, "money out, positive naira; null on a credit line", PUBLIC,
            check=at_least(0)),
        Col("credit", MONEY, "money in, positive naira; null on a debit line", PUBLIC,
            check=at_least(0)),
        Col("amount", MONEY, "the signed amount in naira: credit positive, debit negative "
            "(credit - debit, exactly)", PUBLIC, nullable=False),
        Col("balance", MONEY, "the running balance after the line, naira; null while the "
            "line is pending", PUBLIC),
        Col("currency", TEXT, ISO, PUBLIC, check=CURRENCY, nullable=False),
        # a narration may name a person or hold a phone or account number
        Col("narration", TEXT, "what the bank wrote on the line (the service's notes.desc), "
            "each run of 7 or more digits masked to its last 4 (`***4567`; the raw "
            "narration is sealed)", PERSONAL),
        Col("topics", TEXTS, "the service's tags of the line (notes.topics), e.g. income, "
            "airtime", PUBLIC),
        Col("ref", TEXT, "the bank's reference of the line", PUBLIC),
        Col("branch", TEXT, "the bank branch that posted the line", PUBLIC),
        Col("code", TEXT, "the bank's transaction code", PUBLIC),
        Col("env", TEXT, ENV, PUBLIC),
        Col("created_at", UTC_MS, "when the service first saw the line (UTC)", PUBLIC),
        Col("last_updated", UTC_MS, "when the service last changed the line (UTC)", PUBLIC),
        Col("narration_sealed", pa.binary(), "the raw narration, encrypted (AES-256-GCM), "
            "where masking changed it; `ledgerlake reveal` opens it. Not in the warehouse",
            SENSITIVE, only="lake"))),
    "income": Table(key=("customer_id",), columns=(
        Col("income_id", TEXT, "the service's id of the income estimate", PUBLIC),
        Col("customer_id", TEXT, "the customer the estimate is of", PUBLIC),
        Col("confidence", pa.float64(), "how sure the service is of the estimate, percent",
            PUBLIC, check=at_least(0, at_most=100)),
        Col("number_of_transactions", INT, "income-tagged posted credits the estimate counts",
            PUBLIC, check=at_least(0), nullable=False),
        Col("average_monthly_income", MONEY, "average income a month, naira", PUBLIC,
            check=at_least(0)),
        Col("last_year_income", MONEY, "income over the last year, naira", PUBLIC),
        Col("account_age_months", INT, "months of history the estimate saw", PUBLIC),
        Col("number_of_streams", INT, "income streams found (rows of income_streams)", PUBLIC,
            check=at_least(0), nullable=False),
        Col("past_three_months_total", MONEY, "income over the past three months, naira", PUBLIC),
        Col("past_six_months_total", MONEY, "income over the past six months, naira", PUBLIC),
        Col("past_twelve_months_total", MONEY, "income over the past twelve months, naira",
            PUBLIC),
        Col("past_twelve_months_average", MONEY, "average income a month over the past "
            "twelve months, naira", PUBLIC),
        Col("created_at", UTC_MS, "when the service made the estimate (UTC)", PUBLIC))),
    "income_streams": Table(key=("stream_id",), columns=(
        Col("stream_id", TEXT, "the service's id of the income stream", PUBLIC),
        Col("account_ids", TEXTS, "the accounts the stream's credits arrive on", PUBLIC),
        Col("type", TEXT, "the kind of stream, e.g. Salary, Recurrent Credit", PUBLIC),
        Col("monthly_amount", MONEY, "what the stream pays a month, naira", PUBLIC,
            check=at_least(0), nullable=False),
        Col("number_of_transactions", INT, "the stream's credits among the record's "
            "transactions", PUBLIC, check=at_least(0), nullable=False),
        # an employer, or a person paying
        Col("source_name", TEXT, "who pays: the employer or payer as the narrations name it",
            PERSONAL),
        Col("source_type", TEXT, "the kind of payer, as the service classes it", PUBLIC),
        Col("first_date", DAY, "the day of the stream's first credit", PUBLIC),
        Col("last_date", DAY, "the day of the stream's latest credit", PUBLIC),
        Col("total_count", INT, "credits the stream has had in all", PUBLIC),
        Col("primary_stream", pa.bool_(), "whether this is the customer's main income stream",
            PUBLIC))),
    # validated as the service sends it; the lake keeps the sensitive columns protected
    # (resources/privacy.py): what each column holds there is what is described
    "identity": Table(key=("customer_id",), columns=(
        Col("customer_id", TEXT, "the service's id of the customer", PUBLIC),
        Col("bvn", TEXT, "Bank Verification Number, masked to its last 4 digits (sensitive: "
            "the number is sealed)", SENSITIVE, check=matches(r"^\d{11}$")),
        Col("bvn_hash", TEXT, "keyed hash (HMAC-SHA256) of the BVN: equal for equal BVNs, to "
            "join on; the number cannot be read from it", PERSONAL, only="lake"),
        Col("nin", TEXT, "National Identification Number, masked to its last 4 digits "
            "(sensitive: the number is sealed)", SENSITIVE),
        Col("nin_hash", TEXT, "keyed hash (HMAC-SHA256) of the NIN, to join on", PERSONAL,
            only="lake"),
        Col("firstname", TEXT, "first name", PERSONAL),
        Col("middlename", TEXT, "middle name", PERSONAL),
        Col("lastname", TEXT, "last name", PERSONAL),
        Col("fullname", TEXT, "full name as the bank holds it", PERSONAL),
        Col("dob", DAY, "date of birth (sealed; the lake keeps birth_year)", SENSITIVE,
            check=SINCE_1900, only="sent"),
        Col("birth_year", pa.int32(), "year of birth (the date itself is sealed)", PERSONAL,
            only="lake"),
        Col("gender", TEXT, "gender as the bank holds it", PERSONAL),
        Col("marital_status", TEXT, "marital status as the bank holds it", PERSONAL),
        Col("nationality", TEXT, "nationality", PERSONAL),
        Col("state_of_origin", TEXT, "Nigerian state of origin", PERSONAL),
        Col("state_of_residence", TEXT, "Nigerian state of residence", PERSONAL),
        Col("lga_of_origin", TEXT, "local government area of origin", PERSONAL),
        Col("lga_of_residence", TEXT, "local government area of residence", PERSONAL),
        Col("phones", TEXTS, "phone numbers, masked to their last 4 digits (sensitive: "
            "sealed)", SENSITIVE),
        Col("emails", TEXTS, "email addresses, masked to a***@domain (sensitive: sealed)",
            SENSITIVE),
        Col("addresses", TEXTS, "postal addresses, masked to their last part (sensitive: "
            "sealed)", SENSITIVE),
        Col("aliases", TEXTS, "other names the customer is known by", PERSONAL),
        Col("sealed", pa.binary(), "the raw BVN, NIN, date of birth, phones, emails and "
            "addresses, encrypted (AES-256-GCM); `ledgerlake reveal` opens it with "
            "LEDGERLAKE_PII_KEY. Not in the warehouse", SENSITIVE, only="lake"))),
    "payments": Table(key=("payment_id",), columns=(
        Col("payment_id", TEXT, "the service's id of the payment", PUBLIC),
        Col("callback_type", TEXT, "PAYMENT (one-off) or PAYMENT_RECURRING (made by a "
            "schedule)", PUBLIC, check=one_of("PAYMENT", "PAYMENT_RECURRING"), nullable=False),
        Col("status", TEXT, "the payment's latest status, e.g. success, failed, pending", PUBLIC,
            nullable=False),
        Col("amount", MONEY, "the amount paid, naira (the service sends kobo)", PUBLIC,
            check=at_least(0), nullable=False),
        Col("fee", MONEY, "the fee charged, naira (the service sends kobo)", PUBLIC,
            check=at_least(0)),
        Col("currency", TEXT, ISO, PUBLIC, check=CURRENCY),
        Col("ref", TEXT, "the payment's reference", PUBLIC),
        # account numbers: the inbox keeps them masked (resources/inbox/callbacks.py)
        Col("debit_account", TEXT, "the account paid from, its last 4 digits", PERSONAL),
        Col("credit_account", TEXT, "the account paid to, its last 4 digits", PERSONAL),
        Col("source", TEXT, "how the payment was started, e.g. link", PUBLIC),
        Col("interbank_response_code", TEXT, "the interbank network's response code", PUBLIC),
        Col("bank_response_code", TEXT, "the bank's response code", PUBLIC),
        Col("bank_response_message", TEXT, "the bank's response message", PUBLIC),
        Col("schedule_interval", TEXT, "a recurring payment's interval, e.g. monthly", PUBLIC),
        Col("created_at", UTC_MS, "when the payment was made (UTC)", PUBLIC),
        Col("last_updated", UTC_MS, "when the payment last changed (UTC)", PUBLIC))),
    # derived from transactions and balance_periodic by the warehouse's build, for the records
    # whose rows moved (assets/derived.py, assets/sql/derived/daily_balances.sql)
    "daily_balances": Table(key=("account_id", "date"), columns=(
        Col("account_id", TEXT, "the account (accounts.account_id)", PUBLIC, nullable=False),
        Col("date", DAY, "the customer's day (LEDGERLAKE_TIMEZONE, Africa/Lagos by default)",
            PUBLIC),
        Col("balance", MONEY, "the ledger balance at the end of the day, naira: the running "
            "balance of the day's last posted line, else the service's periodic figure, else "
            "carried forward", PUBLIC),
        Col("available_balance", MONEY, "the available balance at the end of the day, naira, "
            "from the service's periodic history (null on days it has none)", PUBLIC),
        Col("source", TEXT, "where the balance comes from: transactions or periodic", PUBLIC,
            check=one_of("transactions", "periodic"), nullable=False),
        Col("carried_forward", pa.bool_(), "true on a day with neither a posted line nor a "
            "periodic figure: the last known balance before it", PUBLIC, nullable=False))),
    # derived from balance_history likewise (assets/sql/derived/latest_balances.sql)
    "latest_balances": Table(key=("account_id",), columns=SNAPSHOT),
    # derived from transactions likewise (assets/sql/derived/monthly_cashflow.sql)
    "monthly_cashflow": Table(key=("account_id", "month"), columns=(
        Col("account_id", TEXT, "the account (accounts.account_id)", PUBLIC, nullable=False),
        Col("month", DAY, "the month's first day, in the customer's time zone, by value date",
            PUBLIC),
        Col("currency", TEXT, ISO, PUBLIC, check=CURRENCY),
        Col("transactions", INT, "posted lines in the month", PUBLIC, check=at_least(1),
            nullable=False),
        Col("inflow", MONEY, "sum of the month's credits, naira (exact)", PUBLIC,
            check=at_least(0), nullable=False),
        Col("outflow", MONEY, "sum of the month's debits, positive naira (exact)", PUBLIC,
            check=at_least(0), nullable=False),
        Col("net", MONEY, "inflow - outflow, naira", PUBLIC, nullable=False))),
    # rebuilt whole from the inbox (assets/record_status.py; not validated: the inbox is ours)
    "records": Table(by_record=False, columns=(
        RECORD_ID,
        Col("status", TEXT, "the connection: connected, disconnected or reauth_required",
            PUBLIC),
        Col("status_at", UTC_MS, "when the connection took that status (UTC)", PUBLIC),
        Col("last_method", TEXT, "the method of the last callback received, e.g. BALANCE",
            PUBLIC),
        Col("last_code", TEXT, "the code of the last callback received, e.g. "
            "BALANCE_SUCCESS", PUBLIC),
        Col("last_callback_at", UTC_MS, "when the last callback came (UTC)", PUBLIC),
        *(c for p in ("auth", "identity", "accounts", "balance", "transactions", "income",
                      "payment") for c in (
            Col(f"{p}_code", TEXT, f"code of the last {p} callback", PUBLIC),
            Col(f"{p}_at", UTC_MS, f"when the last {p} callback came (UTC)", PUBLIC))))),
    # each record's landing of a product, appended by the run that made it: what Dagster
    # hears of a whole batch, record by record (`ledgerlake status RECORD` reads the latest)
    "landings": Table(columns=(
        Col("product", TEXT, "the asset that fetched it: accounts, balances, transactions, "
            "income, identity or payments", PUBLIC, nullable=False),
        Col("run_id", TEXT, "the Dagster run that landed it", PUBLIC, nullable=False),
        Col("landed_at", UTC_MS, "when the run wrote its outcome (UTC)", PUBLIC,
            nullable=False),
        Col("outcome", TEXT, "landed (published), held (a blocking check failed: the "
            "previous rows stay in view) or failed (nothing written)", PUBLIC,
            check=one_of("landed", "held", "failed"), nullable=False),
        Col("row_count", INT, "rows of the record the landing published (or would have)",
            PUBLIC),
        Col("fetched_rows", INT, "rows fetched from the service (transactions: the pull's)",
            PUBLIC),
        Col("pull", TEXT, "how transactions were pulled: full history, or a window from a "
            "date", PUBLIC),
        Col("lake_table", TEXT, "the lake table written", PUBLIC),
        Col("lake_version", INT, "the table's version the commit made", PUBLIC),
        Col("error", TEXT, "why nothing was written, for a failed landing", PUBLIC))),
    # each check's verdict on each record a run landed; the problems name what is wrong
    "checks": Table(columns=(
        Col("product", TEXT, "the asset the check is of", PUBLIC, nullable=False),
        Col("check_name", TEXT, "the check, as the Dagster UI names it", PUBLIC,
            nullable=False),
        Col("run_id", TEXT, "the Dagster run that evaluated it", PUBLIC, nullable=False),
        Col("evaluated_at", UTC_MS, "when (UTC)", PUBLIC, nullable=False),
        Col("passed", pa.bool_(), "whether the record passed", PUBLIC, nullable=False),
        Col("blocking", pa.bool_(), "whether a failure holds the record's new rows back",
            PUBLIC, nullable=False),
        Col("problem_count", INT, "how many problems it found", PUBLIC),
        Col("problems", TEXT, "the first problems, as JSON: the account, line and figures "
            "that do not add up", PUBLIC))),
    # what `ledgerlake forget` erased (pipeline/forget.py): ids and counts, nothing personal
    "erasures": Table(by_record=False, columns=(
        Col("erasure_id", TEXT, "one pass of `ledgerlake forget`", PUBLIC),
        Col("requested_at", UTC_US, "when the pass started (UTC)", PUBLIC),
        Col("finished_at", UTC_US, "when the pass had erased every "
            "table (UTC; the warehouse is rebuilt next); null on the rows written first, "
            "naming the records it was about to erase", PUBLIC),
        Col("subject", TEXT, "what was asked to be forgotten: customer or record", PUBLIC),
        Col("subject_id", TEXT, "the service's id of that customer or record", PUBLIC),
        Col("record_id", TEXT, "a record erased (null when the customer had none left)",
            PUBLIC),
        Col("lake_table", TEXT, "the lake table the counts are of, or `inbox` (null on "
            "the first rows)", PUBLIC),
        Col("rows_deleted", INT, "rows the pass deleted from the table (on the first "
            "record's row of the pass; 0 on the others)", PUBLIC),
        Col("files_purged", INT, "data files of older versions the pass removed because "
            "they held the rows", PUBLIC),
        Col("lake_version", INT, "the table's version the pass's delete made (on the "
            "first record's row): time travel to an older one meets the files it purged",
            PUBLIC),
        Col("reason", TEXT, "why: request, disconnect, or what the operator wrote", PUBLIC))),
    # who opened sealed values (pipeline/reveal.py), written before they are shown
    "reveals": Table(by_record=False, columns=(
        Col("revealed_at", UTC_US, "when `ledgerlake reveal` opened them (UTC)", PUBLIC),
        Col("revealed_by", TEXT, "who asked: the operating-system user that ran it", PUBLIC),
        Col("subject", TEXT, "what was asked for: customer or record", PUBLIC),
        Col("subject_id", TEXT, "the service's id of that customer or record", PUBLIC),
        Col("record_id", TEXT, "a record whose sealed values were opened", PUBLIC),
        Col("opened", TEXTS, "the sealed columns opened, e.g. bvn, phones", PUBLIC),
        Col("rows", INT, "the record's rows whose values were opened", PUBLIC))),
}


def _declared(table: str) -> Table:
    if table not in TABLES:
        raise ValueError(f"no lake table {table!r}: declare it in resources/tables.py")
    return TABLES[table]


def columns(table: str) -> dict[str, Col]:
    """The table's columns in the lake, by name, `record_id` last where the lake adds it."""
    declared = _declared(table)
    kept = {c.name: c for c in declared.columns if c.only != "sent"}
    return kept | ({"record_id": RECORD_ID} if declared.by_record else {})


def schema(table: str, *, sent: bool = False) -> pa.Schema:
    """The Arrow schema an asset writes the table in (the lake adds `record_id`); `sent`: as
    the service sends it, before protection (identity's)."""
    return pa.schema([(c.name, c.type) for c in _declared(table).columns
                      if c.only != ("lake" if sent else "sent")])


def lake_schema(table: str) -> pa.Schema:
    """The Arrow schema of every data file of the table in the lake, whatever wrote it (an
    append, a replace, an erasure, a compaction): its columns as the lake keeps them, each
    in the one Arrow type Delta stores it as (timestamps in microseconds, a list's item
    `element`), `record_id` last and never null where the lake adds it."""
    fields = [pa.field(c.name, _as_stored(c.type)) for c in columns(table).values()]
    if _declared(table).by_record:
        fields[-1] = fields[-1].with_nullable(False)
    return pa.schema(fields)


def _as_stored(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_list(t):
        return pa.list_(pa.field("element", _as_stored(t.value_type)))
    return t
