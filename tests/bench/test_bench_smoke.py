"""The benches at their smallest, so that none can rot between the times it is run.

Each runs as a real process (bench/run.py with its own sandbox and child processes, dlt only
if uv can provide it) and its JSON and README table are checked. No figure is asserted: speed
is the bench's business. bench/launched_runs.py is left out: its daemon alone takes minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # `make test-all`: each bench starts its own servers


def test_bench_writes_its_results(tmp_path):
    out, readme = tmp_path / "latest.json", tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nkept\n\n<!-- latest:begin -->\nold\n<!-- latest:end -->\n"
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
            "commit", "command"} <= result.keys()
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
    assert f"at {result['commit']}" in text


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


def test_records_scale_measures_every_figure(tmp_path):
    """bench/records_scale.py --quick on the SQLite instance (10 and 30 records): every figure
    it measures is there and positive at each size, the 1M refresh is extrapolated, each
    target has a verdict, and the README gets the table."""
    out, readme = tmp_path / "records_scale.json", tmp_path / "README.md"
    readme.write_text("<!-- records_scale:begin -->\nold\n<!-- records_scale:end -->\n")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/records_scale.py"), "--quick", "--instances",
         "sqlite", "--out", str(out), "--readme", str(readme)],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())

    def positive(figures: dict, where: str) -> None:
        for key, value in figures.items():
            if isinstance(value, dict):
                positive(value, f"{where}.{key}")
            elif key != "pulled_whole":  # a few records may all be pulled by window
                # a time, in hundredths, may round to 0 at these sizes; its rate may not
                low = 0 if key == "seconds" else 1e-12
                assert isinstance(value, int | float) and value >= low, f"{where}.{key}: {value}"

    sizes = result["instances"]["sqlite"]
    assert list(sizes) == ["10", "30"]
    for n, size in sizes.items():
        for part in ("inbox_fill", "schedule", "sensor_tick", "run_launch", "refresh"):
            positive(size[part], f"{n}.{part}")
        assert size["inbox_bytes"] > 0 and size["schedule"]["requests"] == 1
        assert size["sensor_tick"]["callbacks"] == 500 and size["sensor_tick"]["requests"] >= 1
    assert set(sizes["10"]["refresh"]) == {"stand_in"}  # 10 is not a refresh size
    assert set(sizes["30"]["refresh"]) == {"first_landing", "real"}
    for day in (sizes["10"]["refresh"]["stand_in"], sizes["30"]["refresh"]["real"]):
        assert day["runs"] == 1 and day["storage"]["bytes_per_record_day"] > 0
        assert day["storage"]["by_table"]["rows"]["event_logs"] > 0
    for n, size in sizes.items():
        assert len(size["pages"]["queries"]) == 7
        positive(size["pages"], f"{n}.pages")
    positive(result["start_cost"]["code location"], "start_cost")
    positive(result["extrapolation"]["sqlite"], "extrapolation")
    assert result["targets"] and all(isinstance(ok, bool) for _, ok, _ in result["targets"])
    text = readme.read_text()
    assert "old" not in text and "| sqlite | 30 |" in text and "extrapolated" in text


def test_huge_record_measures_each_run_of_this_code_and_the_one_before(tmp_path):
    """bench/huge_record.py at 2,000 lines, against HEAD's code: for both, each run's peak
    and time, every line landed once, a verdict per size, and the README's table."""
    out, readme = tmp_path / "huge_record.json", tmp_path / "README.md"
    readme.write_text("<!-- huge_record:begin -->\nold\n<!-- huge_record:end -->\n")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/huge_record.py"), "--lines", "2000", "--before",
         "HEAD", "--out", str(out), "--readme", str(readme)],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    (size,) = result["sizes"]
    assert size["rows"] > 0 and len(size["code"]) == 2
    assert "this" in size["code"] and any(k.startswith("at ") for k in size["code"])
    for code in size["code"].values():
        for run in ("landing", "income", "refresh"):
            assert code[f"{run}_peak_rss_mb"] > code["ready_rss_mb"] > 0
            assert code[f"{run}_seconds"] > 0
        assert code["rows_per_s"] > 0 and code["runs"] == 1
    assert len(result["verdicts"]) == 1 and "target < 1024 MiB" in result["verdicts"][0]
    text = readme.read_text()
    assert "old" not in text and f"| {size['rows']:,} | this |" in text
