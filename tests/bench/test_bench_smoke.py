"""The bench harness at a tiny size, so `make bench` cannot rot between the times it is run.

Runs bench/run.py as a real process (its own sandbox and child processes) on 3 records of
about 1,000 transactions and one of 2,000, one run each, dlt only if uv can provide it, and
checks the JSON it writes. No figure is asserted: speed is the bench's business.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_writes_its_results(tmp_path):
    out, readme = tmp_path / "latest.json", tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nkept\n\n<!-- bench:begin -->\nold\n<!-- bench:end -->\n"
                      "\ntail kept\n")
    args = [sys.executable, str(ROOT / "bench/run.py"), "--records", "3",
            "--rows-per-record", "1000", "--big", "2000", "--runs", "1",
            "--latency-samples", "2", "--sensor-interval", "1",
            "--out", str(out), "--readme", str(readme)]
    try:
        import dlt  # noqa: F401
    except ImportError:
        args.append("--skip-dlt")  # the bench fetches dlt with uv; tests need not
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]

    result = json.loads(out.read_text())
    assert {"seed", "runs", "sizes", "latency", "targets", "machine", "measured_at",
            "command"} <= result.keys()
    assert set(result["sizes"]) == {"3 records", "1 record"}
    for size in result["sizes"].values():
        assert size["rows"] > 0
        assert {"floor", "ledgerlake"} <= size["contenders"].keys()
        for c in size["contenders"].values():
            assert c["rows_per_s"] > 0 and c["peak_rss_mb"] > 0 and c["runs"] == 1
            assert c["peak_tree_mb"] > 0  # sampled over the process and its workers
        assert size["ledgerlake_over_floor"] > 0
    assert result["sizes"]["3 records"]["records"] == 3
    lat = result["latency"]
    assert lat["samples"] == 2 and 0 < lat["p50_s"] <= lat["p95_s"]
    assert lat["sensor_interval_s"] == 1

    text = readme.read_text()
    assert "kept" in text and "tail kept" in text and "old" not in text
    assert "| 3 records |" in text and "ledgerlake / floor" in text


def test_receiver_bench_measures_the_pipeline_and_the_receiver(tmp_path):
    """bench/receiver_acks.py at a tiny size: the pipeline's rate from a real landing, the
    receiver loaded at ten times it, every callback sent stored once."""
    out = tmp_path / "receiver.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/receiver_acks.py"), "--customers", "2",
         "--seconds", "1", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    pipeline, held = result["pipeline"], result["receiver"]["at_target_rate"]
    assert pipeline["records"] == 2 and pipeline["failed_runs"] == 0
    assert pipeline["callbacks"] >= 2 * 6 and pipeline["callbacks_per_s"] > 0
    assert held["offered_per_s"] == 10 * pipeline["callbacks_per_s"]
    assert held["stored"] == held["sent"] + 20_000 and held["not_200"] == 0
    assert isinstance(result["met"], bool)
