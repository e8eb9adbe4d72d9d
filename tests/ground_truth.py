"""The sandbox's own data of a record, read over its API with the environment's secret key,
and the lake's rows of the same records, in the same shape: what the end-to-end tests and the
chaos suite (tests/chaos/run.py) compare.

Every figure is exact: amounts are summed as decimals (a two-decimal JSON number read as a float
converts back exactly through its shortest repr), never as floats.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from resources import delta
from resources.lake import Lake, check_record_id
from resources.wire import ref


def wait(what: str, ready: Callable, timeout_s: float, *procs, every_s: float = 1.0):
    """Poll `ready()` until it is truthy; fail naming `what` (or a process that died)."""
    print(f"{time.strftime('%H:%M:%S')} waiting for {what}", flush=True)
    deadline = time.monotonic() + timeout_s
    while True:
        value = ready()
        if value:
            return value
        for proc in procs:
            assert proc is None or proc.poll() is None, f"a process died while waiting: {what}"
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s: {what}"
        time.sleep(every_s)


def _data(resp: httpx.Response) -> dict:
    assert resp.status_code == 200, f"{resp.request.url.path}: {resp.status_code} {resp.text}"
    return resp.json()["data"]


def history(api: httpx.Client, record: str) -> list[dict]:
    """The sandbox's own transactions of a record, every page."""
    lines, page = [], 1
    while True:
        resp = api.post("transactions/get", json={"record": record, "limit": 100,
                                                  "page": page})
        assert resp.status_code == 200, resp.text
        data = resp.json()["data"]
        lines += data["transaction"]
        if page >= data["pagination"]["totalPages"]:
            return lines
        page += 1


def signed(line: dict) -> Decimal:
    """A line's signed amount, exactly: credit less debit."""
    return Decimal(str(line["credit"] or 0)) - Decimal(str(line["debit"] or 0))


@dataclass
class Picture:
    """One record's data in the figures both sides are compared by. `tables` holds, per table,
    per account (or "" for a table not kept by account): (row count, set of ids, sum)."""
    record: str
    tables: dict[str, dict[str, tuple[int, frozenset, Decimal]]] = field(default_factory=dict)

    def differences(self, other: Picture) -> list[str]:
        """What differs, one line per table and account, naming both sides' figures."""
        out = []
        for table in sorted(set(self.tables) | set(other.tables)):
            mine, theirs = self.tables.get(table, {}), other.tables.get(table, {})
            for account in sorted(set(mine) | set(theirs)):
                a = mine.get(account, (0, frozenset(), Decimal(0)))
                b = theirs.get(account, (0, frozenset(), Decimal(0)))
                if a != b:
                    lost, extra = sorted(a[1] - b[1])[:3], sorted(b[1] - a[1])[:3]
                    out.append(f"{self.record} {table} {account or '-'}: {a[0]} rows, sum "
                               f"{a[2]} against {b[0]}, {b[2]} (only here: {lost}, only "
                               f"there: {extra})")
        return out


def _add(pic: Picture, table: str, account: str, ids: Iterable[str], total: Decimal) -> None:
    ids = list(ids)
    pic.tables.setdefault(table, {})[account] = (len(ids), frozenset(ids), total)


def truth(api: httpx.Client, record: str) -> Picture:
    """What the service holds for a record now: accounts, every transaction, the balance of
    each account, identity and income (a product the service answers PRODUCT_NOT_READY for,
    such as income without an income stream, holds no rows)."""
    pic = Picture(record)
    accounts = _data(api.post("accounts/get", json={"record": record, "limit": 100}))["accounts"]
    _add(pic, "accounts", "", (a["_id"] for a in accounts), Decimal(0))
    lines: dict[str, list[dict]] = {a["_id"]: [] for a in accounts}
    for line in history(api, record):
        lines.setdefault(ref(line["account"]), []).append(line)
    for account, rows in lines.items():
        _add(pic, "transactions", account, (r["_id"] for r in rows),
             sum((signed(r) for r in rows), Decimal(0)))
    balances = _data(api.post("balance/get", json={"record": record, "limit": 100}))["balance"]
    for b in balances:
        _add(pic, "balances", ref(b["account"]), [ref(b["account"])],
             Decimal(str(b["ledger_balance"])) + Decimal(str(b["available_balance"])))
    identity = _data(api.post("identity/get", json={"record": record}))["identity"]
    _add(pic, "identity", "", (ref(i["customer"]) for i in identity), Decimal(0))
    resp = api.post("income/get", json={"record": record})
    if resp.status_code == 400 and resp.json().get("error_code") == "PRODUCT_NOT_READY":
        _add(pic, "income", "", [], Decimal(0))
    else:
        _add(pic, "income", "", [_data(resp)["income"]["_id"]], Decimal(0))
    return pic


LAKE_COLUMNS = {
    "accounts": [("account_id", pa.string())],
    "transactions": [("account_id", pa.string()), ("transaction_id", pa.string()),
                     ("amount", pa.decimal128(18, 2))],
    "balance_history": [("account_id", pa.string()), ("fetched_at", pa.timestamp("ms", "UTC")),
                        ("ledger_balance", pa.decimal128(18, 2)),
                        ("available_balance", pa.decimal128(18, 2))],
    "identity": [("customer_id", pa.string())],
    "income": [("income_id", pa.string())],
}


def lake_rows(lake: Lake) -> dict[str, list[dict]]:
    """The lake's rows of every table `pictures` reads, with their record ids."""
    out = {}
    for table, cols in LAKE_COLUMNS.items():
        rows = lake.read(table, schema=pa.schema([*cols, ("record_id", pa.string())]))
        out[table] = [] if rows is None else rows.to_pylist()
    return out


def holding(lake: Lake, table: str, record_ids: Iterable[str]) -> set[str]:
    """Which of `record_ids` have rows in `table` (reads their id column only)."""
    ids = [check_record_id(r) for r in record_ids]
    rows = delta.read(lake.table_uri(table), ids, ["record_id"]) if ids else None
    return set() if rows is None else set(pc.unique(rows["record_id"]).to_pylist())


def partitions(lake: Lake, table: str) -> list[str]:
    """The record ids that have rows in `table`."""
    rows = delta.read(lake.table_uri(table), columns=["record_id"])
    return [] if rows is None else sorted(pc.unique(rows["record_id"]).to_pylist())


def pictures(rows: dict[str, list[dict]], records: Iterable[str]) -> dict[str, Picture]:
    """The lake's picture of each record, as `truth` draws the service's (balances: the latest
    snapshot of each account)."""
    wanted = set(records)
    by: dict[str, dict[str, dict[str, list]]] = {r: {} for r in wanted}
    for table, table_rows in rows.items():
        for row in table_rows:
            if row["record_id"] in wanted:
                key = row["account_id"] if table in ("transactions", "balance_history") else ""
                by[row["record_id"]].setdefault(table, {}).setdefault(key, []).append(row)
    out = {}
    for record, tables in by.items():
        pic = Picture(record)
        for a, rs in tables.get("accounts", {}).items():
            _add(pic, "accounts", a, (r["account_id"] for r in rs), Decimal(0))
        accounts = [r["account_id"] for r in tables.get("accounts", {}).get("", [])]
        for account in accounts:
            rs = tables.get("transactions", {}).get(account, [])
            _add(pic, "transactions", account, (r["transaction_id"] for r in rs),
                 sum((r["amount"] for r in rs), Decimal(0)))
        for account, rs in tables.get("transactions", {}).items():
            if account not in accounts:  # lines of an account the accounts table lacks
                _add(pic, "transactions", account, (r["transaction_id"] for r in rs),
                     sum((r["amount"] for r in rs), Decimal(0)))
        for account, rs in tables.get("balance_history", {}).items():
            last = max(rs, key=lambda r: r["fetched_at"])
            _add(pic, "balances", account, [account],
                 last["ledger_balance"] + last["available_balance"])
        for table in ("identity", "income"):
            ids = [r[LAKE_COLUMNS[table][0][0]] for r in tables.get(table, {}).get("", [])]
            _add(pic, table, "", ids, Decimal(0))
        out[record] = pic
    return out


def duplicates(rows: dict[str, list[dict]]) -> list[str]:
    """Ids held twice by a table (a balance snapshot by its account and time)."""
    keys = {"accounts": ("account_id",), "transactions": ("transaction_id",),
            "balance_history": ("account_id", "fetched_at"),
            "identity": ("record_id", "customer_id"), "income": ("record_id", "income_id")}
    out = []
    for table, key in keys.items():
        seen: set = set()
        for row in rows.get(table, []):
            k = tuple(row[c] for c in key)
            if k in seen:
                out.append(f"{table} holds {k} twice")
            seen.add(k)
    return out
