"""One huge record into the lake: the peak memory and time of its landing, by its size.

One sandbox (no rate limit, its clock frozen) makes, per size, one customer of one account
with VOLUME lines a day and as many months as the size needs (a merchant: 200,000 lines are
about 5 months, 2,000,000 about 4.6 years). That record alone is then run through the real
assets three times, each run in a child process of its own, as the run launcher starts them:
`transactions` (the first landing: every page fetched, validated, audited and committed to
the Delta table), `income` (its check counts the record's income credits in the lake), and
`transactions` again (the daily refresh: a window pull; income checked again). Each reports
its process's peak resident set (VmHWM: Arrow's buffers, delta-rs's and Python's heap alike)
and its wall time; the rows landed are counted in the lake. With `--before REV`, the code at
REV (`git archive`, run with the same environment) lands the same record in the same rounds,
their order rotating.

    .venv/bin/python bench/huge_record.py --before 9a9e8f9   # 200k, 1M, 2M: ~15 min
    .venv/bin/python bench/huge_record.py --lines 2000 --out /tmp/x.json   # a smoke run
"""

import argparse
import datetime as dt
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
from harness import ROOT

VOLUME = 1200  # lines a day of the one account (sandbox customers/create's `volume`)
DAYS_PER_MONTH = 30.44
TARGET_MIB = 1024  # the bound at 2,000,000 lines


# -- the child: one landing, JSON on the last stdout line ----------------------------------------

def child(job: dict) -> dict:
    """One run of `job["run"]` over the record, in this process alone: its peak and time."""
    sys.path.insert(0, job["root"])  # the code measured: this tree, or --before's
    import dagster as dg
    import pyarrow as pa

    import assets.transactions
    from assets.batch import Batch, batch_config
    from assets.income import income
    from assets.transactions import transactions, warm
    from pipeline.local import QUIET
    from resources.client.resource import ConnectionClient
    from resources.inbox import describe, kept_body, open_inbox
    from resources.inbox.resource import InboxResource
    from resources.lake import Lake

    if not assets.transactions.__file__.startswith(job["root"]):
        raise SystemExit(f"measured {assets.transactions.__file__}, not {job['root']}")
    lake, record = Lake(root=job["out"] + "/lake"), job["record"]
    inbox = Path(job["out"]) / "inbox.sqlite3"
    with open_inbox(inbox, create=True) as db:  # the record is connected, as in production
        if job["run"] == "landing":
            db.add_described([(describe(b), kept_body(b)) for b in (
                {"method": "AUTH", "callback_code": "AUTH_SUCCESS", "record": record},)])
        number = db.numbers([record])[record]
    asset = {"landing": transactions, "income": income, "refresh": transactions}[job["run"]]
    resources = {"client": ConnectionClient(base_url=job["url"], secret_key=job["key"]),
                 "lake": lake, "inbox": InboxResource(path=str(inbox)), "batch": Batch.configure_at_launch()}
    if "tuning" in asset.required_resource_keys:  # the settings, as the definitions hand them
        from resources.config import Tuning  # (--before's code may predate both)

        resources["tuning"] = Tuning.from_env()
    run = dg.Definitions(
        assets=[asset], jobs=[dg.define_asset_job("run", selection=[asset.key])],
        resources=resources,
    ).resolve_job_def("run")

    @dg.asset
    def warm_up() -> None:
        """Loads Dagster's execution code before the clock starts."""

    with dg.DagsterInstance.ephemeral() as instance:
        dg.materialize([warm_up], instance=instance, run_config=QUIET)
        warm()
        out = {"ready_rss_mb": rss_mb("VmRSS")}
        t0 = time.perf_counter()
        done = run.execute_in_process(instance=instance, raise_on_error=False,
                                      run_config={**QUIET, **batch_config([number])})
        out["seconds"] = round(time.perf_counter() - t0, 2)
        out["peak_rss_mb"] = rss_mb("VmHWM")  # before the count below reads anything
        if not done.success:
            raise SystemExit(f"the {job['run']} run failed")
    out["arrow_peak_mb"] = round(pa.default_memory_pool().max_memory() / 2**20, 1)
    ids = lake.read("transactions", record, schema=pa.schema([("transaction_id", pa.string())]))
    out["rows"] = 0 if ids is None else ids.num_rows
    out["distinct_ids"] = 0 if ids is None else len(set(ids["transaction_id"].to_pylist()))
    return out


# the runs measured, each in a process of its own as the run launcher starts them: the first
# landing (every page), income (its check counts the record's credits in the lake), the daily
# refresh (a window pull; income checked again)
RUNS = ("landing", "income", "refresh")


def rss_mb(field: str) -> float:
    """This process's resident set (VmRSS) or its peak so far (VmHWM), MiB."""
    kib = re.search(rf"^{field}:\s+(\d+)", Path("/proc/self/status").read_text(), re.M)[1]
    return round(int(kib) / 1024, 1)


# -- the parent: sandbox, records, rounds, report ------------------------------------------------

def make_record(box: harness.Sandbox, lines: int, seed: int) -> tuple[str, int]:
    """A customer of one account with about `lines` lines; its record and its exact count."""
    now = dt.datetime.now(dt.UTC)
    days_now = now.day - 1 + now.hour / 24  # the history runs from `months` back to today
    months = max(1, min(60, round((lines / VOLUME - days_now) / DAYS_PER_MONTH)))
    volume = max(1, min(2000, round(lines / (months * DAYS_PER_MONTH + days_now))))
    with box.api(600) as api:
        made = api.post("sandbox/customers/create", json={"customers": [
            {"accounts": 1, "months": months, "volume": volume, "seed": seed}]})
        record = made.raise_for_status().json()["data"]["customers"][0]["record"]
        deadline = time.monotonic() + 600  # the sandbox builds the history on first read
        while (resp := api.post("transactions/get", json={"record": record, "limit": 1})
               ).status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"record {record} not ready: {resp.text[:300]}")
            time.sleep(0.2)
        return record, resp.json()["data"]["pagination"]["totalDocs"]


def run_children(job: dict, work: Path, timeout_s: float) -> dict:
    """The RUNS over one lake, each in a child process; their figures, by run."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    got: dict = {}
    try:
        for run in RUNS:
            job_path = work / "job.json"
            job_path.write_text(json.dumps({**job, "out": str(out), "run": run}))
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                                   str(job_path)], cwd=job["root"], capture_output=True,
                                  text=True, timeout=timeout_s)
            if done.returncode != 0:
                raise RuntimeError(f"the {run} child failed ({done.returncode}):\n"
                                   f"{done.stderr[-3000:]}")
            got[run] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"rows": got["refresh"]["rows"], "distinct_ids": got["refresh"]["distinct_ids"],
            "ready_rss_mb": got["landing"]["ready_rss_mb"],
            "arrow_peak_mb": got["landing"]["arrow_peak_mb"],
            **{f"{run}_{k}": got[run][k] for run in RUNS for k in ("peak_rss_mb", "seconds")}}


def tree_at(rev: str, work: Path) -> Path:
    """The tracked files of `rev`, unpacked (the working tree and its index are untouched)."""
    where = work / f"code-{rev}"
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def table_md(result: dict) -> str:
    rows = []
    for size in result["sizes"]:
        for name, c in size["code"].items():
            rows.append((f"{size['rows']:,}", name, f"**{c['landing_peak_rss_mb']}**",
                         c["landing_seconds"], f"{c['rows_per_s']:,}",
                         c["income_peak_rss_mb"], c["refresh_peak_rss_mb"],
                         c["refresh_seconds"], c["arrow_peak_mb"], c["runs"]))
    text = harness.table(["lines", "code", "landing: peak RSS MiB", "s", "rows/s",
                          "income: peak RSS MiB", "refresh: peak RSS MiB", "s",
                          "Arrow's peak MiB, landing", "rounds"], rows, left=2)
    ready = result["sizes"][0]["code"]["this"]["ready_rss_mb"]
    text += (f"\n\nEach run in a process of its own; its peak is the whole process's, "
             f"{ready} MiB of it imports, Dagster and a warm-up run.")
    for name, slope in result["mib_per_million_lines"].items():
        text += f"\n{name}: {slope} MiB more landing peak per million lines more (least squares)."
    for verdict in result["verdicts"]:
        text += f"\n- {verdict}"
    return text


def slope(points: list[tuple[int, float]]) -> float | None:
    if len(points) < 2:
        return None
    xs, ys = [x / 1e6 for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return round(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, nargs="+", default=[200_000, 1_000_000, 2_000_000],
                    help="sizes of the record, about (the sandbox makes whole days)")
    ap.add_argument("--runs", type=int, default=1, help="landings of each code per size")
    ap.add_argument("--before", metavar="REV", help="also measure the code at this commit")
    ap.add_argument("--before-up-to", type=int, default=2_000_000, metavar="LINES",
                    help="sizes up to which --before is measured (its memory grows)")
    ap.add_argument("--seed", type=int, default=20261130)
    harness.arguments(ap, "huge_record")
    ap.add_argument("--child", metavar="JOB", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        result = child(json.loads(Path(args.child).read_text()))
        print(json.dumps(result), flush=True)
        return 0

    started = time.perf_counter()
    result: dict = {"what": __doc__.splitlines()[0], "seed": args.seed, "volume": VOLUME,
                    "before": args.before, "sizes": [], "target_peak_mib": TARGET_MIB}
    with tempfile.TemporaryDirectory(prefix="ledgerlake-huge-") as tmp:
        work = Path(tmp)
        trees = {"this": ROOT}
        if args.before:
            rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.before],
                                 capture_output=True, text=True, check=True).stdout.strip()
            trees[f"at {rev}"] = tree_at(rev, work)
        with harness.sandbox(work, args.seed, *harness.STILL) as box:
            for n, lines in enumerate(args.lines):
                t0 = time.perf_counter()
                record, total = make_record(box, lines, args.seed + n)
                print(f"[huge] {total:,} lines ({time.perf_counter() - t0:.1f}s to make)",
                      flush=True)
                names = [k for k in trees if k == "this" or lines <= args.before_up_to]
                per: dict[str, list[dict]] = {k: [] for k in names}
                for r in range(args.runs):
                    for name in harness.rotated(names, r):
                        got = run_children({"url": box.url, "key": box.key,
                                            "record": record, "root": str(trees[name])},
                                           work, timeout_s=3600)
                        if got["rows"] != total or got["distinct_ids"] != total:
                            raise RuntimeError(f"{name} landed {got['rows']} rows "
                                               f"({got['distinct_ids']} ids) of {total}")
                        got["rows_per_s"] = round(total / got["landing_seconds"])
                        per[name].append(got)
                        print(f"[huge] {total:,} lines, {name}: " + "; ".join(
                            f"{run} {got[f'{run}_peak_rss_mb']} MiB, {got[f'{run}_seconds']} s"
                            for run in RUNS), flush=True)
                size = {"lines_asked": lines, "rows": total, "code": {}}
                for name, rs in per.items():
                    size["code"][name] = {
                        "runs": len(rs), "each": rs, "rows_per_s": round(statistics.median(
                            r["rows_per_s"] for r in rs)),
                        **{k: round(statistics.median(r[k] for r in rs), 1) for k in (
                            "arrow_peak_mb", "ready_rss_mb", *(f"{run}_{x}" for run in RUNS
                                                               for x in ("peak_rss_mb",
                                                                         "seconds")))},
                        "peak_rss_mb_max": max(r[f"{run}_peak_rss_mb"] for r in rs
                                               for run in RUNS)}
                result["sizes"].append(size)
    result["mib_per_million_lines"] = {name: slope(
        [(s["rows"], s["code"][name]["landing_peak_rss_mb"]) for s in result["sizes"]
         if name in s["code"]]) for name in trees}
    result["verdicts"] = []
    for s in result["sizes"]:
        mine = s["code"]["this"]["peak_rss_mb_max"]
        mark = "✓" if mine < TARGET_MIB else "✗"
        result["verdicts"].append(f"{mark} {s['rows']:,} lines: peak {mine} MiB, the most of "
                                  f"any run (target < {TARGET_MIB} MiB)")
    result["wall_s"] = round(time.perf_counter() - started, 1)
    harness.publish(result, args, "huge_record", table_md(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
