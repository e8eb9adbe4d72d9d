"""Bad command-line arguments get a clear error, exit 2, and change nothing; they are refused
before Dagster is imported (seconds a bad argument need not cost)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import main

CASES = [
    (["sandbox", "--port", "70000"], "port must be from 0 to 65535"),
    (["sandbox", "--port", "x"], "port must be an integer"),
    (["sandbox", "--host", "0.0.0.0"], "loopback"),
    (["sandbox", "--webhook-timeout", "0"], "seconds must be more than 0"),
    (["sandbox", "--rate-limit", "-3"], "rate must be from 0 to 1000000"),
    (["sandbox", "--rate-limit", "nan"], "rate must be from 0 to 1000000"),
    (["receiver", "--port", "-1"], "port must be from 0 to 65535"),
    (["receiver", "--host", "example.com"], "host must be an IP address"),
    (["sql", "select 1", "--max-rows", "0"], "must be at least 1"),
    (["demo", "--customers", "1000"], "customers must be from 1 to 100"),
    (["replay", "--after-minutes", "soon"], "minutes must be a number"),
    (["replay", "--records", "rec1,../etc"], "--records takes record ids"),
    (["status", "rec 1"], "a record id matches"),
    (["rerun", "rec/1"], "a record id matches"),
    (["rerun", "rec1", "--products", "loans"], "products are accounts"),
    (["report", "rec;1"], "a record id matches"),
    (["forget", "--record", "../x"], "a record id matches"),
    (["nonsense"], "invalid choice"),
]


def run(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exc:  # argparse's refusals
        return exc.code


@pytest.mark.parametrize(("args", "message"), CASES)
def test_bad_arguments(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert run(args) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing was created


def test_bad_arguments_are_refused_before_dagster_is_imported(tmp_path):
    script = """
import sys
from tests.pipeline.test_cli import CASES, run
for args, _ in CASES:
    assert run(args) == 2, args
    if "dagster" in sys.modules:
        raise SystemExit(f"Dagster imported by {args}")
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120,
                         env={"PYTHONPATH": str(Path(__file__).parents[2])})
    assert out.returncode == 0, out.stderr[-2000:]
