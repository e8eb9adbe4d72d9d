"""Forgetting a person (pipeline/forget.py, `ledgerlake forget`): every row of their records
leaves every version of every lake table and the warehouse, another customer's stay, the
audit keeps ids and counts only, a killed pass is finished by running it again, and a
disconnect forgets by itself only when told to. A real lake, the real command as its own
process, a real SQLite inbox; nothing mocked."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import orjson
import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from assets import identity as identity_module
from assets import publish as publish_module
from assets.accounts import accounts as accounts_asset
from assets.derived import DERIVED
from assets.warehouse import LAKE_TABLES, PUBLISH_ATTEMPTS, Warehouse, publish
from pipeline.forget import BY_CUSTOMER, TABLES, audit, forget, records_of
from pipeline.jobs import forget_job
from pipeline.sensors import plan
from resources import delta
from resources.client.resource import ConnectionClient
from resources.config import ConfigError, Settings, Tuning
from resources.inbox import LandingState, open_inbox
from resources.inbox.postgres import ERASURE_LOCK
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.privacy import CLASSES, PUBLIC, Keys, protect, protect_narrations
from sandbox import datagen
from tests.assets.test_products import create
from tests.conftest import callback, connected, dead_letters, disconnect, land, reauth
from tests.ground_truth import holding
from tests.resources.test_inbox_postgres import advisory_pids
from tests.resources.test_inbox_postgres import gone as gone_pids
from tests.resources.test_privacy import found

REPO = Path(__file__).resolve().parents[2]
ERASABLE = [t for t in LAKE_TABLES if t not in ("erasures", "reveals")]  # what forget erases
MONEY = pa.decimal128(18, 2)
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

A, B = "cust_ada", "cust_bola"
R1, R2, R3 = "rec_a1", "rec_a2", "rec_b1"  # A has R1 and R2 (two banks), B has R3
OWNER = {R1: A, R2: A, R3: B}
PEOPLE = {A: ("Zinnia", "Marigold", "Quarterbridge", "22730164958"),
          B: ("Bolanle", "Temitope", "Ironwood", "22511907346")}
NUBAN = {R1: "7301946285", R2: "7301946286", R3: "8402057396"}


def keys() -> Keys:
    return Keys.from_env()  # the session's LEDGERLAKE_PII_KEY (tests/conftest.py)


def needles(customer: str) -> list[str]:
    """Strings only this customer's rows hold: their BVN's hash, names, account numbers."""
    first, middle, last, bvn = PEOPLE[customer]
    return [keys().hash(bvn), first, middle, last, *(NUBAN[r] for r in NUBAN
                                                     if OWNER[r] == customer)]


def rows(table: str, items: list[dict]) -> pa.Table:
    """Rows of a lake table, the columns not given null."""
    schema = LAKE_TABLES[table]
    return pa.Table.from_pylist([{n: i.get(n) for n in schema.names} for i in items],
                                schema=schema)


def record_rows(record: str, gen: int) -> dict[str, pa.Table]:
    """A record's rows of every erasable table (`gen` tells the two writes apart)."""
    customer = OWNER[record]
    first, middle, last, bvn = PEOPLE[customer]
    account, when = f"acct_{record}", T0 + timedelta(days=gen)
    item = {**datagen.identity(3, customer, f"{first} {last}"), "customer": customer,
            "bvn": bvn, "middlename": middle, "fullname": f"{first} {middle} {last}"}
    money = {"available_balance": Decimal(f"{1000 + gen}.25"),
             "ledger_balance": Decimal(f"{1000 + gen}.25")}
    return {
        "identity": protect(identity_module.to_table([item]), keys(), identity_module.SCHEMA),
        "accounts": rows("accounts", [{
            "account_id": account, "nuban": NUBAN[record], "name": f"{first} {last}".upper(),
            "type": "SAVINGS", "currency": "NGN", "customer_id": customer,
            "customer_name": f"{first} {last}", "created_at": T0, "last_updated": when}]),
        "transactions": protect_narrations(rows("transactions", [{  # as the asset keeps them
            "transaction_id": f"tx_{record}_{n}", "account_id": account,
            "customer_id": customer, "trans_date": T0 - timedelta(days=n),
            "amount": Decimal(f"-{n + gen}.50"), "currency": "NGN",
            "narration": f"TRF FROM {last.upper()} {first.upper()} {NUBAN[record]}"}
            for n in range(3)]).drop_columns(["narration_sealed"]), keys()),
        "balance_history": rows("balance_history", [{
            "account_id": account, "fetched_at": when, "currency": "NGN", "source": "callback",
            **money}]),
        "balance_periodic": rows("balance_periodic", [{
            "account_id": account, "date": (T0 + timedelta(days=d)).date(), **money}
            for d in range(2)]),
        # as the warehouse's build derives them (assets/derived.py)
        "daily_balances": rows("daily_balances", [{
            "account_id": account, "date": (T0 + timedelta(days=d)).date(), "source": "periodic",
            "carried_forward": False, **money} for d in range(2)]),
        "latest_balances": rows("latest_balances", [{
            "account_id": account, "fetched_at": when, "currency": "NGN", "source": "callback",
            **money}]),
        "monthly_cashflow": rows("monthly_cashflow", [{
            "account_id": account, "month": T0.date().replace(day=1), "currency": "NGN",
            "transactions": 3, "inflow": Decimal("0.00"),
            "outflow": Decimal(f"{4.5 + 3 * gen}"),
            "net": -Decimal(f"{4.5 + 3 * gen}")}]),
        "income": rows("income", [{
            "income_id": f"inc_{record}", "customer_id": customer, "confidence": 0.9,
            "average_monthly_income": Decimal("250000.00"), "created_at": when}]),
        "income_streams": rows("income_streams", [{
            "stream_id": f"st_{record}", "account_ids": [account], "type": "SALARY",
            "monthly_amount": Decimal("250000.00"), "source_name": f"{last} Holdings Ltd"}]),
        "payments": rows("payments", [{
            "payment_id": f"pay_{record}", "status": "successful", "amount": Decimal("5000.00"),
            "currency": "NGN", "debit_account": NUBAN[record], "created_at": when}]),
        # what the inbox says of the record, and what the pipeline noted of each landing and
        # check of it
        "records": rows("records", [{
            "record_id": record, "status": "connected", "status_at": T0,
            "accounts_code": "ACCOUNTS_SUCCESS", "accounts_at": when}]),
        "landings": rows("landings", [{
            "product": "accounts", "run_id": f"run-{gen}", "landed_at": when,
            "outcome": "landed", "row_count": 1, "lake_table": "accounts"}]),
        "checks": rows("checks", [{
            "product": "accounts", "check_name": "account_has_record", "run_id": f"run-{gen}",
            "evaluated_at": when, "passed": True, "blocking": True, "problem_count": 0}]),
    }


def write_lake(root: Path) -> Lake:
    """Every record's rows of every erasable table, written twice (replaced; balances and the
    landings and checks appended), so that files of older versions hold the rows too."""
    lake = Lake(root=str(root))
    for gen in range(2):
        parts = {r: record_rows(r, gen) for r in OWNER}
        for table in ERASABLE:
            by_record = {r: parts[r][table] for r in OWNER}
            if table == "records":  # rebuilt whole from the inbox, not kept by record
                lake.write(table, None, pa.concat_tables(by_record.values()))
            elif table in ("balance_history", "landings", "checks"):
                lake.append(table, by_record, LAKE_TABLES[table])
            else:
                lake.replace(table, by_record, LAKE_TABLES[table])
    return lake


@pytest.fixture
def home(tmp_path) -> dict:
    """A lake of A's two records and B's one, its warehouse, and the command's environment
    (no inbox file: `forget` reads a missing inbox as no record connected)."""
    write_lake(tmp_path / "lake")
    publish(tmp_path / "lake", tmp_path / "warehouse.duckdb")  # derived as the build does
    env = {**os.environ, "LEDGERLAKE_HOME": str(tmp_path / "home"),
           "LEDGERLAKE_LAKE": str(tmp_path / "lake"),
           "LEDGERLAKE_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
           "LEDGERLAKE_INBOX": str(tmp_path / "inbox.sqlite3")}
    env.pop("LEDGERLAKE_FORGET_ON_DISCONNECT", None)
    return {"root": tmp_path, "lake": Lake(root=str(tmp_path / "lake")), "env": env,
            "warehouse": tmp_path / "warehouse.duckdb"}


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def counts(lake: Lake) -> dict[tuple[str, str], int]:
    """Rows of each (table, record) in the tables' latest versions."""
    out = {}
    for table in ERASABLE:
        ids = delta.read(lake.table_uri(table), columns=["record_id"])["record_id"]
        for item in pc.value_counts(ids).to_pylist():
            out[(table, item["values"])] = item["counts"]
    return out


def of(counted: dict, *records: str) -> dict:
    return {k: n for k, n in counted.items() if k[1] in records}


def in_views(warehouse: Path) -> dict[str, set[str]]:
    """The records each view over a record's rows shows."""
    views = ["accounts", "transactions", "balance_history", "identity", "income_summary",
             "income_streams", "payments", "records", "landings", "checks"]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return {v: {r for (r,) in con.execute(f"select distinct record_id from {v}").fetchall()}
                for v in views}


def state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` (the lake, the warehouse) with its size and modification."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def erasures_of(lake: Lake, subject_id: str) -> list[dict]:
    table = audit(lake)
    return [] if table is None else [r for r in table.to_pylist()
                                     if r["subject_id"] == subject_id]


def test_forget_a_customer_erases_every_version_and_keeps_the_others(home):
    lake, root = home["lake"], home["root"]
    before = counts(lake)
    assert of(before, R1, R2) and of(before, R3)
    # every table holds A's rows, in files of both versions: the scan sees them
    seen = found(root / "lake", needles(A))
    assert {n for hits in seen.values() for n in hits} == set(needles(A))
    assert len([p for p in seen if p.startswith("accounts/") and p.endswith(".parquet")]) >= 2

    out = cli(home["env"], "forget", "--customer", A)
    assert out.returncode == 0, out.stderr
    assert f"forgot customer {A}: 2 record(s)" in out.stdout
    for table in ERASABLE:  # a progress line per table
        assert f"  {table}: " in out.stderr

    # nothing of A left in any file of any version, the log or the warehouse file
    assert found(root / "lake", needles(A)) == {}
    assert found(root, needles(A)) == {}
    assert found(root / "lake", needles(B))  # B's still are
    after = counts(lake)
    assert of(after, R1, R2) == {} and after == of(before, R3)
    views = in_views(home["warehouse"])
    assert views == {v: {R3} for v in views}
    assert records_of(lake, A) == [] and records_of(lake, B) == [R3]
    # B's sealed values were rewritten with the files that held A's rows: they still open
    revealed = cli(home["env"], "reveal", "--customer", B)
    assert revealed.returncode == 0, revealed.stderr
    assert f'"bvn":"{PEOPLE[B][3]}"' in revealed.stdout
    gone = cli(home["env"], "reveal", "--customer", A)
    assert gone.returncode == 1 and f"nothing sealed of customer {A}" in gone.stderr

    # the audit: A's records per table, the counts, nothing personal
    (erasure,) = {r["erasure_id"] for r in erasures_of(lake, A)}
    # first what the pass was about to erase (no table, not finished), then what it did
    assert {(r["record_id"], r["lake_table"]) for r in erasures_of(lake, A)
            if r["finished_at"] is None} == {(R1, None), (R2, None)}
    rows_ = [r for r in erasures_of(lake, A) if r["finished_at"] is not None]
    assert {(r["record_id"], r["lake_table"]) for r in rows_} == {
        (r, t) for r in (R1, R2) for t in ERASABLE}
    assert all(r["subject"] == "customer" and r["reason"] == "request" and r["finished_at"]
               and r["requested_at"] <= r["finished_at"] for r in rows_)
    deleted = {t: sum(r["rows_deleted"] for r in rows_ if r["lake_table"] == t)
               for t in ERASABLE}
    assert deleted == {t: before.get((t, R1), 0) + before.get((t, R2), 0) for t in ERASABLE}
    assert all(sum(r["files_purged"] for r in rows_ if r["lake_table"] == t) >= 1
               for t in ERASABLE)  # the older version's file, at least
    assert erasure in out.stdout
    assert all(cls == PUBLIC for cls in CLASSES["erasures"].values())
    assert found(root / "lake" / "erasures", needles(A)) == {}

    # again: nothing more to erase, and it says so
    again = cli(home["env"], "forget", "--customer", A)
    assert again.returncode == 0, again.stderr
    assert f"forgot customer {A}: 0 record(s), 0 rows deleted, 0 files purged" in again.stdout
    assert counts(lake) == after
    assert len({r["erasure_id"] for r in erasures_of(lake, A)}) == 2


def test_time_travel_to_before_an_erasure_names_it(home):
    """Not the vacuum: the erasure, by its id, whatever the version or the time asked. The
    table's history starts again after it: its log names none of the erased records."""
    lake, env = home["lake"], home["env"]
    before, between = lake.version("accounts"), datetime.now(UTC)
    out = cli(env, "forget", "--customer", A)
    assert out.returncode == 0, out.stderr
    (erasure,) = {r["erasure_id"] for r in erasures_of(lake, A)}
    for as_of in (f"accounts={before}", between.isoformat()):
        told = cli(env, "sql", "select count(*) from accounts", "--as-of", as_of)
        assert told.returncode == 2, told.stderr
        assert f"history before erasure {erasure} (of customer {A}, " in told.stderr
        assert "ledgerlake forget" in told.stderr and "vacuum" not in told.stderr
    # the delete, then the commit the history starts at
    assert {r["lake_version"] for r in erasures_of(lake, A) if r["files_purged"]
            and r["lake_table"] not in DERIVED} == {before + 2}  # derived: once more written
    logs = b"".join(p.read_bytes() for p in (home["root"] / "lake" / "accounts" /
                                             "_delta_log").glob("*.json"))
    assert logs and not [r for r in (R1, R2) if r.encode() in logs]
    after = cli(env, "sql", "select count(*) as n from accounts", "--format", "csv",
                "--as-of", f"accounts={before + 2}")
    assert after.returncode == 0 and after.stdout.split() == ["n", "1"], after.stderr


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_forget_empties_the_inbox_of_the_records_and_keeps_the_others(home, request, store):
    """Events and their bodies (A's that names no record too), statuses, products, landing
    states, dead letters: none of A's records left; B's all there; the audit counts them. The
    SQLite file keeps no byte of them."""
    env = home["env"]
    if store == "postgres":
        env = {**env, "LEDGERLAKE_INBOX": request.getfixturevalue("postgres_url")}
    with open_inbox(env["LEDGERLAKE_INBOX"], create=True) as inbox:
        # before any record of A was known: it names A and applies to no record
        inbox.add(reauth(A, "2026-01-01T00:00:00.000Z"))
        for record in (R1, R2, R3):
            inbox.add(callback(record, "AUTH", "AUTH_SUCCESS", customer=OWNER[record]))
            inbox.add(callback(record, "BALANCE", "BALANCE_SUCCESS", customer=OWNER[record],
                               account=f"acct_{record}"))
            inbox.save_landings([LandingState(record, "balances", "landed", "run-1", 1.0)])
            inbox.dead_letter("bad", f'{{"recordId": "{record}"}}'.encode())
        inbox.add(disconnect(A, "2026-01-02T00:00:00.000Z", [f"acct_{R1}", f"acct_{R2}"]))
        inbox.add(disconnect(B, "2026-01-02T00:00:00.000Z", [f"acct_{R3}"]))
        assert inbox.of_customer(A) == [R1, R2]
        # open meanwhile, as a receiver's is: the forget's connection is not the last
        out = cli(env, "forget", "--customer", A, "--even-connected")
        assert out.returncode == 0, out.stderr
        if store == "sqlite":  # deleted content overwritten, the write-ahead log emptied
            hits = found(home["root"], [A, R1, R2])
            assert [p for p in hits if p.startswith("inbox.sqlite3")] == []
    # 6 events, 2 statuses, 2 numbers, 4 products, 2 landing states, 2 dead letters
    assert "  inbox: 18 rows deleted" in out.stderr
    with open_inbox(env["LEDGERLAKE_INBOX"]) as inbox:
        assert [(e.record, e.records) for e in inbox.after(0)] == [(R3, (R3,))] * 2 + [
            (None, (R3,))]
        assert list(inbox.records()) == [R3] and inbox.of_customer(A) == []
        assert [x.record for x in inbox.landings()] == [R3]
        assert dead_letters(inbox) == [("bad", f'{{"recordId": "{R3}"}}'.encode())]
    inboxes = {(r["record_id"], r["rows_deleted"]) for r in erasures_of(home["lake"], A)
               if r["lake_table"] == "inbox"}
    assert inboxes == {(R1, 18), (R2, 0)}  # the counts on the first record's row
    assert of(counts(home["lake"]), R1, R2) == {}  # the lake's `records` table too
    assert in_views(home["warehouse"])["records"] == {R3}


def test_a_connected_record_is_kept_unless_told(home):
    lake, env = home["lake"], home["env"]
    with open_inbox(env["LEDGERLAKE_INBOX"], create=True) as inbox:
        inbox.add(callback(R3, "AUTH", "AUTH_SUCCESS", customer=B))
        assert inbox.status(R3) == "connected"
    before, files = counts(lake), state(home["root"])
    versions = {t: lake.version(t) for t in ERASABLE}

    refused = cli(env, "forget", "--record", R3)
    assert refused.returncode == 2
    assert f"{R3} still connected" in refused.stderr and "--even-connected" in refused.stderr
    assert {t: lake.version(t) for t in ERASABLE} == versions
    assert state(home["root"]) == files and audit(lake) is None

    done = cli(env, "forget", "--record", R3, "--even-connected", "--reason", "court-order")
    assert done.returncode == 0, done.stderr
    assert f"forgot record {R3}: 1 record(s)" in done.stdout
    assert of(counts(lake), R3) == {}
    assert of(counts(lake), R1, R2) == of(before, R1, R2)
    assert found(home["root"], needles(B)) == {}
    assert {r["reason"] for r in erasures_of(lake, R3)} == {"court-order"}
    assert in_views(home["warehouse"])["accounts"] == {R1, R2}


@pytest.mark.parametrize(("args", "message"), [
    (["--record", "rec_a1'"], "a record id matches ^[A-Za-z0-9_-]{1,64}$, not \"rec_a1'\""),
    (["--record", "rec_a1' OR '1'='1"], "a record id matches"),
    (["--record", "../rec_a1"], "not '../rec_a1'"),
    (["--customer", "cust/ada"], "not 'cust/ada'"),
    (["--customer", A, "--record", R1], "not allowed with argument"),
    ([], "one of the arguments --customer --record is required"),
])
def test_bad_input_is_refused_and_changes_nothing(home, args, message):
    files = state(home["root"])
    out = cli(home["env"], "forget", *args)
    assert out.returncode == 2
    assert message in out.stderr and "usage: ledgerlake forget" in out.stderr
    assert state(home["root"]) == files


def test_a_bad_forget_on_disconnect_setting_names_the_variable(home, tmp_path):
    assert Settings.from_env({"LEDGERLAKE_HOME": str(tmp_path)}).forget_on_disconnect is False
    assert Settings.from_env({"LEDGERLAKE_HOME": str(tmp_path),
                              "LEDGERLAKE_FORGET_ON_DISCONNECT": "Yes"}).forget_on_disconnect
    with pytest.raises(ConfigError, match="LEDGERLAKE_FORGET_ON_DISCONNECT='sometimes' is not "
                                          "true or false"):
        Settings.from_env({"LEDGERLAKE_HOME": str(tmp_path),
                           "LEDGERLAKE_FORGET_ON_DISCONNECT": "sometimes"})
    # the command says it in one line, and touches nothing
    files = state(home["root"])
    out = cli({**home["env"], "LEDGERLAKE_FORGET_ON_DISCONNECT": "sometimes"},
              "forget", "--customer", A)
    assert out.returncode == 2 and "LEDGERLAKE_FORGET_ON_DISCONNECT" in out.stderr
    assert "Traceback" not in out.stderr
    assert state(home["root"]) == files


def test_a_killed_pass_is_finished_by_running_it_again(home):
    lake, root = home["lake"], home["root"]
    before = counts(lake)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "forget", "--customer", A],
                            cwd=REPO, env=home["env"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "files purged" in line:  # every table's rows deleted, the first purged
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL  # killed before it was done
    # no pass of it finished, and the one killed said first what it was about to erase
    assert [r for r in erasures_of(lake, A) if r["finished_at"]] == []
    assert {r["record_id"] for r in erasures_of(lake, A)} == {R1, R2}
    # mid-way indeed: no version the lake reads shows them, files of older ones still do
    assert of(counts(lake), R1, R2) == {} and found(root, needles(A)) != {}

    out = cli(home["env"], "forget", "--customer", A)
    assert out.returncode == 0, out.stderr
    assert f"forgot customer {A}: 2 record(s)" in out.stdout
    assert found(root, needles(A)) == {}
    assert of(counts(lake), R1, R2) == {} and counts(lake) == of(before, R3)
    finished = [r for r in erasures_of(lake, A) if r["finished_at"]]
    assert {r["record_id"] for r in finished} == {R1, R2}
    views = in_views(home["warehouse"])
    assert views == {v: {R3} for v in views}


# `forget` in a process of its own whose every delete loses its commit to a concurrent
# writer: a real one, which changes the table's description between the delete's read and
# its commit (delta-rs refuses a commit across a metadata change)
LOSING = """
import sys
from deltalake import DeltaTable
from resources import delta
rows_of = delta._rows_of
def losing(uri, table, ids, columns):
    found = rows_of(uri, table, ids, columns)
    DeltaTable(uri).alter.set_table_description("a concurrent writer won")
    return found
delta._rows_of, delta.ATTEMPTS, delta.BACKOFF_S = losing, 2, 0.01
from pipeline.cli.commands import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_forget_that_keeps_losing_its_commits_says_so_in_one_line(home):
    """The chaos suite saw `forget` crash with a traceback when runs kept committing to
    `landings`: the command says in one line that nothing of that write landed, and running
    it again finishes the pass."""
    lake = home["lake"]
    out = subprocess.run([sys.executable, "-c", LOSING, "forget", "--customer", A], cwd=REPO,
                         env=home["env"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ledgerlake: forget failed: CommitConflict: ") and \
        "2 commits in a row lost to concurrent writers" in last, out.stderr
    assert [r for r in erasures_of(lake, A) if r["finished_at"]] == []

    again = cli(home["env"], "forget", "--customer", A)
    assert again.returncode == 0, again.stderr
    assert of(counts(lake), R1, R2) == {}
    assert {r["record_id"] for r in erasures_of(lake, A) if r["finished_at"]} == {R1, R2}


# `forget` in a process of its own whose rebuild always meets a real cut of `transactions`'
# log (as another erasure makes one) between its refresh and its views
CUTTING = """
import sys
from assets import warehouse
from resources import delta
from resources.lake import Lake
build = warehouse.build
def cut_then_build(root, *args, **kw):
    uri = Lake(root=str(root)).table_uri("transactions")
    delta._cut_history(uri, *delta._filesystem(uri))
    print("cut under the build", file=sys.stderr)
    return build(root, *args, **kw)
warehouse.build = cut_then_build
from pipeline.cli.commands import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_forget_whose_rebuild_keeps_meeting_cuts_says_so_in_one_line(home):
    """Each build begun again meets another cut: the command says in one line what the cuts
    took, and running it again finishes the pass."""
    lake = home["lake"]
    out = subprocess.run([sys.executable, "-c", CUTTING, "forget", "--customer", A],
                         cwd=REPO, env=home["env"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ledgerlake: forget failed: HistoryGone: ") and \
        "transactions" in last, out.stderr
    assert out.stderr.count("cut under the build") == PUBLISH_ATTEMPTS, out.stderr
    assert [r for r in erasures_of(lake, A) if r["finished_at"]] == []

    again = cli(home["env"], "forget", "--customer", A)
    assert again.returncode == 0, again.stderr
    assert of(counts(lake), R1, R2) == {}
    assert {r["record_id"] for r in erasures_of(lake, A) if r["finished_at"]} == {R1, R2}


def test_a_landing_waits_while_forget_deletes_then_lands_whole(home, monkeypatch):
    """A run's commit to `landings` beats forget's delete there to the commit: delta-rs counts
    the rows appended as ones the delete should have read (the file's ids span the records'),
    and the chaos suite saw a stream of runs make a forget lose 8 commits in a row. A landing
    step that begins while forget deletes waits for it (`Inbox.erasing`), then lands whole."""
    lake, path = home["lake"], home["root"] / "inbox.sqlite3"
    real, started, landed = delta._rows_of, [], []

    def landing(n: int) -> None:  # as a landing step: the shared lock, then its commit
        with open_inbox(path) as inbox:
            inbox.hold_landing()
            lake.append("landings", {r: rows("landings", [{
                "product": "accounts", "run_id": f"run-late-{n}", "landed_at": T0,
                "outcome": "landed", "row_count": 1, "lake_table": "accounts"}])
                for r in ("rec_a0", "rec_zz")}, LAKE_TABLES["landings"])
        landed.append(n)

    def raced(uri, table, ids, columns):  # between the delete's read and its commit
        found = real(uri, table, ids, columns)
        if uri.rstrip("/").endswith("landings"):
            started.append(threading.Thread(target=landing, args=(len(started),)))
            started[-1].start()
            started[-1].join(1.0)  # one not made to wait has committed by now
        return found

    monkeypatch.setattr(delta, "_rows_of", raced)
    monkeypatch.setattr(delta, "ATTEMPTS", 3)
    with open_inbox(path, create=True) as inbox:
        forget(lake, ERASABLE, customer=A, inbox=inbox)
    monkeypatch.undo()
    for thread in started:
        thread.join(60)
    assert len(started) == 1, "the delete lost its commit to the landing"
    assert landed == [0]  # the landing waited, then landed
    assert of(counts(lake), R1, R2) == {}
    assert [r["run_id"] for r in lake.read("landings").to_pylist()
            if r["run_id"].startswith("run-late")] == ["run-late-0"] * 2


def test_a_question_asked_while_forget_purges_meets_no_missing_file(home):
    """Rows go from every table and the warehouse is rebuilt before any file is purged: a
    question started at any point of the purge reads the files its views name."""
    lake, warehouse = home["lake"], home["warehouse"]
    asked: list[dict[str, set[str]]] = []

    def progress(line: str) -> None:
        if "files purged" in line:  # a table purged: ask every view, on a new connection
            asked.append(in_views(warehouse))

    forget(lake, ERASABLE, customer=A, progress=progress,
           rebuild=lambda: publish(lake.root, warehouse))
    assert len(asked) == len(ERASABLE)
    # each answer is of the rebuilt views: B's record, none of A's
    assert all(views == {v: {R3} for v in views} for views in asked)


class Stop(Exception):
    """Where a pass is stopped, as a kill between two tables would."""


@pytest.mark.parametrize("stop_after", range(2 * len(ERASABLE)))  # deleted, then purged
def test_a_pass_stopped_after_any_table_is_finished_by_running_it_again(tmp_path, stop_after):
    """Wherever `forget --customer` stops, the next run still finds the customer's records,
    so tables that do not name customers (payments, balances) are not left holding them."""
    lake = write_lake(tmp_path / "lake")
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)
        if len(lines) > stop_after:
            raise Stop

    with pytest.raises(Stop):
        forget(lake, ERASABLE, customer=A, progress=progress)
    done = forget(lake, ERASABLE, customer=A)
    # even stopped after its last table, when no table names them any more, the records are
    # known: the stopped pass wrote them into the audit before erasing anything
    assert done.records == [R1, R2], lines
    assert of(counts(lake), R1, R2) == {}, lines
    assert found(tmp_path / "lake", needles(A)) == {}


def published_lake(tmp_path: Path) -> tuple[Lake, Path, Path]:
    """`write_lake`'s lake, its warehouse published, and where the inbox file goes."""
    lake = write_lake(tmp_path / "lake")
    warehouse = tmp_path / "warehouse.duckdb"
    publish(lake.root, warehouse)
    return lake, warehouse, tmp_path / "inbox.sqlite3"


def test_a_disconnect_forgets_by_itself_only_when_told_and_only_the_disconnected(tmp_path):
    lake, warehouse, path = published_lake(tmp_path)
    with open_inbox(path, create=True) as inbox:
        for record in (R1, R2):
            inbox.add(callback(record, "AUTH", "AUTH_SUCCESS", customer=A,
                               ended_at="2026-01-01T00:00:00.000Z"))
        gone, _ = inbox.add(disconnect(A, "2026-01-02T00:00:00.000Z"))
        # R2 logs in again after the disconnect, before the forget run starts
        inbox.add(callback(R2, "AUTH", "AUTH_SUCCESS", customer=A,
                           ended_at="2026-01-03T00:00:00.000Z"))
        events = [e for e in inbox.after(0) if e.id == gone]
        assert events[0].records == (R1, R2)
        assert (inbox.status(R1), inbox.status(R2)) == ("disconnected", "connected")
        numbers = inbox.numbers([R1, R2])

    status = {R1: "disconnected", R2: "disconnected"}
    told, _, _ = plan(events, {"record_status"}, status, numbers, forget=True)
    untold, _, _ = plan(events, {"record_status"}, status, numbers, forget=False)
    assert [r.job_name for r in untold] == ["warehouse_job"]  # statuses rebuilt, data kept
    (request,) = [r for r in told if r.job_name == forget_job.name]
    assert request.run_key == f"forget-{gone}"
    assert request.run_config == {"ops": {"forget_disconnected": {
        "config": {"records": [numbers[R1], numbers[R2]]}}}}
    assert [r.job_name for r in told if r is not request] == ["warehouse_job"]

    before = counts(lake)
    result = forget_job.execute_in_process(
        run_config=request.run_config,
        resources={"lake": lake, "inbox": InboxResource(path=str(path)),
                   "warehouse_db": Warehouse(path=str(warehouse))})
    assert result.success
    after = counts(lake)
    assert of(after, R1) == {}
    assert of(after, R2, R3) == of(before, R2, R3)  # connected again: kept
    assert found(tmp_path / "lake", [NUBAN[R1]]) == {}
    assert found(tmp_path / "lake", [NUBAN[R2]])
    assert in_views(warehouse)["accounts"] == {R2, R3}
    # the rebuild derived the derived tables up to the sources it published: the views of
    # transactions and of daily_balances agree (chaos's readers found a forget's build did not)
    from assets import derived
    assert derived._get(lake, derived.STATE)["versions"] == {
        t: lake.version(t) for t in derived.SOURCES}
    (erased,) = {(r["subject"], r["reason"]) for r in erasures_of(lake, R1)}
    assert erased == ("record", "disconnect")
    assert erasures_of(lake, R2) == []
    assert sorted(BY_CUSTOMER) == sorted(t for t in ERASABLE
                                         if "customer_id" in LAKE_TABLES[t].names)



def test_the_disconnects_of_one_tick_forget_in_one_run_and_one_pass(tmp_path):
    lake, warehouse, path = published_lake(tmp_path)
    with open_inbox(path, create=True) as inbox:
        for record, customer in ((R1, A), (R2, A), (R3, B)):
            inbox.add(callback(record, "AUTH", "AUTH_SUCCESS", customer=customer,
                               ended_at="2026-01-01T00:00:00.000Z"))
        first, _ = inbox.add(disconnect(A, "2026-01-02T00:00:00.000Z"))
        last, _ = inbox.add(disconnect(B, "2026-01-02T00:00:01.000Z"))
        events = [e for e in inbox.after(0) if e.id in (first, last)]
        numbers = inbox.numbers([R1, R2, R3])
    status = dict.fromkeys((R1, R2, R3), "disconnected")
    told, _, _ = plan(events, {"record_status"}, status, numbers, forget=True)
    # one run, not one a disconnect queued behind each other: every record named once
    (request,) = [r for r in told if r.job_name == forget_job.name]
    assert request.run_key == f"forget-{last}"
    assert request.run_config == {"ops": {"forget_disconnected": {
        "config": {"records": [numbers[R1], numbers[R2], numbers[R3]]}}}}
    result = forget_job.execute_in_process(
        run_config=request.run_config,
        resources={"lake": lake, "inbox": InboxResource(path=str(path)),
                   "warehouse_db": Warehouse(path=str(warehouse))})
    assert result.success
    assert counts(lake) == {}  # every row of the three, from every table
    # one pass (a pass rewrites every table whatever it erases), each record its own subject
    rows = {r: erasures_of(lake, r) for r in (R1, R2, R3)}
    assert len({x["erasure_id"] for r in rows.values() for x in r}) == 1
    for record, audited in rows.items():
        assert {(x["subject"], x["record_id"], x["reason"]) for x in audited} == {
            ("record", record, "disconnect")}
        assert any(x["finished_at"] is not None for x in audited)



def test_a_disconnect_pass_that_never_finished_is_finished_by_the_next_run(tmp_path):
    from pipeline.forget import Erasure, _write_audit

    lake, warehouse, path = published_lake(tmp_path)
    with open_inbox(path, create=True) as inbox:
        inbox.add(callback(R1, "AUTH", "AUTH_SUCCESS", customer=A,
                           ended_at="2026-01-01T00:00:00.000Z"))
        number = inbox.numbers([R1])[R1]
        # a pass that failed after its first steps: the audit says what is about to go, the
        # inbox forgot the record (its number names it no more), the lake still holds it
        _write_audit(lake, Erasure("e" * 32, "record", None, [R1]), datetime.now(UTC), None,
                     "disconnect", [{"record_id": R1, "lake_table": None,
                                     "rows_deleted": None, "files_purged": None}])
        inbox.forget([R1])
    assert of(counts(lake), R1)
    result = forget_job.execute_in_process(
        run_config={"ops": {"forget_disconnected": {"config": {"records": [number]}}}},
        resources={"lake": lake, "inbox": InboxResource(path=str(path)),
                   "warehouse_db": Warehouse(path=str(warehouse))})
    assert result.success
    assert of(counts(lake), R1) == {}
    assert of(counts(lake), R2, R3)  # the others kept
    assert any(x["finished_at"] is not None for x in erasures_of(lake, R1))


# -- a forgotten record stays forgotten ---------------------------------------------------

def landed_anywhere(lake: Lake, inbox, record: str) -> dict:
    """Where `record` still is: the lake tables holding rows of it, and the inbox's rows."""
    where = {t: 1 for t in ERASABLE if lake.version(t) is not None and holding(lake, t, [record])}
    if inbox.numbers([record]) or inbox.records([record]) or inbox.landings([record]):
        where["inbox"] = 1
    return where


def test_forget_racing_a_landing_of_the_same_record_leaves_nothing(sandbox, tmp_path):
    """20 times: a run lands a record's accounts while the record is forgotten, the forget
    started at a different moment of the landing each time. Whichever comes first, nothing
    of the record is left anywhere afterwards: a landing that began first is waited for and
    erased, one that began after finds no such record."""
    import random
    import threading

    from assets.accounts import accounts
    from resources.client.resource import ConnectionClient
    from tests.conftest import connected, land

    with sandbox.api() as api:
        made = api.post("sandbox/customers/create", json={"customers": [{"accounts": 1}] * 20})
        assert made.status_code == 200, made.text
    records = [c["record"] for c in made.json()["data"]["customers"]]
    lake = Lake(root=str(tmp_path / "lake"))
    res = {"client": ConnectionClient(base_url=sandbox.url, secret_key=sandbox.sandbox_key,
                                      environment="sandbox"),
           "lake": lake, "inbox": InboxResource(path=connected(tmp_path / "inbox.sqlite3",
                                                               records))}
    shuffle, outcomes = random.Random(20261127), []
    with dg_instance() as instance, open_inbox(tmp_path / "inbox.sqlite3") as inbox:
        land([accounts], records[:1], res, instance=instance)  # the code paths warmed up
        for record in records[1:] + records[:1]:
            results: list = []
            run = threading.Thread(target=lambda r=record, out=results: out.append(land(
                [accounts], [r], res, instance=instance, raise_on_error=False)))
            run.start()
            threading.Event().wait(shuffle.uniform(0.0, 1.5))  # anywhere in the landing
            forget(lake, TABLES, record=record, inbox=inbox)
            run.join(120)
            assert results and results[0].success
            outcomes.append(bool(noted_rows(lake, record)))
            assert landed_anywhere(lake, inbox, record) == {}, record
            assert inbox.forgotten([record]) == {record}
    assert len(outcomes) == 20


def dg_instance():
    import dagster as dg

    return dg.DagsterInstance.ephemeral()


def noted_rows(lake: Lake, record: str) -> int:
    rows = lake.read("landings")
    return 0 if rows is None else sum(r == record for r in rows["record_id"].to_pylist())


def test_a_forgotten_record_is_never_fetched_again(sandbox, tmp_path, monkeypatch):
    """The tombstone: the record's callbacks, redelivered, are dropped; the daily refresh
    and replay leave it out; a rerun by id or by its old number is refused; a run whose
    batch still names its number (an old run re-executed) fetches nothing."""
    import dagster as dg

    from assets.accounts import accounts
    from assets.batch import Batch
    from pipeline.replay import overdue, replay_named
    from pipeline.schedules import daily_refresh
    from resources.client.resource import ConnectionClient
    from tests.conftest import connected, land

    with sandbox.api() as api:
        made = api.post("sandbox/customers/create", json={"customers": [{"accounts": 1}] * 2})
    kept, gone = [c["record"] for c in made.json()["data"]["customers"]]
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    lake = Lake(root=str(tmp_path / "lake"))
    res = {"client": ConnectionClient(base_url=sandbox.url, secret_key=sandbox.sandbox_key,
                                      environment="sandbox"),
           "lake": lake, "inbox": InboxResource(path=connected(path, [kept, gone]))}
    assert land([accounts], [kept, gone], res).success
    with open_inbox(path) as inbox:
        number = inbox.numbers([gone])[gone]
        forget(lake, TABLES, record=gone, inbox=inbox)
        # redelivered: acknowledged, not stored
        assert inbox.add(callback(gone, "ACCOUNTS", "ACCOUNTS_SUCCESS")) == (0, False)
        assert inbox.add(callback(gone, "AUTH", "AUTH_SUCCESS"))[1] is False
        assert inbox.records([gone]) == {} and inbox.numbers([gone], create=True) == {}
        assert gone not in [o.record for o in overdue(inbox, after_s=0, now=4e9)]
        said: list[str] = []
        assert replay_named(inbox, None, [gone], say=said.append).overdue == []
        assert said == [f"record {gone}: forgotten; not replayed"]
    with dg.instance_for_test() as instance, dg.build_schedule_context(
            instance=instance, resources={"inbox": InboxResource()},
            scheduled_execution_time=datetime(2026, 11, 22, 2, tzinfo=UTC)) as ctx:
        (request,) = daily_refresh(ctx)
    with open_inbox(path) as inbox:
        assert list(inbox.ids_of(request.run_config["resources"]["batch"]["config"]
                                 ["records"]).values()) == [kept]
    env = {**os.environ, "LEDGERLAKE_INBOX": str(path), "LEDGERLAKE_SECRET_KEY": "sk_test_x",
           "LEDGERLAKE_LAKE": str(tmp_path / "lake")}
    for name in (gone, f"#{number}"):
        out = cli(env, "rerun", name)
        assert out.returncode == 2 and ("forgotten" in out.stderr or
                                        "no record has number" in out.stderr), out.stderr
    # an old run's batch, executed again: nothing fetched, nothing written
    out = dg.materialize([accounts], resources={**res, "batch": Batch(records=[number])})
    assert out.success and not out.get_asset_materialization_events()
    with open_inbox(path) as inbox:
        assert landed_anywhere(lake, inbox, gone) == {}


def test_after_a_customer_is_forgotten_every_other_record_lands_reveals_and_reports(
        sandbox, tmp_path):
    """The real products land three customers' records from the sandbox in one run, so every
    table's files hold all three; `ledgerlake forget --customer` erases one, rewriting those
    files. Then the others land again (a window pull, which reads their rows back first,
    then whole), income's audit reads their transactions, `reveal`, `report` and `sql
    --as-of` answer for them; every data file of every lake table keeps its declared schema,
    and the inbox keeps no event naming the customer (their USER_REAUTH came before any of
    their records was known)."""
    from assets.accounts import accounts
    from assets.balances import balances
    from assets.identity import identity
    from assets.income import income
    from assets.record_status import record_status
    from assets.transactions import transactions
    from resources.client.resource import ConnectionClient
    from resources.tables import lake_schema
    from tests.conftest import land
    from tests.resources.test_lake_files import file_schemas

    made = sandbox.control("customers/create", customers=[
        {"accounts": 1, "months": 2, "volume": 2, "seed": seed} for seed in (11, 12, 13)]
    )["customers"]
    with sandbox.api() as api:
        for c in made:  # the service has processed the products
            for _ in range(100):
                if api.post("transactions/get", json={"record": c["record"], "limit": 1}
                            ).status_code == 200:
                    break
                threading.Event().wait(0.1)
    gone, kept = made[0]["customer"], [c["record"] for c in made[1:]]
    path, lake = tmp_path / "inbox.sqlite3", Lake(root=str(tmp_path / "lake"))
    with open_inbox(path, create=True) as inbox:
        inbox.add(reauth(gone, "2026-01-01T00:00:00.000Z"))  # before any record of theirs
        for c in made:
            inbox.add(callback(c["record"], "AUTH", "AUTH_SUCCESS", customer=c["customer"]))
    res = {"client": ConnectionClient(base_url=sandbox.url, secret_key=sandbox.sandbox_key,
                                      environment="sandbox"),
           "lake": lake, "inbox": InboxResource(path=str(path)), "tuning": Tuning()}
    products = [accounts, transactions, balances, identity, income]
    assert land([*products, record_status], [c["record"] for c in made], res).success
    warehouse = tmp_path / "warehouse.duckdb"
    publish(lake.root, warehouse)  # the derived tables too
    env = {**os.environ, "LEDGERLAKE_HOME": str(tmp_path / "home"),
           "LEDGERLAKE_LAKE": lake.root, "LEDGERLAKE_WAREHOUSE": str(warehouse),
           "LEDGERLAKE_INBOX": str(path)}
    env.pop("LEDGERLAKE_FORGET_ON_DISCONNECT", None)

    out = cli(env, "forget", "--customer", gone, "--even-connected")
    assert out.returncode == 0, out.stderr
    assert f"forgot customer {gone}: 1 record(s)" in out.stdout
    erased_at = {t: lake.version(t) for t in ("transactions", "accounts")}

    def landed(run_id: str) -> dict[tuple[str, str], str]:
        with open_inbox(path) as inbox:
            return {(s.record, s.product): s.outcome for s in inbox.landings(kept)
                    if s.run_id == run_id}

    every = {(r, p.key.path[-1]): "landed" for r in kept for p in products}
    again = land(products, kept, res, raise_on_error=False)  # transactions: a window pull
    assert again.success and landed(again.run_id) == every
    with open_inbox(path) as inbox:
        pulls = {s.record: s.detail.get("pull") for s in inbox.landings(
            kept, product="transactions")}
    assert all(p and p.startswith("window") for p in pulls.values()), pulls
    whole = land([transactions, income], kept, res, raise_on_error=False, run_config={
        "ops": {"transactions": {"config": {"full_history": True}}}})
    assert whole.success and landed(whole.run_id) == {
        (r, p): "landed" for r in kept for p in ("transactions", "income")}
    checks = {(r["record_id"], r["check_name"]): r["passed"] for r in lake.read(
        "checks").to_pylist() if r["run_id"] == whole.run_id and r["product"] == "income"}
    assert checks and all(checks.values()), checks  # income's audit read the transactions

    publish(lake.root, warehouse)  # the derived tables caught up past the cut
    shown = cli(env, "reveal", "--customer", made[1]["customer"])
    assert shown.returncode == 0, shown.stderr
    assert '"bvn":' in shown.stdout
    page = tmp_path / "report.html"
    told = cli(env, "report", kept[0], "--output", str(page))
    assert told.returncode == 0, told.stderr
    assert kept[0] in page.read_text()
    for table, version in erased_at.items():
        past = cli(env, "sql", f"select distinct record_id from {table} order by 1",
                   "--format", "csv", "--as-of", f"{table}={version}")
        assert past.returncode == 0, past.stderr
        assert past.stdout.split() == ["record_id", *sorted(kept)]
    with open_inbox(path) as inbox:
        assert [e for e in inbox.after(0) if gone in orjson.dumps(e.body).decode()] == []
    # every file of every table (no payment was made: payments has none): the erasure's
    # rewrites, the landings since, the audits
    written = [t for t in LAKE_TABLES if lake.version(t) is not None]
    assert written == [t for t in LAKE_TABLES if t != "payments"]
    for table in written:
        wrong = {f: str(s) for f, s in file_schemas(lake, table).items()
                 if not s.equals(lake_schema(table))}
        assert not wrong, (table, wrong)


def lock_dropped_then_forgotten(postgres_url: str, lake: Lake, record: str) -> None:
    """What a restart of the Postgres inbox does to a step holding the erasure lock (its
    backend ends, the lock with it), then a whole forget of `record` in the gap."""
    held = advisory_pids(postgres_url, ERASURE_LOCK)
    assert held, "the step holds no erasure lock"
    with contextlib.closing(psycopg2.connect(postgres_url)) as admin:
        admin.autocommit = True
        admin.cursor().execute("select pg_terminate_backend(pid) from pg_locks where"
                               " locktype = 'advisory' and granted and objid = %s",
                               (ERASURE_LOCK & 0xFFFFFFFF,))
    gone_pids(postgres_url, held)
    with open_inbox(postgres_url) as inbox:  # the lock is free: it runs whole
        forget(lake, TABLES, record=record, inbox=inbox)


def test_a_forget_that_fits_in_a_landing_whose_lock_went_leaves_nothing(
        shared_sandbox, tmp_path, postgres_url, monkeypatch):
    """A restart of the Postgres inbox ends a landing step's session, and its erasure lock
    with it, while the step runs on: a whole forget then fits between the step reading its
    records and writing them (the chaos suite's seed 1 kept a `landings` row so). The step
    erases again what it wrote of a record forgotten meanwhile, from every file, and the
    inbox keeps no state of it; the other record of the batch lands."""
    made = [create(shared_sandbox, accounts=1, months=1) for _ in range(2)]
    gone, kept = made[0]["record"], made[1]["record"]
    time.sleep(0.5)  # the connection completes on its own, right after creation
    lake = Lake(root=str(tmp_path / "lake"))
    res = {"client": ConnectionClient(base_url=shared_sandbox.url,
                                      secret_key=shared_sandbox.sandbox_key,
                                      environment="sandbox"),
           "lake": lake, "inbox": InboxResource(path=connected(postgres_url, [gone, kept])),
           "tuning": Tuning()}
    real, raced = publish_module.commit, []

    def restarted_then_forgotten(*args, **kw):  # after the fetch, before the commit
        if not raced:
            raced.append(gone)
            lock_dropped_then_forgotten(postgres_url, lake, gone)
        return real(*args, **kw)

    monkeypatch.setattr(publish_module, "commit", restarted_then_forgotten)
    out = land([accounts_asset], [gone, kept], res, raise_on_error=False)
    assert raced and out.success
    for table in ("accounts", "landings"):
        assert holding(lake, table, [gone, kept]) == {kept}, table
        assert found(tmp_path / "lake" / table, [gone]) == {}, table  # no file of any version
    assert holding(lake, "checks", [gone]) == set()
    with open_inbox(postgres_url) as inbox:
        assert {s.record for s in inbox.landings([gone, kept])} == {kept}


def test_a_forget_that_fits_in_a_records_rebuild_whose_lock_went_leaves_nothing(
        tmp_path, postgres_url, monkeypatch):
    """The `records` rebuild holds the erasure lock as a landing step does, so a restart of the
    Postgres inbox that ends its session lets a whole forget run between its reading the
    inbox's records and writing them. It erases again the row it wrote of the record forgotten
    meanwhile, from every file; the other record's row stays."""
    from assets.record_status import record_status

    gone, kept = "rebuild-gone-1", "rebuild-kept-2"
    lake = Lake(root=str(tmp_path / "lake"))
    res = {"lake": lake, "inbox": InboxResource(path=connected(postgres_url, [gone, kept]))}
    assert land([record_status], [gone, kept], res).success  # both rows, before any race
    assert holding(lake, "records", [gone, kept]) == {gone, kept}
    real, raced = Lake.write, []

    def restarted_then_forgotten(self, table, *args, **kw):  # after db.records(), before
        if table == "records" and not raced:  # the write
            raced.append(gone)
            lock_dropped_then_forgotten(postgres_url, lake, gone)
        return real(self, table, *args, **kw)

    monkeypatch.setattr(Lake, "write", restarted_then_forgotten)
    out = land([record_status], [kept], res, raise_on_error=False)
    assert raced and out.success
    assert holding(lake, "records", [gone, kept]) == {kept}
    assert found(tmp_path / "lake" / "records", [gone]) == {}  # no file of any version
    with open_inbox(postgres_url) as inbox:
        assert gone not in inbox.records()
