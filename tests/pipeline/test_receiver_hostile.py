"""Nothing one sender does stops the receiver for the others: no body (however deep, large,
malformed or mistyped), no idle or slow connection, no refused write. Each test talks HTTP
to a real `ledgerlake receiver` process, and after each hostile thing a normal callback is
still stored and answered."""

from __future__ import annotations

import copy
import os
import resource
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import psycopg2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.local import Server
from resources.inbox import Inbox
from tests.conftest import Receiver, callback, disconnect, reauth, record_id

HTTP = httpx.Client(timeout=30)
RAW = "@@raw@@"  # a member's value to be replaced by raw JSON text orjson would not write


def post_raw(receiver: Receiver, raw: bytes) -> httpx.Response:
    return HTTP.post(receiver.callback_url, content=raw,
                     headers={"Authorization": f"Bearer {receiver.token}",
                              "Content-Type": "application/json"})


def a_normal_callback_is_stored(receiver: Receiver) -> None:
    record = record_id()
    answer = post_raw(receiver, orjson.dumps(callback(record)))
    assert answer.status_code == 200, answer.text
    assert answer.json()["duplicate"] is False
    with Inbox(receiver.inbox) as inbox:
        assert inbox.payloads(record, ["ACCOUNTS"]), "acknowledged but not in the inbox"


def start(tmp_path: Path, *args: str, env: dict | None = None) -> Receiver:
    """A receiver of an inbox in `tmp_path`, or, when `env` names a LEDGERLAKE_HOME, of the
    home's default inbox."""
    token = secrets.token_hex(16)
    home = (env or {}).get("LEDGERLAKE_HOME")
    inbox = Path(home) / "inbox.sqlite3" if home else tmp_path / "inbox.sqlite3"
    where = () if home else ("--inbox", str(inbox))
    server = Server("receiver", *where, *args,
                    env={"LEDGERLAKE_RECEIVER_TOKEN": token, **(env or {})},
                    log_path=tmp_path / "receiver.log").start()
    return Receiver(server.url, token, inbox, server)


@pytest.fixture(scope="module")
def shared_receiver(tmp_path_factory) -> Iterator[Receiver]:
    receiver = start(tmp_path_factory.mktemp("hostile"))
    try:
        yield receiver
    finally:
        receiver.server.stop()


# -- bodies ---------------------------------------------------------------------------------

def nested(depth: int, kind: str) -> bytes:
    return (b"[" * depth + b"]" * depth if kind == "list"
            else b'{"a":' * depth + b"1" + b"}" * depth)


# raw JSON text for a member's value: what orjson reads but will not write, or does not read
FRAGMENTS = st.one_of(
    st.tuples(st.integers(250, 3000), st.sampled_from(["list", "dict"])).map(
        lambda d: nested(*d)),
    st.sampled_from([b"1e400", b"-1e400", b"1" + b"0" * 400, b"-0.0e-400", b"NaN",
                     b'"\\ud800"', b'"\\udfff\\ud800"', b'"\xed\xa0\x80"', b'"\xff\xfe"',
                     b'"a\\u0000b"', b'"\x00"', b"\x00", b'"\\u0000"']),
    st.integers(1 << 16, 1 << 20).map(lambda n: b'"' + b"x" * n + b'"'),
    st.integers(1 << 14, 1 << 19).map(lambda n: b"[" + b"0," * n + b"0]"),
)
WRONG = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=80),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                             max_size=4),
    max_leaves=8)


def shapes() -> list[dict]:
    """A body of every shape the service sends: callbacks of each kind, connection events."""
    record = "rec-" + secrets.token_hex(4)
    payment = callback(record, "PAYMENT", "PAYMENT_SUCCESS", account="acc1",
                       paymentId="pay1", payment={"_id": "pay1", "status": "successful",
                                                  "amount": 5000, "account": "0123456789"})
    return [callback(record), callback(record, "TRANSACTIONS", "TRANSACTIONS_SUCCESS",
                                       newTransactions=3, account="acc1"),
            payment, disconnect("cust1", "2026-01-01T00:00:00.000Z", ["acc1"]),
            reauth("cust1", "2026-01-01T00:00:00.000Z")]


def members(body: dict, prefix: tuple = ()) -> list[tuple]:
    """The path to every member, nested ones too."""
    paths = []
    for key, value in body.items():
        paths.append((*prefix, key))
        if isinstance(value, dict):
            paths += members(value, (*prefix, key))
    return paths


def with_member(body: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(body)
    at = out
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return out


@st.composite
def hostile_bodies(draw) -> bytes:
    kind = draw(st.sampled_from(["member", "raw member", "whole", "duplicate keys"]))
    body = draw(st.sampled_from(shapes()))
    path = draw(st.sampled_from(members(body)))
    if kind == "member":  # every member of every shape, with a value of a wrong type
        return orjson.dumps(with_member(body, path, draw(WRONG)))
    if kind == "raw member":
        return orjson.dumps(with_member(body, path, RAW)).replace(
            orjson.dumps(RAW), draw(FRAGMENTS))
    if kind == "whole":
        return draw(FRAGMENTS)
    text = orjson.dumps(body)  # the same key twice, the second of another type
    key = orjson.dumps(path[0])
    return text[:-1] + b"," + key + b":" + orjson.dumps(draw(WRONG)) + b"}"


# -- bodies ---------------------------------------------------------------------------------

def test_a_callback_nested_300_deep_is_400_and_the_next_is_stored(shared_receiver):
    # orjson reads 1,024 levels and writes 255: this body describes as a callback, then
    # could not be kept, which killed the writer thread
    raw = orjson.dumps(with_member(callback(record_id()), ("serverResponse",), RAW)).replace(
        orjson.dumps(RAW), nested(300, "list"))
    answer = post_raw(shared_receiver, raw)
    assert answer.status_code == 400
    assert "nested deeper than 255 levels" in answer.json()["error"]
    a_normal_callback_is_stored(shared_receiver)
    assert HTTP.get(shared_receiver.url + "/health").status_code == 200


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=hostile_bodies())
def test_no_body_stops_the_receiver(shared_receiver, raw):
    answer = post_raw(shared_receiver, raw)
    assert answer.status_code in (200, 400, 413), (answer.status_code, answer.text, raw[:200])
    a_normal_callback_is_stored(shared_receiver)


def test_after_every_hostile_body_the_process_and_its_health_stand(shared_receiver):
    # run after the property above in this module (xdist keeps a module on one worker)
    assert shared_receiver.server.proc.poll() is None
    assert HTTP.get(shared_receiver.url + "/health").status_code == 200


def test_a_writer_that_dies_anyway_ends_the_process_at_once(tmp_path):
    # no body reaches this any more: the fault is put inside the child, where the writer
    # stores a group, as a bug there would
    token = secrets.token_hex(16)
    script = ("import pipeline.receiver as r\n"
              "def boom(*a):\n    raise SystemExit('a fault nothing caught')\n"
              "r._store = boom\n"
              "from pipeline.cli import main\n"
              f"main(['receiver', '--inbox', {str(tmp_path / 'i.sqlite3')!r}, '--port', '0'])\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LEDGERLAKE_RECEIVER_TOKEN": token})
    try:
        url = next(line for line in proc.stdout if line.startswith("READY ")).split()[1]
        with pytest.raises(httpx.TransportError):  # the process is gone before it answers
            HTTP.post(url + "/callbacks/", json=callback(record_id()),
                      headers={"Authorization": f"Bearer {token}"})
        assert proc.wait(timeout=30) == 70  # non-zero, for its supervisor to restart it
        assert "exiting (70) so that a supervisor restarts the receiver" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


# -- connections ----------------------------------------------------------------------------

def test_idle_and_slow_connections_cannot_lock_callbacks_out(tmp_path):
    receiver = start(tmp_path, "--header-timeout", "3")
    host, port = receiver.url.removeprefix("http://").rsplit(":", 1)
    try:
        idle = [socket.create_connection((host, int(port))) for _ in range(1000)]
        slow_body = socket.create_connection((host, int(port)))
        record = record_id()
        body = orjson.dumps(callback(record))
        slow_body.sendall(b"POST /callbacks/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                          + receiver.token.encode() + b"\r\nContent-Type: application/json\r\n"
                          + b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
        slow_headers = socket.create_connection((host, int(port)))
        slow_headers.sendall(b"POST /callbacks/ HTTP/1.1\r\n")

        # over uvicorn's old connection limit (256) and a real callback is still stored
        a_normal_callback_is_stored(receiver)

        # the late ones are closed by the server: headers not sent in 3 s, a body that
        # stopped, headers that dribble in a byte a second
        for sock in [*idle, slow_body, slow_headers]:
            sock.settimeout(60)
        for _ in range(6):
            try:
                slow_headers.sendall(b"X")
            except OSError:  # closed already
                break
            time.sleep(1)
        for sock in [*idle, slow_body, slow_headers]:
            try:
                assert sock.recv(1024) == b""  # closed, not answered
            except ConnectionResetError:
                pass
        with Inbox(receiver.inbox) as inbox:
            assert not inbox.payloads(record, ["ACCOUNTS"]), "half a body was stored"
        a_normal_callback_is_stored(receiver)
    finally:
        for sock in [*idle, slow_body, slow_headers]:
            sock.close()
        receiver.server.stop()


def test_a_body_that_keeps_the_floor_rate_is_stored(tmp_path):
    receiver = start(tmp_path, "--header-timeout", "1", "--min-body-rate", "100")
    host, port = receiver.url.removeprefix("http://").rsplit(":", 1)
    record = record_id()
    body = orjson.dumps(callback(record))
    try:
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /callbacks/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                         + receiver.token.encode() + b"\r\nContent-Type: application/json\r\n"
                         + b"Content-Length: %d\r\n\r\n" % len(body))
            # slower than the header timeout as a whole, faster than 100 bytes a second
            for i in range(0, len(body), 200):
                sock.sendall(body[i:i + 200])
                time.sleep(0.5)
            sock.settimeout(30)
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
        with Inbox(receiver.inbox) as inbox:
            assert inbox.payloads(record, ["ACCOUNTS"])
    finally:
        receiver.server.stop()


# -- health on refused writes ---------------------------------------------------------------

def test_health_is_503_while_the_disk_refuses_writes(tmp_path):
    receiver = start(tmp_path)
    pid = receiver.server.proc.pid
    limit = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    try:
        a_normal_callback_is_stored(receiver)
        # a file-size limit of 1 byte: every write the process makes past the first byte of
        # a file fails (EFBIG), as on a full disk
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, limit[1]))
        refused = post_raw(receiver, orjson.dumps(callback(record_id())))
        assert refused.status_code == 503
        assert HTTP.get(receiver.url + "/health").status_code == 503
        resource.prlimit(pid, resource.RLIMIT_FSIZE, limit)
        assert HTTP.get(receiver.url + "/health").status_code == 200  # its probe now commits
        a_normal_callback_is_stored(receiver)
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, limit)
        receiver.server.stop()


def test_health_is_503_while_postgres_refuses_writes(postgres_server, postgres_url, tmp_path):
    token = secrets.token_hex(16)
    server = Server("receiver", env={"LEDGERLAKE_RECEIVER_TOKEN": token,
                                     "LEDGERLAKE_INBOX": postgres_url},
                    log_path=tmp_path / "receiver.log").start()
    database = postgres_url.rsplit("/", 1)[1].split("?")[0]

    def read_only(on: bool) -> None:
        admin = psycopg2.connect(postgres_server.url())
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute(f'alter database "{database}" '
                        + ("set default_transaction_read_only = on" if on
                           else "reset default_transaction_read_only"))
            # the receiver's sessions end; the ones it opens next read the setting
            cur.execute("select pg_terminate_backend(pid) from pg_stat_activity"
                        " where datname = %s and pid <> pg_backend_pid()", (database,))
        admin.close()

    def post(body: dict) -> httpx.Response:
        return HTTP.post(server.url + "/callbacks/", json=body,
                         headers={"Authorization": f"Bearer {token}"})

    try:
        assert post(callback(record_id())).status_code == 200
        read_only(True)
        answers = [post(callback(record_id())).status_code for _ in range(3)]
        assert 200 not in answers and set(answers) <= {503}
        assert HTTP.get(server.url + "/health").status_code == 503  # reads still work
        read_only(False)
        health = [HTTP.get(server.url + "/health").status_code for _ in range(3)]
        assert health[-1] == 200, health  # a dropped session is reconnected on the way
        assert post(callback(record_id())).status_code == 200
    finally:
        read_only(False)
        server.stop()


# -- the token ------------------------------------------------------------------------------

def test_the_token_never_comes_from_the_command_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LEDGERLAKE_RECEIVER_TOKEN"}
    cli = [sys.executable, "-m", "pipeline.cli", "receiver", "--inbox",
           str(tmp_path / "i.sqlite3"), "--port", "0"]
    given = subprocess.run([*cli, "--token", "s3cret"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert given.returncode == 2
    assert "--token shows the token in the process list" in given.stderr
    assert "s3cret" not in given.stderr
    (tmp_path / "empty").write_text("\n")
    empty = subprocess.run([*cli, "--token-file", str(tmp_path / "empty")], env=env,
                           capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2 and "the token file is empty" in empty.stderr
    missing = subprocess.run([*cli, "--token-file", str(tmp_path / "nope")], env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "No such file" in missing.stderr
    assert not (tmp_path / "i.sqlite3").exists()  # nothing made


def test_the_data_home_and_the_inbox_are_the_users_alone(tmp_path):
    home = tmp_path / "home"  # not there yet: the receiver makes it
    receiver = start(tmp_path, env={"LEDGERLAKE_HOME": str(home)})
    try:
        a_normal_callback_is_stored(receiver)
    finally:
        receiver.server.stop()
    inbox = home / "inbox.sqlite3"
    made = [home, *home.rglob("*")]
    assert inbox in made
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in made} == {
        p.name: ("0o700" if p.is_dir() else "0o600") for p in made}
