"""Forgotten means forgotten: after a demo-sized run, `ledgerlake forget --customer` leaves
none of the customer's personal values, nor their records' ids, in any file under the data
home (with the Postgres inbox and instance and a lake on S3: tests/e2e/test_beyond_one_machine.py): the lake's files and Delta logs, the warehouse, the inbox, Dagster's storage and compute
logs, ledgerlake's logs. Compressed and encoded files are read decoded (Parquet values,
DuckDB tables, gzip); SQLite files byte for byte, free pages included. Only the lake's audits
(`erasures`, `reveals`) may name the records (the inbox's tombstones keep a hash); the
sandbox's own folder and log are the service's."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from resources.privacy import Keys
from tests.conftest import start_sandbox

AUDITS = ("erasures", "reveals")  # the lake's audit tables


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
        "narrations": [(t.get("notes") or {}).get("desc") or "" for t in items_all(box, record)],
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


def needles_for(box, owners: dict[str, str], customer: str, env: dict,
                kinds: tuple[str, ...] = ("record", "names", "numbers", "contacts",
                                          "narrations")) -> dict[str, list[str]]:
    """What only `customer`'s data holds, by kind, from the service's side (`owners`: every
    record's customer): a narration like "POS PURCHASE" is everyone's, so it is not one.
    Each of `kinds` must yield one at least (among hundreds of customers, a month's
    narrations may all be someone else's too)."""
    values = {r: raw_of(box, r, env) for r in owners}
    mine = [r for r, c in owners.items() if c == customer]
    theirs = {v for r in owners if r not in mine for vs in values[r].values() for v in vs}
    needles = {kind: sorted({v for r in mine for v in values[r][kind]
                             if len(v) >= 6 and not any(v in t for t in theirs)})
               for kind in values[mine[0]]}
    assert all(needles[k] for k in kinds), needles
    return needles


def decoded(path: Path | str, data: bytes) -> bytes:
    """What a file holds, as a reader could get it: its bytes, plus Parquet's values, a
    DuckDB file's tables, a gzip's content."""
    name = str(path)
    if name.endswith(".gz"):
        data += gzip.decompress(data)
    if ".parquet" in name:
        try:
            data += str(pq.read_table(pa.BufferReader(data)).to_pylist()).encode()
        except (pa.ArrowInvalid, OSError):
            pass
    if name.endswith(".duckdb"):
        with duckdb.connect(str(path), read_only=True) as con:
            for (table,) in con.execute("select table_name from information_schema.tables"
                                        " where table_type = 'BASE TABLE'").fetchall():
                data += str(con.execute(f'select * from "{table}"').fetchall()).encode()
    return data


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
    """Which needles each file holds."""
    hits: dict[str, list[str]] = {}
    for path in ours(home):
        if got := holding(decoded(path, path.read_bytes()), needles):
            hits[str(path.relative_to(home))] = got
    return hits


def holding(data: bytes, needles: dict[str, list[str]]) -> list[str]:
    return [n for vs in needles.values() for n in vs if n.encode() in data]


def found_in_store(uri: str, needles: dict[str, list[str]]) -> dict[str, list[str]]:
    """As `found`, over every object of a lake in object storage but its audits'."""
    from resources.object_store import filesystem

    store, base = filesystem(uri)
    hits = {}
    for info in store.get_file_info(pafs.FileSelector(base, recursive=True)):
        name = info.path.removeprefix(base).lstrip("/")
        if info.type != pafs.FileType.File or name.split("/")[0] in AUDITS:
            continue
        with store.open_input_stream(info.path) as f:
            if got := holding(decoded(name, f.read()), needles):
                hits[name] = got
    return hits


def found_in_postgres(url: str, needles: dict[str, list[str]]) -> dict[str, list[str]]:
    """Which needles each table of a Postgres database holds, in its rows as text."""
    import psycopg2

    hits = {}
    with psycopg2.connect(url) as con, con.cursor() as cur:
        cur.execute("select tablename from pg_tables where schemaname = 'public'")
        for (table,) in cur.fetchall():
            cur.execute(f'select t::text from "{table}" t')
            text = "\n".join(r[0] for r in cur.fetchall()).encode()
            if got := holding(text, needles):
                hits[table] = got
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
        needles = needles_for(box, owners, customer, env)
    finally:
        box.server.stop()
    before = found(home, needles)
    assert before, "the demo's data holds none of the customer's values: the scan is blind"

    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "forget", "--customer",
                          customer, "--even-connected"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert found(home, needles) == {}
