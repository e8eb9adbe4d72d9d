"""bench/harness.py's helpers that decide what a bench reports."""

from __future__ import annotations

import os

import pytest

from bench.harness import (
    cpu_seconds,
    family,
    percentile,
    ratios,
    rotated,
    spread,
    table,
    write_marked,
)


def test_rounds_rotate_so_none_always_goes_first():
    assert [rotated(["a", "b", "c"], k) for k in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_ratios_are_taken_within_rounds():
    # the machine ran twice as fast in the second round: the ratio did not move
    assert ratios([8, 16], [10, 20]) == {"median": 0.8, "rounds": [0.8, 0.8]}
    assert ratios([8, 16, 9], [10, 20]) == {"median": 0.8, "rounds": [0.8, 0.8]}  # dlt's rounds


def test_spread_and_percentile():
    values = [float(v) for v in range(1, 11)]
    assert spread(values) == {"n": 10, "median": 5.5, "p90": 10.0, "min": 1.0, "max": 10.0}
    assert percentile(values, 0.5) == 6.0 and percentile([3.0], 0.99) == 3.0


def test_a_process_family_holds_this_process_and_its_cpu():
    assert os.getpid() in family(os.getppid())
    sum(range(3_000_000))
    assert cpu_seconds([os.getpid(), 2**22 + 1]) > 0  # a pid that is gone counts nothing


def test_a_marked_table_is_replaced_and_nothing_else(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("head\n<!-- x:begin -->\nold\n<!-- x:end -->\ntail\n")
    write_marked(readme, "x", table(["a", "b"], [("one", 1)]))
    assert readme.read_text() == ("head\n<!-- x:begin -->\n| a | b |\n|---|---:|\n| one | 1 |\n"
                                  "<!-- x:end -->\ntail\n")
    with pytest.raises(ValueError, match="y:begin"):
        write_marked(readme, "y", "text")
