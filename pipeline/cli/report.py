"""`ledgerlake report RECORD`: one record on one page, a single self-contained HTML file.

Its daily balance per account (charts by assets/charts.py), monthly inflow, outflow and net,
income streams, from the warehouse's views, and the latest verdict of each check with when
its products last landed, from the inbox. Styles and SVG charts are inline, so it opens with
no network; the file is written aside and renamed.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import duckdb

from pipeline.status import PRODUCTS
from resources.inbox import RECORD_ID


class ReportError(Exception):
    """Nothing to report: the message says why, and no file was written."""


@dataclass
class CheckResult:
    asset: str
    check: str
    passed: bool | None  # None: never evaluated for this record
    at: float | None = None
    detail: str = ""


@dataclass
class Landed:
    asset: str
    at: float | None  # when the product last landed


@dataclass
class Report:
    record: str
    accounts: list[dict]
    daily: dict[str, list[dict]]  # account_id -> its days
    monthly: list[dict]
    income: dict | None
    streams: list[dict]
    status: dict | None
    checks: list[CheckResult] | None = None  # None: no inbox to ask
    landed: list[Landed] = field(default_factory=list)
    timezone: str = "Africa/Lagos"


def check_record(record: str) -> str:
    if not isinstance(record, str) or not RECORD_ID.fullmatch(record):
        raise ReportError(f"a record id matches ^[A-Za-z0-9_-]{{1,64}}$, not {record!r:.70}")
    return record


def _rows(con: duckdb.DuckDBPyConnection, query: str, *args) -> list[dict]:
    cur = con.execute(query, list(args))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def gather(con: duckdb.DuckDBPyConnection, record: str) -> Report:
    """The record's rows from the warehouse's views; ReportError if it has none."""
    accounts = _rows(con, "select a.account_id, a.nuban, a.type, a.name, a.currency, "
                          "b.ledger_balance, b.available_balance, b.fetched_at "
                          "from accounts a left join balances b using (record_id, account_id) "
                          "where a.record_id = ? order by a.account_id", record)
    status = next(iter(_rows(con, "select status, status_at, last_callback_at from records "
                                  "where record_id = ?", record)), None)
    if not accounts and status is None:
        raise ReportError(f"record {record} is not in the warehouse (no accounts, no status): "
                          "see `ledgerlake status`")
    daily: dict[str, list[dict]] = {}
    for row in _rows(con, "select account_id, date, balance from daily_balances "
                          "where record_id = ? order by account_id, date", record):
        daily.setdefault(row["account_id"], []).append(row)
    monthly = _rows(con, "select month, sum(inflow) as inflow, sum(outflow) as outflow, "
                         "sum(net) as net, sum(transactions) as transactions "
                         "from monthly_cashflow where record_id = ? group by month "
                         "order by month", record)
    income = next(iter(_rows(con, "select average_monthly_income, confidence, "
                                  "number_of_streams from income_summary where record_id = ?",
                             record)), None)
    streams = _rows(con, "select type, source_name, monthly_amount, number_of_transactions, "
                         "first_date, last_date, primary_stream from income_streams "
                         "where record_id = ? order by primary_stream desc nulls last, "
                         "monthly_amount desc", record)
    return Report(record, accounts, daily, monthly, income, streams, status)


def add_landings(report: Report, inbox) -> None:
    """The latest verdict of every check on the record, and when each product landed (the
    record's state in the inbox)."""
    from pipeline.freshness import CHECK_NAME, MAX_AGE

    states = {s.product: s for s in inbox.landings([report.record])}
    report.checks = []
    now = dt.datetime.now(dt.UTC).timestamp()
    connected = (report.status or {}).get("status") in (None, "connected")
    for asset in PRODUCTS:
        state = states.get(asset)
        report.landed.append(Landed(asset, state and state.landed_at))
        if state is None:
            continue
        problems = state.detail.get("problems", [])
        for check, count in sorted(state.detail.get("checks", {}).items()):
            report.checks.append(CheckResult(
                asset, check, not count, state.at, "" if not count else
                f"{count} problems: " + "; ".join(p.get("problem", "") for p in problems)))
        if asset in ("balances", "transactions") and state.landed_at is not None:
            fresh = not connected or now - state.landed_at < MAX_AGE.total_seconds()
            report.checks.append(CheckResult(
                asset, CHECK_NAME, fresh, now,
                "" if fresh else f"last landed more than {MAX_AGE} ago"))


# -- the page ---------------------------------------------------------------------------------

STYLE = Path(__file__).with_name("report.css").read_text()  # inlined in each page


NUMERIC = ' class="n"'
TRANSACTIONS = "trans&shy;actions"  # a header that may break, on a phone
VERDICTS = {None: '<span class="none">not evaluated</span>',
            True: '<span class="pass">passed</span>', False: '<span class="fail">failed</span>'}


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _name(value) -> str:
    """An identifier (a check's or an asset's name) that may break after its underscores."""
    return _e(value).replace("_", "_<wbr>")


def _day(value) -> str:
    """A date or a month, never broken at its hyphens."""
    return f'<span class="nw">{_e(value)}</span>'


def money(value) -> str:
    if value is None:
        return ""
    q = Decimal(value).quantize(Decimal("0.01"))
    return f"{'-' if q < 0 else ''}₦{abs(q):,.2f}"


def _when(ts: float | dt.datetime | None) -> str:
    if ts is None:
        return ""
    when = ts if isinstance(ts, dt.datetime) else dt.datetime.fromtimestamp(ts, dt.UTC)
    return when.astimezone(dt.UTC).strftime('<span class="nw">%Y-%m-%d</span> %H:%M UTC')


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int] = frozenset()
           ) -> str:
    def cells(tag, values):
        return "".join(f"<{tag}{NUMERIC if i in numeric else ''}>{v}</{tag}>"
                       for i, v in enumerate(values))
    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    # in a box of its own: a table wider than a phone scrolls there, never the page
    return (f"<div class=\"table\"><table><thead><tr>{cells('th', head)}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>")


def _svg(raw: bytes) -> str:
    """matplotlib's SVG as an inline element (its XML prologue and doctype dropped)."""
    text = raw.decode()
    return text[text.index("<svg"):]


WIDE, NARROW = (9.0, 2.6), (4.6, 3.0)  # inches: a desktop's column, a phone's (390 px)


def _both(draw) -> str:
    """A chart drawn twice, for a wide screen and for a phone, the page's CSS showing the one
    that fits: scaled down to a phone, the wide one's axis text would be 5 px high."""
    return (f"<div class=\"wide\">{_svg(draw(WIDE))}</div>"
            f"<div class=\"narrow\">{_svg(draw(NARROW))}</div>")


def render(report: Report) -> str:
    from assets.charts import account_label

    labels = {a["account_id"]: account_label(a) for a in report.accounts}
    status = report.status or {}
    since = f" since {_when(status['status_at'])}" if status.get("status_at") else ""
    body = "\n".join([
        f"<h1>Record {_e(report.record)}</h1>",
        f"<p class=\"muted\">Connection: <b>{_e(status.get('status') or 'unknown')}</b>{since}; "
        f"last callback {_when(status.get('last_callback_at')) or 'unknown'}. Report made "
        f"{_when(dt.datetime.now(dt.UTC))}; days and months are {_e(report.timezone)}'s.</p>",
        "<h2>Accounts</h2>",
        _table(["account", "currency", "ledger balance", "available", "as of"], [
            [_e(labels[a["account_id"]]), _e(a["currency"]), money(a["ledger_balance"]),
             money(a["available_balance"]), _when(a["fetched_at"])] for a in report.accounts],
            {2, 3}),
        "<h2>Daily balance</h2>", *_daily(report.daily, labels),
        "<h2>Monthly cash flow</h2>", *_cashflow(report.monthly),
        "<h2>Income</h2>", *_income(report.income, report.streams),
        "<h2>Checks</h2>", *_checks(report)])
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>ledgerlake: record {_e(report.record)}</title>"
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def _daily(daily: dict[str, list[dict]], labels: dict[str, str]) -> list[str]:
    from assets.charts import draw

    if not daily:
        return ["<p class=\"muted\">No balance history landed yet.</p>"]
    parts = []
    for account, days in daily.items():
        label = labels.get(account, account)
        series = [(label, [d["date"] for d in days], [d["balance"] for d in days])]
        svg = _both(lambda size, series=series: draw(series, None, fmt="svg", size=size))
        parts.append(f"<figure class=\"chart\" data-account=\"{_e(account)}\">"
                     f"<figcaption>{_e(label)}: end-of-day balance</figcaption>{svg}</figure>")
    return parts


def _cashflow(monthly: list[dict]) -> list[str]:
    from assets.charts import draw_cashflow

    if not monthly:
        return ["<p class=\"muted\">No posted transactions yet.</p>"]
    columns = [[m[k] for m in monthly] for k in ("month", "inflow", "outflow", "net")]
    svg = _both(lambda size: draw_cashflow(*columns, size=size))
    return [f"<figure class=\"cashflow\"><figcaption>Inflow, outflow and net, all accounts"
            f"</figcaption>{svg}</figure>",
            _table(["month", "inflow", "outflow", "net", TRANSACTIONS], [
                [_day(m["month"].strftime("%Y-%m")), money(m["inflow"]), money(m["outflow"]),
                 money(m["net"]), _e(m["transactions"])] for m in monthly], {1, 2, 3, 4})]


def _income(income: dict | None, streams: list[dict]) -> list[str]:
    parts = []
    if income:
        n = income["number_of_streams"]
        parts.append(f"<p>Average monthly income <b>{money(income['average_monthly_income'])}"
                     f"</b> from {_e(n)} stream{'' if n == 1 else 's'} (confidence "
                     f"{_e(income['confidence'])}%).</p>")
    if streams:
        parts.append(_table(["stream", "source", "monthly", TRANSACTIONS, "seen"], [
            [_e(s["type"]) + (" (primary)" if s["primary_stream"] else ""),
             _e(s["source_name"]), money(s["monthly_amount"]), _e(s["number_of_transactions"]),
             f"{_day(s['first_date'])} to {_day(s['last_date'])}"] for s in streams], {2, 3}))
    elif not income:
        parts.append("<p class=\"muted\">No income landed yet.</p>")
    return parts


def _checks(report: Report) -> list[str]:
    if report.checks is None:
        return ["<p class=\"muted\">Unknown: no inbox to ask (set LEDGERLAKE_INBOX).</p>"]
    return [_table(["asset", "check", "result", "when", "detail"], [
                [_name(c.asset), _name(c.check), VERDICTS[c.passed], _when(c.at), _e(c.detail)]
                for c in report.checks]),
            _table(["product", "last landed"], [
                [_e(x.asset), _when(x.at) or "<span class=\"none\">never</span>"]
                for x in report.landed])]
