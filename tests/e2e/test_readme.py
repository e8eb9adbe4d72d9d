"""The README's commands run as written, over the session's demo (its data home standing in
for ./data): each `.venv/bin/ledgerlake ...` line of its shell blocks, RECORD a record of the
demo, the interactive `sql` given one statement on stdin."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import duckdb
import pytest

REPO = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()
            if line.startswith(".venv/bin/ledgerlake ")]


@pytest.mark.slow
def test_the_readme_commands_run_as_written(demo):
    assert demo.out.returncode == 0, demo.out.stdout + demo.out.stderr
    commands = readme_commands()
    assert len(commands) >= 4, commands
    with duckdb.connect(str(demo.home / "warehouse.duckdb"), read_only=True) as con:
        (record,) = con.execute("select min(record_id) from accounts").fetchone()
    for command in commands:
        args = [a.replace("RECORD", record) for a in shlex.split(command)]
        out = subprocess.run([str(REPO / args[0]), *args[1:]], cwd=demo.home.parent,
                             env=demo.env, capture_output=True, text=True, timeout=300,
                             input="select count(*) from accounts;\n")
        assert out.returncode == 0, f"{command}: {out.stderr[-2000:]}"
        assert (out.stdout + out.stderr).strip(), command  # report says where it wrote
