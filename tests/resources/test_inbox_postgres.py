"""The inbox in a real Postgres database, where it differs from a SQLite file: it is made by the
receiver alone, writers in other connections take turns (so a cursor never steps over an id),
a server that goes away and comes back is reconnected, and no password is ever shown.

The rules it shares with the SQLite inbox run on both in test_inbox.py and
test_inbox_events.py."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import psycopg2
import pytest

from resources.config import Settings
from resources.inbox import (
    InboxMissing,
    InboxUnavailable,
    InvalidEvent,
    describe,
    is_database_url,
    open_inbox,
)
from resources.inbox.postgres import ERASURE_LOCK, WRITE_LOCK, PostgresInbox, redact
from resources.inbox.resource import InboxResource
from tests.postgres import PostgresServer, free_port, require_bin
from tests.resources.inbox_batches import random_batches


def password(url: str) -> str:
    return url.split("//", 1)[1].split("@", 1)[0].split(":", 1)[1]


def tables(url: str) -> set[str]:
    con = psycopg2.connect(url)
    try:
        cur = con.cursor()
        cur.execute("select tablename from pg_tables where schemaname = 'public'")
        return {r[0] for r in cur.fetchall()}
    finally:
        con.close()


def test_a_url_opens_the_postgres_inbox_and_shows_no_password(postgres_url, make):
    secret = password(postgres_url)
    with open_inbox(postgres_url, create=True) as inbox:
        assert isinstance(inbox, PostgresInbox)
        assert inbox.add(make.callback("rec-1"))[1]
        for shown in (inbox.shown, repr(inbox), str(inbox)):
            assert secret not in shown
        assert inbox.shown == redact(postgres_url) == postgres_url.replace(f":{secret}@", "@")
    # postgres:// is the same database
    with open_inbox(postgres_url.replace("postgresql://", "postgres://", 1)) as inbox:
        assert inbox.count() == 1


def test_a_reader_of_a_database_without_the_inbox_gets_inbox_missing(postgres_url):
    with pytest.raises(InboxMissing) as info:
        open_inbox(postgres_url)
    assert redact(postgres_url) in str(info.value)
    assert password(postgres_url) not in str(info.value)
    assert tables(postgres_url) == set()  # a reader made nothing


def test_receivers_starting_together_make_the_schema_once(postgres_url):
    errors: list[BaseException] = []
    opened: list[PostgresInbox] = []
    start = threading.Barrier(6)

    def one() -> None:
        start.wait()
        try:
            opened.append(PostgresInbox(postgres_url, create=True))
        except BaseException as exc:  # noqa: BLE001 (what the assertion reports)
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for inbox in opened:
        inbox.close()
    assert errors == [] and len(opened) == 6
    assert tables(postgres_url) == {"events", "dead_letters", "records", "record_products",
                                    "landings", "record_numbers", "forgotten", "write_probe"}
    with open_inbox(postgres_url, create=True) as again:  # and once more, later: a no-op
        assert again.count() == 0


def test_the_resource_and_the_setting_take_a_url(postgres_url, monkeypatch, make):
    with open_inbox(postgres_url, create=True) as inbox:
        inbox.add(make.callback("rec-url"))
    with InboxResource(path=postgres_url).open() as inbox:
        assert [e.record for e in inbox.after(0)] == ["rec-url"]
    monkeypatch.setenv("LEDGERLAKE_INBOX", postgres_url)
    settings = Settings.from_env()
    assert password(postgres_url) not in repr(settings)
    with InboxResource().open() as inbox:
        assert inbox.count() == 1


def test_a_server_that_is_not_there_is_one_clear_error(postgres_server):
    url = f"postgresql://postgres:hunter2secret@127.0.0.1:{free_port()}/nowhere"
    for create in (True, False):
        with pytest.raises(InboxUnavailable) as info:
            open_inbox(url, create=create)
        message = str(info.value)
        assert message.startswith("inbox postgresql://postgres@127.0.0.1:")
        assert "does not answer" in message and "\n" not in message
        assert "hunter2secret" not in message
    wrong = postgres_server.url().replace(postgres_server.password, "not-the-password")
    with pytest.raises(InboxUnavailable, match="password authentication failed") as info:
        open_inbox(wrong, create=True)
    assert "not-the-password" not in str(info.value)


def advisory(url: str, lock: int, *, granted: bool) -> int:
    """How many connections hold (`granted`) or wait for the advisory `lock`: the inbox's
    write or erasure lock."""
    con = psycopg2.connect(url)
    try:
        cur = con.cursor()
        cur.execute("select count(*) from pg_locks where locktype = 'advisory' and granted = %s"
                    " and objid = %s", (granted, lock & 0xFFFFFFFF))
        return cur.fetchone()[0]
    finally:
        con.close()


def advisory_pids(url: str, lock: int) -> set[int]:
    """The backends holding the advisory `lock`."""
    with contextlib.closing(psycopg2.connect(url)) as con:
        cur = con.cursor()
        cur.execute("select pid from pg_locks where locktype = 'advisory' and granted"
                    " and objid = %s", (lock & 0xFFFFFFFF,))
        return {row[0] for row in cur.fetchall()}


def gone(url: str, pids: set[int], limit_s: float = 60.0) -> None:
    """Wait until the backends `pids` have ended (the server ends one when it reads its
    client's goodbye, which can be after the client's close has returned)."""
    deadline = time.monotonic() + limit_s
    while True:
        with contextlib.closing(psycopg2.connect(url)) as con:
            cur = con.cursor()
            cur.execute("select count(*) from pg_stat_activity where pid = any(%s)",
                        (list(pids),))
            if not cur.fetchone()[0]:
                return
        assert time.monotonic() < deadline, f"backends {sorted(pids)} still up"
        time.sleep(0.05)


def test_writers_take_turns_so_a_cursor_never_steps_over_an_id(postgres_url, make):
    """A writer holding the write lock has drawn an id and not committed; a second writer must
    wait for it, or its larger id could be read (and the cursor moved past the first) before
    the first commits."""
    with open_inbox(postgres_url, create=True) as first, \
            open_inbox(postgres_url, create=True) as second, open_inbox(postgres_url) as sensor:
        first._db.begin_write()  # as add_described does, kept open
        first_id = first._insert(describe(make.callback("rec-first")),
                                 b'{"record": "rec-first"}', 0.0, "an identity")
        done: list = []
        later = threading.Thread(target=lambda: done.append(second.add(
            make.callback("rec-second"))))
        later.start()
        while not advisory(postgres_url, WRITE_LOCK, granted=False):  # it got as far as the lock
            assert later.is_alive(), done
            time.sleep(0.01)
        assert sensor.after(0) == []  # nothing visible yet, so the cursor stays at 0
        first._db.execute("commit")
        later.join()
        (second_id, new), = done
        assert new and second_id > first_id
        assert [e.id for e in sensor.after(0)] == [first_id, second_id]


@pytest.mark.parametrize("waiter", ["forget", "landing"])
def test_a_wait_for_the_erasure_lock_the_server_drops_is_inbox_unavailable(postgres_url,
                                                                          waiter):
    """A forget waiting for the landings in flight (or a landing waiting for a forget) whose
    connection the server drops, as a restart does, raises InboxUnavailable, which commands
    print in one line, not psycopg2's error."""
    with open_inbox(postgres_url, create=True) as holder, open_inbox(postgres_url) as other, \
            contextlib.ExitStack() as held:
        if waiter == "forget":
            holder.hold_landing()
        else:
            held.enter_context(holder.erasing())
        raised: list[BaseException] = []

        def wait() -> None:
            try:
                with contextlib.ExitStack() as got:
                    if waiter == "forget":
                        got.enter_context(other.erasing())
                    else:
                        other.hold_landing()
            except BaseException as exc:  # noqa: BLE001 - what it raised is the question
                raised.append(exc)

        waiting = threading.Thread(target=wait)
        waiting.start()
        while not advisory(postgres_url, ERASURE_LOCK, granted=False):
            assert waiting.is_alive(), raised
            time.sleep(0.01)
        admin = psycopg2.connect(postgres_url)
        admin.autocommit = True
        admin.cursor().execute(
            "select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory'"
            " and not granted and objid = %s", (ERASURE_LOCK & 0xFFFFFFFF,))
        admin.close()
        waiting.join()
        (exc,) = raised
        assert isinstance(exc, InboxUnavailable), repr(exc)
        assert redact(postgres_url) in str(exc) and password(postgres_url) not in str(exc)
        holders = advisory_pids(postgres_url, ERASURE_LOCK)
        held.close()  # the forget ends, or the landing's lock goes with its inbox
        holder.close()
        gone(postgres_url, holders)  # a closed connection's backend ends after close returns
        assert advisory(postgres_url, ERASURE_LOCK, granted=True) == 0
        if waiter == "landing":  # its next try takes the lock: the failed wait left none held
            other.hold_landing()
            assert advisory(postgres_url, ERASURE_LOCK, granted=True) == 1


def test_concurrent_writers_redeliveries_and_a_paging_sensor(postgres_url, make):
    """Writers on their own connections add distinct and repeated events while a sensor pages
    by cursor: each event is stored once, and the sensor reads each exactly once."""
    bodies = [make.callback(f"rec-{i:03d}", ended_at="2026-01-01T00:00:00.000Z")
              for i in range(240)]
    writers = [open_inbox(postgres_url, create=True) for _ in range(4)]
    sensor = open_inbox(postgres_url)
    seen: list[int] = []
    stop = threading.Event()

    def read() -> None:
        cursor = 0
        while True:
            last_round = stop.is_set()
            events = sensor.after(cursor, limit=7)
            for event in events:
                seen.append(event.id)
                cursor = event.id
            if last_round and not events:
                return
            if not events:
                time.sleep(0.005)

    def write(n: int, inbox) -> None:
        mine = bodies[n * 60:(n + 1) * 60] + bodies[((n + 1) % 4) * 60:((n + 2) % 4) * 60]
        for i in range(0, len(mine), 5):  # small batches, as the receiver groups them
            inbox.add_described([(describe(b), b"{}") for b in mine[i:i + 5]])

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(n, w)) for n, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    reader.join()
    for w in writers:
        w.close()
    with sensor:
        events = sensor.after(0, 10_000)
    assert sorted(e.record for e in events) == [f"rec-{i:03d}" for i in range(240)]
    assert seen == [e.id for e in events]  # every id, once, in order


def test_a_server_that_goes_away_and_comes_back_is_reconnected(make):
    folder = require_bin()
    server = PostgresServer(folder).start()  # its own: the session's must stay up
    try:
        url = server.create_database()
        inbox = open_inbox(url, create=True)
        reader = open_inbox(url)
        assert inbox.add(make.callback("rec-before"))[1]
        server.stop()
        for call in (lambda: inbox.add(make.callback("rec-during")), inbox.check,
                     reader.count, lambda: reader.records(iter(["rec-before"]))):
            with pytest.raises(InboxUnavailable) as info:
                call()
            assert server.password not in str(info.value)
            assert redact(url) in str(info.value)
        server.resume()
        inbox.check()
        assert inbox.add(make.callback("rec-during"))[1]  # the same objects, reconnected
        assert sorted(e.record for e in reader.after(0)) == ["rec-before", "rec-during"]
        assert set(reader.records(iter(["rec-before"]))) == {"rec-before"}
        inbox.close()
        reader.close()
    finally:
        server.remove()


def test_a_customer_no_database_text_can_hold(where_all, make):
    """A NUL in a callback's customer drops the customer (as a number there does); in a
    connection event, whose customer names records, it is refused."""
    with open_inbox(where_all, create=True) as inbox:
        body = make.callback("rec-nul", customer="c\x00x")
        assert inbox.add(body)[1]
        assert inbox.records()["rec-nul"].customer is None
        with pytest.raises(InvalidEvent, match="NUL"):
            inbox.add(make.disconnect("c\x00x", "2026-01-02T00:00:00.000Z"))


@pytest.fixture(params=["sqlite", "postgres"])
def where_all(request, tmp_path):
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return tmp_path / "inbox.sqlite3"


def test_the_inbox_resource_reads_a_postgres_inbox_as_it_reads_a_file(postgres_url, tmp_path,
                                                                     make, monkeypatch):
    """The assets that land what callbacks carry (payments, record status) read either,
    through the one resource over the inbox."""
    payments = ("PAYMENT", "PAYMENT_RECURRING")  # the methods the payments asset reads
    path = tmp_path / "inbox.sqlite3"
    bodies = [make.callback("rec-a", "AUTH", "AUTH_SUCCESS", customer="c1", account="acc-a",
                            ended_at="2026-01-01T00:00:00.000Z"),
              {**make.callback("rec-a", "PAYMENT", "PAYMENT_SUCCESS",
                               ended_at="2026-01-01T01:00:00.000Z"), "paymentId": "pay1"},
              {**make.callback("rec-a", "PAYMENT", "PAYMENT_SUCCESS",
                               ended_at="2026-01-01T01:00:00.000Z"), "paymentId": "pay2"},
              make.callback("rec-b", "INCOME", "INCOME_FAILED", customer="c2",
                            status="is_failed", ended_at="2026-01-01T02:00:00.000Z"),
              make.disconnect("c1", "2026-01-02T00:00:00.000Z", accounts=["acc-a"])]
    for where in (path, postgres_url):
        with open_inbox(where, create=True) as inbox:
            for body in bodies:
                inbox.add(body)
    monkeypatch.setenv("LEDGERLAKE_INBOX", postgres_url)
    # the setting, read when opened: no URL in the resource's config
    with InboxResource(path=str(path)).open() as on_file, InboxResource().open() as in_db:
        assert [p["paymentId"] for p in in_db.payloads("rec-a", payments)] == ["pay1", "pay2"]
        assert in_db.payloads("rec-a", payments) == on_file.payloads("rec-a", payments)
        statuses = in_db.records()
        assert {r: (s.status, s.status_at, sorted(s.products)) for r, s in statuses.items()} \
            == {r: (s.status, s.status_at, sorted(s.products))
                for r, s in on_file.records().items()}
        assert [(r, s.status) for r, s in statuses.items()] == [("rec-a", "disconnected"),
                                                                ("rec-b", "connected")]
        assert statuses["rec-b"].products["INCOME"].code == "INCOME_FAILED"
        # the net under lost runs reads connected records' callbacks by when they came
        announced = in_db.announced(0, 1e12)
        assert [(r, m, p.code) for r, m, p in announced] == [("rec-b", "INCOME",
                                                              "INCOME_FAILED")]
        assert [(r, m, p.event, p.status) for r, m, p in announced] == \
            [(r, m, p.event, p.status) for r, m, p in on_file.announced(0, 1e12)]
        assert in_db.announced(0, announced[0][2].received_at - 1e-3) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batches_store_in_postgres_what_they_store_in_sqlite(postgres_url, tmp_path, make,
                                                             monkeypatch, seed):
    """Postgres stores a batch of callbacks in one string of prepared statements, not event
    by event as SQLite does: the same batches (repeats inside one and across them, products
    out of order, logins that do and do not reconnect, disconnects between callbacks) leave
    the same events, ids, statuses and products in both."""
    monkeypatch.setattr("resources.inbox.store.time.time", lambda: 1_767_225_600.25)
    batches = random_batches(make, seed)
    answers, events, states = [], [], []
    for where in (tmp_path / "inbox.sqlite3", postgres_url):
        with open_inbox(where, create=True) as inbox:
            # the state after each batch: a later event would hide what a batch left wrong
            steps = [(inbox.add_described(batch), inbox.records()) for batch in batches]
            answers.append([answer for answer, _ in steps])
            events.append(inbox.after(0, 10_000))
            states.append([state for _, state in steps])
    assert answers[0] == answers[1]
    assert events[0] == events[1]
    assert states[0] == states[1]
    assert {s.status for state in states[0] for s in state.values()} >= {"connected",
                                                                         "disconnected"}


@pytest.mark.parametrize("value, complaint", [
    ("postgresql://u:pw-xyz@127.0.0.1:port/db", "its port is not a number"),
    ("postgresql://u:pw-xyz@127.0.0.1/db#frag", "without #fragment"),
    ("mysql://u:pw-xyz@127.0.0.1/db", "use a local path, file://, postgresql:// or postgres://"),
])
def test_the_setting_refuses_what_is_no_postgres_url_without_repeating_a_password(value,
                                                                                 complaint):
    from resources.config import ConfigError

    with pytest.raises(ConfigError, match=complaint) as info:
        Settings.from_env({"LEDGERLAKE_INBOX": value})
    assert "pw-xyz" not in str(info.value) and "LEDGERLAKE_INBOX=" in str(info.value)


def test_replay_reads_a_postgres_inbox_and_names_a_missing_one_without_its_password(
        postgres_url, make):
    import subprocess
    import sys

    def replay(*args: str):
        env = {**os.environ, "LEDGERLAKE_INBOX": postgres_url}
        return subprocess.run([sys.executable, "-m", "pipeline.cli", "replay", *args],
                              env=env, capture_output=True, text=True, timeout=120)

    missing = replay("--dry-run")
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"ledgerlake: no inbox in {redact(postgres_url)}: start " \
        "the receiver with --inbox naming this database (or set LEDGERLAKE_INBOX to the " \
        "database it writes)"
    with open_inbox(postgres_url, create=True) as inbox:
        inbox.add(make.callback("rec-late", "AUTH", "AUTH_SUCCESS"))
    done = replay("--dry-run", "--after-minutes", "0")
    assert done.returncode == 0, done.stderr
    assert "record rec-late: no ACCOUNTS, TRANSACTIONS" in done.stdout
    assert "1 records overdue; would trigger 1 in 0 calls" in done.stdout
    assert password(postgres_url) not in done.stdout + done.stderr


def test_a_database_url_names_postgres_in_either_scheme_and_any_case(postgres_url, tmp_path,
                                                                      monkeypatch):
    """`postgres://` is libpq's other spelling; an upper-case scheme, which libpq does not
    read, is still taken for a database (and refused, naming it) rather than as a file name."""
    monkeypatch.chdir(tmp_path)
    rest = postgres_url.split("://", 1)[1]
    for scheme in ("postgresql", "postgres"):
        with open_inbox(f"{scheme}://{rest}", create=True) as inbox:
            assert isinstance(inbox, PostgresInbox)
    for scheme in ("POSTGRESQL", "Postgres"):
        assert is_database_url(f"{scheme}://{rest}")
        with pytest.raises(InboxUnavailable):
            open_inbox(f"{scheme}://{rest}", create=True)
    assert not is_database_url(Path("postgresql://x")) and not is_database_url("pg.sqlite3")
    assert list(tmp_path.iterdir()) == []  # no file was made of a URL
