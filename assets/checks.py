"""Rules a record's new rows must keep before they are published (write, audit, publish).

Each rule returns its problems, each a dict naming what is wrong (empty: the rule holds), so
the asset can decide whether to publish and show them in the Dagster UI. Money is compared
exactly, in kobo.
"""

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from resources.wire import kobo_of, money, naira


@dataclass(frozen=True)
class Check:
    """A rule a product's records are held to, as the Dagster UI shows it."""
    name: str
    description: str
    blocking: bool = True  # a record that fails keeps its previous rows in view


# a running balance is checked in posting order: when the line cleared, then its id (ids sort
# in posting order within an account; pending lines have neither cleared_date nor balance)
CHAIN_ORDER = [("account_id", "ascending"), ("cleared_date", "ascending"),
               ("transaction_id", "ascending")]
CHAIN_COLUMNS = ["account_id", "transaction_id", "cleared_date", "amount", "balance"]
# how long before its value date (trans_date) a line may post, at most, for a record's lines
# to be checked as they come (RunningBalance): a bank's forward-valued lines post days early
LEEWAY = dt.timedelta(days=31)


class NotInPostingOrder(ValueError):
    """A line came after lines it precedes in posting order, more than LEEWAY behind the value
    dates read: the record's chain cannot be followed a piece at a time."""


def posted_in_order(table: pa.Table) -> pa.Table:
    """The posted lines (with a running balance), per account in posting order."""
    return _posted(table).sort_by(CHAIN_ORDER)


def _posted(table: pa.Table) -> pa.Table:
    posted = table.filter(pc.and_(pc.is_valid(table["balance"]),
                                  pc.is_valid(table["cleared_date"])))
    return posted.select(CHAIN_COLUMNS)


def _ms(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Timestamps as int64 milliseconds (none null)."""
    return pc.cast(values, pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_numpy()


class RunningBalance:
    """The running-balance rules over a record's lines fed a piece at a time: per account,
    in posting order, each posted line's balance is the previous one's plus its amount (the
    first break named), and the last one is what `ledger_mismatches` compares.

    The pieces come in the service's order, by value date (trans_date). A posted line is
    checked once no line still to come can post before it: every later line's value date is
    at least the latest one read, and a line posts at most LEEWAY before its value date. What
    is held between pieces is each account's last line checked and the lines not yet in
    place (LEEWAY's worth), whatever the record's size. A line that breaks that promise (one
    posted before a line already checked) raises NotInPostingOrder: the record is checked
    whole instead. Fed as one piece and finished, it is the rule on the whole record.

    `after`: each account's line just before the lines fed, as (cleared ms, transaction id,
    balance kobo), when the lines before them are known to hold already.
    """

    def __init__(self, record_id: str, leeway: dt.timedelta = LEEWAY,
                 after: dict[str | None, tuple[int, str, int]] | None = None) -> None:
        self.record_id = record_id
        self.leeway_ms = int(leeway.total_seconds() * 1000)
        self.last: dict[str | None, tuple[int, str, int]] = dict(after or {})
        self.latest: int | None = None  # the latest value date read, ms
        self.waiting: pa.Table | None = None  # posted lines read, not yet checked
        self.found: dict[str, dict] = {}  # account -> its first break

    @property
    def breaks(self) -> list[dict]:
        """The first break of each account, by account."""
        return [self.found[a] for a in sorted(self.found)]

    @property
    def running(self) -> dict[str | None, int]:
        """Each account's running balance after its last posted line checked, in kobo."""
        return {a: balance for a, (_, _, balance) in self.last.items()}

    def feed(self, rows: pa.Table) -> None:
        """Take the next piece of the record's lines (in the service's order: by value date)."""
        if rows.num_rows and (latest := pc.max(rows["trans_date"]).as_py()) is not None:
            ms = int(pa.scalar(latest, pa.timestamp("ms", tz="UTC")).cast(pa.int64()).as_py())
            self.latest = ms if self.latest is None else max(self.latest, ms)
        posted = _posted(rows)
        self._refuse_out_of_order(posted)
        waiting = posted if self.waiting is None else pa.concat_tables([self.waiting, posted])
        if self.latest is None or waiting.num_rows == 0:
            self.waiting = waiting
            return
        cut = pa.scalar(self.latest - self.leeway_ms, pa.int64()).cast(
            pa.timestamp("ms", tz="UTC"))
        placed = pc.less(pc.cast(waiting["cleared_date"], pa.timestamp("ms", tz="UTC")), cut)
        self.check(waiting.filter(placed).sort_by(CHAIN_ORDER))
        self.waiting = waiting.filter(pc.invert(placed))

    def finish(self) -> None:
        """No more lines: check those still waiting."""
        if self.waiting is not None:
            self.check(self.waiting.sort_by(CHAIN_ORDER))
        self.waiting = None

    def _refuse_out_of_order(self, posted: pa.Table) -> None:
        if not self.last or posted.num_rows == 0:
            return
        accounts = posted["account_id"]
        cleared = _ms(posted["cleared_date"])
        for account in pc.unique(accounts).to_pylist():
            if account not in self.last:
                continue
            of_account = (pc.is_null(accounts) if account is None
                    else pc.fill_null(pc.equal(accounts, account), False))
            mask = of_account.to_numpy(zero_copy_only=False)
            at, tid, _ = self.last[account]
            same = np.flatnonzero(mask & (cleared == at))
            ids = posted["transaction_id"].take(same).to_pylist() if len(same) else []
            if (mask & (cleared < at)).any() or any(i is None or i <= tid for i in ids):
                raise NotInPostingOrder(
                    f"record {self.record_id}: a line of account {account} posted before its "
                    f"line {tid}, already checked, came after it")

    def check(self, lines: pa.Table) -> None:
        """Check posted lines in posting order (`posted_in_order`), each account's first one
        against its last line checked before."""
        n = lines.num_rows
        if n == 0:
            return
        accounts = lines["account_id"].combine_chunks()
        same = np.zeros(n, dtype=bool)
        if n > 1:
            same[1:] = pc.fill_null(pc.equal(accounts.slice(1), accounts.slice(0, n - 1)),
                                    False).to_numpy(zero_copy_only=False)
        balance, amount = kobo_of(lines["balance"]), kobo_of(lines["amount"])
        previous = np.zeros(n, dtype=np.int64)
        previous[1:] = balance[:-1]
        follows = same.copy()
        starts = np.flatnonzero(~same)
        for i, account in zip(starts.tolist(), accounts.take(starts).to_pylist(), strict=True):
            if account is not None and account in self.last:
                previous[i], follows[i] = self.last[account][2], True
        for i in np.flatnonzero(follows & (previous + amount != balance)).tolist():
            account = accounts[i].as_py()
            if account in self.found:
                continue  # the first break names the fault; what follows it inherits it
            self.found[account] = {
                "record": self.record_id, "account": account,
                "transaction_id": lines["transaction_id"][i].as_py(),
                "cleared_date": str(lines["cleared_date"][i].as_py()),
                "previous_balance": naira(previous[i]), "amount": naira(amount[i]),
                "balance": naira(balance[i]), "expected_balance": naira(previous[i] + amount[i]),
                "problem": "running balance does not follow from the previous line"}
        ends = np.append(starts[1:] - 1, n - 1)
        cleared, ids = _ms(lines["cleared_date"]), lines["transaction_id"]
        for i, account in zip(ends.tolist(), accounts.take(ends).to_pylist(), strict=True):
            self.last[account] = (int(cleared[i]), ids[i].as_py(), int(balance[i]))


def chain_breaks(record_id: str, table: pa.Table, lines: pa.Table | None = None) -> list[dict]:
    """Per account, the first posted line whose running balance is not the previous line's
    balance plus its own amount, to the kobo.

    A break means a line is missing before it (one posted back-dated, outside the last pull's
    window) or a figure is wrong; either way the record's rows do not add up.
    """
    rule = RunningBalance(record_id)
    rule.check(posted_in_order(table) if lines is None else lines)
    return rule.breaks


def last_running_balances(table: pa.Table, lines: pa.Table | None = None) -> dict[str, int]:
    """Each account's running balance after its last posted line, in kobo."""
    rule = RunningBalance("")
    rule.check(posted_in_order(table) if lines is None else lines)
    return rule.running


def ledger_mismatches(record_id: str, table: pa.Table, balances: list[dict],
                      lines: pa.Table | None = None) -> list[dict]:
    """The last running balance of each account equals its ledger balance at the service
    (`/balance/get` items), to the kobo."""
    return ledger_problems(record_id, last_running_balances(table, lines), balances)


def ledger_problems(record_id: str, running: dict[str | None, int], balances: list[dict]
                    ) -> list[dict]:
    """`ledger_mismatches` of each account's last running balance (`RunningBalance.running`)."""
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
                                transactions: pa.Table | Mapping[str | None, int]
                                ) -> list[dict]:
    """Income's stream counts equal the income-tagged posted credits among the transactions
    (the record's lines, or their count per account: `income_credits`)."""
    actual = (income_credits(transactions) if isinstance(transactions, pa.Table)
              else dict(transactions))
    problems = []
    claimed = int(pc.sum(income["number_of_transactions"]).as_py() or 0)
    if claimed != sum(actual.values()):
        problems.append({"record": record_id, "income_transactions": claimed,
                         "income_tagged_credits": sum(actual.values()),
                         "problem": "income counts another number of transactions"})
    per_account: dict[str, int] = {}
    for ids, n in zip(streams["account_ids"].to_pylist(),
                      streams["number_of_transactions"].to_pylist(), strict=True):
        for a in ids or []:
            per_account[a] = per_account.get(a, 0) + n
    for account in sorted(set(per_account) | set(actual)):
        if per_account.get(account, 0) != actual.get(account, 0):
            problems.append({"record": record_id, "account": account,
                             "stream_transactions": per_account.get(account, 0),
                             "income_tagged_credits": actual.get(account, 0),
                             "problem": "an account's income streams count other credits"})
    return problems


def income_credits(lines: pa.Table | pa.RecordBatch,
                   counts: Mapping[str | None, int] | None = None) -> dict[str | None, int]:
    """Per account, the income-tagged posted credits among `lines` (account_id, topics,
    credit, balance), added to `counts`: a record's lines counted a batch at a time."""
    out = dict(counts or {})
    tagged = lines.filter(pc.and_(pc.and_(has_topic(lines["topics"], "income"),
                                          pc.is_valid(lines["credit"])),
                                  pc.is_valid(lines["balance"])))
    for item in pc.value_counts(tagged["account_id"]).to_pylist():
        out[item["values"]] = out.get(item["values"], 0) + item["counts"]
    return out


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
