"""Rules a record's new rows must keep before they are published (write, audit, publish).

Each rule returns its problems, each a dict naming what is wrong (empty: the rule holds), so
the asset can decide whether to publish and show them in the Dagster UI. Money is compared
exactly, in kobo.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from resources.columns import kobo_of, money, naira

# a running balance is checked in posting order: when the line cleared, then its id (ids sort
# in posting order within an account; pending lines have neither cleared_date nor balance)
CHAIN_ORDER = [("account_id", "ascending"), ("cleared_date", "ascending"),
               ("transaction_id", "ascending")]


def posted_in_order(table: pa.Table) -> pa.Table:
    """The posted lines (with a running balance), per account in posting order."""
    posted = table.filter(pc.and_(pc.is_valid(table["balance"]),
                                  pc.is_valid(table["cleared_date"])))
    return posted.select(["account_id", "transaction_id", "cleared_date", "amount",
                          "balance"]).sort_by(CHAIN_ORDER)


def chain_breaks(record_id: str, table: pa.Table, lines: pa.Table | None = None) -> list[dict]:
    """Per account, the first posted line whose running balance is not the previous line's
    balance plus its own amount, to the kobo.

    A break means a line is missing before it (one posted back-dated, outside the last pull's
    window) or a figure is wrong; either way the record's rows do not add up.
    """
    lines = posted_in_order(table) if lines is None else lines
    if lines.num_rows < 2:
        return []
    accounts = lines["account_id"].combine_chunks()
    same = pc.equal(accounts.slice(1), accounts.slice(0, len(accounts) - 1))
    same = pc.fill_null(same, False).to_numpy(zero_copy_only=False)
    balance, amount = kobo_of(lines["balance"]), kobo_of(lines["amount"])
    expected = balance[:-1] + amount[1:]
    broken = np.flatnonzero(same & (expected != balance[1:])) + 1
    problems, seen = [], set()
    for i in broken.tolist():
        account = accounts[i].as_py()
        if account in seen:
            continue  # the first break names the fault; what follows it inherits it
        seen.add(account)
        problems.append({
            "record": record_id, "account": account,
            "transaction_id": lines["transaction_id"][i].as_py(),
            "cleared_date": str(lines["cleared_date"][i].as_py()),
            "previous_balance": naira(balance[i - 1]), "amount": naira(amount[i]),
            "balance": naira(balance[i]), "expected_balance": naira(expected[i - 1]),
            "problem": "running balance does not follow from the previous line"})
    return problems


def last_running_balances(table: pa.Table, lines: pa.Table | None = None) -> dict[str, int]:
    """Each account's running balance after its last posted line, in kobo."""
    lines = posted_in_order(table) if lines is None else lines
    if lines.num_rows == 0:
        return {}
    accounts = lines["account_id"].to_pylist()
    balance = kobo_of(lines["balance"]).tolist()
    return dict(zip(accounts, balance, strict=True))  # the last line of each account wins


def ledger_mismatches(record_id: str, table: pa.Table, balances: list[dict],
                      lines: pa.Table | None = None) -> list[dict]:
    """The last running balance of each account equals its ledger balance at the service
    (`/balance/get` items), to the kobo."""
    running = last_running_balances(table, lines)
    if not running:
        return []
    problems = []
    for item in balances:
        account = item.get("account")
        if account not in running:
            continue
        try:
            ledger = int(kobo_of(money([item.get("ledger_balance")]))[0])
            missing = item.get("ledger_balance") is None
        except ValueError:
            ledger, missing = None, True
        if missing or ledger != running[account]:
            problems.append({"record": record_id, "account": account,
                             "running_balance": naira(running[account]),
                             "ledger_balance": None if missing else naira(ledger),
                             "problem": "last running balance differs from the ledger balance"})
    return problems


def income_matches_transactions(record_id: str, income: pa.Table, streams: pa.Table,
                                transactions: pa.Table) -> list[dict]:
    """Income's stream counts equal the income-tagged posted credits among the transactions."""
    is_income = has_topic(transactions["topics"], "income")
    tagged = transactions.filter(pc.and_(pc.and_(is_income, pc.is_valid(transactions["credit"])),
                                         pc.is_valid(transactions["balance"])))
    problems = []
    claimed = int(pc.sum(income["number_of_transactions"]).as_py() or 0)
    if claimed != tagged.num_rows:
        problems.append({"record": record_id, "income_transactions": claimed,
                         "income_tagged_credits": tagged.num_rows,
                         "problem": "income counts another number of transactions"})
    per_account: dict[str, int] = {}
    for ids, n in zip(streams["account_ids"].to_pylist(),
                      streams["number_of_transactions"].to_pylist(), strict=True):
        for a in ids or []:
            per_account[a] = per_account.get(a, 0) + n
    seen = tagged.group_by("account_id").aggregate([("transaction_id", "count")])
    actual = dict(zip(seen["account_id"].to_pylist(), seen["transaction_id_count"].to_pylist(),
                      strict=True))
    for account in sorted(set(per_account) | set(actual)):
        if per_account.get(account, 0) != actual.get(account, 0):
            problems.append({"record": record_id, "account": account,
                             "stream_transactions": per_account.get(account, 0),
                             "income_tagged_credits": actual.get(account, 0),
                             "problem": "an account's income streams count other credits"})
    return problems


def has_topic(topics: pa.ChunkedArray | pa.Array, topic: str) -> pa.Array:
    """Per row: does its list of topics hold `topic`? (vectorized over the flat values)"""
    if isinstance(topics, pa.ChunkedArray):
        topics = topics.combine_chunks() if topics.num_chunks else pa.array(
            [], pa.list_(pa.string()))
    rows = pc.filter(pc.list_parent_indices(topics),
                     pc.fill_null(pc.equal(pc.list_flatten(topics), topic), False))
    return pc.is_in(pa.array(np.arange(len(topics))), value_set=rows)


def accounts_belong_to_record(record_id: str, accounts: list[dict],
                              known_records: set[str]) -> list[dict]:
    """Every account names its record, and the inbox knows that record (`known_records`)."""
    problems = []
    if record_id not in known_records:
        problems.append({"record": record_id, "problem": "the inbox never heard of the record"})
    for a in accounts:
        if a.get("record") not in (None, record_id):
            problems.append({"record": record_id, "account": a.get("_id"),
                             "names_record": a.get("record"),
                             "problem": "account names another record"})
    return problems
