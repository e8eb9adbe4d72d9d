"""The SQLite inbox's layouts (`pragma user_version`): a new inbox is made in the current one;
the receiver rewrites an older inbox in it once, keeping every event, its id, deduplication,
the records' statuses and the id sequence, all or nothing; each layout's statements read the
events through an index."""

from __future__ import annotations

import logging
import re
import sqlite3
import subprocess
import sys
import time

import pytest

from pipeline.inbox import INDEXES, LAYOUT, Inbox, InboxDamaged, describe, tables
from resources.callbacks import CallbackLog

INDEXES_FROM_2 = {"events_identity", "events_identity_recordless", "events_account"}
INDEXES_OF = {1: {"sqlite_autoindex_events_1", "events_record", "events_account"},
              2: INDEXES_FROM_2, 3: INDEXES_FROM_2}


def older_layout(path, layout: int) -> None:
    """An empty inbox as versions before layout 3 made it: layout 1 with the identity unique
    on its own, layout 2 with it unique within its record."""
    schema = tables(layout)
    assert schema.count("identity text not null,") == 1 and "num integer" not in schema
    if layout == 1:
        schema = schema.replace("identity text not null,", "identity text not null unique,")
    version = 2 if layout == 2 else 0  # layout 1 had no number of its own
    con = sqlite3.connect(path)
    con.executescript(f"{schema};{INDEXES[layout]};pragma user_version = {version}")
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
        assert ib.layout == LAYOUT == 3 and ib.numbered
    assert layout_of(tmp_path / "inbox.sqlite3") == (3, INDEXES_OF[3])
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
        assert ib.layout == 3


@pytest.mark.parametrize("start", [1, 2])
def test_the_receiver_rewrites_an_older_inbox_once_keeping_every_event(tmp_path, make, caplog,
                                                                     start):
    path = tmp_path / "inbox.sqlite3"
    older_layout(path, start)
    bodies = some_events(make)
    late = make.callback(bodies[1]["record"], method="INCOME", code="INCOME_SUCCESS",
                         ended_at="2026-01-02T02:00:00.000Z")
    with Inbox(path) as old:  # a reader: it keeps the layout it finds
        assert old.layout == start and not old.numbered
        stored = [old.add(b) for b in bodies]
        old.add(late)
        assert old.add(bodies[0]) == (stored[0][0], False)
        old.mark_replayed([bodies[1]["record"]], at=1_767_225_600.5)
        last = make.record_id()
        gone, _ = old.add(make.callback(last))
        old._db.execute("delete from events where id = ?", (gone,))  # the newest id, deleted
        before, records = old.after(0, 100), old.records()
        payloads = old.payloads(bodies[0]["record"], ["ACCOUNTS"])
    assert len(payloads) == 2 and len(records) == 3
    assert layout_of(path) == ((0 if start == 1 else 2), INDEXES_OF[start])

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="ledgerlake.inbox"), \
            Inbox(path, create=True) as new:
        took = time.monotonic() - started
        assert new.layout == 3
        assert new.after(0, 100) == before and new.records() == records
        assert new.payloads(bodies[0]["record"], ["ACCOUNTS"]) == payloads
        # numbered in the order they were first heard of
        assert [r for (r,) in new._db.execute("select record from records order by num")] == \
            [bodies[0]["record"], bodies[1]["record"], last]
        # a redelivery of any of them is the event already stored, recordless ones too
        assert [new.add(b) for b in bodies] == [(i, False) for i, _ in stored]
        later, is_new = new.add(make.callback(make.record_id()))
        assert is_new and later > gone  # no id a cursor passed is given again
        assert new._db.execute("select count(*) from events where (num is null) !="
                               " (record is null)").fetchone() == (0,)
    first, done = caplog.messages
    assert first == (f"inbox {path.resolve()}: rewriting its 5 events in layout 3 (from "
                     f"{start}), once; callbacks are answered when it is done")
    said = re.fullmatch(rf"inbox {re.escape(str(path.resolve()))}: 5 events in layout 3 "
                        r"\((\d+\.\d) s\)", done)
    assert said and 0 <= float(said.group(1)) <= took + 0.05
    assert layout_of(path) == (3, INDEXES_OF[3])

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ledgerlake.inbox"), \
            Inbox(path, create=True) as again:
        assert again.layout == 3 and len(again.after(0, 100)) == 6
    assert "rewriting" not in caplog.text  # once


@pytest.mark.parametrize("start", [1, 2])
def test_a_rewrite_that_fails_part_way_leaves_the_older_layout_whole(tmp_path, make,
                                                                    monkeypatch, start):
    path = tmp_path / "inbox.sqlite3"
    older_layout(path, start)
    with Inbox(path) as old:
        for body in some_events(make):
            old.add(body)
        before, records = old.after(0, 100), old.records()
    # the last step fails: after the copies, the drops and the rename
    monkeypatch.setitem(INDEXES, LAYOUT, INDEXES[LAYOUT] + ";\ncreate index broken on nowhere (x)")
    with pytest.raises(sqlite3.OperationalError, match="nowhere"):
        Inbox(path, create=True)
    assert layout_of(path) == ((0 if start == 1 else 2), INDEXES_OF[start])
    con = sqlite3.connect(path)
    assert con.execute("select name from sqlite_master where type = 'table' and name not like"
                       " 'sqlite%' order by name").fetchall() == [
        ("dead_letters",), ("events",), ("record_products",), ("records",)]
    con.close()
    with Inbox(path) as old:
        assert old.after(0, 100) == before and old.records() == records

    monkeypatch.undo()  # and the next start rewrites it
    with Inbox(path, create=True) as new:
        assert new.layout == 3 and new.after(0, 100) == before and new.records() == records


def test_an_inbox_whose_events_name_a_record_it_lacks_is_left_as_it_is(tmp_path, make):
    """No write of ours leaves an event without its record (each touches its records in the
    same transaction); an inbox edited by hand is refused a rewrite, saying so, unchanged."""
    path = tmp_path / "inbox.sqlite3"
    older_layout(path, 2)
    with Inbox(path) as old:
        for body in some_events(make):
            old.add(body)
        old._db.execute("delete from records where record = ?", (old.after(0)[0].record,))
        before = old.after(0, 100)
    with pytest.raises(InboxDamaged, match=r"3 events or products name a record its records "
                                           r"table lacks; left in layout 2, not rewritten"):
        Inbox(path, create=True)
    assert layout_of(path) == (2, INDEXES_OF[2])
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "receiver", "--port", "0",
                           "--inbox", str(path), "--token", "t" * 32], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and "READY" not in done.stdout, done
    assert done.stderr.splitlines()[-1] == (
        f"ledgerlake: inbox {path.resolve()}: 3 events or products name a record its records "
        "table lacks; left in layout 2, not rewritten")
    assert layout_of(path) == (2, INDEXES_OF[2])
    with Inbox(path) as old:
        assert old.after(0, 100) == before


def test_a_receiver_starting_beside_one_that_rewrote_the_inbox_leaves_it_be(tmp_path, make,
                                                                          caplog):
    """Two receivers started at once both find layout 2; the second to take the write lock
    finds the rewrite done."""
    path = tmp_path / "inbox.sqlite3"
    older_layout(path, 2)
    with Inbox(path) as second, Inbox(path) as reader:  # opened before the rewrite
        for body in some_events(make):
            second.add(body)
        before, records = second.after(0, 100), second.records()
        rec = before[0].record
        with Inbox(path, create=True) as first:
            assert first.layout == 3
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ledgerlake.inbox"):
            second._upgrade()
        assert second.layout == 3 and caplog.text == ""
        assert second.after(0, 100) == before and second.records() == records
        # a reader that opened it in layout 2 reads it in layout 3
        assert reader.records() == records
        assert len(reader.payloads(rec, ["ACCOUNTS"])) == 2
        assert len(CallbackLog(inbox_path=str(path)).payloads(rec, ("ACCOUNTS",))) == 2


def test_the_database_keeps_an_identity_once_recordless_or_not(tmp_path, make):
    """Past the code's own check: layout 3's two partial unique indexes together are the
    first layout's unique identity, a record's number being there exactly when its id is."""
    with Inbox(tmp_path / "inbox.sqlite3", create=True) as ib:
        for body in some_events(make):
            ib.add(body)
        for recordless in (False, True):
            with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
                ib._db.execute(
                    "insert into events (identity, received_at, kind, record, body, num) select"
                    " identity, received_at, kind, record, body, num from events where record"
                    f" is {'' if recordless else 'not '}null limit 1")
        for record, num in (("rec-x", None), (None, 1)):
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                ib._db.execute("insert into events (identity, received_at, kind, record, body,"
                               " num) values ('x', 0, 'callback', ?, x'', ?)", (record, num))


@pytest.mark.parametrize("layout", [1, 2, 3])
def test_no_statement_of_a_batch_or_a_read_scans_the_events(tmp_path, make, layout):
    path = tmp_path / "inbox.sqlite3"
    if layout < 3:
        older_layout(path, layout)
    with Inbox(path) if layout < 3 else Inbox(path, create=True) as ib:
        assert ib.layout == layout
        for body in some_events(make):  # events to find
            ib.add(body)
        statements: list[str] = []
        ib._db.set_trace_callback(statements.append)
        rec = make.record_id()
        answers = ib.add_described([(describe(b), b"{}") for b in
                                    [make.callback(rec), *some_events(make), make.callback(rec)]])
        ib.add({"event": "USER_DISCONNECT", "message": "",
                "data": {"accounts": ["acc-1"], "disconnected_at": "2026-01-04T00:00:00.000Z"}})
        ib.payloads(rec, ["TRANSACTIONS", "ACCOUNTS"])
        ib.records([rec])
        stored = ib.after(0, 100)
        ib._db.set_trace_callback(None)
        # a batch's answers are its events as stored, each of its kind
        # (the connection event is the first one's again: one run of five callbacks)
        assert [i for i, new in answers if new] == [e.id for e in stored[4:9]]
        assert [e.kind for e in stored[4:10]] == ["callback"] * 5 + ["connection"]
        reads = [s for s in statements if s.lstrip().lower().startswith("select")
                 and re.search(r"\b(events|records|record_products)\b", s)]
        assert len(reads) >= 7
        for sql in reads:
            plan = [r[-1] for r in ib._db.execute("explain query plan " + sql)]
            assert not [p for p in plan if re.match(r"SCAN (events|records|record_products)\b",
                                                   p)], (sql, plan)
