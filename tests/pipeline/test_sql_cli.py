"""`ledgerlake sql`, run as analysts run it: a real process over a published warehouse."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import secrets
import shlex
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.warehouse import publish
from resources.lake import Lake
from resources.wire import money

TS = pa.timestamp("ms", tz="UTC")


def lines(account: str, n: int, start: float) -> pa.Table:
    """n lines a day apart, alternating credit 100 and debit 40, from a balance of `start`."""
    credit = [100.0 if i % 2 == 0 else None for i in range(n)]
    debit = [None if i % 2 == 0 else 40.0 for i in range(n)]
    amount = [c if c is not None else -d for c, d in zip(credit, debit, strict=True)]
    balance = list(pd.Series(amount).cumsum() + start)
    when = [dt.datetime(2025, 1, 30, 12, tzinfo=dt.UTC) + dt.timedelta(days=i) for i in range(n)]
    return pa.table({
        "transaction_id": [f"{account}-{i:04d}" for i in range(n)],
        "account_id": [account] * n,
        "trans_date": pa.array(when, TS), "cleared_date": pa.array(when, TS),
        "debit": money(debit), "credit": money(credit),
        "amount": money(amount), "balance": money(balance), "currency": ["NGN"] * n,
        "topics": pa.array([["shopping", "pos"]] * n, pa.list_(pa.string())),
    })


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("home")
    lake = Lake(root=str(home / "lake"))
    lake.write("accounts", "rec1", pa.table({
        "account_id": ["acc1", "acc2"], "nuban": ["0123456789", "9876543210"],
        "name": ["ADA OBI", "ADA OBI ENTERPRISES"]}))
    lake.write("transactions", "rec1", pa.concat_tables(
        [lines("acc1", 6, 1000.0), lines("acc2", 3, 50.0)]))
    target = home / "warehouse.duckdb"
    publish(lake.root, target)
    return target


def sql(*args: str, stdin: str | None = None, env: dict | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`ledgerlake sql ARGS` in a process. SQL reads only the lake LEDGERLAKE_LAKE names:
    with --warehouse W and no lake or home in `env`, the lake beside W, where it was built."""
    env = dict(env or {})
    if "--warehouse" in args and not {"LEDGERLAKE_LAKE", "LEDGERLAKE_HOME"} & set(env):
        env["LEDGERLAKE_LAKE"] = str(Path(args[args.index("--warehouse") + 1]).parent / "lake")
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", *args],
                          input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, cwd=cwd)


def test_prints_a_readable_table(warehouse):
    out = sql("select account_id, count(*) as n from transactions group by 1 order by 1",
              "--warehouse", str(warehouse))
    assert out.returncode == 0, out.stderr
    rows = [[cell.strip() for cell in ln.split("│")[1:3]]
            for ln in out.stdout.splitlines() if ln.startswith("│ acc") and "_id" not in ln]
    assert rows == [["acc1", "6"], ["acc2", "3"]]
    assert "account_id" in out.stdout and "int64" in out.stdout


def test_the_default_warehouse_comes_from_the_settings(warehouse, tmp_path):
    out = sql("select count(*) as n from accounts", env={"LEDGERLAKE_HOME": str(warehouse.parent)},
              cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "│     2 │" in out.stdout


def test_writes_csv_json_and_parquet(warehouse, tmp_path):
    q = ("select account_id, month, transactions, inflow, outflow, net from monthly_cashflow "
         "order by account_id, month")
    want = pd.DataFrame({
        "account_id": ["acc1", "acc1", "acc2", "acc2"],
        "transactions": [2, 4, 2, 1],
        "inflow": [100.0, 200.0, 100.0, 100.0],
        "outflow": [40.0, 80.0, 40.0, 0.0],
    })
    want["net"] = want["inflow"] - want["outflow"]
    for fmt in ("csv", "json", "parquet"):
        path = tmp_path / f"cashflow.{fmt}"
        out = sql(q, "--warehouse", str(warehouse), "--format", fmt, "--output", str(path))
        assert out.returncode == 0, out.stderr
        assert "wrote 4 rows" in out.stderr
        got = {"csv": pd.read_csv, "parquet": pd.read_parquet,
               "json": lambda p: pd.DataFrame(json.loads(Path(p).read_text()))}[fmt](path)
        pd.testing.assert_frame_equal(got[want.columns.tolist()], want, check_dtype=False)
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # the format follows the output's suffix when not given
    out = sql("select * from transactions", "--warehouse", str(warehouse),
              "--output", str(tmp_path / "all.parquet"))
    assert out.returncode == 0, out.stderr
    table = pq.read_table(tmp_path / "all.parquet")
    assert table.num_rows == 9
    assert table.column("topics").to_pylist()[0] == ["shopping", "pos"]


FIRST_LINES = ("select account_id, transaction_id, amount, balance, trans_date, topics, "
               "0.1::decimal(18,2) + 0.2::decimal(18,2) as drift "
               "from transactions order by transaction_id limit 2")


def test_prints_json_to_stdout_with_exact_decimals_and_iso_times(warehouse):
    out = sql(FIRST_LINES, "--warehouse", str(warehouse), "--format", "json",
              env={"TZ": "Africa/Lagos"})
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # nothing but the data, so a pipe gets only the data
    rows = json.loads(out.stdout, parse_float=Decimal)
    assert rows == [
        {"account_id": "acc1", "transaction_id": "acc1-0000", "amount": Decimal("100.00"),
         "balance": Decimal("1100.00"), "trans_date": "2025-01-30T12:00:00+00:00",
         "topics": ["shopping", "pos"], "drift": Decimal("0.30")},
        {"account_id": "acc1", "transaction_id": "acc1-0001", "amount": Decimal("-40.00"),
         "balance": Decimal("1060.00"), "trans_date": "2025-01-31T12:00:00+00:00",
         "topics": ["shopping", "pos"], "drift": Decimal("0.30")},
    ]
    # the digits as the warehouse holds them, never a float's (0.30000000000000004)
    assert '"balance":1100.00' in out.stdout and '"drift":0.30' in out.stdout
    assert dt.datetime.fromisoformat(rows[0]["trans_date"]) == dt.datetime(
        2025, 1, 30, 12, tzinfo=dt.UTC)


def test_prints_jsonl_one_object_a_line(warehouse):
    out = sql("select transaction_id, balance from transactions order by transaction_id",
              "--warehouse", str(warehouse), "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    lines_ = out.stdout.splitlines()
    assert len(lines_) == 9
    objects = [json.loads(ln, parse_float=Decimal) for ln in lines_]
    assert objects[0] == {"transaction_id": "acc1-0000", "balance": Decimal("1100.00")}
    assert objects[-1] == {"transaction_id": "acc2-0002", "balance": Decimal("210.00")}


def test_prints_csv_with_a_header(warehouse):
    out = sql(FIRST_LINES, "--warehouse", str(warehouse), "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    rows = list(csv.reader(io.StringIO(out.stdout)))
    assert rows[0] == ["account_id", "transaction_id", "amount", "balance", "trans_date",
                       "topics", "drift"]
    assert rows[1] == ["acc1", "acc1-0000", "100.00", "1100.00", "2025-01-30T12:00:00+00:00",
                       "[shopping, pos]", "0.30"]
    assert rows[2][2:5] == ["-40.00", "1060.00", "2025-01-31T12:00:00+00:00"]
    assert len(rows) == 3


def test_an_empty_result_prints_empty_json_and_a_bare_csv_header(warehouse):
    q = "select account_id, balance from transactions where false"
    got = {fmt: sql(q, "--warehouse", str(warehouse), "--format", fmt)
           for fmt in ("json", "jsonl", "csv")}
    assert all(o.returncode == 0 for o in got.values()), [o.stderr for o in got.values()]
    assert json.loads(got["json"].stdout) == []
    assert got["jsonl"].stdout == ""
    assert got["csv"].stdout.splitlines() == ["account_id,balance"]


def test_a_file_holds_what_stdout_prints(warehouse, tmp_path):
    for fmt in ("csv", "json", "jsonl"):
        path = tmp_path / f"first.{fmt}"
        printed = sql(FIRST_LINES, "--warehouse", str(warehouse), "--format", fmt)
        written = sql(FIRST_LINES, "--warehouse", str(warehouse), "--output", str(path))
        assert printed.returncode == written.returncode == 0, printed.stderr + written.stderr
        assert "wrote 2 rows" in written.stderr and written.stdout == ""
        assert path.read_text() == printed.stdout


def test_pipes_into_a_json_reader_and_into_head(warehouse):
    me = shlex.join([sys.executable, "-m", "pipeline.cli", "sql"])
    w = shlex.quote(str(warehouse))
    env = {**os.environ, "LEDGERLAKE_LAKE": str(warehouse.parent / "lake")}
    out = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {me} 'select * from accounts' --warehouse {w} "
         f"--format json | {shlex.quote(sys.executable)} -c 'import json,sys; print(len(json.load(sys.stdin)))'"],
        capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"
    # far more than a pipe holds: the writer meets a closed pipe once head has its line
    out = subprocess.run(
        ["bash", "-c", f"{me} 'select range as n from range(300000)' --warehouse {w} "
         "--format jsonl | head -n 1; echo \"exit ${PIPESTATUS[0]}\""],
        capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.splitlines() == ['{"n":0}', "exit 0"]
    assert "Traceback" not in out.stderr and "Broken pipe" not in out.stderr, out.stderr


def test_times_print_in_utc_whatever_the_machines_zone(warehouse):
    out = sql("select min(trans_date) as first from transactions", "--warehouse", str(warehouse),
              env={"TZ": "Africa/Lagos"})
    assert out.returncode == 0, out.stderr
    assert "2025-01-30 12:00:00+00" in out.stdout


def test_a_failed_query_leaves_an_existing_output_alone(warehouse, tmp_path):
    path = tmp_path / "keep.csv"
    path.write_text("precious\n")
    out = sql("select nope from accounts", "--warehouse", str(warehouse), "--output", str(path))
    assert out.returncode == 1
    assert "nope" in out.stderr
    assert path.read_text() == "precious\n"


def test_interactive_prompt_reads_statements_from_stdin(warehouse):
    script = ("select count(*) as accounts_n from accounts;\n"
              "select sum(net) as total_net\n"
              "  from monthly_cashflow;\n"
              "select broken syntax here;\n"
              "select 41 + 1 as answer;\n"
              ".quit\n"
              "select 'after quit' as never;\n")
    out = sql("--warehouse", str(warehouse), stdin=script)
    assert "accounts_n" in out.stdout and "total_net" in out.stdout
    assert "│          2 │" in out.stdout
    assert "340.0" in out.stdout      # acc1 3*100 - 3*40, acc2 2*100 - 40
    assert "│     42 │" in out.stdout  # statements after a failed one still run
    assert "never" not in out.stdout  # .quit ends the session
    assert "syntax error" in out.stderr
    assert out.returncode == 1        # a statement failed


def test_interactive_ends_at_end_of_input(warehouse):
    out = sql("--warehouse", str(warehouse), stdin="select 7 as seven;\nselect 8 as eight")
    assert out.returncode == 0, out.stderr
    assert "seven" in out.stdout and "eight" in out.stdout  # the last `;` may be left off


@pytest.mark.parametrize("args, code, message", [
    (["select 1", "--warehouse", "{missing}"], 2, "no warehouse at"),
    (["selec 1", "--warehouse", "{w}"], 1, "syntax error"),
    (["select 1", "--warehouse", "{w}", "--format", "xml", "--output", "x.xml"], 2,
     "unknown format 'xml'"),
    (["select 1", "--warehouse", "{w}", "--format", "parquet"], 2,
     "--format parquet writes a file: pass --output FILE"),
    (["select 1", "--warehouse", "{w}", "--output", "out.txt"], 2, "cannot tell the format"),
    (["select 1", "--warehouse", "{w}", "--max-rows", "0"], 2, "at least 1"),
    (["create table stolen as select 1", "--warehouse", "{w}"], 1, "read-only"),
    (["drop view accounts", "--warehouse", "{w}"], 1, "read-only"),
])
def test_clear_errors(warehouse, tmp_path, args, code, message):
    before = warehouse.read_bytes()
    args = [a.format(w=warehouse, missing=tmp_path / "none.duckdb") for a in args]
    out = sql(*args, cwd=tmp_path)
    assert out.returncode == code, out.stdout + out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert warehouse.read_bytes() == before
    assert not (tmp_path / "x.xml").exists()


def test_beside_a_running_dev_stack_a_missing_warehouse_means_wait(tmp_path):
    """In the first minute of `ledgerlake dev` its folder has no warehouse yet: `sql` says the
    views are being built (the stack's file names a live process: this one), not `make demo`;
    a file left by a stack that is gone is stale, and the usual advice returns."""
    from pipeline.cli import devstack

    devstack.announce(tmp_path, "http://127.0.0.1:3999")
    out = sql("select 1", "--warehouse", str(tmp_path / "warehouse.duckdb"), cwd=tmp_path)
    assert out.returncode == 2
    assert "`ledgerlake dev` (pid" in out.stderr and "wait and ask again" in out.stderr
    assert "http://127.0.0.1:3999/runs" in out.stderr and "make demo" not in out.stderr
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / devstack.STACK_FILE).write_text(json.dumps({"pid": int(gone), "ui": "x"}))
    out = sql("select 1", "--warehouse", str(tmp_path / "warehouse.duckdb"), cwd=tmp_path)
    assert "make demo" in out.stderr and "ledgerlake dev` (pid" not in out.stderr


# -- analysts' SQL reads the lake and the warehouse, and nothing else ----------------------------

@pytest.fixture(scope="module")
def guarded(warehouse) -> Path:
    """The warehouse's home, as `make demo` leaves one: lake/, warehouse.duckdb and the
    personal-data key file beside them, pii.key."""
    home = warehouse.parent
    key = home / "pii.key"
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    return home


def lake_files(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file()}


def delta_commit_emptying(home: Path, table: str) -> str:
    """COPY writing the table's next Delta commit: a `remove` of each of its data files, so
    that a reader of the log finds the table empty."""
    log = home / "lake" / table / "_delta_log"
    version = max(int(p.stem) for p in log.glob("*.json")) + 1
    return (f"copy (select {{'path': parse_filename(file), 'dataChange': true, "
            f"'deletionTimestamp': 0}} as remove from glob('{home}/lake/{table}/*.parquet')) "
            f"to '{log}/{version:020d}.json' (format json)")


REFUSED = {  # a statement from the issue (its home's paths as {home}), what the refusal names
    "read the key": ("select content from read_text('{home}/pii.key')",
                     "refused: reading {home}/pii.key;"),
    "read the key as a blob": ("select content from read_blob('{home}/lake/../pii.key')",
                               "refused: reading {home}/lake/../pii.key;"),
    "list the data home": ("select * from glob('{home}/*')", "refused: reading {home}/*;"),
    "read /etc/passwd": ("select * from read_csv('/etc/passwd', sep = ':')",
                         "refused: reading /etc/passwd;"),
    "read the environment": ("select content from read_text('/proc/self/environ')",
                             "refused: reading /proc/self/environ;"),
    "copy to a file": ("copy (select * from accounts) to '{home}/stolen.csv'", "refused: COPY"),
    "copy into the lake": ("copy (select 1 as n) to '{home}/lake/accounts/x.csv'",
                           "refused: COPY"),
    "export the database": ("export database '{home}/lake/accounts/dump'",
                            "refused: EXPORT DATABASE"),
    "explain analyze a copy": ("explain analyze copy (select 1 as n) to '{home}/lake/x.csv'",
                               "refused: EXPLAIN of a statement that is not a query"),
    "a copy after a query": ("select 1 as n; copy (select 1 as n) to '{home}/lake/x.csv'",
                             "refused: COPY"),
    "attach": ("attach '{home}/lake/other.duckdb' as other", "refused: ATTACH"),
    "install": ("install httpfs", "refused: INSTALL"),
    "load": ("load httpfs", "refused: LOAD"),
    "autoinstall extensions": ("set autoinstall_known_extensions = true", "refused: SET"),
    "enable external access": ("set enable_external_access = true", "refused: SET"),
    "allow every directory": ("set allowed_directories = ['/']", "refused: SET"),
    "unlock the settings": ("set lock_configuration = false", "refused: SET"),
    "reset the lock": ("reset lock_configuration", "refused: RESET"),
    "pragma external access": ("pragma enable_external_access = true", "refused: PRAGMA"),
    "a function that sets": ("select * from enable_logging(storage = 'file', "
                             "storage_config = {{'path': '{home}/lake/log'}})",
                             "refused: changing the setting enable_logging;"),
    "create a secret": ("create secret s3key (type s3, key_id 'k', secret 's')",
                        "refused: CREATE"),
    "call": ("call pragma_version()", "refused: CALL"),
    "a table": ("create table stolen as select 1", "read-only"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_statement_beyond_the_lake_and_the_warehouse_is_refused(guarded, tmp_path, case):
    """Each refusal: exit 1, one line on stderr naming what was refused, nothing written."""
    home = guarded
    statement, named = (text.format(home=home) for text in REFUSED[case])
    before = lake_files(home)
    out = sql(statement, "--warehouse", str(home / "warehouse.duckdb"), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.splitlines() == [out.stderr.rstrip("\n")]  # one line
    assert out.stderr.startswith("ledgerlake: ") and named in out.stderr, out.stderr
    assert "ledgerlake sql only reads the lake and the warehouse" in out.stderr or \
        "read-only" in out.stderr
    assert out.stdout == ""
    assert (home / "pii.key").read_text().strip() not in out.stdout + out.stderr
    assert lake_files(home) == before  # nothing written, in the lake or beside it
    assert list(tmp_path.iterdir()) == []


def test_a_delta_commit_into_a_lake_table_is_refused_and_the_table_reads_whole(guarded,
                                                                                tmp_path):
    home = guarded
    before = lake_files(home)
    out = sql(delta_commit_emptying(home, "transactions"), "--warehouse",
              str(home / "warehouse.duckdb"), cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.strip() == ("ledgerlake: refused: COPY reads or writes files; ledgerlake "
                                  "sql only reads the lake and the warehouse")
    assert lake_files(home) == before
    assert Lake(root=str(home / "lake")).read("transactions").num_rows == 9
    count = sql("select count(*) as n from transactions", "--format", "csv",
                "--warehouse", str(home / "warehouse.duckdb"))
    assert count.stdout.splitlines() == ["n", "9"], count.stderr


@pytest.mark.parametrize("query", ["select getenv('LEDGERLAKE_PII_KEY') as key",
                                   "select current_setting('s3_secret_access_key') as key",
                                   "select * from duckdb_secrets(redact = false)"])
def test_sql_reads_no_secret_of_the_environment(guarded, query):
    secret = secrets.token_hex(32)
    out = sql(query, "--warehouse", str(guarded / "warehouse.duckdb"),
              env={"LEDGERLAKE_PII_KEY": secret, "AWS_SECRET_ACCESS_KEY": secret})
    assert out.returncode == 1, out.stdout
    assert out.stderr.splitlines() == [out.stderr.rstrip("\n")]
    assert secret not in out.stdout + out.stderr


def test_the_key_file_inside_a_lake_table_folder_is_refused_before_any_sql(guarded, tmp_path):
    key = guarded / "lake" / "accounts" / "pii.key"
    key.write_text("0" * 64)
    try:
        out = sql("select 1", "--warehouse", str(guarded / "warehouse.duckdb"),
                  env={"LEDGERLAKE_PII_KEY_FILE": str(key)}, cwd=tmp_path)
    finally:
        key.unlink()
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"ledgerlake: the personal-data key file {key} is inside the lake's folder "
        f"{guarded / 'lake' / 'accounts'}/, which SQL reads: move it out "
        "(LEDGERLAKE_PII_KEY_FILE)")


def test_a_warehouse_built_over_another_lake_is_read_only_with_that_lake(guarded, tmp_path):
    out = sql("select count(*) from accounts", "--warehouse", str(guarded / "warehouse.duckdb"),
              env={"LEDGERLAKE_LAKE": str(tmp_path / "lake")})
    assert out.returncode == 1
    assert out.stderr.startswith(f"ledgerlake: refused: reading {guarded}/lake/accounts/")
    assert out.stderr.rstrip().endswith(
        "ledgerlake sql only reads the lake and the warehouse (if a view reads it: set "
        "LEDGERLAKE_LAKE to the lake the warehouse was built over)")


def test_queries_of_every_kind_still_answer_and_refusals_do_not_end_a_session(guarded):
    home = guarded
    script = (f"copy (select * from accounts) to '{home}/lake/stolen.csv';\n"
              "set lock_configuration = false;\n"
              "describe accounts;\n"
              "summarize select balance from transactions;\n"
              "show tables;\n"
              "explain analyze select count(*) from transactions;\n"
              "pivot (select account_id, month from monthly_cashflow) on month;\n"
              "from accounts select count(*) as from_first;\n"
              # the lake's own files are the lake: read as they are
              f"select count(*) as lake_files from glob('{home}/lake/transactions/*.parquet');\n"
              "set TimeZone = 'Africa/Lagos';\n"
              "select min(trans_date) as lagos from transactions;\n")
    before = lake_files(home)
    out = sql("--warehouse", str(home / "warehouse.duckdb"), stdin=script)
    assert out.returncode == 1  # two statements were refused
    assert out.stderr.splitlines() == [
        "ledgerlake: refused: COPY reads or writes files; ledgerlake sql only reads the lake "
        "and the warehouse",
        "ledgerlake: refused: SET changes a setting (only SET TimeZone may); ledgerlake sql "
        "only reads the lake and the warehouse"]
    for shown in ("column_name", "approx_unique", "monthly_cashflow", "analyzed_plan",
                  "2025-01", "from_first", "lake_files", "2025-01-30 13:00:00+01"):
        assert shown in out.stdout, shown
    assert lake_files(home) == before


def test_the_sessions_time_zone_reaches_a_written_file(guarded, tmp_path):
    out = sql("set TimeZone = 'Africa/Lagos'; select min(trans_date) as first from transactions",
              "--warehouse", str(guarded / "warehouse.duckdb"), "--output",
              str(tmp_path / "first.csv"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "first.csv").read_text().splitlines() == [
        "first", "2025-01-30T13:00:00+01:00"]


# -- --as-of: the views over the lake as it stood then -------------------------------------------

@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A home whose lake's transactions were replaced once: 6 lines, then 9 (a second
    account's); its warehouse published over the latest. Returns the home, a time between
    the two commits, and the two versions."""
    import time

    home = tmp_path_factory.mktemp("history")
    lake = Lake(root=str(home / "lake"))
    lake.write("accounts", "rec1", pa.table({"account_id": ["acc1", "acc2"]}))
    first = lake.write("transactions", "rec1", lines("acc1", 6, 1000.0))
    time.sleep(0.05)  # commit times are in milliseconds: a time clearly between the two
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    last = lake.write("transactions", "rec1", pa.concat_tables(
        [lines("acc1", 6, 1000.0), lines("acc2", 3, 50.0)]))
    publish(lake.root, home / "warehouse.duckdb")
    return home, between, first, last


COUNT = "select count(*) as n, count(distinct account_id) as accounts from transactions"


def test_as_of_a_time_answers_the_earlier_count(history, tmp_path):
    home, between, _, _ = history
    published = (home / "warehouse.duckdb").read_bytes()
    now = sql(COUNT, "--format", "csv", env={"LEDGERLAKE_HOME": str(home)}, cwd=tmp_path)
    assert now.returncode == 0, now.stderr
    assert now.stdout.splitlines() == ["n,accounts", "9,2"]
    then = sql(COUNT, "--format", "csv", "--as-of", between.isoformat().replace("+00:00", "Z"),
               env={"LEDGERLAKE_HOME": str(home)}, cwd=tmp_path)
    assert then.returncode == 0, then.stderr
    assert then.stdout.splitlines() == ["n,accounts", "6,1"]
    # the published warehouse is not touched, and nothing is left beside it
    assert (home / "warehouse.duckdb").read_bytes() == published
    assert sorted(p.name for p in home.iterdir()) == ["lake", "warehouse.duckdb"]


def test_as_of_a_table_version_from_the_lake_setting(history, tmp_path):
    """LEDGERLAKE_LAKE names the lake; no published warehouse is needed to travel back."""
    home, _, first, last = history
    out = sql(COUNT, "--format", "csv", "--as-of", f"transactions={first}, accounts=1",
              env={"LEDGERLAKE_HOME": str(tmp_path / "elsewhere"),
                   "LEDGERLAKE_LAKE": str(home / "lake")}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["n,accounts", "6,1"]
    assert not (tmp_path / "elsewhere" / "warehouse.duckdb").exists()


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """`ledgerlake sql ...` in this process (the same code the command runs, without the
    seconds a fresh interpreter takes to import Dagster)."""
    from pipeline.cli import main

    code = main(["sql", *args])  # the settings from the environment the test set
    out = capsys.readouterr()
    return code, out.out, out.err


def test_as_of_in_any_zone_and_at_the_latest_version(history, capsys, monkeypatch):
    home, between, _, last = history
    monkeypatch.setenv("LEDGERLAKE_HOME", str(home))
    monkeypatch.delenv("LEDGERLAKE_LAKE", raising=False)
    lagos = between.astimezone(dt.timezone(dt.timedelta(hours=1))).isoformat()
    assert lagos.endswith("+01:00")
    code, out, err = cli(capsys, COUNT, "--as-of", lagos)
    assert code == 0, err
    assert "│     6 │        1 │" in out
    code, out, err = cli(capsys, COUNT, "--as-of", f"transactions={last}")
    assert code == 0, err
    assert "│     9 │        2 │" in out


@pytest.mark.parametrize("when, message", [
    ("2026-01-30T09:00", "has no time zone: add one (Z for UTC, or +01:00)"),
    ("2999-01-01T00:00Z", "'2999-01-01T00:00Z' is in the future"),
    ("last tuesday", "is neither a time (ISO 8601, e.g. 2026-11-23T09:00Z) nor table=version"),
    ("transactions=latest", "'transactions=latest' is not table=version"),
    ("transactionz=1", "no lake table transactionz; the tables: accounts, "),
    ("transactions=99", "lake table transactions has no version 99 (latest: "),
    ("payments=0", "lake table payments does not exist, so has no version 0"),
])
def test_a_bad_as_of_exits_2_with_a_clear_message(history, capsys, monkeypatch, when, message):
    home, _, _, _ = history
    monkeypatch.setenv("LEDGERLAKE_HOME", str(home))
    monkeypatch.delenv("LEDGERLAKE_LAKE", raising=False)
    published = (home / "warehouse.duckdb").read_bytes()
    code, out, err = cli(capsys, COUNT, "--as-of", when)
    assert code == 2, out + err
    assert err.startswith("ledgerlake: ") and message in err
    assert out == ""
    assert (home / "warehouse.duckdb").read_bytes() == published


def test_as_of_a_vacuumed_version_exits_2_with_a_clear_message(tmp_path, capsys, monkeypatch):
    from resources import delta

    lake = Lake(root=str(tmp_path / "lake"))
    first = lake.write("transactions", "rec1", lines("acc1", 6, 1000.0))
    lake.write("transactions", "rec1", lines("acc1", 2, 1000.0))
    assert delta.vacuum(lake.table_uri("transactions"), retention_hours=0)["files_removed"] == 1
    monkeypatch.setenv("LEDGERLAKE_HOME", str(tmp_path))
    monkeypatch.delenv("LEDGERLAKE_LAKE", raising=False)
    code, _, err = cli(capsys, COUNT, "--as-of", f"transactions={first}")
    assert code == 2
    assert "vacuum" in err


def test_as_of_over_a_file_uri_lake_setting(history, tmp_path, capsys, monkeypatch):
    home, _, first, _ = history
    monkeypatch.setenv("LEDGERLAKE_HOME", str(tmp_path))
    monkeypatch.setenv("LEDGERLAKE_LAKE", (home / "lake").as_uri())
    code, out, err = cli(capsys, COUNT, "--as-of", f"transactions={first}")
    assert code == 0, err
    assert "│     6 │        1 │" in out
