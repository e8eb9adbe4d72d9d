"""Personal data (resources/privacy.py): the masks, the keyed hash, sealing, the key's sources,
and what an identity table puts on disk: no raw BVN, phone or email in any file of its Delta
table, no statistics of a column that is not public in its log. Real files; nothing mocked."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import subprocess
import sys
from collections.abc import Iterable
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.identity import RAW, SCHEMA, to_table
from resources.lake import Lake
from resources.privacy import (
    KEY_FILE_VAR,
    KEY_VAR,
    Keys,
    KeyUnusable,
    mask_address,
    mask_digits,
    mask_email,
    new_key,
    protect,
    reveal,
    stats_columns,
)
from sandbox import datagen

ROOT = Path(__file__).resolve().parents[2]


def found(root: Path, needles: Iterable[str]) -> dict[str, list[str]]:
    """Which of `needles` each file under `root` holds, by file: in its bytes (a Parquet
    footer's statistics, the Delta log's JSON, a DuckDB catalog), or, for a Parquet file
    (compressed: its bytes alone would hide a value), in its decoded values. A file whose
    Parquet does not parse is judged by its bytes."""
    needles = list(needles)
    hits: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        text = path.read_bytes()
        if ".parquet" in path.name:
            try:
                text += str(pq.ParquetFile(path).read().to_pylist()).encode()
            except (pa.ArrowInvalid, OSError):
                pass
        if got := [n for n in needles if n.encode() in text]:
            hits[str(path.relative_to(root))] = got
    return hits


def log_stats_columns(table_dir: Path) -> set[str]:
    """Every column any add or remove action of the table's log keeps statistics of."""
    columns: set[str] = set()
    for commit in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if (stats := (action.get(kind) or {}).get("stats")):
                    parsed = json.loads(stats)
                    for part in ("minValues", "maxValues", "nullCount"):
                        columns |= set(parsed.get(part) or {})
    return columns


def people(customers: Iterable[str], seed: int = 7) -> list[dict]:
    """Identity items as /identity/get sends them (sandbox/datagen.py), one per customer."""
    return [{**datagen.identity(seed, c, f"Adaeze{i} Okonkwo-Test{i}"), "customer": c}
            for i, c in enumerate(customers)]


@pytest.fixture
def keys() -> Keys:
    return Keys(secrets.token_bytes(32))


# -- masks -------------------------------------------------------------------------------------

def test_masks_keep_only_what_an_analyst_needs():
    assert mask_digits("22123456789") == "*******6789"
    assert mask_digits("+2348031234567") == "**********4567"
    assert mask_digits("123456") == "******"  # too short to show four digits of
    assert mask_digits("") == "" and mask_digits(None) is None
    assert mask_email("ada.obi@example.com") == "a***@example.com"
    assert mask_email("not-an-email") == "***"
    assert mask_address("12 Allen Avenue, Ikeja, Lagos") == "***, Lagos"
    assert mask_address("12 Allen Avenue") == "***"
    assert mask_address("12 Allen Avenue, ") == "***"


# -- keys --------------------------------------------------------------------------------------

def test_the_hash_is_keyed_and_stable():
    secret = secrets.token_bytes(32)
    one, same, other = Keys(secret), Keys(secret), Keys(secrets.token_bytes(32))
    h = one.hash("22123456789")
    assert len(h) == 64 and int(h, 16) >= 0
    assert h == same.hash("22123456789") == one.hash(" 22123456789 ")  # joins across runs
    assert other.hash("22123456789") != h  # another key: nothing to join, nothing to guess
    assert one.hash("22123456780") != h
    assert one.hash(None) is None
    assert h != hashlib.sha256(b"22123456789").hexdigest()  # not a dictionary lookup away


def test_seal_opens_only_with_its_key_and_its_customer(keys):
    values = {"bvn": "22123456789", "phones": ["+2348031234567"], "dob": "1990-04-01"}
    sealed = keys.seal(values, "cust-a")
    assert b"22123456789" not in sealed and b"2348031234567" not in sealed
    assert keys.open(sealed, "cust-a") == values
    assert keys.seal(values, "cust-a") != sealed  # a fresh nonce each time

    secret = secrets.token_bytes(32)
    with pytest.raises(KeyUnusable, match="another key") as wrong_key:
        Keys(secret).open(sealed, "cust-a")
    assert secret.hex() not in str(wrong_key.value)
    with pytest.raises(KeyUnusable, match="another customer"):
        keys.open(sealed, "cust-b")  # a row copied under another customer does not open
    damaged = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(KeyUnusable, match="damaged"):
        keys.open(damaged, "cust-a")
    with pytest.raises(KeyUnusable, match="unknown format"):
        keys.open(b"\x02" + sealed[1:], "cust-a")


def test_keys_never_show_the_secret():
    secret = secrets.token_bytes(32)
    keys = Keys(secret)
    for shown in (repr(keys), str(keys)):
        assert secret.hex() not in shown.lower() and secret.hex()[:8] not in shown.lower()
    assert not hasattr(keys, "__dict__")  # nothing else to dump it from


@pytest.mark.parametrize("bad", ["abc", "0" * 63, "0" * 65, "g" * 64, "zz" + "0" * 62])
def test_a_key_not_64_hex_digits_is_refused_without_echoing_it(tmp_path, bad):
    with pytest.raises(KeyUnusable, match=f"{KEY_VAR} must be 64 hex digits") as refused:
        Keys.from_env({KEY_VAR: bad, "LEDGERLAKE_HOME": str(tmp_path)})
    assert bad not in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # no key file made in its place


def test_the_env_key_is_the_key(tmp_path):
    secret = secrets.token_bytes(32)
    keys = Keys.from_env({KEY_VAR: secret.hex().upper(), "LEDGERLAKE_HOME": str(tmp_path)},
                         local_lake=False)
    assert keys.hash("x") == Keys(secret).hash("x")
    assert list(tmp_path.iterdir()) == []


def test_a_key_is_made_only_when_asked_once_private_and_never_replaced(tmp_path):
    env = {"LEDGERLAKE_HOME": str(tmp_path / "home")}
    with pytest.raises(KeyUnusable, match="no key: LEDGERLAKE_PII_KEY is not set") as none:
        Keys.from_env(env)  # a reader, or a writer, never makes one
    assert "ledgerlake keys new" in str(none.value) and KEY_FILE_VAR in str(none.value)
    assert not (tmp_path / "home").exists()
    path = new_key(env)
    assert path == tmp_path / "home" / "pii.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    first, again = Keys.from_env(env), Keys.from_env(env)
    assert again.hash("x") == first.hash("x")
    with pytest.raises(KeyUnusable, match="a key is already at"):
        new_key(env)
    assert new_key(env, exist_ok=True) == path and path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == ["pii.key"]  # no temporary left
    with pytest.raises(KeyUnusable, match=f"{KEY_VAR} is set"):
        new_key({**env, KEY_VAR: secrets.token_hex(32)})
    assert new_key({**env, KEY_VAR: secrets.token_hex(32)}, exist_ok=True) is None
    # a file named by LEDGERLAKE_PII_KEY_FILE instead, and a non-local lake may use it
    named = {KEY_FILE_VAR: str(tmp_path / "keys" / "lake.key")}
    made = Keys.from_env(named) if new_key(named) else None
    assert stat.S_IMODE((tmp_path / "keys" / "lake.key").stat().st_mode) == 0o600
    assert Keys.from_env(named, local_lake=False).hash("x") == made.hash("x") != first.hash("x")


def test_a_key_file_not_holding_a_key_is_refused(tmp_path):
    (tmp_path / "pii.key").write_text("not a key\n")
    with pytest.raises(KeyUnusable, match="does not hold a key") as refused:
        Keys.from_env({"LEDGERLAKE_HOME": str(tmp_path)})
    assert "not a key" not in str(refused.value)


def test_a_lake_in_object_storage_needs_a_shared_key(tmp_path):
    with pytest.raises(KeyUnusable, match=f"{KEY_VAR} is not set"):
        Keys.from_env({"LEDGERLAKE_HOME": str(tmp_path)}, local_lake=False)
    assert list(tmp_path.iterdir()) == []  # no machine-local key made for it


def test_processes_making_the_key_file_at_once_all_get_one_key(tmp_path):
    """Four makers of a fresh local lake's key at once (`demo`, `dev`): one key wins, all
    seal with it."""
    env = {k: v for k, v in os.environ.items() if k not in (KEY_VAR, KEY_FILE_VAR)}
    env["LEDGERLAKE_HOME"] = str(tmp_path)
    code = ("from resources.privacy import Keys, new_key; new_key(exist_ok=True); "
            "print(Keys.from_env().hash('x'))")
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    hashes = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert hashes == {Keys(bytes.fromhex((tmp_path / "pii.key").read_text())).hash("x")}
    assert [p.name for p in tmp_path.iterdir()] == ["pii.key"]


# -- identity in the lake ----------------------------------------------------------------------

def test_protect_masks_hashes_and_seals_and_reveal_opens(keys):
    items = people(["cust-a", "cust-b"])
    items.append({"customer": {"_id": "cust-c", "name": "C"}, "bvn": "22999888777",
                  "firstname": "Chidi", "lastname": "Eze", "phone": [], "email": []})
    raw = to_table(items)
    assert raw.schema == RAW
    lake = protect(raw, keys, SCHEMA)
    assert lake.schema == SCHEMA

    secrets_ = {v for item in items for k in ("bvn", "nin", "phone", "email", "address", "dob")
                for v in (item.get(k) if isinstance(item.get(k), list) else [item.get(k)]) if v}
    assert len(secrets_) == 2 * 6 + 1
    values = str(lake.to_pylist())
    assert [s for s in secrets_ if s in values] == []
    # bytes too (the sealed column): no raw value there either
    assert not any(s.encode() in row["sealed"] for row in lake.to_pylist() for s in secrets_)

    rows = {r["customer_id"]: r for r in lake.to_pylist()}
    a = items[0]
    assert rows["cust-a"]["bvn"] == "*******" + a["bvn"][-4:]
    assert rows["cust-a"]["bvn_hash"] == keys.hash(a["bvn"])
    assert rows["cust-a"]["nin_hash"] == keys.hash(a["nin"])
    assert rows["cust-a"]["birth_year"] == date.fromisoformat(a["dob"]).year
    assert rows["cust-a"]["emails"] == [mask_email(a["email"][0])]
    assert rows["cust-a"]["addresses"] == [mask_address(a["address"][0])]
    assert rows["cust-a"]["fullname"] == a["fullname"]  # personal, not sensitive: kept
    assert rows["cust-c"]["nin"] is None and rows["cust-c"]["nin_hash"] is None
    assert rows["cust-c"]["birth_year"] is None and rows["cust-c"]["phones"] == []

    opened = {o["customer_id"]: o for o in reveal(lake.append_column(
        "record_id", pa.array(["r1", "r1", "r2"])), keys)}
    assert opened["cust-a"] == {"customer_id": "cust-a", "record_id": "r1", "bvn": a["bvn"],
                                "nin": a["nin"], "dob": a["dob"], "phones": a["phone"],
                                "emails": a["email"], "addresses": a["address"]}
    assert opened["cust-c"]["bvn"] == "22999888777" and opened["cust-c"]["dob"] is None
    with pytest.raises(KeyUnusable):
        reveal(lake.append_column("record_id", pa.array(["r1"] * 3)),
               Keys(secrets.token_bytes(32)))


def test_the_identity_table_on_disk_holds_no_raw_value_and_no_private_statistics(
        tmp_path, keys):
    items = people(["cust-a", "cust-b", "cust-c"])
    lake = Lake(root=str(tmp_path / "lake"))
    raw = to_table(items)
    lake.replace("identity", {"r1": protect(raw.slice(0, 2), keys, SCHEMA),
                              "r2": protect(raw.slice(2), keys, SCHEMA)}, SCHEMA)
    # a second write: a rewritten file, a removed one, one more commit of statistics
    lake.replace("identity", {"r1": protect(raw.slice(0, 1), keys, SCHEMA)}, SCHEMA)
    folder = tmp_path / "lake" / "identity"
    assert len(list(folder.glob("*.parquet"))) >= 2

    raw_values = [v for i in items for v in (i["bvn"], i["nin"], *i["phone"], *i["email"])]
    assert found(folder, raw_values) == {}
    # the scan does read the values: the hash and the name analysts see are there
    seen = found(folder, [keys.hash(items[2]["bvn"]), items[2]["fullname"]])
    assert seen and all(p.endswith(".parquet") for p in seen)

    logged = log_stats_columns(folder)
    assert "customer_id" in logged and "record_id" in logged  # the log keeps statistics...
    assert logged <= set(stats_columns("identity"))  # ...of public columns only
    assert not logged & {"bvn_hash", "fullname", "bvn", "phones", "sealed"}


@pytest.mark.parametrize(("env", "said"), [
    ({"LEDGERLAKE_PII_KEY": "not-a-key-0123"}, "LEDGERLAKE_PII_KEY must be 64 hex digits"),
    ({"LEDGERLAKE_PII_KEY": "", "LEDGERLAKE_LAKE": "s3://lake/prefix"},
     "LEDGERLAKE_PII_KEY is not set: a lake in object storage"),
])
def test_a_key_that_cannot_be_used_stops_the_code_location_at_load(tmp_path, env, said):
    """Before any run lands identity, in one line, without the value; nothing is made."""
    full = {**os.environ, "LEDGERLAKE_HOME": str(tmp_path), **env}
    full.pop("LEDGERLAKE_PII_KEY_FILE", None)
    if "LEDGERLAKE_LAKE" in env:  # reached only once the lake answers: check_key alone
        code = ("from resources.privacy import check_key, KeyUnusable\n"
                "try:\n    check_key(local_lake=False)\n"
                "except KeyUnusable as e:\n    raise SystemExit(str(e))")
    else:
        code = "import pipeline.definitions"
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert out.returncode != 0 and said in out.stderr, out.stderr
    assert "not-a-key-0123" not in out.stderr
    assert list(tmp_path.iterdir()) == []
