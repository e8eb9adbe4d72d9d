"""bench/freshness.py at its smallest (`--quick`: a warm-up record and 2 records a side), so
that it cannot rot between full runs: both sides' sandbox, receiver and dagster-daemon really
run, and every record made is seen through `daily_balances`. No figure is asserted: speed is
the bench's business.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # `make test-all`: two pipelines with their daemons, minutes


@pytest.mark.timeout(1500)  # ~5 minutes alone; the machine is shared
def test_freshness_sees_every_record_before_and_after(tmp_path):
    out, readme = tmp_path / "freshness.json", tmp_path / "README.md"
    readme.write_text("<!-- freshness:begin -->\nold\n<!-- freshness:end -->\n")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/freshness.py"), "--quick", "--work", str(tmp_path),
         "--out", str(out), "--readme", str(readme)],
        cwd=ROOT, capture_output=True, text=True, timeout=1440)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())

    assert result["rounds"] == 1 and result["records_per_round"] == 2
    for name in ("before", "after"):
        side = result["sides"][name]
        assert side["records"] == 2
        assert all(s["visible"] and s["rows"] > 0 for s in side["samples"]), side["samples"]
        assert side["all"]["n"] == 2
        assert 0 < side["all"]["p50_s"] <= side["all"]["p95_s"]
        assert side["rounds"][0]["n"] == 2
    assert result["sides"]["before"]["daily_balances"] == "a view over the lake"
    assert result["sides"]["after"]["daily_balances"] == "a lake table the build derives"
    assert result["after_over_before"]["p50"]["median"] > 0
    text = readme.read_text()
    assert "old" not in text and "| before (" in text and "| after (" in text
    assert not list(tmp_path.glob("ledgerlake-freshness-*")), "the trees and data are removed"
