"""A record's daily balance, drawn: in the Dagster UI and in `ledgerlake report`.

The days are the `daily_balances` table's, computed by its own SQL (assets/derived.py) in an
in-memory DuckDB over the record's rows, so the chart and the table never disagree.
matplotlib draws them, imported on first use; a run draws one per record only when it lands
at most LEDGERLAKE_CHART_RECORDS (5; 0: never: resources/config.py, Tuning, which the
definitions hand to the asset), as a chart costs more than a record's landing
(docs/operations.md, "Charts and freshness").
"""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from dagster import MetadataValue

from resources.tables import schema

from .derived import derive

if TYPE_CHECKING:
    from resources.config import Tuning

    from .publish import Landing


# the lake's columns the daily_balances SQL reads, each table with the record's id
_READS = {"transactions": ["account_id", "cleared_date", "transaction_id", "balance"],
          "balance_periodic": ["account_id", "date", "available_balance", "ledger_balance"]}
ACCOUNTS, PERIODIC, TRANSACTIONS = map(schema, ["accounts", "balance_periodic", "transactions"])
_TYPES = {"transactions": TRANSACTIONS, "balance_periodic": PERIODIC}


def daily_balances(tables: Mapping[str, Mapping[str, pa.Table | Iterable[pa.RecordBatch]]],
                   zone: str) -> dict[str, pa.Table]:
    """Per record, its `daily_balances` rows (account_id, date, balance, ...) sorted by
    account and day in `zone`, from `tables`: lake table -> record -> that record's rows (a
    table, or its batches: streamed into DuckDB's aggregate, never held at once)."""
    sources = {table: _streamed(parts, columns, _TYPES[table])
               for table, columns in _READS.items() if (parts := tables.get(table))}
    daily = derive(sources, zone, "daily_balances")
    out = {}
    for record in sorted(set(daily["record_id"].to_pylist())):
        out[record] = daily.filter(pc.equal(daily["record_id"], record))
    return out


def _streamed(parts: Mapping[str, pa.Table | Iterable[pa.RecordBatch]], columns: list[str],
              types: pa.Schema) -> pa.RecordBatchReader:
    """The records' rows in `columns` with their `record_id`, one batch at a time."""
    want = pa.schema([types.field(c) for c in columns])
    schema = want.append(pa.field("record_id", pa.string()))

    def batches() -> Iterator[pa.RecordBatch]:
        for record, rows in parts.items():
            for batch in rows.to_batches() if isinstance(rows, pa.Table) else rows:
                if batch.num_rows:
                    cast = batch.select(columns).cast(want)
                    yield pa.RecordBatch.from_arrays(
                        [*cast.columns, pa.array([record] * batch.num_rows, pa.string())],
                        schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def account_label(account: Mapping) -> str:
    """`Savings ••6789`: the kind of account and its number's last digits, no more."""
    kind = account.get("type") or account.get("name") or "account"
    nuban = account.get("nuban") or ""
    return f"{kind} ••{nuban[-4:]}" if nuban else f"{kind} {account.get('account_id', '')}"


def _naira(value: float, _pos=None) -> str:
    sign, value = "-" if value < 0 else "", abs(value)
    if value >= 1e6:
        return f"{sign}₦{value / 1e6:,.3g}m"
    return f"{sign}₦{value:,.0f}"


def _figure(size: tuple[float, float]):
    """A matplotlib figure and its axes, without pyplot's global state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=size, dpi=80)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.yaxis.set_major_formatter(FuncFormatter(_naira))
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _save(fig, fmt: str) -> bytes:
    """SVG with its text as text, or PNG in a palette (a fifth of the bytes of full colour:
    every materialization event stores it)."""
    import matplotlib
    from PIL import Image  # matplotlib's own dependency

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ledgerlake"}):
        fig.tight_layout()
        buf = io.BytesIO()
        if fmt == "svg":
            fig.savefig(buf, format="svg", metadata={"Date": None})
            return buf.getvalue()
        fig.savefig(buf, format="png", metadata={"Software": None})
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB").quantize(64)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def draw(series: Sequence[tuple[str, list, list]], title: str | None, fmt: str = "png",
         size: tuple[float, float] = (8.0, 2.6)) -> bytes:
    """A line per (label, days, balances), as PNG or SVG."""
    import matplotlib
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    with matplotlib.rc_context({"font.size": 9}):
        fig, ax = _figure(size)
        for label, days, values in series:
            ax.plot(days, [float(v) if v is not None else None for v in values],
                    drawstyle="steps-post", linewidth=1.4, label=label)
        if title:
            ax.set_title(title, loc="left", fontsize=10)
        locator = AutoDateLocator(minticks=3, maxticks=8)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize=8, frameon=False, loc="upper left")
        return _save(fig, fmt)


def draw_cashflow(months: list, inflow: list, outflow: list, net: list, fmt: str = "svg",
                  size: tuple[float, float] = (9.0, 2.6)) -> bytes:
    """Monthly inflow up, outflow down, net as a line: SVG for the report, or PNG. A narrow
    `size` (a phone's) names every few months, as many as fit."""
    import matplotlib

    with matplotlib.rc_context({"font.size": 9}):
        fig, ax = _figure(size)
        x = list(range(len(months)))
        ax.bar(x, [float(v) for v in inflow], color="#2e7d32", label="inflow")
        ax.bar(x, [-float(v) for v in outflow], color="#c62828", label="outflow")
        ax.plot(x, [float(v) for v in net], color="#1d2330", marker="o", linewidth=1.4,
                label="net")
        ax.axhline(0, color="#667", linewidth=0.8)
        every = max(1, -(-len(months) * 0.75 // size[0]))  # a label per 0.75 in at most
        ax.set_xticks(x[::int(every)], [m.strftime("%b %Y") for m in months][::int(every)])
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0, 1),
                  ncols=3)
        return _save(fig, fmt)


def series_of(daily: pa.Table, labels: Mapping[str, str] | None = None
              ) -> list[tuple[str, list, list]]:
    """A record's daily rows as one (label, days, balances) per account."""
    rows = daily.select(["account_id", "date", "balance"]).to_pylist()
    by_account: dict[str, tuple[list, list]] = {}
    for r in rows:
        days, values = by_account.setdefault(r["account_id"], ([], []))
        days.append(r["date"])
        values.append(r["balance"])
    return [((labels or {}).get(a, a), d, v) for a, (d, v) in by_account.items()]


def record_charts(lake, record_ids: Sequence[str], titles: Mapping[str, str], zone: str
                  ) -> dict[str, str]:
    """Per record with any balance history, its daily balance chart as Markdown, its days
    in `zone`, titled by `titles` (by number, in Dagster)."""
    if not record_ids:
        return {}
    # only the columns the chart reads: a record's topics or narrations are not worth a read
    schemas = {t: pa.schema([_TYPES[t].field(c) for c in cols]) for t, cols in _READS.items()}
    # a record's lines streamed from the lake (a record may hold millions), its days held
    tables = {"transactions": {r: lake.scan("transactions", r, schemas["transactions"])
                               for r in record_ids},
              "balance_periodic": lake.read_many("balance_periodic", record_ids,
                                                 schemas["balance_periodic"])}
    accounts = lake.read_many("accounts", record_ids, pa.schema(
        [ACCOUNTS.field(c) for c in ("account_id", "nuban", "type", "name")]))
    out = {}
    for record, daily in daily_balances(tables, zone).items():
        labels = {a["account_id"]: account_label(a)
                  for a in (accounts[record].to_pylist() if record in accounts else [])}
        title = titles[record]
        png = base64.b64encode(draw(series_of(daily, labels), f"Daily balance of {title}"))
        # an image the UI's Markdown shows inline: a data URI, nothing to fetch
        out[record] = f"![daily balance of {title}](data:image/png;base64,{png.decode()})"
    return out


def chart_metadata(context, lake, landings: Sequence[Landing], tuning: Tuning) -> dict:
    """The batch's daily balance charts, one per published record, for its materialization's
    metadata (`daily_balance`); for a batch of more than `tuning.chart_records`
    (LEDGERLAKE_CHART_RECORDS), where to draw them. A chart that fails is said there and
    logged, never the run's failure: the rows are landed already."""
    published = [x for x in landings if x.published]
    if not published:
        return {}
    if len(landings) > (most := tuning.chart_records):
        number = next((f"'#{x.number}'" for x in published if x.number is not None), "RECORD")
        return {"daily_balance": MetadataValue.md(
            f"{len(published)} records landed, more than LEDGERLAKE_CHART_RECORDS "
            f"({most}) a run draws: `ledgerlake report {number}` draws a record's, "
            "by its number (`ledgerlake status` lists them).")}
    try:
        charts = record_charts(lake, [x.record_id for x in published],
                               {x.record_id: x.label for x in published}, tuning.timezone)
    except Exception as exc:  # a chart is a view of landed rows, not part of landing them
        context.log.warning("no balance chart this run: %s: %s", type(exc).__name__, exc)
        return {"daily_balance": MetadataValue.md(
            f"No chart this run: {type(exc).__name__} (the run's log says more).")}
    return {"daily_balance": MetadataValue.md("\n\n".join(charts.values()))} if charts else {}


SUMMARY_DAYS = 92  # the daily_balances chart's window, which its title says
# the views whose builds carry a chart of every record's rows: the series, by their SQL
SUMMARIES = {
    "daily_balances": "select date, sum(balance) from daily_balances where date > (select "
                      f"max(date) - {SUMMARY_DAYS} from daily_balances) group by date "
                      "order by date",
    "monthly_cashflow": "select month, sum(inflow), sum(outflow), sum(net) from "
                        "monthly_cashflow where currency = 'NGN' group by month order by month",
}


def summary_chart(context, warehouse: Path, view: str, budget_s: float = 5.0) -> dict:
    """For the materialization of a view in SUMMARIES, its chart over all records (`summary`):
    the daily sum of balances over the last SUMMARY_DAYS days, or the monthly cash flow in naira. One
    that fails, or whose query takes more than `budget_s` (a lake of millions of records: it
    reads every row), is said there and logged, never the build's failure."""
    if view not in SUMMARIES:
        return {}
    try:
        with duckdb.connect(str(warehouse), read_only=True) as con:
            timer = threading.Timer(budget_s, con.interrupt)
            timer.start()
            try:
                rows = con.execute(SUMMARIES[view]).fetchall()
            finally:
                timer.cancel()
        if not rows:
            return {"summary": MetadataValue.md("No rows yet: nothing to draw.")}
        if view == "daily_balances":
            caption = (f"Sum of every account's balance, by day: the last {SUMMARY_DAYS} days "
                       f"of the view, {rows[0][0]:%Y-%m-%d} to {rows[-1][0]:%Y-%m-%d}")
            png = draw([("all accounts", *map(list, zip(*rows, strict=True)))], caption,
                       size=(8.0, 2.2))
        else:
            caption = "Inflow, outflow and net of every record, by month (NGN)"
            png = draw_cashflow(*map(list, zip(*rows, strict=True)), fmt="png")
    except Exception as exc:  # a chart of the view, not part of building it
        context.log.warning("no summary chart of %s: %s: %s", view, type(exc).__name__, exc)
        why = f"its query took more than {budget_s:g} s" if isinstance(
            exc, duckdb.InterruptException) else type(exc).__name__
        return {"summary": MetadataValue.md(f"No chart this build: {why}.")}
    return {"summary": MetadataValue.md(
        f"{caption}.\n\n"
        f"![{view} of every record](data:image/png;base64,{base64.b64encode(png).decode()})")}
