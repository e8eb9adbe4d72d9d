"""Opening sealed values (`ledgerlake reveal`, pipeline/reveal.py) and making the key
(`ledgerlake keys new`): a reader never makes a key, and says how to give one; every reveal is
audited in the lake's `reveals` table, without personal data. The real command as its own
process over a real lake (tests/pipeline/test_forget.py's)."""

from __future__ import annotations

import json
import os
import pwd
import stat
from datetime import UTC, datetime
from pathlib import Path

from pipeline.reveal import AUDIT
from resources.privacy import SEALED
from tests.pipeline import test_forget
from tests.pipeline.test_forget import NUBAN, PEOPLE, R1, R2, R3, A, B, cli, needles
from tests.resources.test_privacy import found

home = test_forget.home  # the fixture: a lake of A's two records and B's one


def keyless(env: dict) -> dict:
    return {k: v for k, v in env.items() if k not in ("LEDGERLAKE_PII_KEY",
                                                      "LEDGERLAKE_PII_KEY_FILE")}


def audited(home: dict) -> list[dict]:
    rows = home["lake"].read(AUDIT)
    return [] if rows is None else rows.to_pylist()


def test_reveal_without_a_key_says_so_and_makes_none(home):
    env = keyless(home["env"])
    out = cli(env, "reveal", "--customer", B)
    assert out.returncode == 2 and out.stdout == ""
    assert "no key: LEDGERLAKE_PII_KEY is not set and there is no key file at" in out.stderr
    assert "ledgerlake keys new" in out.stderr and "Traceback" not in out.stderr
    assert not Path(env["LEDGERLAKE_HOME"]).exists()  # no key file made, nothing else
    assert audited(home) == []


def test_keys_new_makes_one_key_once_and_never_replaces_it(home):
    env = keyless(home["env"])
    made = cli(env, "keys", "new")
    assert made.returncode == 0, made.stderr
    path = Path(env["LEDGERLAKE_HOME"]) / "pii.key"
    assert f"made a new personal-data key at {path}" in made.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    again = cli(env, "keys", "new")
    assert again.returncode == 2 and f"a key is already at {path}" in again.stderr
    assert path.read_text() == text
    set_ = cli(home["env"], "keys", "new")
    assert set_.returncode == 2 and "LEDGERLAKE_PII_KEY is set" in set_.stderr
    # the lake was sealed with the session's key, not this new one: said, nothing opened
    other = cli(env, "reveal", "--customer", B)
    assert other.returncode == 2 and "sealed with another key" in other.stderr
    assert PEOPLE[B][3] not in other.stdout and audited(home) == []


def test_every_reveal_is_audited_without_personal_data(home):
    before = datetime.now(UTC)
    for args, bvn in ((["--customer", A], PEOPLE[A][3]), (["--record", R3], PEOPLE[B][3])):
        out = cli(home["env"], "reveal", *args)
        assert out.returncode == 0 and f'"bvn":"{bvn}"' in out.stdout, out.stderr
    # the raw narrations too, a line each: the lake and the views show `***6285`
    lines = [json.loads(line) for line in out.stdout.splitlines() if "narration" in line]
    assert [(t["record_id"], t["narration"]) for t in lines] == [
        (R3, f"TRF FROM IRONWOOD BOLANLE {NUBAN[R3]}")] * 3
    assert {t["transaction_id"] for t in lines} == {f"tx_{R3}_{n}" for n in range(3)}
    rows = audited(home)
    assert sorted((r["subject"], r["subject_id"], r["record_id"]) for r in rows) == [
        ("customer", A, R1), ("customer", A, R2), ("record", R3, R3)]
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert all(r["revealed_by"] == me and r["opened"] == [*SEALED, "narration"]
               and r["rows"] == 1 + 3
               and before <= r["revealed_at"] <= datetime.now(UTC) for r in rows)
    raw = [PEOPLE[A][3], PEOPLE[B][3]]  # their BVNs, and the names and numbers
    assert found(home["root"] / "lake" / AUDIT, [*needles(A), *needles(B), *raw]) == {}
    # a customer with nothing to open is not audited
    none = cli(home["env"], "reveal", "--customer", "cust_nobody")
    assert none.returncode == 1 and len(audited(home)) == 3
