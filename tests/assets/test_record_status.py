"""The `records` table: status and last callback per product, from a real inbox file."""

from __future__ import annotations

import dagster as dg
import pyarrow.parquet as pq

from assets.record_status import record_status
from pipeline.inbox import Inbox
from resources.callbacks import CallbackLog
from resources.lake import Lake


def test_record_status_table(tmp_path, make):
    inbox_path = tmp_path / "inbox.sqlite3"
    with Inbox(inbox_path, create=True) as inbox:
        def add(record, customer, method, code, at, **kw):
            inbox.add(make.callback(record, method, code, customer=customer, ended_at=at, **kw))

        add("r1", "c1", "AUTH", "AUTH_SUCCESS", "2026-11-01T00:00:00.000Z")
        add("r1", "c1", "TRANSACTIONS", "PRODUCT_IS_READY", "2026-11-01T00:01:00.000Z")
        add("r1", "c1", "PERIODIC_TRANSACTIONS", "PRODUCT_IS_READY", "2026-11-02T00:00:00.000Z")
        add("r1", "c1", "INCOME", "INCOME_FAILED", "2026-11-01T00:02:00.000Z",
            status="is_failed")
        add("r2", "c2", "ACCOUNTS", "ACCOUNTS_SUCCESS", "2026-11-01T00:00:00.000Z")
        inbox.add(make.disconnect("c2", "2026-11-03T00:00:00.000Z"))

    with dg.instance_for_test() as instance:  # its own instance: no state left by other tests
        out = dg.materialize([record_status], instance=instance, resources={
            "callback_log": CallbackLog(inbox_path=str(inbox_path)),
            "lake": Lake(root=str(tmp_path / "lake"))})
    assert out.success
    rows = {r["record_id"]: r for r in
            pq.read_table(tmp_path / "lake" / "records" / "part-0.parquet").to_pylist()}
    assert set(rows) == {"r1", "r2"}
    r1, r2 = rows["r1"], rows["r2"]
    assert r1["status"] == "connected" and r2["status"] == "disconnected"
    assert r1["transactions_code"] == "PRODUCT_IS_READY"
    assert r1["transactions_at"].isoformat().startswith("2026-11-02T00:00")  # the periodic one
    assert r1["income_code"] == "INCOME_FAILED"
    assert r1["accounts_code"] is None and r1["accounts_at"] is None
    assert r2["accounts_code"] == "ACCOUNTS_SUCCESS"
    assert r1["last_method"] == "INCOME"  # the last to arrive
