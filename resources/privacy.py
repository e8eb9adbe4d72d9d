"""Personal data: the class of every lake column, and how the sensitive ones are kept.

Each column's class is declared with it (resources/tables.py; docs/privacy.md). A `sensitive`
one is never written in clear: the lake holds a masked form analysts read (`*******1234`,
`a***@example.com`, the year of birth), a keyed hash of the BVN and NIN (HMAC-SHA256) to join
on, and the raw values sealed (AES-256-GCM) in `sealed`, which only `ledgerlake reveal` opens.
The key: LEDGERLAKE_PII_KEY (64 hex digits), or for a local lake a key file,
LEDGERLAKE_PII_KEY_FILE (default `$LEDGERLAKE_HOME/pii.key`, mode 0600), which only
`ledgerlake keys new`, `dev` and `demo` make (`new_key`), never a reader or a writer; the
hashing and sealing keys are derived from it. Only `public` columns get statistics in the
Delta log (`stats_columns`), where a file's min and max would outlive the file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from .config import home_from_env
from .tables import PUBLIC, TABLES, columns

# the class of every lake column, from its declaration (resources/tables.py)
CLASSES = {t: {name: c.privacy for name, c in columns(t).items()} for t in TABLES}

# sensitive values as the lake keeps them: the masked column, and what is sealed
SEALED = ("bvn", "nin", "dob", "phones", "emails", "addresses")
HASHED = ("bvn", "nin")


def classify(table: str, column: str) -> str:
    """The column's class; a ValueError for a column nobody classified."""
    try:
        return CLASSES[table][column]
    except KeyError:
        raise ValueError(f"column {table}.{column} has no class: declare it in "
                         f"resources/tables.py") from None


def stats_columns(table: str) -> list[str] | None:
    """The columns the Delta log may keep statistics of (min, max): the public ones. None for
    a table not declared (no restriction)."""
    if table not in CLASSES:
        return None
    return [c for c, cls in CLASSES[table].items() if cls == PUBLIC]


# -- keys --------------------------------------------------------------------------------------

KEY_VAR, KEY_FILE_VAR = "LEDGERLAKE_PII_KEY", "LEDGERLAKE_PII_KEY_FILE"
_HEX_KEY = re.compile(r"^[0-9a-fA-F]{64}$")
SEAL_VERSION = b"\x01"


class KeyUnusable(ValueError):
    """No usable key: the message says which setting, never the key."""


class Keys:
    """The hashing and sealing keys, derived from one secret; never shown."""

    __slots__ = ("_hash", "_seal", "_cipher", "key_id")

    def __init__(self, secret: bytes):
        if len(secret) != 32:
            raise KeyUnusable("the personal-data key must be 32 bytes (64 hex digits)")
        self._hash = hmac.digest(secret, b"ledgerlake hash v1", "sha256")
        self._seal = hmac.digest(secret, b"ledgerlake seal v1", "sha256")
        self._cipher = None  # made at first use and kept: one for every row, not one a row
        # names the key in sealed values (to tell a wrong key from damage), reveals nothing
        self.key_id = hashlib.sha256(b"ledgerlake key id" + secret).digest()[:4]

    def __repr__(self) -> str:
        return f"Keys(key_id={self.key_id.hex()})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 local_lake: bool = True) -> Keys:
        """LEDGERLAKE_PII_KEY, else the key file (for an object-storage lake only when named:
        processes on several machines must share one key). Never made here: a KeyUnusable
        saying "no key" and how to give one."""
        env = os.environ if environ is None else environ
        if value := env.get(KEY_VAR):
            if not _HEX_KEY.fullmatch(value.strip()):
                raise KeyUnusable(f"{KEY_VAR} must be 64 hex digits (32 bytes): make one with "
                                "`python -c 'import secrets; print(secrets.token_hex(32))'`")
            return cls(bytes.fromhex(value.strip()))
        if not local_lake and KEY_FILE_VAR not in env:
            raise _no_key_for_object_storage()
        path = key_file(env)
        if not path.exists():
            raise KeyUnusable(f"no key: {KEY_VAR} is not set and there is no key file at "
                              f"{path}. Set {KEY_VAR} (64 hex digits) from your secret store, "
                              f"or put the key file back (or name it with {KEY_FILE_VAR}); "
                              "for a new lake, `ledgerlake keys new` makes one")
        text = path.read_text().strip()
        if not _HEX_KEY.fullmatch(text):
            raise KeyUnusable(f"{path} does not hold a key (64 hex digits)")
        return cls(bytes.fromhex(text))

    def hash(self, value: str | None) -> str | None:
        """The keyed hash analysts join on: HMAC-SHA256 of the value, hex."""
        if value is None:
            return None
        return hmac.new(self._hash, value.strip().encode(), "sha256").hexdigest()

    def _aead(self):
        if self._cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._cipher = AESGCM(self._seal)
        return self._cipher

    def seal(self, values: dict, context: str) -> bytes:
        """The values, encrypted and bound to `context` (the customer's id)."""
        nonce = secrets.token_bytes(12)
        body = self._aead().encrypt(nonce, orjson.dumps(values), context.encode())
        return SEAL_VERSION + self.key_id + nonce + body

    def open(self, sealed: bytes, context: str) -> dict:
        """What `seal` sealed; a KeyUnusable for another key's or damaged values."""
        from cryptography.exceptions import InvalidTag

        if sealed[:1] != SEAL_VERSION:
            raise KeyUnusable("sealed values of an unknown format")
        if sealed[1:5] != self.key_id:
            raise KeyUnusable(f"sealed with another key (id {sealed[1:5].hex()}, this key's "
                            f"{self.key_id.hex()})")
        try:
            return orjson.loads(self._aead().decrypt(sealed[5:17], sealed[17:],
                                                     context.encode()))
        except InvalidTag:
            raise KeyUnusable("sealed values are damaged or belong to another customer") \
                from None


def check_key(environ: Mapping[str, str] | None = None, local_lake: bool = True) -> None:
    """At load, without making anything: LEDGERLAKE_PII_KEY well formed if set, and set (or a
    key file named) for a lake in object storage. A KeyUnusable otherwise."""
    env = os.environ if environ is None else environ
    if value := env.get(KEY_VAR):
        Keys.from_env({KEY_VAR: value})  # refuses a malformed one, in its words
    elif not local_lake and not env.get(KEY_FILE_VAR):
        raise _no_key_for_object_storage()


def _no_key_for_object_storage() -> KeyUnusable:
    return KeyUnusable(f"{KEY_VAR} is not set: a lake in object storage is written from "
                       "several machines, which must seal identity with one key; set it "
                       "(64 hex digits) from your secret store")


def key_file(environ: Mapping[str, str] | None = None) -> Path:
    """Where the key file is: LEDGERLAKE_PII_KEY_FILE, else `$LEDGERLAKE_HOME/pii.key`."""
    env = os.environ if environ is None else environ
    return Path(env.get(KEY_FILE_VAR) or home_from_env(env) / "pii.key")


def new_key(environ: Mapping[str, str] | None = None, *, exist_ok: bool = False
            ) -> Path | None:
    """Make the key file (`ledgerlake keys new`; `dev` and `demo` with `exist_ok`), mode
    0600, written whole or not at all (a concurrent maker's key wins): its path, or None when
    LEDGERLAKE_PII_KEY is set and `exist_ok`. Refuses, saying why, to replace a key."""
    env = os.environ if environ is None else environ
    path = key_file(env)
    if env.get(KEY_VAR) or path.exists():
        if exist_ok:
            return None if env.get(KEY_VAR) else path
        raise KeyUnusable(f"{KEY_VAR} is set: that is the key" if env.get(KEY_VAR) else
                          f"a key is already at {path}: what it sealed opens only with it; "
                          "move it away yourself to make another")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (secrets.token_hex(32) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process made it first: theirs is kept
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path


# -- masks -------------------------------------------------------------------------------------

def mask_digits(value: str | None) -> str | None:
    """`*******1234`: the last four characters, the rest starred."""
    if value is None:
        return None
    keep = value[-4:] if len(value) > 6 else ""
    return "*" * (len(value) - len(keep)) + keep


def mask_email(value: str) -> str:
    """`a***@example.com`: the first letter and the domain."""
    local, at, domain = value.partition("@")
    return (local[:1] + "***" + at + domain) if at else "***"


def mask_address(value: str) -> str:
    """`***, Lagos`: the last part (the state or town) only."""
    parts = [p.strip() for p in value.split(",")]
    return "***" + (f", {parts[-1]}" if len(parts) > 1 and parts[-1] else "")


def protect(raw: pa.Table, keys: Keys, schema: pa.Schema) -> pa.Table:
    """Identity rows as the lake keeps them (`schema`): the sensitive columns masked, the BVN
    and NIN hashed too, the raw values sealed per row, bound to its customer."""
    rows = raw.select(["customer_id", *SEALED]).to_pylist()
    cols: dict[str, list] = {c: raw[c] for c in raw.column_names if c not in SEALED}
    for name in HASHED:
        values = raw[name].to_pylist()
        cols[name] = [mask_digits(v) for v in values]
        cols[f"{name}_hash"] = [keys.hash(v) for v in values]
    cols["birth_year"] = pc.year(raw["dob"]).cast(pa.int32())
    cols["phones"] = [[mask_digits(p) for p in v or []] for v in raw["phones"].to_pylist()]
    cols["emails"] = [[mask_email(e) for e in v or []] for v in raw["emails"].to_pylist()]
    cols["addresses"] = [[mask_address(a) for a in v or []]
                         for v in raw["addresses"].to_pylist()]
    cols["sealed"] = [keys.seal({k: (v.isoformat() if k == "dob" and v is not None else v)
                                 for k, v in row.items() if k != "customer_id"},
                                row["customer_id"] or "")
                      for row in rows]
    return pa.table({n: cols[n] for n in schema.names}).cast(schema)


LONG_DIGITS = r"\d{3,}(\d{4})"  # a run of 7 or more digits: a phone, an account, a card


def protect_narrations(rows: pa.Table, keys: Keys) -> pa.Table:
    """Transactions as the lake keeps them: each narration's runs of 7 or more digits masked
    to their last 4 (`***4567`), in Arrow; the raw narration sealed, bound to its customer,
    on the lines masking changed only (the others hold nothing to hide from the view)."""
    raw = rows["narration"]
    masked = pc.replace_substring_regex(raw, LONG_DIGITS, r"***\1")
    changed = pc.fill_null(pc.not_equal(raw, masked), False)
    sealed = [None] * rows.num_rows
    for at, text, customer in zip(pc.indices_nonzero(changed).to_pylist(),
                                  pc.filter(raw, changed).to_pylist(),
                                  pc.filter(rows["customer_id"], changed).to_pylist(),
                                  strict=True):
        sealed[at] = keys.seal({"narration": text}, customer or "")
    rows = rows.set_column(rows.schema.get_field_index("narration"), "narration", masked)
    return rows.append_column("narration_sealed", pa.array(sealed, pa.binary()))


def reveal(lake_rows: pa.Table, keys: Keys) -> list[dict]:
    """The raw sensitive values of identity rows as the lake keeps them."""
    out = []
    for row in lake_rows.select(["customer_id", "record_id", "sealed"]).to_pylist():
        opened = keys.open(row["sealed"], row["customer_id"] or "")
        out.append({"customer_id": row["customer_id"], "record_id": row["record_id"], **opened})
    return out
