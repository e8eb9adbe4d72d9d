"""The daily balance charts: the days are the daily_balances view's, a run draws them only
when it is small, and a chart that fails never fails a landing."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from assets import charts
from assets.balances import PERIODIC
from assets.publish import Landing
from assets.warehouse import publish
from resources.config import Tuning
from resources.lake import Lake
from tests.pipeline.test_sql_cli import lines


def published(root, target, *args, **kw) -> list[str]:
    """The warehouse as its asset publishes it: the derived lake tables derived first."""
    return publish(root, target, *args, **kw)[0]


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Lake:
    lake = Lake(root=str(tmp_path_factory.mktemp("charts") / "lake"))
    for record, accounts in (("r1", ("a1", "a2")), ("r2", ("b1",))):
        lake.write("transactions", record, pa.concat_tables(
            [lines(a, 10 + 5 * i, 100.0 * (i + 1)) for i, a in enumerate(accounts)]))
    lake.write("balance_periodic", "r1", pa.Table.from_pylist([
        {"account_id": "a1", "date": dt.date(2025, 1, 25), "ledger_balance": Decimal("90"),
         "available_balance": Decimal("80")}], schema=PERIODIC), schema=PERIODIC)
    return lake


def test_the_days_are_the_views(lake, tmp_path):
    target = tmp_path / "w.duckdb"
    published(lake.root, target)
    with duckdb.connect(str(target), read_only=True) as con:
        view = con.execute("select record_id, account_id, date, balance, source, "
                           "carried_forward from daily_balances order by all").fetchall()
    ids = ["r1", "r2"]
    tables = {"transactions": lake.read_many("transactions", ids, lines("x", 1, 0).schema),
              "balance_periodic": lake.read_many("balance_periodic", ids, PERIODIC)}
    drawn = charts.daily_balances(tables, Tuning().timezone)
    mine = sorted((r, row["account_id"], row["date"], row["balance"], row["source"],
                   row["carried_forward"]) for r, t in drawn.items() for row in t.to_pylist())
    assert mine == view and len(view) > 30


class Log:
    def __init__(self):
        self.warnings = []

    def warning(self, msg, *args):
        self.warnings.append(msg % args)


class Context:
    def __init__(self):
        self.log = Log()


def landed(*records: str) -> list[Landing]:
    return [Landing(r, published=True, number=i) for i, r in enumerate(records, 1)]


def test_a_small_run_gets_a_chart_per_record_a_large_one_says_where(lake):
    """A batch of at most CHART_RECORDS records is drawn, a chart per published record with
    rows, in one Markdown value of the batch's materialization; a larger one says how to draw
    any of its records, by number."""
    few = [*landed("r1", "r2"), Landing("r3", error="ApiError: down", number=3)]
    text = charts.chart_metadata(Context(), lake, few, Tuning())["daily_balance"].value
    drawn = re.findall(r"!\[daily balance of record #(\d+)\]\(data:image/png;base64,", text)
    assert drawn == ["1", "2"]  # by their numbers; not the record that failed
    assert text.count("data:image/png;") == 2
    many = landed("r1", "r2", *[f"n{i}" for i in range(Tuning().chart_records)])
    told = charts.chart_metadata(Context(), lake, many, Tuning())["daily_balance"].value
    assert f"{len(many)} records landed" in told and "`ledgerlake report '#1'`" in told
    assert "r1" not in told and "data:image" not in told
    assert charts.chart_metadata(Context(), lake, landed("n1"), Tuning()) == {}  # nothing to draw
    # the limit is the one handed in (LEDGERLAKE_CHART_RECORDS, as the definitions read it)
    never = charts.chart_metadata(Context(), lake, landed("r1"), Tuning(chart_records=0))
    assert "1 records landed, more than LEDGERLAKE_CHART_RECORDS (0)" in \
        never["daily_balance"].value


def test_a_chart_that_fails_is_a_warning_not_a_failed_landing(lake):
    class Broken(Lake):
        def read_many(self, *a, **kw):
            raise OSError("the store went away")

    ctx, landings = Context(), landed("r1")
    told = charts.chart_metadata(ctx, Broken(root=lake.root), landings, Tuning())["daily_balance"]
    assert told.value == "No chart this run: OSError (the run's log says more)."
    assert landings[0].published and landings[0].error is None
    assert ctx.log.warnings == ["no balance chart this run: OSError: the store went away"]


def test_a_summary_chart_over_its_budget_is_said_not_waited_for(lake, tmp_path, monkeypatch):
    """The views' summary charts read every row: over a lake too big for the budget, the
    build says so instead of spending minutes on a picture."""
    target = tmp_path / "w.duckdb"
    published(lake.root, target)
    drawn = charts.summary_chart(Context(), target, "monthly_cashflow")["summary"].value
    assert "\n\n![monthly_cashflow of every record](data:image/png;base64," in drawn
    # the daily chart says which days it covers: the view's last 92, not all of them
    daily = charts.summary_chart(Context(), target, "daily_balances")["summary"].value
    caption = daily.split("\n\n")[0]
    assert re.fullmatch(r"Sum of every account's balance, by day: the last 92 days of the "
                        r"view, \d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d\.", caption), caption
    monkeypatch.setitem(charts.SUMMARIES, "monthly_cashflow",
                        "select count(*) from range(100000000000)")  # minutes of work
    ctx = Context()
    told = charts.summary_chart(ctx, target, "monthly_cashflow", budget_s=0.5)
    assert told["summary"].value == "No chart this build: its query took more than 0.5 s."
    assert ctx.log.warnings and charts.summary_chart(ctx, target, "payments") == {}
