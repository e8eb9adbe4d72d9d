"""Helpers of the settlement and control tests: frozen sandboxes, customers made ready, pulls."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.conftest import Sandbox, start_sandbox


@contextlib.contextmanager
def frozen(tmp: Path, name: str = "sandbox") -> Iterator[Sandbox]:
    """A sandbox whose clock moves only by clock/advance, so what is visible is fixed."""
    box = start_sandbox(tmp / name, "--freeze-clock")
    try:
        yield box
    finally:
        box.server.stop()


def ok(resp: httpx.Response) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def create(api: httpx.Client, *specs: dict) -> list[dict]:
    """Customers made and their connections completed."""
    made = ok(api.post("sandbox/customers/create", json={"customers": list(specs)}))
    deadline = time.monotonic() + 30
    for c in made["customers"]:
        while any(s == "pending" for s in ok(api.post(
                "record/get", json={"record": c["record"]}))["record"]["status"].values()):
            assert time.monotonic() < deadline, "the connection never completed"
            time.sleep(0.02)
    return made["customers"]


def when(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def advance(api: httpx.Client, seconds: float) -> dt.datetime:
    return when(ok(api.post("sandbox/clock/advance", json={"seconds": seconds}))["now"])


def pull(api: httpx.Client, **body) -> list[dict]:
    """Every page of transactions/get, 100 at a time."""
    lines, page = [], 1
    while page:
        data = ok(api.post("transactions/get", json={**body, "page": page, "limit": 100}))
        lines += data["transaction"]
        page = data["pagination"]["nextPage"]
    return lines


def kobo(naira: float | None) -> int:
    return round((naira or 0) * 100)


def signed(line: dict) -> int:
    return kobo(line["credit"]) - kobo(line["debit"])


def chain_breaks(lines: list[dict], opening: dict[str, int] | None = None) -> list[str]:
    """Ids of posted lines whose running balance is not the previous one plus their amount,
    per account in (cleared_date, _id) order. `opening` (kobo per account) checks the first."""
    breaks = []
    by_account: dict[str, list[dict]] = {}
    for t in lines:
        if t["cleared_date"] is not None:
            by_account.setdefault(t["account"], []).append(t)
    for account, posted in by_account.items():
        posted.sort(key=lambda t: (t["cleared_date"], t["_id"]))
        prev = opening[account] if opening else kobo(posted[0]["balance"]) - signed(posted[0])
        for t in posted:
            if prev + signed(t) != kobo(t["balance"]):
                breaks.append(t["_id"])
            prev = kobo(t["balance"])
    return breaks
