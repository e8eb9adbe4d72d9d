"""Each reconciliation rule fails on data that breaks it, and names what is wrong."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from assets.checks import (
    accounts_belong_to_record,
    chain_breaks,
    has_topic,
    income_matches_transactions,
    last_running_balances,
    ledger_mismatches,
)
from resources.wire import MONEY

T0 = dt.datetime(2026, 3, 1, 9, tzinfo=dt.UTC)


def lines(*rows) -> pa.Table:
    """rows: (account, id, minutes after T0 or None when pending, amount, balance or None)."""
    return pa.table({
        "account_id": [r[0] for r in rows],
        "transaction_id": [r[1] for r in rows],
        "cleared_date": pa.array([None if r[2] is None else T0 + dt.timedelta(minutes=r[2])
                                  for r in rows], pa.timestamp("ms", tz="UTC")),
        "amount": pa.array([Decimal(r[3]) for r in rows], MONEY),
        "balance": pa.array([None if r[4] is None else Decimal(r[4]) for r in rows], MONEY),
    })


GOOD = lines(("a", "a1", 0, "100.00", "100.00"), ("a", "a2", 5, "-30.50", "69.50"),
             ("a", "a3", 9, "0.01", "69.51"),
             ("b", "b1", 1, "10.00", "510.00"), ("b", "b2", 2, "-510.00", "0.00"))


def test_a_whole_chain_passes():
    assert chain_breaks("r", GOOD) == []
    assert last_running_balances(GOOD) == {"a": 6951, "b": 0}


def test_a_chain_broken_by_one_kobo_in_the_middle_names_the_line():
    bad = lines(("a", "a1", 0, "100.00", "100.00"), ("a", "a2", 5, "-30.50", "69.51"),
                ("a", "a3", 9, "0.01", "69.52"), ("a", "a4", 10, "1.00", "70.52"))
    (problem,) = chain_breaks("r", bad)
    assert problem == {"record": "r", "account": "a", "transaction_id": "a2",
                       "cleared_date": str(T0 + dt.timedelta(minutes=5)),
                       "previous_balance": "100.00", "amount": "-30.50", "balance": "69.51",
                       "expected_balance": "69.50",
                       "problem": "running balance does not follow from the previous line"}


def test_a_missing_line_breaks_the_chain_at_the_next_one():
    """A line posted back-dated and not pulled: the next line's balance includes it."""
    bad = lines(("a", "a1", 0, "100.00", "100.00"), ("a", "a3", 9, "5.00", "125.00"))
    (problem,) = chain_breaks("r", bad)
    assert problem["transaction_id"] == "a3" and problem["expected_balance"] == "105.00"


def test_the_chain_follows_posting_order_not_the_table_order():
    shuffled = GOOD.take([4, 2, 0, 3, 1])
    assert chain_breaks("r", shuffled) == []
    # a line posted back-dated sits by when it cleared, not by its value date
    late = lines(("a", "a1", 0, "100.00", "100.00"), ("a", "a9", 60, "-1.00", "98.00"),
                 ("a", "a2", 30, "-1.00", "99.00"))
    assert chain_breaks("r", late) == []


def test_pending_lines_are_outside_the_chain_and_accounts_do_not_leak_into_each_other():
    with_pending = lines(("a", "a1", 0, "100.00", "100.00"), ("a", "p1", None, "-9.00", None),
                         ("a", "a2", 5, "-30.50", "69.50"))
    assert chain_breaks("r", with_pending) == []
    assert last_running_balances(with_pending) == {"a": 6950}
    # b's first line does not follow a's last: a new account starts a new chain
    two = lines(("a", "a1", 0, "1.00", "1.00"), ("b", "b1", 1, "1.00", "900.00"))
    assert chain_breaks("r", two) == []


def test_only_the_first_break_of_each_account_is_named():
    bad = lines(("a", "a1", 0, "1.00", "1.00"), ("a", "a2", 1, "1.00", "5.00"),
                ("a", "a3", 2, "1.00", "9.00"), ("b", "b1", 0, "1.00", "1.00"),
                ("b", "b2", 1, "1.00", "3.00"))
    assert [(p["account"], p["transaction_id"]) for p in chain_breaks("r", bad)] == [
        ("a", "a2"), ("b", "b2")]


def test_short_and_empty_tables_have_nothing_to_break():
    assert chain_breaks("r", GOOD.slice(0, 1)) == []
    assert chain_breaks("r", GOOD.slice(0, 0)) == []
    assert last_running_balances(GOOD.slice(0, 0)) == {}


def test_the_last_running_balance_must_be_the_ledger_to_the_kobo():
    service = [{"account": "a", "ledger_balance": 69.51}, {"account": "b", "ledger_balance": 0},
               {"account": "c", "ledger_balance": 5.0}]  # c has no lines: nothing to compare
    assert ledger_mismatches("r", GOOD, service) == []
    off = [{"account": "a", "ledger_balance": 69.52}, {"account": "b", "ledger_balance": None}]
    assert ledger_mismatches("r", GOOD, off) == [
        {"record": "r", "account": "a", "running_balance": "69.51", "ledger_balance": "69.52",
         "problem": "last running balance differs from the ledger balance"},
        {"record": "r", "account": "b", "running_balance": "0.00", "ledger_balance": None,
         "problem": "last running balance differs from the ledger balance"}]
    assert ledger_mismatches("r", GOOD.slice(0, 0), off) == []
    # a ledger figure with a third decimal is no figure at all
    (odd,) = ledger_mismatches("r", GOOD, [{"account": "a", "ledger_balance": 69.505}])
    assert odd["ledger_balance"] is None


def income_parts(counts: dict[str, int], claimed: int):
    summary = pa.table({"number_of_transactions": [claimed]})
    streams = pa.table({"account_ids": [[a] for a in counts],
                        "number_of_transactions": list(counts.values())})
    return summary, streams


def tagged_lines(per_account: dict[str, int], extra: list | None = None) -> pa.Table:
    rows = []
    for account, n in per_account.items():
        rows += [(account, ["income", "salary"], "500.00", "1.00")] * n
    rows += extra or []
    return pa.table({
        "account_id": [r[0] for r in rows],
        "transaction_id": [f"t{i}" for i in range(len(rows))],
        "topics": pa.array([r[1] for r in rows], pa.list_(pa.string())),
        "credit": pa.array([None if r[2] is None else Decimal(r[2]) for r in rows], MONEY),
        "balance": pa.array([None if r[3] is None else Decimal(r[3]) for r in rows], MONEY),
    })


def test_income_matches_the_income_tagged_posted_credits():
    summary, streams = income_parts({"a": 3, "b": 2}, 5)
    noise = [("a", ["shopping"], "9.00", "1.00"),          # not income
             ("a", ["income"], None, "1.00"),              # a debit tagged income
             ("a", ["income"], "7.00", None),              # pending: not posted yet
             ("b", None, "1.00", "1.00")]                  # no topics at all
    assert income_matches_transactions("r", summary, streams,
                                       tagged_lines({"a": 3, "b": 2}, noise)) == []


def test_income_that_counts_other_credits_fails_and_says_where():
    summary, streams = income_parts({"a": 3, "b": 2}, 5)
    problems = income_matches_transactions("r", summary, streams, tagged_lines({"a": 3, "b": 1}))
    assert problems == [
        {"record": "r", "income_transactions": 5, "income_tagged_credits": 4,
         "problem": "income counts another number of transactions"},
        {"record": "r", "account": "b", "stream_transactions": 2, "income_tagged_credits": 1,
         "problem": "an account's income streams count other credits"}]
    # an account with income credits but no stream is named too
    summary, streams = income_parts({"a": 3}, 4)
    problems = income_matches_transactions("r", summary, streams, tagged_lines({"a": 3, "c": 1}))
    assert [(p["account"], p["stream_transactions"]) for p in problems] == [("c", 0)]


def test_has_topic_reads_each_row_of_a_list_column():
    topics = pa.chunked_array([pa.array([["a", "income"], None, [], ["income"]],
                                        pa.list_(pa.string())), pa.array([["x"]],
                                                                          pa.list_(pa.string()))])
    assert has_topic(topics, "income").to_pylist() == [True, False, False, True, False]
    assert has_topic(pa.chunked_array([], pa.list_(pa.string())), "income").to_pylist() == []


@pytest.mark.parametrize("accounts,known,want", [
    ([{"_id": "a1", "record": "r"}, {"_id": "a2"}], {"r"}, []),
    ([{"_id": "a1", "record": "other"}], {"r"},
     [{"record": "r", "account": "a1", "names_record": "other",
       "problem": "account names another record"}]),
    ([], set(), [{"record": "r", "problem": "the inbox never heard of the record"}]),
])
def test_accounts_belong_to_their_record(accounts, known, want):
    assert accounts_belong_to_record("r", accounts, known) == want


def test_a_line_naming_no_account_is_in_no_chain():
    """Lines without an account are compared with no neighbour, not even one another."""
    orphans = lines(("a", "a1", 0, "1.00", "1.00"), (None, "x1", 1, "5.00", "50.00"),
                    ("a", "a2", 2, "1.00", "2.00"), (None, "x2", 3, "5.00", "90.00"))
    assert chain_breaks("r", orphans) == []


def test_a_single_posted_line_is_its_accounts_last_running_balance():
    one = lines(("a", "a1", 0, "5.00", "5.00"), ("a", "p1", None, "-1.00", None))
    assert last_running_balances(one) == {"a": 500}
    assert ledger_mismatches("r", one, [{"account": "a", "ledger_balance": 5.0}]) == []
    (off,) = ledger_mismatches("r", one, [{"account": "a", "ledger_balance": 6.0}])
    assert off["running_balance"] == "5.00" and off["ledger_balance"] == "6.00"


def test_an_account_the_lake_lacks_does_not_hide_the_ones_after_it():
    service = [{"account": "c", "ledger_balance": 5.0},  # no lines of c: skipped
               {"account": "a", "ledger_balance": 69.52}, {"account": "b", "ledger_balance": 0}]
    assert [(p["account"], p["ledger_balance"]) for p in ledger_mismatches("r", GOOD, service)] \
        == [("a", "69.52")]


def streams_of(*streams: tuple[list[str], int]) -> pa.Table:
    return pa.table({"account_ids": pa.array([s[0] for s in streams], pa.list_(pa.string())),
                     "number_of_transactions": pa.array([s[1] for s in streams], pa.int64())})


def test_an_accounts_income_is_the_sum_of_its_streams():
    """Two streams on one account (salary and rent, say) count together; a stream that counts
    no transaction on an account without income credits is no mismatch."""
    summary = pa.table({"number_of_transactions": [3]})
    streams = streams_of((["a"], 2), (["a"], 1), (["b"], 0))
    assert income_matches_transactions("r", summary, streams, tagged_lines({"a": 3})) == []
    # nothing claimed, nothing tagged
    none = pa.table({"number_of_transactions": pa.array([0], pa.int64())})
    quiet = tagged_lines({}, [("b", ["shopping"], "9.00", "1.00")])
    assert income_matches_transactions("r", none, streams_of((["b"], 0)), quiet) == []
    empty = pa.table({"number_of_transactions": pa.array([], pa.int64())})
    assert income_matches_transactions("r", empty, streams_of(), quiet) == []


def test_a_stream_counting_credits_an_account_does_not_have_fails():
    summary = pa.table({"number_of_transactions": [4]})
    streams = streams_of((["a"], 3), (["b"], 1))
    assert income_matches_transactions("r", summary, streams, tagged_lines({"a": 3})) == [
        {"record": "r", "income_transactions": 4, "income_tagged_credits": 3,
         "problem": "income counts another number of transactions"},
        {"record": "r", "account": "b", "stream_transactions": 1, "income_tagged_credits": 0,
         "problem": "an account's income streams count other credits"}]


def test_a_topic_list_holding_a_null_does_not_hold_the_topic():
    topics = pa.array([["income", None], [None], None, ["x", "income"]], pa.list_(pa.string()))
    assert has_topic(topics, "income").to_pylist() == [True, False, False, True]
