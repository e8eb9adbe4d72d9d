"""Shared fixtures: real servers on free loopback ports, each in its own child process."""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from assets.publish import FETCH_RETRY
from pipeline.local import Server
from resources.config import Tuning
from resources.inbox.store import _retried
from tests.postgres import PostgresServer, require_bin

# the engine's retries wait seconds, not the production default of minutes: the processes the
# tests start inherit the setting (their definitions hand it to the retry policy), and this
# one's policy is handed it here, as the definitions would
os.environ.setdefault("LEDGERLAKE_RETRY_DELAY_S", "0.5")
FETCH_RETRY.set_first_wait(Tuning.from_env().retry_delay_s)
# the personal-data key of this test session (resources/privacy.py): every process the tests
# start seals with it, and the secret scans look for it
os.environ.setdefault("LEDGERLAKE_PII_KEY", secrets.token_hex(32))
# pytest-xdist's workers set COLUMNS=80, which the servers and commands the tests start would
# inherit (tables then print narrower than in a plain pytest run): every run is the same
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


def chromium() -> str:
    """Debian's chromium, which the browser tests drive (`make test` installs it); the module
    fails without it."""
    found = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
    if not found:
        pytest.fail("no chromium to drive: apt-get install -y chromium (`make test` does)",
                    pytrace=False)
    return found


@dataclass
class Sandbox:
    url: str
    production_key: str
    sandbox_key: str
    data_dir: Path
    server: Server
    frozen: bool = False  # its clock moves only by `clock/advance`

    def api(self, env: str = "sandbox", **kw) -> httpx.Client:
        """A client of one environment's base path, authorized with its key."""
        base, key = (("/sandbox/v2/", self.sandbox_key) if env == "sandbox"
                     else ("/v2/", self.production_key))
        return httpx.Client(base_url=self.url + base, headers={"Authorization": f"Bearer {key}"},
                            **{"timeout": 30, **kw})

    def control(self, path: str, **body) -> dict:
        """A sandbox control (`sandbox/<path>`) of the sandbox environment; its data.

        The truth (`records/ledger`) is only asked of a frozen sandbox: on wall time a line
        can post between the pipeline's pull and the test's reading of the truth."""
        assert self.frozen or path != "records/ledger", "ask the truth of a frozen_sandbox"
        with self.api() as api:
            resp = api.post(f"sandbox/{path}", json=body)
            assert resp.status_code == 200, resp.text
            return resp.json()["data"]

    def customer(self, **spec) -> dict:
        """A new customer of `spec`, once its record's transactions are ready."""
        made = self.control("customers/create", customers=[spec])["customers"][0]
        for _ in range(100):  # the connection completes on its own, right after creation
            with self.api() as api:
                if api.post("transactions/get", json={"record": made["record"],
                                                      "limit": 1}).status_code == 200:
                    return made
            time.sleep(0.1)
        raise AssertionError("the sandbox never made the record's transactions ready")


def start_sandbox(data_dir: Path, *extra: str) -> Sandbox:
    prod, sand = "sk_live_" + secrets.token_hex(12), "sk_test_" + secrets.token_hex(12)
    server = Server("sandbox", "--data-dir", str(data_dir), *extra,
                    env={"LEDGERLAKE_PRODUCTION_KEY": prod, "LEDGERLAKE_SANDBOX_KEY": sand},
                    log_path=data_dir.parent / f"{data_dir.name}.log").start()
    return Sandbox(server.url, prod, sand, data_dir, server, "--freeze-clock" in extra)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """A fresh sandbox for one test."""
    box = start_sandbox(tmp_path / "sandbox")
    try:
        yield box
    finally:
        box.server.stop()


@pytest.fixture
def frozen_sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """A fresh sandbox whose clock stands still (it moves only by `clock/advance`): no line
    posts between a test's reading of the truth and the pipeline's pull."""
    box = start_sandbox(tmp_path / "frozen", "--freeze-clock")
    try:
        yield box
    finally:
        box.server.stop()


@pytest.fixture(scope="module")
def shared_sandbox(tmp_path_factory) -> Iterator[Sandbox]:
    """One sandbox for a whole test module, its own: its tests share its state."""
    box = start_sandbox(tmp_path_factory.mktemp("shared") / "sandbox")
    try:
        yield box
    finally:
        box.server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One private PostgreSQL cluster for the whole session (tests/postgres.py)."""
    server = PostgresServer(require_bin()).start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a new empty database of the session's cluster, for one test."""
    return postgres_server.create_database()


@dataclass
class Receiver:
    url: str
    token: str
    inbox: Path
    server: Server

    @property
    def callback_url(self) -> str:
        return f"{self.url}/callbacks/"


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    token = secrets.token_hex(16)
    inbox = tmp_path / "inbox.sqlite3"
    # a log line per callback (at INFO the receiver writes one per commit), for tests and
    # their failures to read
    server = Server("receiver", "--inbox", str(inbox),
                    env={"LEDGERLAKE_RECEIVER_TOKEN": token, "LEDGERLAKE_LOG_LEVEL": "DEBUG"},
                    log_path=tmp_path / "receiver.log").start()
    try:
        yield Receiver(server.url, token, inbox, server)
    finally:
        server.stop()


# -- callback and connection-event bodies shaped as the service sends them (spec, INTERFACE.md)

_n = itertools.count()


def callback(record: str, method: str = "ACCOUNTS", code: str = "ACCOUNTS_SUCCESS", *,
             status: str = "is_success", ended_at: str | None = None, account: str | None = None,
             customer: str = "cust1", **extra) -> dict:
    body = {
        "method": method, "callback_type": method, "callback_code": code, "type": "CALLBACK",
        "code": code, "env": "production-sandbox", "status": status,
        "started_at": "2026-01-01T00:00:00.000Z",
        "ended_at": ended_at or f"2026-01-01T00:{next(_n) % 60:02d}:00.000Z",
        "message": "", "meta": {}, "options": {}, "extras": {}, "meta_responses": None,
        "bankName": "Sandbox Bank", "record": record, "recordId": record,
        "customerId": customer, "customerEmail": [], "country": "NG", **extra,
    }
    if account:
        body["accountId"] = account
        body["nuban"] = "0123456789"
    return body


def disconnect(customer: str, at: str, accounts: list[str] | None = None) -> dict:
    return {"message": "user disconnected", "event": "USER_DISCONNECT",
            "data": {"accounts": accounts or [], "customer": customer, "disconnected_at": at}}


def reauth(customer: str, at: str) -> dict:
    return {"message": "reauth needed", "event": "USER_REAUTH",
            "data": {"customer": customer, "deauthorized_at": at}}


def record_id() -> str:
    return secrets.token_hex(12)


@pytest.fixture
def make():
    """The body factories, for tests that would rather not import across test folders."""
    class Make:
        pass
    m = Make()
    m.callback, m.disconnect, m.reauth, m.record_id = callback, disconnect, reauth, record_id
    return m


# -- runs over a batch of records, as the sensor, the schedule and `ledgerlake rerun` make them

def connected(inbox_path: Path, records: list[str]) -> str:
    """An inbox at `inbox_path` that knows `records` (an AUTH callback each), connected:
    its path, for an InboxResource."""
    from resources.inbox import open_inbox

    with open_inbox(inbox_path, create=True) as inbox:
        for record in records:
            inbox.add(callback(record, "AUTH", "AUTH_SUCCESS"))
    return str(inbox_path)


def numbers(inbox, records: list[str]) -> list[int]:
    """The records' numbers in `inbox` (an InboxResource), given them if they have none: what
    a run's batch names them by."""
    with inbox.open() as db:
        got = db.numbers(records, create=True)
    return [got[r] for r in records if r in got]


@_retried
def dead_letters(inbox) -> list[tuple[str, bytes]]:
    """The inbox's dead letters, (reason, body) oldest first, read as the inbox's own reads
    are (once more on a lost connection)."""
    with inbox._lock:
        return [(r[0], bytes(r[1])) for r in inbox._db.execute(
            "select reason, body from dead_letters order by id")]


def land(assets: list, records: list[str], resources: dict, **kw):
    """Materialize `assets` in process over one batch of `records` (`dg.materialize`'s other
    arguments in `kw`); `resources` must hold the inbox."""
    import dagster as dg

    from assets.batch import Batch

    batch = Batch(records=numbers(resources["inbox"], records))
    return dg.materialize(assets, resources={**resources, "batch": batch}, **kw)


def noted(lake_root, table: str, run_id: str | None = None) -> list[dict]:
    """The rows runs added to the lake's `landings` or `checks` table (assets/publish.py),
    only those of `run_id` if given, by record, then check (or product), then time."""
    from resources.lake import Lake

    rows = Lake(root=str(lake_root)).read(table)
    rows = [] if rows is None else rows.to_pylist()
    return sorted((r for r in rows if run_id is None or r["run_id"] == run_id),
                  key=lambda r: (r["record_id"], r.get("check_name") or r["product"],
                                 r.get("landed_at") or r["evaluated_at"]))


# -- what the service did with a record's callbacks: a moment to wait on, not a sleep

def deliveries(box: Sandbox, record: str, methods: list[str]) -> dict[str, dict | None]:
    """The sandbox's latest delivery of each of the record's callback `methods` (GET /callback:
    its state pending, acknowledged, dropped or unsent, raised_at, next_attempt_at, attempts),
    None before any; `BALANCE` covers PERIODIC_BALANCE, `TRANSACTIONS` PERIODIC_TRANSACTIONS.
    A receiver stores a callback before it acknowledges it: once the sandbox says
    acknowledged, the inbox holds all that delivery will bring."""
    with box.api() as api:
        return {m: api.get("callback", params={"record": record, "method": m}).json()["data"]
                ["callback"] for m in methods}
