"""The SQLite inbox's layouts (`pragma user_version`): a new inbox is made in the current one;
the receiver rewrites an older inbox in it once, keeping every event, its id, deduplication and
the id sequence, all or nothing; each layout's statements read the events through an index."""

from __future__ import annotations

import logging
import re
import sqlite3
import time

import pytest

from pipeline.inbox import INDEXES, LAYOUT, SCHEMA, Inbox, describe

LAYOUT_2_INDEXES = {"events_identity", "events_identity_recordless", "events_account"}


def first_layout(path) -> None:
    """An empty inbox as versions before layout 2 made it: the identity unique on its own."""
    assert SCHEMA.count("identity text not null,") == 1
    con = sqlite3.connect(path)
    con.executescript(SCHEMA.replace("identity text not null,", "identity text not null unique,")
                      + INDEXES[1])
    con.close()


def layout_of(path) -> tuple[int, set[str]]:
    con = sqlite3.connect(path)
    try:
        version = con.execute("pragma user_version").fetchone()[0]
        names = {r[0] for r in con.execute("select name from sqlite_master where type = 'index'"
                                           " and tbl_name = 'events'")}
        return version, names
    finally:
        con.close()


def some_events(make) -> list[dict]:
    """Callbacks of two records, one of them again later, and a connection event that names
    no record (stored recordless)."""
    a, b = make.record_id(), make.record_id()
    return [make.callback(a, ended_at="2026-01-01T01:00:00.000Z"),
            make.callback(b, method="ACCOUNTS", code="ACCOUNTS_SUCCESS",
                          ended_at="2026-01-01T01:00:01.000Z"),
            make.callback(a, ended_at="2026-01-02T01:00:00.000Z"),
            {"event": "USER_UPGRADED", "message": "",
             "data": {"customer": "cust-9", "upgraded_at": "2026-01-03T00:00:00.000Z"}}]


def test_a_new_inbox_is_made_in_the_current_layout(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ledgerlake.inbox"), \
            Inbox(tmp_path / "inbox.sqlite3", create=True) as ib:
        assert ib.layout == LAYOUT == 2
    assert layout_of(tmp_path / "inbox.sqlite3") == (2, LAYOUT_2_INDEXES)
    assert caplog.text == ""  # made so, not made older and then rewritten


def test_a_new_inbox_that_fails_to_be_made_is_left_without_tables(tmp_path, monkeypatch):
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setitem(INDEXES, LAYOUT, INDEXES[LAYOUT] + ";\ncreate index broken on nowhere (x)")
    with pytest.raises(sqlite3.OperationalError, match="nowhere"):
        Inbox(path, create=True)
    assert layout_of(path) == (0, set())
    con = sqlite3.connect(path)
    assert con.execute("select count(*) from sqlite_master").fetchone() == (0,)
    con.close()
    monkeypatch.undo()
    with Inbox(path, create=True) as ib:  # and the next start makes it whole
        assert ib.layout == 2


def test_the_receiver_rewrites_a_first_layout_inbox_once_keeping_every_event(tmp_path, make,
                                                                           caplog):
    path = tmp_path / "inbox.sqlite3"
    first_layout(path)
    bodies = some_events(make)
    with Inbox(path) as old:  # a reader: it keeps the layout it finds
        assert old.layout == 1
        stored = [old.add(b) for b in bodies]
        assert old.add(bodies[0]) == (stored[0][0], False)
        gone, _ = old.add(make.callback(make.record_id()))
        old._db.execute("delete from events where id = ?", (gone,))  # the newest id, deleted
        before, records = old.after(0, 100), old.records()
    assert layout_of(path) == (0, {"sqlite_autoindex_events_1", "events_record",
                                   "events_account"})

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="ledgerlake.inbox"), \
            Inbox(path, create=True) as new:
        took = time.monotonic() - started
        assert new.layout == 2
        assert new.after(0, 100) == before and new.records() == records
        # a redelivery of any of them is the event already stored, recordless ones too
        assert [new.add(b) for b in bodies] == [(i, False) for i, _ in stored]
        later, is_new = new.add(make.callback(make.record_id()))
        assert is_new and later > gone  # no id a cursor passed is given again
    first, done = caplog.messages
    assert first == (f"inbox {path.resolve()}: rewriting its 4 events in layout 2 (from 1), "
                     "once; callbacks are answered when it is done")
    said = re.fullmatch(rf"inbox {re.escape(str(path.resolve()))}: 4 events in layout 2 "
                        r"\((\d+\.\d) s\)", done)
    assert said and 0 <= float(said.group(1)) <= took + 0.05
    assert layout_of(path) == (2, LAYOUT_2_INDEXES)

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ledgerlake.inbox"), \
            Inbox(path, create=True) as again:
        assert again.layout == 2 and len(again.after(0, 100)) == 5
    assert "rewriting" not in caplog.text  # once


def test_a_rewrite_that_fails_part_way_leaves_the_first_layout_whole(tmp_path, make,
                                                                   monkeypatch):
    path = tmp_path / "inbox.sqlite3"
    first_layout(path)
    with Inbox(path) as old:
        for body in some_events(make):
            old.add(body)
        before = old.after(0, 100)
    # the last step fails: after the copy, the drop and the rename
    monkeypatch.setitem(INDEXES, LAYOUT, INDEXES[LAYOUT] + ";\ncreate index broken on nowhere (x)")
    with pytest.raises(sqlite3.OperationalError, match="nowhere"):
        Inbox(path, create=True)
    assert layout_of(path) == (0, {"sqlite_autoindex_events_1", "events_record",
                                   "events_account"})
    con = sqlite3.connect(path)
    assert con.execute("select name from sqlite_master where name like 'events%' and"
                       " type = 'table'").fetchall() == [("events",)]
    con.close()
    with Inbox(path) as old:
        assert old.after(0, 100) == before

    monkeypatch.undo()  # and the next start rewrites it
    with Inbox(path, create=True) as new:
        assert new.layout == 2 and new.after(0, 100) == before


def test_the_database_keeps_an_identity_once_recordless_or_not(tmp_path, make):
    """Past the code's own check: layout 2's two partial unique indexes together are the
    first layout's unique identity."""
    with Inbox(tmp_path / "inbox.sqlite3", create=True) as ib:
        for body in some_events(make):
            ib.add(body)
        for recordless in (False, True):
            with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
                ib._db.execute(
                    "insert into events (identity, received_at, kind, record, body) select"
                    " identity, received_at, kind, record, body from events where record is"
                    f" {'' if recordless else 'not '}null limit 1")


@pytest.mark.parametrize("layout", [1, 2])
def test_no_statement_of_a_batch_or_a_read_scans_the_events(tmp_path, make, layout):
    path = tmp_path / "inbox.sqlite3"
    if layout == 1:
        first_layout(path)
    with Inbox(path) if layout == 1 else Inbox(path, create=True) as ib:
        assert ib.layout == layout
        for body in some_events(make):  # events to find
            ib.add(body)
        statements: list[str] = []
        ib._db.set_trace_callback(statements.append)
        rec = make.record_id()
        ib.add_described([(describe(b), b"{}") for b in
                          [make.callback(rec), *some_events(make), make.callback(rec)]])
        ib.add({"event": "USER_DISCONNECT", "message": "",
                "data": {"accounts": ["acc-1"], "disconnected_at": "2026-01-04T00:00:00.000Z"}})
        ib.payloads(rec, ["TRANSACTIONS", "ACCOUNTS"])
        ib.after(0, 10)
        ib._db.set_trace_callback(None)
        reads = [s for s in statements if s.lstrip().lower().startswith("select")
                 and " events " in f" {s} "]
        assert len(reads) >= 5
        for sql in reads:
            plan = [r[-1] for r in ib._db.execute("explain query plan " + sql)]
            assert not [p for p in plan if p.startswith("SCAN events")], (sql, plan)

