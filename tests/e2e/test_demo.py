"""`ledgerlake demo` runs the slice by itself and leaves no process behind."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest


def summary_rows(stdout: str) -> list[str]:
    """The rows of the demo's per-record summary (the identity table follows it)."""
    summary = stdout.split("identity as analysts see it", 1)[0]
    return [ln for ln in summary.splitlines() if re.match(r"│ [0-9a-f]{24} ", ln)]


@pytest.mark.slow
def test_demo_end_to_end(demo, tmp_path):
    """The session's demo run (tests/e2e/conftest.py: 4 customers), then a second run."""
    home, env, out = demo.home, demo.env, demo.out
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"sensor requested \d+ runs; 0 failed", out.stdout), out.stdout
    table = summary_rows(out.stdout)
    assert len(table) == 4, out.stdout  # one summary row per record
    for line in table:  # accounts, transactions, balance and income all landed
        cells = [c.strip() for c in line.strip("│").split("│")]
        assert int(cells[1]) >= 1 and int(cells[2]) > 0 and cells[3] != "NULL", line
    assert str(home / "warehouse.duckdb") in out.stdout
    assert not demo.left_running, "the demo left a server running"

    # identity shown masked, and how to forget a customer; the raw values nowhere in clear in
    # what ledgerlake wrote (the sandbox's own folder and log are the service's, not ours)
    assert re.search(r"│ \*{7}\d{4} ", out.stdout), out.stdout
    hint = re.search(r"ledgerlake forget --customer (\S+)", out.stdout)
    assert hint, out.stdout
    revealed = subprocess.run([sys.executable, "-m", "pipeline.cli", "reveal", "--customer",
                               hint.group(1)], env=env, capture_output=True, text=True,
                              check=True)
    person = json.loads(revealed.stdout.splitlines()[0])
    assert re.fullmatch(r"\d{11}", person["bvn"]) and person["emails"], person
    needles = [v.encode() for v in (person["bvn"], *person["phones"], *person["emails"])]
    ours = [p for p in home.rglob("*") if p.is_file()
            and p.relative_to(home).parts[0] != "sandbox" and p.name != "sandbox.log"]
    assert len(ours) > 20
    # the home and all in it, the lake its runs wrote included, are the user's alone
    loose = [str(p) for p in [home, *home.rglob("*")]
             if p.stat().st_mode & 0o777 != (0o700 if p.is_dir() else 0o600)]
    assert loose == []
    assert [str(p) for p in ours if any(n in p.read_bytes() for n in needles)] == []
    # and no query of the default views can return the number: `ledgerlake sql` on identity
    views = subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", "--format", "csv",
                            "select * from identity"], env=env, capture_output=True,
                           text=True, check=True)
    assert person["bvn"] not in views.stdout and "*******" + person["bvn"][-4:] in views.stdout

    # `ledgerlake sql` finds the demo's warehouse by default
    answer = subprocess.run([sys.executable, "-m", "pipeline.cli", "sql",
                             "select count(distinct record_id) as records from accounts"],
                            env=env, capture_output=True, text=True, check=True)
    assert "│       4 │" in answer.stdout, answer.stdout

    # a second run starts fresh in a folder an earlier run filled (a copy of the session's,
    # which the browser tests read)
    again_home = tmp_path / "demo-home"
    shutil.copytree(home, again_home)
    again_env = {**env, "LEDGERLAKE_HOME": str(again_home)}
    again = subprocess.run([sys.executable, "-m", "pipeline.cli", "demo", "--customers", "2"],
                           env=again_env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"sensor requested \d+ runs; 0 failed", again.stdout), again.stdout
    assert len(summary_rows(again.stdout)) == 2


def test_demo_refuses_foreign_folder(tmp_path):
    home = tmp_path / "precious"
    home.mkdir()
    (home / "keep.txt").write_text("not the demo's")
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "demo", "--home", str(home)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "holds data the demo did not make" in out.stderr
    assert (home / "keep.txt").read_text() == "not the demo's"
