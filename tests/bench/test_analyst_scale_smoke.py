"""bench/analyst_scale.py at its smallest (`--quick`: 2,000 records, one run each), so that it
cannot rot between full runs: every question answered through the views and by hand, in both
layouts, with the same answer. No figure is asserted: speed is the bench's business.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # `make test-all`: a lake of a million lines, ~3 minutes


@pytest.mark.timeout(900)  # ~2-3 minutes alone; the machine is shared
def test_analyst_scale_answers_every_question_the_same_both_ways(tmp_path):
    """In sittings, as the 1M level is measured: the lake made and kept, then the questions
    by `--resume` (to the partial file only: the committed results stay as they are), then
    the parts published."""
    out, readme = tmp_path / "analyst_scale.json", tmp_path / "README.md"
    readme.write_text("<!-- analyst_scale:begin -->\nold\n<!-- analyst_scale:end -->\n")
    committed = (ROOT / "bench/results/analyst_scale.json").read_bytes()

    def bench(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, str(ROOT / "bench/analyst_scale.py"), *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=840)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    bench("--quick", "--keep", "--make-only", "--work", str(tmp_path))
    (folder,) = tmp_path.glob("analyst-2000-*")
    resumed = bench("--quick", "--resume", str(folder))
    assert "| q1 | 2,000 |" in resumed.stdout  # its table, printed
    assert (ROOT / "bench/results/analyst_scale.json").read_bytes() == committed
    partial = tmp_path / "analyst_scale.partial.json"
    assert json.loads(partial.read_text())["levels"][0]["records"] == 2000
    bench("--publish", str(partial), "--out", str(out), "--readme", str(readme))
    result = json.loads(out.read_text())

    (level,) = result["levels"]
    assert level["records"] == 2000 and level["lines"] > 500_000
    assert level["hourly_runs"]["runs"] == 6
    for layout in ("compacted", "hourly"):
        asked = {x["question"]: x for x in level[layout]["questions"]}
        assert {f"q{i}" for i in range(1, 8)} <= asked.keys()
        for view in ("daily_balances", "transactions", "balances", "accounts",
                     "income_summary", "landings", "checks", "records"):
            for who in ("one customer", "1,000 records"):
                assert f"{view}: {who}" in asked
        for name, x in asked.items():
            assert "failed" not in x["view"] and "failed" not in x["hand"], (layout, name, x)
            assert x["answers"]["equal"], (layout, name, x["answers"])
            assert x["answers"]["compared"], (layout, name)
            for side in ("view", "hand"):
                assert x[side]["runs"] == 1 and x[side]["peak_mb"] > 0
        # every question found rows, or the comparison would prove nothing
        assert all(x["view"]["rows"] > 0 for x in asked.values()), layout
        assert level[layout]["layout"]["transactions"]["rows"] == level["lines"]
    text = readme.read_text()
    assert "old" not in text and "| q1 | 2,000 |" in text and "After a day of hourly runs" in text
    assert "load_avg_1m_end" in json.loads((folder / "level.json").read_text())  # whole
