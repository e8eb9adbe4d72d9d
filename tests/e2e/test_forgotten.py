"""Forgotten means forgotten: after a demo-sized run, `ledgerlake forget --customer` leaves
none of the customer's personal values, nor their records' ids, in any file under the data
home: the lake's files and Delta logs, the warehouse, the inbox, Dagster's storage and compute
logs, ledgerlake's logs. Compressed and encoded files are read decoded (Parquet values,
DuckDB tables, gzip). Only the audits may name the records (the lake's `erasures` and
`reveals`, the inbox's tombstones); the sandbox's own folder and log are the service's."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.privacy import Keys
from tests.conftest import start_sandbox

AUDITS = ("erasures", "reveals")  # the lake's audit tables (and their views)
TOMBSTONES = "forgotten"  # the inbox's


def raw_of(box, record: str, env: dict) -> dict[str, list[str]]:
    """A record's personal values as the service sends them, by kind; the identity numbers'
    keyed hashes (under the key of `env`) too."""
    with box.api() as api:
        def items(path: str, key: str) -> list[dict]:
            out, page = [], 1
            while page:
                data = api.post(path, json={"record": record, "page": page, "limit": 100}
                                ).json()["data"]
                out += data[key]
                page = (data.get("pagination") or {}).get("nextPage")
            return out

        accounts = items("accounts/get", "accounts")
        people = api.post("identity/get", json={"record": record}).json()["data"]["identity"]
    keys = Keys.from_env(environ=env)
    ids = [p.get(k) or "" for p in people for k in ("bvn", "nin")]
    return {
        "record": [record],
        "names": [p.get(k) or "" for p in people for k in ("firstname", "middlename",
                                                           "lastname", "fullname")]
        + [a.get("name") or "" for a in accounts],
        "numbers": [*ids, *(keys.hash(i) for i in ids if i),
                    *(a.get("nuban") or "" for a in accounts)],
        "contacts": [v for p in people for k in ("phone", "email") for v in p.get(k) or []],
        "narrations": [t.get("narration") or "" for t in items_all(box, record)],
    }


def items_all(box, record: str) -> list[dict]:
    out, page = [], 1
    with box.api() as api:
        while page:
            data = api.post("transactions/get", json={"record": record, "page": page,
                                                      "limit": 100}).json()["data"]
            out += data["transaction"]
            page = data["pagination"]["nextPage"]
    return out


def decoded(path: Path, home: Path) -> bytes:
    """What a file holds, as a reader could get it: its bytes, plus Parquet's values, a
    DuckDB file's tables, a gzip's content; an SQLite file's tables but the tombstones (its
    bytes are checked for everything else)."""
    data = path.read_bytes()
    name = path.name
    if name.endswith(".gz"):
        data += gzip.decompress(data)
    if ".parquet" in name:
        try:
            data += str(pq.ParquetFile(path).read().to_pylist()).encode()
        except (pa.ArrowInvalid, OSError):
            pass
    if name.endswith(".duckdb"):
        with duckdb.connect(str(path), read_only=True) as con:
            for (table,) in con.execute("select table_name from information_schema.tables"
                                        " where table_type = 'BASE TABLE'").fetchall():
                data += str(con.execute(f'select * from "{table}"').fetchall()).encode()
    return data


def sqlite_rows(path: Path) -> bytes | None:
    """An SQLite file's rows, every table but the tombstones; None if not SQLite."""
    if path.read_bytes()[:16] != b"SQLite format 3\0":
        return None
    con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        tables = [t for (t,) in con.execute("select name from sqlite_master where type ="
                                            " 'table'") if t != TOMBSTONES]
        return b"".join(str(con.execute(f'select * from "{t}"').fetchall()).encode()
                        for t in tables)
    finally:
        con.close()


def ours(home: Path) -> list[Path]:
    """Every file ledgerlake wrote under `home`: not the sandbox's, not the audits'."""
    out = []
    for p in sorted(home.rglob("*")):
        parts = p.relative_to(home).parts
        if not p.is_file() or parts[0] == "sandbox" or p.name.startswith("sandbox."):
            continue
        if parts[0] == "lake" and len(parts) > 1 and parts[1] in AUDITS:
            continue
        out.append(p)
    return out


def found(home: Path, needles: dict[str, list[str]]) -> dict[str, list[str]]:
    """Which needles each file holds. Record ids are looked for outside the inbox's
    tombstones: in an SQLite file, in its rows but those."""
    hits: dict[str, list[str]] = {}
    ids = needles["record"]
    others = [n for kind, vs in needles.items() if kind != "record" for n in vs]
    for path in ours(home):
        data = decoded(path, home)
        rows = sqlite_rows(path) if not path.name.endswith((".duckdb", ".parquet")) else None
        where_ids = rows if rows is not None else data
        got = [n for n in others if n.encode() in data] + \
            [n for n in ids if n.encode() in where_ids]
        if got:
            hits[str(path.relative_to(home))] = got
    return hits


@pytest.mark.slow
def test_a_forgotten_customer_is_in_no_file_of_the_data_home(demo, tmp_path):
    assert demo.out.returncode == 0, demo.out.stdout + demo.out.stderr
    home = tmp_path / "home"
    shutil.copytree(demo.home, home)  # the session's demo stays for the other tests
    env = {**demo.env, "LEDGERLAKE_HOME": str(home)}
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        owners = dict(con.execute("select distinct record_id, customer_id from accounts"
                                  ).fetchall())
    customer = sorted(set(owners.values()))[0]
    box = start_sandbox(home / "sandbox")  # the demo's service, again, to read its truth
    try:
        values = {r: raw_of(box, r, env) for r in owners}
    finally:
        box.server.stop()
    mine = [r for r, c in owners.items() if c == customer]
    theirs = {v for r in owners if r not in mine for vs in values[r].values() for v in vs}
    # what only this customer's data holds (a narration like "POS PURCHASE" is everyone's)
    needles = {kind: sorted({v for r in mine for v in values[r][kind]
                             if len(v) >= 6 and not any(v in t for t in theirs)})
               for kind in values[mine[0]]}
    assert needles["record"] and needles["names"] and needles["numbers"], needles
    assert needles["contacts"] and needles["narrations"], needles
    before = found(home, needles)
    assert before, "the demo's data holds none of the customer's values: the scan is blind"

    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "forget", "--customer",
                          customer, "--even-connected"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert found(home, needles) == {}
