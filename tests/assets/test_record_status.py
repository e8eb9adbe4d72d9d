"""The `records` table: status and last callback per product, from a real inbox file."""

from __future__ import annotations

import dagster as dg
from deltalake import DeltaTable

from assets.record_status import SCHEMA, record_status
from resources.inbox import Inbox
from resources.inbox.resource import InboxResource
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

    lake = Lake(root=str(tmp_path / "lake"))
    resources = {"inbox": InboxResource(path=str(inbox_path)), "lake": lake}
    with dg.instance_for_test() as instance:  # its own instance: no state left by other tests
        out = dg.materialize([record_status], instance=instance, resources=resources)
    assert out.success
    # read with Delta's own reader: one Delta table, not one kept by record (no column added)
    table = DeltaTable(lake.table_uri("records")).to_pyarrow_table()
    assert table.column_names == SCHEMA.names
    rows = {r["record_id"]: r for r in table.to_pylist()}
    assert len(rows) == table.num_rows
    assert set(rows) == {"r1", "r2"}
    r1, r2 = rows["r1"], rows["r2"]
    assert r1["status"] == "connected" and r2["status"] == "disconnected"
    assert r1["transactions_code"] == "PRODUCT_IS_READY"
    assert r1["transactions_at"].isoformat().startswith("2026-11-02T00:00")  # the periodic one
    assert r1["income_code"] == "INCOME_FAILED"
    assert r1["accounts_code"] is None and r1["accounts_at"] is None
    assert r2["accounts_code"] == "ACCOUNTS_SUCCESS"
    assert r1["last_method"] == "INCOME"  # the last to arrive

    # the materialization names the Delta table and the version it committed
    meta = out.asset_materializations_for_node("record_status")[0].metadata
    assert "path" not in meta
    assert meta["lake_table"].value == lake.shown("records") == str(tmp_path / "lake" / "records")
    first = meta["lake_version"].value
    assert first == lake.version("records")
    assert meta["dagster/row_count"].value == 2


def test_a_rebuild_replaces_the_whole_table_in_one_commit(tmp_path, make):
    inbox_path = tmp_path / "inbox.sqlite3"
    with Inbox(inbox_path, create=True) as inbox:
        inbox.add(make.callback("r1", "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="c1",
                                ended_at="2026-11-01T00:00:00.000Z"))
    lake = Lake(root=str(tmp_path / "lake"))
    resources = {"inbox": InboxResource(path=str(inbox_path)), "lake": lake}
    versions = []
    with dg.instance_for_test() as instance:
        for later in ("r2", "r3"):
            out = dg.materialize([record_status], instance=instance, resources=resources)
            assert out.success
            versions.append(out.asset_materializations_for_node("record_status")[0]
                            .metadata["lake_version"].value)
            with Inbox(inbox_path) as inbox:
                inbox.add(make.callback(later, "ACCOUNTS", "ACCOUNTS_SUCCESS", customer=later,
                                        ended_at="2026-11-02T00:00:00.000Z"))
        out = dg.materialize([record_status], instance=instance, resources=resources)
        versions.append(out.asset_materializations_for_node("record_status")[0]
                        .metadata["lake_version"].value)
    assert versions == sorted(set(versions)) and versions[-1] == lake.version("records")
    # each run's table is the whole status, never added to the last one's
    ids = sorted(lake.read("records")["record_id"].to_pylist())
    assert ids == ["r1", "r2", "r3"]
    for version, want in zip(versions, (["r1"], ["r1", "r2"], ["r1", "r2", "r3"]), strict=True):
        assert sorted(lake.read("records", version=version)["record_id"].to_pylist()) == want
