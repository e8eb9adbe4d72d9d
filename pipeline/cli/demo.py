"""`make demo` and `ledgerlake dev`: the whole flow on this machine, sandbox as the upstream."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from dagster import DagsterInstance

from pipeline.cli import devstack
from pipeline.local import Server, one_box_pools
from resources.config import home_from_env
from resources.privacy import new_key

MARKER = ".ledgerlake-demo"
SUMMARY = """
select a.record_id,
       count(distinct a.account_id) as accounts,
       (select count(*) from transactions t where t.record_id = a.record_id) as transactions,
       (select round(sum(b.ledger_balance), 2) from balances b
         where b.record_id = a.record_id) as balance_ngn,
       (select i.average_monthly_income from income_summary i
         where i.record_id = a.record_id) as monthly_income_ngn
from accounts a
group by a.record_id
order by a.record_id
"""
# identity as analysts read it: the BVN, phones and emails masked (docs/privacy.md)
IDENTITY = """
select record_id, customer_id, fullname, bvn, phones, emails, birth_year
from identity
order by record_id
"""
REPO = Path(__file__).resolve().parents[2]


def _print_demo(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def prepare_home(home: Path) -> None:
    """Start the demo's data folder fresh, refusing to wipe a folder the demo did not make."""
    if home.exists() and any(home.iterdir()) and not (home / MARKER).exists():
        raise SystemExit(f"ledgerlake: {home} holds data the demo did not make; "
                         "pass --home or set LEDGERLAKE_HOME to another folder")
    for sub in ("lake", "sandbox", "dagster", "logs"):
        shutil.rmtree(home / sub, ignore_errors=True)
    for f in ("inbox.sqlite3", "inbox.sqlite3-wal", "inbox.sqlite3-shm", "warehouse.duckdb"):
        (home / f).unlink(missing_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    (home / MARKER).touch()


def dagster_home(home: Path) -> Path:
    path = home / "dagster"
    path.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", path / "dagster.yaml")
    with DagsterInstance.from_config(str(path)) as instance:
        one_box_pools(instance)
    return path


def start_upstream(home: Path, sandbox_port: int = 0, receiver_port: int = 0):
    """Sandbox and receiver as child processes, the webhook pointed at the receiver."""
    keys = {"LEDGERLAKE_SANDBOX_KEY": "sk_test_" + secrets.token_hex(16),
            "LEDGERLAKE_PRODUCTION_KEY": "sk_live_" + secrets.token_hex(16)}
    token = secrets.token_hex(16)
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    sandbox = Server("sandbox", "--data-dir", str(home / "sandbox"), "--port", str(sandbox_port),
                     env=keys, log_path=logs / "sandbox.log").start()
    try:
        receiver = Server("receiver", "--inbox", str(home / "inbox.sqlite3"),
                          "--port", str(receiver_port),
                          env={"LEDGERLAKE_RECEIVER_TOKEN": token},
                          log_path=logs / "receiver.log").start()
    except BaseException:
        sandbox.stop()
        raise
    api = httpx.Client(base_url=f"{sandbox.url}/sandbox/v2/", timeout=30,
                       headers={"Authorization": f"Bearer {keys['LEDGERLAKE_SANDBOX_KEY']}"})
    api.post("settings/webhook", json={"url": f"{receiver.url}/callbacks/", "token": token}
             ).raise_for_status()
    # every location pinned under `home`: a LEDGERLAKE_LAKE (say s3://) or LEDGERLAKE_INBOX
    # left in the shell must not send the demo's data elsewhere or read another inbox
    env = {"LEDGERLAKE_API_URL": sandbox.url, "LEDGERLAKE_ENVIRONMENT": "sandbox",
           "LEDGERLAKE_SECRET_KEY": keys["LEDGERLAKE_SANDBOX_KEY"],
           "LEDGERLAKE_HOME": str(home), "LEDGERLAKE_LAKE": str(home / "lake"),
           "LEDGERLAKE_WAREHOUSE": str(home / "warehouse.duckdb"),
           "LEDGERLAKE_INBOX": str(home / "inbox.sqlite3"),
           # the alerts sensor and `ledgerlake metrics` watch this receiver's /health
           "LEDGERLAKE_RECEIVER_URL": receiver.url}
    return sandbox, receiver, api, env


def create_customers(api: httpx.Client, n: int) -> list[str]:
    """`n` sandbox customers of one to three accounts; their record ids."""
    made = api.post("sandbox/customers/create",
                    json={"customers": [{"accounts": 1 + i % 3} for i in range(n)]})
    return [c["record"] for c in made.raise_for_status().json()["data"]["customers"]]


def wait_for_events(inbox_path: Path, expected: int, timeout_s: float = 60.0,
                    settle_s: float = 0.0) -> int:
    """Wait until the inbox holds `expected` events, then until it stops growing for
    `settle_s` (a connection's callbacks come in a burst). Returns the count."""
    from resources.inbox import Inbox

    deadline = time.monotonic() + timeout_s
    with Inbox(inbox_path, create=True) as inbox:  # the receiver may not have written yet
        while (n := inbox.count()) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        quiet_since = time.monotonic()
        while settle_s and time.monotonic() - quiet_since < settle_s \
                and time.monotonic() < deadline:
            time.sleep(0.2)
            if (m := inbox.count()) != n:
                n, quiet_since = m, time.monotonic()
        return n


def run_demo(customers: int = 3, home: Path | None = None) -> int:
    home = home.resolve() if home else home_from_env()
    prepare_home(home)
    _print_demo(f"data folder {home}")
    sandbox, receiver, api, env = start_upstream(home)
    try:
        _print_demo(f"sandbox at {sandbox.url}, receiver at {receiver.url}")
        os.environ.update(env)
        new_key(exist_ok=True)  # the personal-data key, made only by demo, dev, `keys new`
        os.environ["DAGSTER_HOME"] = str(dagster_home(home))
        records = create_customers(api, customers)
        _print_demo(f"created {len(records)} customers; waiting for their callbacks")
        got = wait_for_events(home / "inbox.sqlite3", len(records), settle_s=2.0)
        _print_demo(f"inbox holds {got} callbacks")

        from pipeline.definitions import defs
        from pipeline.local import QUIET, drain

        with DagsterInstance.get() as instance:
            run_ids = drain(defs, instance)
            failed = [r for r in run_ids
                      if not instance.get_run_by_id(r).is_success]
            _print_demo(f"sensor requested {len(run_ids)} runs; {len(failed)} failed")
            out = defs.resolve_job_def("warehouse_job").execute_in_process(
                instance=instance, run_config=QUIET, raise_on_error=False)
            # the freshness checks as the daemon runs them hourly: the UI shows them evaluated
            fresh = defs.resolve_job_def("freshness_job").execute_in_process(
                instance=instance, run_config=QUIET, raise_on_error=False)
            if failed or not out.success or not fresh.success:
                _print_demo("a run failed: see the Dagster UI (`ledgerlake dev`) for its logs")
                return 1
    finally:
        api.close()
        receiver.stop()
        sandbox.stop()

    _print_demo("the warehouse answers, per record:")
    subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", SUMMARY,
                    "--warehouse", str(home / "warehouse.duckdb")], check=True)
    _print_demo("identity as analysts see it: BVN, phones and emails masked, the raw values "
                "sealed:")
    subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", IDENTITY,
                    "--warehouse", str(home / "warehouse.duckdb")], check=True)
    # the demo's records stay connected (its sandbox is gone): forgetting one says so
    _print_demo(f"forget a customer (erasure on request; docs/privacy.md): .venv/bin/ledgerlake "
         f"forget --customer {_a_customer(home / 'warehouse.duckdb')} --even-connected")
    _print_demo(f"lake      {home / 'lake'}")
    _print_demo(f"warehouse {home / 'warehouse.duckdb'}")
    _print_demo('try: .venv/bin/ledgerlake sql "select * from monthly_cashflow order by month"')
    _print_demo("     .venv/bin/ledgerlake status       (each record's products, from the inbox)")
    _print_demo("link a bank by hand in the browser: `make dev` prints the connect page's URL, and "
         "the Dagster UI shows the run that lands it")
    return 0


def _a_customer(warehouse: Path) -> str:
    """A customer id the demo landed, for the hint it prints."""
    import duckdb

    with duckdb.connect(str(warehouse), read_only=True) as con:
        row = con.execute("select customer_id from identity order by record_id limit 1").fetchone()
    return row[0] if row else "<customer id>"


def run_dev(port: int = 3000, customers: int = 3, sandbox_port: int = 0,
            receiver_port: int = 0) -> int:
    """Sandbox and receiver (free ports unless given), a few customers, then `dagster dev` on
    the same data until SIGINT or SIGTERM, which stop all of it, in the foreground or the
    background: the daemon's sensor picks their callbacks up from the inbox."""
    home = home_from_env()
    home.mkdir(parents=True, exist_ok=True)
    sandbox, receiver, api, env = start_upstream(home, sandbox_port, receiver_port)
    try:
        if customers:
            create_customers(api, customers)
        # the hosted connect page, where a user links a bank (docs/interface.md)
        connect = api.post("settings/connect", json={}).json()["data"]
    finally:
        api.close()
    key = env["LEDGERLAKE_SECRET_KEY"]  # this run's throwaway sandbox key, not a real secret
    print(f"data       {home}  (lake, inbox, warehouse, logs)\n"
          f"sandbox    {sandbox.url}/sandbox/v2/  (key for this run: {key})\n"
          f"connect    {connect['demo_url']}  (link a bank in the browser)\n"
          f"receiver   {receiver.url}/callbacks/\n"
          f"Dagster UI http://127.0.0.1:{port}\n"
          f"{customers} customers created; more with:\n"
          f"  curl -s -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' "
          f"-d '{{\"customers\": [{{\"accounts\": 2}}]}}' "
          f"{sandbox.url}/sandbox/v2/sandbox/customers/create", flush=True)
    child_env = {**os.environ, **env, "DAGSTER_HOME": str(dagster_home(home)),
                 # `dagster dev` is what the README and workspace.yaml serve, not yet `dg dev`
                 "PYTHONWARNINGS": "ignore:Function `dev_command` is superseded"}
    new_key(child_env, exist_ok=True)
    # tells `ledgerlake sql` beside it that the views are on their way
    stack_file = devstack.announce(home, f"http://127.0.0.1:{port}")
    # its own process group: a signal to us reaches dagster dev (and the webserver, daemon and
    # code servers it starts) as a SIGINT, its own way to stop them all; a shell's background
    # job ignores SIGINT, so both signals are taken here, whatever was inherited
    dev = subprocess.Popen([str(Path(sys.executable).with_name("dagster")), "dev", "-w",
                            str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
                           env=child_env, cwd=home, start_new_session=True)
    asked: list[float] = []

    def stop(*_) -> None:  # 6 s after a stop was asked for, whatever is left is killed
        asked.append(time.monotonic())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(dev.pid, signal.SIGINT)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    try:
        while (code := dev.poll()) is None and not (asked and time.monotonic() - asked[0] > 6):
            with contextlib.suppress(subprocess.TimeoutExpired):
                dev.wait(timeout=0.5)
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left of it: gone
            os.killpg(dev.pid, signal.SIGKILL)
        dev.wait()
        stack_file.unlink(missing_ok=True)
        receiver.stop()
        sandbox.stop()
    return 0 if asked or code == 0 else code
