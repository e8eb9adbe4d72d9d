"""`ledgerlake sql` over a lake on S3 (moto's server checking credentials), run as analysts run
it: a process, with LEDGERLAKE_LAKE the s3:// lake and the warehouse a local file."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from assets.warehouse import publish
from resources import object_store
from tests.assets.test_warehouse_s3 import (  # noqa: F401  (s3, landed: fixtures)
    S3,
    TRANSACTIONS,
    Landed,
    landed,
    refusals,
    s3,
)
from tests.s3 import BUCKET


@pytest.fixture(scope="module")
def home(landed, tmp_path_factory) -> Path:  # noqa: F811
    """A home whose warehouse was published over the S3 lake."""
    home = tmp_path_factory.mktemp("home")
    publish(landed.lake.root, home / "warehouse.duckdb")
    return home


def sql(s3: S3, home: Path, *args: str, stdin: str | None = None,  # noqa: F811
        **env: str) -> subprocess.CompletedProcess:
    environ = s3.env(**{"LEDGERLAKE_HOME": str(home), "LEDGERLAKE_LAKE": s3.root(), **env})
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", *args], input=stdin,
                         capture_output=True, text=True, timeout=120, env=environ, cwd=home)
    for secret in (s3.secret, environ["AWS_SECRET_ACCESS_KEY"]):
        assert secret not in out.stdout + out.stderr
    return out


def rows(csv: str) -> list[tuple[str, int, Decimal]]:
    lines = csv.splitlines()
    assert lines[0] == "record_id,count_star(),sum(amount)"
    return [(r, int(n), Decimal(s)) for r, n, s in (line.split(",") for line in lines[1:])]


def test_queries_the_views_over_s3(s3, landed: Landed, home):  # noqa: F811
    out = sql(s3, home, TRANSACTIONS, "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert rows(out.stdout) == [(r, n, total) for r, (n, total)
                                in sorted(landed.transactions.items())]
    shown = sql(s3, home, "select account_id, available_balance from balances order by 1")
    assert shown.returncode == 0, shown.stderr
    assert "1180.15" in shown.stdout and "110.15" in shown.stdout and "3.00" in shown.stdout


def test_writes_parquet_and_reads_statements_from_stdin(s3, landed, home, tmp_path):  # noqa: F811
    out = sql(s3, home, TRANSACTIONS, "--output", str(tmp_path / "t.parquet"))
    assert out.returncode == 0, out.stderr
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.column("record_id").to_pylist() == sorted(landed.transactions)
    out = sql(s3, home, stdin="select count(*) as n from accounts;\n"
                              "select count(*) as m from transactions;\n")
    assert out.returncode == 0, out.stderr
    counts = [line.strip("│ ") for line in out.stdout.splitlines() if line.startswith("│")]
    assert counts == ["n", "int64", "3", "m", "int64", "14"]


@pytest.mark.slow  # tens of seconds: make test-all
def test_as_of_over_s3(s3, landed: Landed, home, tmp_path):  # noqa: F811
    published = (home / "warehouse.duckdb").read_bytes()
    at = landed.between.isoformat().replace("+00:00", "Z")
    for when in (at, f"transactions={landed.first}"):
        out = sql(s3, tmp_path, TRANSACTIONS, "--format", "csv", "--as-of", when)
        assert out.returncode == 0, out.stderr
        assert [r[:2] for r in rows(out.stdout)] == [("rec1", 9), ("rec2", 2)]
    assert (home / "warehouse.duckdb").read_bytes() == published
    assert list(tmp_path.iterdir()) == []  # the as-of warehouse was a scratch file, gone


def test_a_lake_setting_that_is_not_the_warehouses_lake_says_so(s3, home, tmp_path):  # noqa: F811
    """Views naming s3:// files, read without the lake's filesystem: told, nothing fetched
    (DuckDB would otherwise try to download httpfs)."""
    out = sql(s3, home, "select count(*) from transactions",
              LEDGERLAKE_LAKE=str(tmp_path / "lake"))
    assert out.returncode == 1
    assert out.stderr.startswith(f"ledgerlake: refused: reading s3://{BUCKET}/lake/transactions/")
    assert out.stderr.splitlines()[0].endswith(
        "ledgerlake sql only reads the lake and the warehouse (if the warehouse's views read "
        "the lake on S3: set LEDGERLAKE_LAKE to the s3:// lake it was built over)")
    assert len(out.stderr.splitlines()) == 1


def objects(landed: Landed) -> dict[str, int]:  # noqa: F811
    """Every object of the lake's bucket, and its size."""
    store, base = object_store.filesystem(landed.lake.root)
    return {i.path: i.size for i in store.get_file_info(
        pafs.FileSelector(base.split("/", 1)[0], recursive=True))}


REFUSED = {  # over the S3 lake: a statement, what its refusal names
    "a Delta commit into the lake": (
        "copy (select {{'path': parse_filename(file), 'dataChange': true, "
        "'deletionTimestamp': 0}} as remove from glob('{lake}/transactions/*.parquet')) "
        "to '{lake}/transactions/_delta_log/{next:020d}.json' (format json)",
        "refused: COPY reads or writes files"),
    "the bucket beyond the lake": ("select * from glob('s3://{bucket}/*')",
                                   "refused: reading s3://{bucket}/*;"),
    "another prefix": ("select content from read_text('s3://{bucket}/elsewhere/key')",
                       "refused: reading s3://{bucket}/elsewhere/key;"),
    "a local file": ("select * from read_csv('/etc/passwd', sep = ':')",
                     "refused: reading /etc/passwd;"),
    "external access": ("set enable_external_access = true", "refused: SET"),
    "install": ("install httpfs", "refused: INSTALL"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_sql_over_s3_reads_the_lake_and_nothing_else(s3, landed: Landed, home, case):  # noqa: F811
    lake = f"s3://{BUCKET}/lake"
    values = {"lake": lake, "bucket": BUCKET,
              "next": landed.lake.version("transactions") + 1}
    statement, named = (text.format(**values) for text in REFUSED[case])
    before = objects(landed)
    out = sql(s3, home, statement)  # the secret in neither output: sql() checks
    assert out.returncode == 1
    assert out.stderr.splitlines() == [out.stderr.rstrip("\n")]
    assert out.stderr.startswith("ledgerlake: " + named)
    assert "ledgerlake sql only reads the lake and the warehouse" in out.stderr
    assert objects(landed) == before
    whole = sql(s3, home, TRANSACTIONS, "--format", "csv")
    assert rows(whole.stdout) == [(r, n, total) for r, (n, total)
                                  in sorted(landed.transactions.items())]


@pytest.mark.parametrize("case", ["wrong secret", "unknown key", "no bucket", "no endpoint"])
@pytest.mark.parametrize("as_of", [False, True])
def test_a_lake_that_refuses_us_exits_2_with_one_line(s3, home, tmp_path, case,  # noqa: F811
                                                      as_of):
    env, line = refusals(s3, home)[case]
    published = (home / "warehouse.duckdb").read_bytes()
    args = ["select count(*) from transactions"] + (["--as-of", "transactions=1"] if as_of
                                                    else [])
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", *args], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.splitlines() == [out.stderr.strip()]  # one line
    assert out.stderr.startswith("ledgerlake: " + line)
    assert s3.secret not in out.stderr and env["AWS_SECRET_ACCESS_KEY"] not in out.stderr
    assert (home / "warehouse.duckdb").read_bytes() == published
    assert list(tmp_path.iterdir()) == []


DELTA_LOG_CUT = {"kind": "drop", "op": "GET", "key": "_delta_log"}  # delta-rs's reads
DATA_503 = {"kind": "503", "op": "GET", "key": r"\.parquet$"}  # DuckDB's, through pyarrow


@pytest.mark.parametrize("args, fault, said", [
    (("forget", "--customer", "c1"), DELTA_LOG_CUT, ""),
    (("reveal", "--customer", "c1"), DELTA_LOG_CUT, ""),
    (("sql", "select count(*) from transactions", "--as-of", "2026-01-01T00:00Z"),
     DELTA_LOG_CUT, ""),
    # DuckDB's error holds the Python traceback of the store's 503: its words are said (a
    # build's are tested in tests/assets/test_warehouse_s3.py)
    (("sql", "select count(*) from transactions"), DATA_503,
     "the lake's store failed under the query: AWS Error ")])
def test_a_store_failing_under_a_command_is_said_in_one_line(s3, landed, home,  # noqa: F811
                                                             args, fault, said):
    """A command whose lake store fails under it (past the client's retries: a Delta log's
    read cut off mid-answer, or a data file's answered 503) says what failed in one line,
    never a traceback, and names no secret (the chaos suite saw `forget` crash when the
    store dropped a connection)."""
    from tests.s3_faults import S3Faults

    with S3Faults(s3.endpoint) as proxy:
        proxy.set_rules([fault])
        environ = s3.env(LEDGERLAKE_HOME=str(home),
                         LEDGERLAKE_LAKE=s3.root(endpoint=proxy.endpoint))
        out = subprocess.run([sys.executable, "-m", "pipeline.cli", *args],
                             capture_output=True, text=True, timeout=300, env=environ, cwd=home)
        assert sum(proxy.report().values()) > 0, (dict(proxy.seen), out.stderr)
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ledgerlake: " + said) and "Traceback" not in out.stderr, \
        out.stderr
    assert s3.secret not in out.stdout + out.stderr
