"""bench/record_tags.py --quick: its figures come out whole and the budget's verdict with
them (the full measurement: bench/results/record_tags.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # `make test-all`: a few hundred runs into SQLite


def test_record_tags_quick(tmp_path):
    out = tmp_path / "record_tags.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench/record_tags.py"), "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["records"] == 1_000_000 and result["target"][1] is True
    tick = result["measured"]["tick"]
    # a small run: a tag per record besides its count and ranges; a big one: ranges only
    assert tick["with"]["tag_rows_per_run"] - tick["without"]["tag_rows_per_run"] == \
        result["tagged_at_most"] + 1
    refresh = result["measured"]["refresh"]
    assert refresh["with"]["tag_rows_per_run"] - refresh["without"]["tag_rows_per_run"] == 1
    assert 0 < result["names_per_record_day"]["rows"] < 1
