"""Receivers on one Postgres inbox, each its own `ledgerlake receiver` process: deliveries and
redeliveries spread over them are each stored once, the sensor's cursor reads each once, a
database down at start is one line, and a database that goes away and comes back costs 503s
(which the service redelivers) and nothing else. No password in any line they write."""

from __future__ import annotations

import os
import random
import secrets
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson

from pipeline.local import Server
from resources.inbox import open_inbox
from resources.inbox.postgres import redact
from tests.postgres import PostgresServer, free_port, require_bin

HTTP = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=32))


def start_receiver(url: str, token: str, log: Path, *, by_option: bool = False) -> Server:
    """A receiver of the inbox at `url`, named by LEDGERLAKE_INBOX, or by --inbox (which wins
    over a LEDGERLAKE_INBOX naming a file next to its log)."""
    env = {"LEDGERLAKE_RECEIVER_TOKEN": token,
           "LEDGERLAKE_INBOX": str(log.with_suffix(".sqlite3")) if by_option else url}
    args = ("receiver", "--inbox", url) if by_option else ("receiver",)
    return Server(*args, env=env, log_path=log).start()


def post(server: Server, token: str, body: dict) -> httpx.Response:
    return HTTP.post(server.url + "/callbacks/", content=orjson.dumps(body),
                     headers={"Authorization": f"Bearer {token}"})


def no_password_in(password: str, *files: Path, lines: list[str] = ()) -> None:
    for f in files:
        assert password not in f.read_text(errors="replace"), f
    for line in lines:
        assert password not in line


def test_two_receivers_store_each_delivery_and_redelivery_once(postgres_url, tmp_path, make):
    token = secrets.token_hex(16)
    password = postgres_url.split("//")[1].split("@")[0].split(":")[1]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    servers = [start_receiver(postgres_url, token, logs[0]),
               start_receiver(postgres_url, token, logs[1], by_option=True)]
    bodies = [make.callback(f"rec-{i:03d}", ended_at="2026-01-01T00:00:00.000Z")
              for i in range(300)]
    # half of the deliveries to each; every one redelivered to the other, in a random order
    sends = [(i, i % 2) for i in range(300)] + [(i, 1 - i % 2) for i in range(300)]
    random.Random(14).shuffle(sends)
    answers: dict[int, list[dict]] = {i: [] for i in range(300)}
    seen: list[int] = []
    done = threading.Event()

    def sensor() -> None:  # pages by cursor while the receivers write
        with open_inbox(postgres_url) as inbox:
            cursor, last_round = 0, False
            while True:
                events = inbox.after(cursor, limit=13)
                seen.extend(e.id for e in events)
                cursor = events[-1].id if events else cursor
                if last_round and not events:
                    return
                last_round = done.is_set()
                if not events:
                    time.sleep(0.01)

    def send(item: tuple[int, int]) -> None:
        i, which = item
        resp = post(servers[which], token, bodies[i])
        assert resp.status_code == 200, resp.text
        answers[i].append(resp.json())

    try:
        with open_inbox(postgres_url, create=True):  # the reader may start before a receiver
            pass
        reader = threading.Thread(target=sensor)
        reader.start()
        try:
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(send, sends))
        finally:
            done.set()
            reader.join()
    finally:
        for s in servers:
            s.stop()
    # each body: one event, told to both receivers' senders by the same id, new exactly once
    for i, got in answers.items():
        assert len(got) == 2 and got[0]["event"] == got[1]["event"], (i, got)
        assert sorted(a["duplicate"] for a in got) == [False, True], (i, got)
    with open_inbox(postgres_url) as inbox:
        events = inbox.after(0, 10_000)
        assert inbox.count() == 300
    ids = [e.id for e in events]
    assert len(set(ids)) == 300
    assert sorted(e.record for e in events) == [f"rec-{i:03d}" for i in range(300)]
    assert seen == ids  # the cursor read every event exactly once, in order
    no_password_in(password, *logs, lines=servers[0].lines + servers[1].lines)
    assert not logs[1].with_suffix(".sqlite3").exists()


def test_a_database_down_at_start_is_one_line_without_its_password(tmp_path):
    port = free_port()  # nothing listens there
    url = f"postgresql://ledger:s3cr3t-pw-{secrets.token_hex(4)}@127.0.0.1:{port}/inbox"
    password = url.split(":")[2].split("@")[0]
    env = {**os.environ, "LEDGERLAKE_RECEIVER_TOKEN": "t" * 32}
    for args, extra in ((["--inbox", url], {}), ([], {"LEDGERLAKE_INBOX": url})):
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "receiver", "--port", "0",
                               *args], env={**env, **extra}, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith(f"ledgerlake: inbox postgresql://ledger@127.0.0.1:{port}/inbox"
                                   " does not answer: ")
        assert password not in done.stderr + done.stdout
        assert "READY" not in done.stdout


def test_a_database_that_goes_away_costs_503s_and_nothing_else(tmp_path, make):
    folder = require_bin()
    pg = PostgresServer(folder).start()  # its own: the session's cluster must stay up
    token = secrets.token_hex(16)
    log = tmp_path / "receiver.log"
    try:
        url = pg.create_database()
        server = start_receiver(url, token, log)
        try:
            assert HTTP.get(server.url + "/health").status_code == 200
            before = [make.callback(f"rec-before-{i}") for i in range(5)]
            assert {post(server, token, b).status_code for b in before} == {200}

            pg.stop()
            during = [make.callback(f"rec-during-{i}") for i in range(8)]
            with ThreadPoolExecutor(8) as pool:  # concurrent: one batch, or several
                refused = list(pool.map(lambda b: post(server, token, b), during))
            assert {r.status_code for r in refused} == {503}
            assert all(r.headers.get("Retry-After") for r in refused)
            health = HTTP.get(server.url + "/health")
            assert health.status_code == 503 and pg.password not in health.text

            pg.resume()  # on the same port; the receiver finds it again by itself
            assert HTTP.get(server.url + "/health").status_code == 200
            # the service redelivers what was refused, and repeats some of what was not
            again = [post(server, token, b) for b in during + before[:2]]
            assert [r.status_code for r in again] == [200] * 10
            assert [r.json()["duplicate"] for r in again] == [False] * 8 + [True] * 2
        finally:
            server.stop()
        with open_inbox(url) as inbox:
            assert sorted(e.record for e in inbox.after(0)) == sorted(
                [f"rec-before-{i}" for i in range(5)] + [f"rec-during-{i}" for i in range(8)])
        text = log.read_text()
        assert redact(url) in text  # the failures were logged, naming the inbox ...
        no_password_in(pg.password, log, lines=server.lines)  # ... without its password
    finally:
        pg.remove()
