"""analyst_scale's verdicts: a question meets its target, misses it, or only the view answered
(by hand stopped past its child's memory, the view within the whole-lake limit)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # as its scripts run
import analyst_scale  # noqa: E402


def side(wall: float, peak: float) -> dict:
    return {"wall_s": wall, "cpu_s": wall, "peak_mb": peak}


def asked(name: str, kind: str, view: dict, hand: dict) -> dict:
    x = {"question": name, "kind": kind, "view": view, "hand": hand}
    if "wall_s" in view and "wall_s" in hand:
        x |= {"wall_ratio": view["wall_s"] / hand["wall_s"],
              "peak_ratio": view["peak_mb"] / hand["peak_mb"], "answers": {"equal": True}}
    return x


def test_by_hand_stopped_counts_for_the_view_only_within_its_limit():
    stopped = {"failed": "over 12000 MB", "peak_mb": 12001, "runs": 1}
    level = {"records": 1000, "compacted": {"questions": [
        asked("q3", "whole", side(1.0, 200), side(2.0, 200)),
        asked("q7", "whole", side(3.0, 200), side(1.0, 200)),
        asked("q5", "whole", side(1.1, 150), stopped),
        asked("q4", "whole", side(90.0, 5000), stopped),
        asked("one record", "lookup", side(0.2, 150), stopped),
    ]}}
    (verdict,) = analyst_scale.verdicts({"levels": [level]})
    assert verdict.startswith("✗ 1,000 records, compacted: 2 of 5 questions meet their target")
    assert "missed: q7;" in verdict
    assert "stopped: q4, one record;" in verdict
    assert verdict.endswith("the view alone answered: q5 (by hand: over 12000 MB)")
