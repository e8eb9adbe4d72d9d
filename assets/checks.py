"""Rules across tables, run as blocking asset checks after a product is written.

Each returns a list of problems (empty: the rule holds), so the asset can report them as
check metadata in the Dagster UI.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from resources.client import ConnectionClient

TOLERANCE = 0.005  # naira: half a kobo


def last_running_balances(table: pa.Table) -> dict[str, float]:
    """Each account's running balance after its last line (the table is in service order)."""
    if table.num_rows == 0:
        return {}
    last = (table.select(["account_id", "balance"])
            .group_by("account_id", use_threads=False).aggregate([("balance", "last")]))
    return dict(zip(last["account_id"].to_pylist(), last["balance_last"].to_pylist(),
                    strict=True))


def reconcile_running_balances(client: ConnectionClient, record_id: str,
                               table: pa.Table) -> list[dict]:
    """The last running balance of each account equals its ledger balance at the service."""
    running = last_running_balances(table)
    if not running:
        return []
    problems = []
    for item in client.balance(record_id):
        account = item.get("account")
        if account not in running:
            continue
        ledger = item.get("ledger_balance")
        if ledger is None or abs(running[account] - ledger) > TOLERANCE:
            problems.append({"record": record_id, "account": account,
                             "running_balance": running[account], "ledger_balance": ledger})
    return problems


def income_matches_transactions(record_id: str, income: pa.Table, streams: pa.Table,
                                transactions: pa.Table | None) -> list[dict]:
    """Income's stream counts equal the income-tagged credits among the transactions."""
    if transactions is None:
        return [{"record": record_id, "problem": "no transactions in the lake to compare"}]
    is_income = has_topic(transactions["topics"], "income")
    tagged = transactions.filter(pc.and_(is_income, pc.is_valid(transactions["credit"])))
    problems = []
    claimed = int(pc.sum(income["number_of_transactions"]).as_py() or 0)
    if claimed != tagged.num_rows:
        problems.append({"record": record_id, "income_transactions": claimed,
                         "income_tagged_credits": tagged.num_rows})
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
                             "income_tagged_credits": actual.get(account, 0)})
    return problems


def has_topic(topics: pa.ChunkedArray | pa.Array, topic: str) -> pa.Array:
    """Per row: does its list of topics hold `topic`? (vectorized over the flat values)"""
    if isinstance(topics, pa.ChunkedArray):
        topics = topics.combine_chunks()
    rows = pc.filter(pc.list_parent_indices(topics),
                     pc.fill_null(pc.equal(pc.list_flatten(topics), topic), False))
    return pc.is_in(pa.array(np.arange(len(topics))), value_set=rows)


def accounts_belong_to_record(record_id: str, accounts: list[dict],
                              known_records: set[str]) -> list[dict]:
    """Every account names its record, and that record is a known partition."""
    problems = []
    if record_id not in known_records:
        problems.append({"record": record_id, "problem": "record is not a known partition"})
    for a in accounts:
        if a.get("record") not in (None, record_id):
            problems.append({"record": record_id, "account": a.get("_id"),
                             "names_record": a.get("record")})
    return problems
