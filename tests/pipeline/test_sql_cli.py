"""`ledgerlake sql`, run as analysts run it: a real process over a published warehouse."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import shlex
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.warehouse import build
from resources.columns import money
from resources.lake import Lake

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
    build(lake.root, target)
    return target


def sql(*args: str, stdin: str | None = None, env: dict | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", *args],
                          input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=cwd)


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
    out = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {me} 'select * from accounts' --warehouse {w} "
         f"--format json | {shlex.quote(sys.executable)} -c 'import json,sys; print(len(json.load(sys.stdin)))'"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"
    # far more than a pipe holds: the writer meets a closed pipe once head has its line
    out = subprocess.run(
        ["bash", "-c", f"{me} 'select range as n from range(300000)' --warehouse {w} "
         "--format jsonl | head -n 1; echo \"exit ${PIPESTATUS[0]}\""],
        capture_output=True, text=True, timeout=120)
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
    build(lake.root, home / "warehouse.duckdb")
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
