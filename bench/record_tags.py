"""What naming records in run tags costs Dagster's storage, on a day of a million records.

A run names its records by number in its tags (assets/batch.py, `record_tags`): their count
and ranges in every run, and a tag per record (`ledgerlake/record-22`), which the UI's run
filter finds, in runs of at most TAGGED records. Small runs are those of a quiet sensor tick,
so such tags cost at most TAGGED rows a tick, whatever the number of records.

The worst day at 1M: every sensor tick (one each MIN_INTERVAL_S) starts a run of TAGGED
records, the rest of the million call back in runs of RECORDS_PER_RUN, and the daily refresh
runs over all of them in runs of RECORDS_PER_RUN. The same runs are stored twice in Dagster's
default SQLite run storage (a fresh instance each): with the count tag alone, as before, and
with `record_tags`. The difference, per record-day, is what the names cost; the budget of "A
million linked records" (bench/records_scale.py: <= 1 KB and <= 1 row per record-day, all of
Dagster's storage) must still hold with it added to that bench's worst day.

    .venv/bin/python bench/record_tags.py            # bench/results/record_tags.json
    .venv/bin/python bench/record_tags.py --quick    # 20 runs of each kind, to /tmp
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import uuid
from pathlib import Path

import harness
from harness import ROOT

sys.path.insert(0, str(ROOT))

from assets.batch import RECORDS_PER_RUN, TAGGED, record_tags  # noqa: E402
from pipeline.sensors import MIN_INTERVAL_S  # noqa: E402

DAY_S = 86_400


def day_of_runs(records: int) -> dict[str, tuple[int, int]]:
    """The worst day over `records` records: per kind of run, (how many, records each)."""
    ticks = min(DAY_S // MIN_INTERVAL_S, records // TAGGED)  # a quiet tick each: a small run
    rest = records - ticks * TAGGED  # the others called back in bursts
    return {"tick": (ticks, TAGGED),
            "burst": (-(-rest // RECORDS_PER_RUN), RECORDS_PER_RUN),
            "refresh": (-(-records // RECORDS_PER_RUN), RECORDS_PER_RUN)}


def stored(kind: str, size: int, sample: int, named: bool) -> dict:
    """`sample` runs of `kind` over `size` records each in a fresh SQLite run storage, their
    records named or not: rows and bytes per run."""
    import dagster as dg

    with tempfile.TemporaryDirectory(prefix="record-tags-") as home:
        Path(home, "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        with dg.DagsterInstance.from_config(home) as instance:
            storage = instance.run_storage
            db = Path(home, "history", "runs.db")
            empty = None
            for i in range(sample + 1):
                numbers = list(range(1 + i * size, 1 + (i + 1) * size))
                tags = (record_tags(numbers) if named
                        else {"ledgerlake/records": str(len(numbers))})
                if kind == "refresh":
                    tags |= {"ledgerlake/schedule": "daily_refresh",
                             "ledgerlake/refresh_day": "2026-11-28"}
                else:
                    tags |= {"ledgerlake/inbox_event": str(i), "ledgerlake/methods": "BALANCE"}
                storage.add_run(dg.DagsterRun(job_name=f"{kind}_job", run_id=str(uuid.uuid4()),
                                           tags=tags, run_config={"resources": {"batch": {
                                               "config": {"records": numbers}}}}))
                if empty is None:  # the first run creates the tables' pages: not counted
                    empty = _measure(db)
            full = _measure(db)
        return {"runs": sample, "tag_rows_per_run": (full[0] - empty[0]) / sample,
                "bytes_per_run": (full[1] - empty[1]) / sample}


def _measure(db: Path) -> tuple[int, int]:
    """Tag rows and bytes of the run storage, compacted."""
    with sqlite3.connect(db) as con:
        con.execute("vacuum")
        rows = con.execute("select count(*) from run_tags").fetchone()[0]
    return rows, db.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=200, help="runs stored per kind")
    parser.add_argument("--quick", action="store_true", help="20 runs per kind, to /tmp")
    harness.arguments(parser, "record_tags")
    args = parser.parse_args()
    if args.quick:
        args.sample, args.out = 20, args.out or Path("/tmp/record_tags.json")
    args.no_readme = True  # the figures go to the JSON and to docs/operations.md by hand
    day = day_of_runs(args.records)
    cost = {kind: {named: stored(kind, size, min(count, args.sample), named == "with")
                   for named in ("without", "with")}
            for kind, (count, size) in day.items() if count}
    extra_rows = sum(day[k][0] * (c["with"]["tag_rows_per_run"] - c["without"]["tag_rows_per_run"])
                     for k, c in cost.items())
    extra_bytes = sum(day[k][0] * (c["with"]["bytes_per_run"] - c["without"]["bytes_per_run"])
                      for k, c in cost.items())
    per_day = {"rows": round(extra_rows / args.records, 4),
               "bytes": round(extra_bytes / args.records, 1)}
    scale = json.loads((harness.RESULTS / "records_scale.json").read_text())
    worst = next(t for t in scale["targets"] if t[0].startswith("sqlite: Dagster storage"))
    b, r = (float(x) for x in worst[2].replace(" B,", "").split(" ")[:2])
    total = {"bytes": round(b + per_day["bytes"], 1), "rows": round(r + per_day["rows"], 4)}
    result = {
        "what": "Dagster's SQLite run storage: a worst day's runs over N records, their "
                "records named in tags (record_tags) against the count tag alone; each kind "
                "of run measured on a sample, counted for the day",
        "records": args.records, "tagged_at_most": TAGGED, "tick_s": MIN_INTERVAL_S,
        "day": {k: {"runs": n, "records_each": size} for k, (n, size) in day.items()},
        "measured": cost, "names_per_record_day": per_day,
        "records_scale_worst_day_sqlite": worst[2], "with_names_added": total,
        "target": ["<= 1 KB and <= 1 row per record-day, all of Dagster's storage, at 1M",
                   total["bytes"] <= 1024 and total["rows"] <= 1],
    }
    table = harness.table(["kind of run", "runs a day", "records each", "tag rows a run",
                           "bytes a run"], [
        [k, day[k][0], day[k][1],
         f"{c['without']['tag_rows_per_run']:.0f} -> {c['with']['tag_rows_per_run']:.0f}",
         f"{c['without']['bytes_per_run']:.0f} -> {c['with']['bytes_per_run']:.0f}"]
        for k, c in cost.items()])
    table += (f"\n\nNames per record-day: +{per_day['rows']} rows, +{per_day['bytes']} B; with "
              f"records_scale's worst day (sqlite, {worst[2]}): {total['rows']} rows, "
              f"{total['bytes']} B.")
    harness.publish(result, args, "record_tags", table)
    return 0 if result["target"][1] else 1


if __name__ == "__main__":
    sys.exit(main())
