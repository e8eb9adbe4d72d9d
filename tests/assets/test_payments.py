"""Payments land from the PAYMENT callbacks that really reached the receiver's inbox."""

from __future__ import annotations

import time

from assets.payments import payments
from resources.inbox import Inbox
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from tests.conftest import land, noted


def payment_events(inbox_path, record: str) -> list:
    with Inbox(inbox_path, create=True) as inbox:
        return [e for e in inbox.after(0, 10_000)
                if e.record == record and e.method in ("PAYMENT", "PAYMENT_RECURRING")]


def test_payments_from_callbacks(sandbox, receiver, tmp_path):
    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()
        made = api.post("sandbox/customers/create",
                        json={"customers": [{"accounts": 1, "months": 2}]}).json()
        record = made["data"]["customers"][0]["record"]
        small = api.post("sandbox/payments/initiate", json={"record": record, "amount": 50_000})
        huge = api.post("sandbox/payments/initiate",
                        json={"record": record, "amount": 10**12})
        monthly = api.post("sandbox/payments/initiate", json={
            "record": record, "amount": 20_000,
            "recurring": {"interval": "monthly", "start_date": "2026-11-01"}})
        for resp in (small, huge, monthly):
            assert resp.status_code == 200, resp.text
    ids = {r.json()["data"]["payment"]["_id"]: r.json()["data"]["payment"]
           for r in (small, huge, monthly)}

    deadline = time.monotonic() + 30
    while len(payment_events(receiver.inbox, record)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(payment_events(receiver.inbox, record)) >= 3

    # the receiver's own inbox, read through the one resource over it
    res = {"inbox": InboxResource(path=str(receiver.inbox)), "lake": Lake(root=str(tmp_path))}
    runs = []
    for _ in range(2):  # a rerun replaces the record's rows: nothing doubles
        out = land([payments], [record], res)
        assert out.success
        runs.append(out.run_id)
    table = Lake(root=str(tmp_path)).read("payments", record)
    assert table.num_rows == 3
    # each run noted the record in the lake, the inbox keeps the last one's landing
    assert [(r["run_id"], r["outcome"], r["row_count"]) for r in noted(tmp_path, "landings")] \
        == [(run, "landed", 3) for run in runs]
    meta = out.asset_materializations_for_node("payments")[0].metadata
    assert (meta["dagster/row_count"].value, meta["published"].value) == (3, 1)
    with Inbox(receiver.inbox) as inbox:
        (state,) = inbox.landings([record], product="payments")
    assert (state.outcome, state.run_id, state.row_count) == ("landed", runs[-1], 3)
    rows = {r["payment_id"]: r for r in table.to_pylist()}
    assert set(rows) == set(ids)
    for pid, sent in ids.items():
        # kobo on the wire, exact naira in the lake, the fee in the same unit
        assert rows[pid]["amount"] * 100 == sent["amount"]
        assert rows[pid]["fee"] * 100 == sent["fee"]
        assert rows[pid]["status"] == sent["status"]
        assert rows[pid]["interbank_response_code"] == sent["bank_response"]["STATUSCODE"]
    assert {r["status"] for r in rows.values()} == {"success", "failed"}
    kinds = {rows[pid]["callback_type"] for pid in ids}
    assert kinds == {"PAYMENT", "PAYMENT_RECURRING"}
    assert rows[monthly.json()["data"]["payment"]["_id"]]["schedule_interval"] == "monthly"


def test_two_payments_in_one_window_both_land(tmp_path, make):
    """Two PAYMENT callbacks of one record with the same window differ only by their payment:
    both are events, and both payments reach the lake."""
    inbox_path = tmp_path / "inbox.sqlite3"
    record = make.record_id()
    with Inbox(inbox_path, create=True) as inbox:
        for pid, amount in (("pay1", 50_000), ("pay2", 70_000)):
            body = make.callback(record, "PAYMENT", "PAYMENT_SUCCESS",
                                 ended_at="2026-01-01T01:00:00.000Z", paymentId=pid,
                                 link=None, schedule={"current_amount": amount,
                                                      "paymentId": pid},
                                 payment={"_id": pid, "status": "success", "amount": amount,
                                          "fee": 750, "currency": "NGN"})
            assert inbox.add(body)[1]
    res = {"inbox": InboxResource(path=str(inbox_path)),
           "lake": Lake(root=str(tmp_path / "lake"))}
    assert land([payments], [record], res).success
    table = Lake(root=str(tmp_path / "lake")).read("payments", record)
    assert sorted(table["payment_id"].to_pylist()) == ["pay1", "pay2"]
    assert sorted(str(a) for a in table["amount"].to_pylist()) == ["500.00", "700.00"]
    assert {str(f) for f in table["fee"].to_pylist()} == {"7.50"}
