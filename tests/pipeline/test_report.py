"""`ledgerlake report RECORD`: one self-contained HTML page per record, or one line saying why
not (and no file). The page in a browser, over a real ingest: tests/e2e/test_ui.py."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pyarrow as pa
import pytest

from assets.accounts import SCHEMA as ACCOUNTS
from assets.balances import PERIODIC
from assets.income import STREAMS, SUMMARY
from assets.record_status import SCHEMA as RECORDS
from assets.warehouse import publish
from pipeline.cli import main
from resources.inbox import HELD, LANDED_OK, LandingState, open_inbox
from resources.lake import Lake
from tests.conftest import connected
from tests.pipeline.test_sql_cli import lines


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A warehouse holding one record of two accounts, income and a status; no Dagster."""
    home = tmp_path_factory.mktemp("report-home")
    lake = Lake(root=str(home / "lake"))
    lake.write("accounts", "rec1", pa.Table.from_pylist([
        {"account_id": "acc1", "nuban": "0123456789", "type": "Savings", "currency": "NGN"},
        {"account_id": "acc2", "nuban": "9876543210", "type": "Current", "currency": "NGN"}],
        schema=ACCOUNTS), schema=ACCOUNTS)
    lake.write("transactions", "rec1", pa.concat_tables(
        [lines("acc1", 40, 1000.0), lines("acc2", 20, 50.0)]))
    lake.write("balance_periodic", "rec1", pa.Table.from_pylist([
        {"account_id": "acc1", "date": dt.date(2025, 1, 20), "ledger_balance": Decimal("900"),
         "available_balance": Decimal("880")}], schema=PERIODIC), schema=PERIODIC)
    lake.write("income", "rec1", pa.Table.from_pylist([
        {"customer_id": "c1", "average_monthly_income": Decimal("350000.00"),
         "confidence": 92.5, "number_of_streams": 1, "number_of_transactions": 3}],
        schema=SUMMARY), schema=SUMMARY)
    lake.write("income_streams", "rec1", pa.Table.from_pylist([
        {"stream_id": "s1", "type": "Salary", "source_name": "ACME LTD",
         "monthly_amount": Decimal("350000.00"), "number_of_transactions": 3,
         "primary_stream": True}], schema=STREAMS), schema=STREAMS)
    lake.write("records", None, pa.Table.from_pylist([
        {"record_id": "rec1", "status": "connected",
         "status_at": dt.datetime(2025, 1, 30, tzinfo=dt.UTC)}], schema=RECORDS),
        schema=RECORDS)
    publish(lake.root, home / "warehouse.duckdb")
    # each product's landing as the inbox keeps it: transactions landed and checked, income
    # held by its check (its previous rows in view), balances landed two days ago
    now = dt.datetime.now(dt.UTC).timestamp()
    with open_inbox(connected(home / "inbox.sqlite3", ["rec1"])) as inbox:
        inbox.save_landings([
            LandingState("rec1", "balances", LANDED_OK, "run-1", now - 2 * 86400),
            LandingState("rec1", "transactions", LANDED_OK, "run-2", now, row_count=60,
                         detail={"checks": {"running_balance_reconciles": 0}}),
            LandingState("rec1", "income", LANDED_OK, "run-1", now - 86400)])
        inbox.save_landings([LandingState(
            "rec1", "income", HELD, "run-2", now, detail={
                "checks": {"income_matches_transactions": 2},
                "problems": [{"problem": "stream s1 has no matching credit"},
                             {"problem": "stream s2 has no matching credit"}]})])
    return home


@pytest.fixture
def env(home, monkeypatch, tmp_path):
    monkeypatch.setenv("LEDGERLAKE_HOME", str(home))
    for var in ("DAGSTER_HOME", "LEDGERLAKE_WAREHOUSE", "LEDGERLAKE_LAKE", "LEDGERLAKE_INBOX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_one_page_with_a_chart_per_account(env, capsys):
    assert main(["report", "rec1"]) == 0
    page = (env / "report-rec1.html").read_text()
    assert f"wrote {env / 'report-rec1.html'}" in capsys.readouterr().err
    charts = re.findall(r'<figure class="chart" data-account="(\w+)"><figcaption>([^<:]+): '
                        r'end-of-day balance</figcaption><div class="wide"><svg', page)
    assert charts == [("acc1", "Savings ••6789"), ("acc2", "Current ••3210")]
    # each chart drawn twice, for a desktop and for a phone (the CSS shows one)
    assert page.count('<div class="wide"><svg') == page.count('<div class="narrow"><svg') == 3
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    # the rest read as text: dates unbreakable, names breakable after underscores
    page = re.sub(r'<span class="nw">([^<]*)</span>', r"\1", page).replace("<wbr>", "")
    # acc1's 40 and acc2's 20 daily lines from 30 January, summed per month
    months = re.findall(r"<tr><td>(2025-\d\d)</td><td class=\"n\">(₦[\d,.]+)</td>", page)
    assert [m for m, _ in months] == ["2025-01", "2025-02", "2025-03"]
    assert "ACME LTD" in page and "₦350,000.00" in page and "Salary (primary)" in page
    # each check's latest verdict on the record, and when its products landed, from the inbox
    checks = re.findall(r'<tr><td>(\w+)</td><td>(\w+)</td><td><span class="(\w+)">', page)
    assert checks == [("balances", "connected_records_fresh", "fail"),
                      ("transactions", "running_balance_reconciles", "pass"),
                      ("transactions", "connected_records_fresh", "pass"),
                      ("income", "income_matches_transactions", "fail")]
    assert "2 problems: stream s1 has no matching credit; stream s2" in page
    assert "last landed more than 1 day, 2:00:00 ago" in page  # balances: two days old
    landed = dict(re.findall(r"<tr><td>(\w+)</td><td>(<span class=\"none\">never|[^<]*)<", page))
    assert [a for a, when in landed.items() if "never" in when] == [
        "accounts", "identity", "payments"]
    assert landed["income"] < landed["transactions"]  # held since: its last landing stays


def test_a_record_named_by_its_number_as_dagster_names_it(env):
    assert main(["report", "#1"]) == 0
    assert "ACME LTD" in (env / "report-rec1.html").read_text()


def test_without_an_inbox_the_checks_are_unknown_never_guessed(env, capsys, monkeypatch):
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(env / "no-inbox.sqlite3"))
    assert main(["report", "rec1"]) == 0
    assert "the checks are unknown" in capsys.readouterr().err
    page = (env / "report-rec1.html").read_text()
    assert "Unknown: no inbox to ask" in page and "running_balance_reconciles" not in page


@pytest.mark.parametrize("args, message", [
    (["report", "../etc"], "a record id matches"),
    (["report", "nobody"], "record nobody is not in the warehouse"),
    (["report", "#99"], "no record has number #99"),
    (["report", "rec1", "--warehouse", "missing.duckdb"], "no warehouse at"),
    (["report", "rec1", "--output", "page.pdf"], "must end in .html"),
    (["report", "rec1", "--output", "no/such/folder/x.html"], "no folder"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(env, capsys, args, message):
    (env / "report-rec1.html").write_text("kept")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert sorted(p.name for p in env.iterdir()) == ["report-rec1.html"]
    assert (env / "report-rec1.html").read_text() == "kept"
