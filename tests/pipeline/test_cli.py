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
