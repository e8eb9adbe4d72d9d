"""Bad command-line arguments get a clear error, exit 2, and change nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    (["sandbox", "--port", "70000"], "port must be from 0 to 65535"),
    (["sandbox", "--port", "x"], "port must be an integer"),
    (["sandbox", "--host", "0.0.0.0"], "loopback"),
    (["sandbox", "--webhook-timeout", "0"], "seconds must be more than 0"),
    (["sandbox", "--rate-limit", "-3"], "must be at least 0"),
    (["receiver", "--port", "-1"], "port must be from 0 to 65535"),
    (["receiver", "--host", "example.com"], "host must be an IP address"),
    (["sql", "select 1", "--max-rows", "0"], "must be at least 1"),
    (["demo", "--customers", "1000"], "customers must be from 1 to 100"),
    (["replay", "--after-minutes", "soon"], "minutes must be a number"),
    (["nonsense"], "invalid choice"),
]


@pytest.mark.parametrize(("args", "message"), CASES)
def test_bad_arguments(tmp_path, args, message):
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert list(tmp_path.iterdir()) == []  # nothing was created


@pytest.mark.parametrize("command", ["sql", "report"])
def test_the_readme_options_table_is_the_commands(command):
    """README's option table of `ledgerlake <command>` lists exactly the parser's options."""
    import argparse
    import re
    from pathlib import Path

    from pipeline.cli import build_parser

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split(f"### `ledgerlake {command}`", 1)[1].split("\n### ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `--")]
    documented = {opt for ln in rows for opt in re.findall(r"`(--[a-z-]+)", ln.split("|")[1])}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {o for a in sub.choices[command]._actions for o in a.option_strings
               if o.startswith("--") and o != "--help"}
    assert documented == options
