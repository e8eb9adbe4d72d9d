"""Freshness: a record's callback to its rows visible through `daily_balances`, before and after.

Measured as a user meets it, on the pipeline as `ledgerlake dev` deploys it on one machine:
per side, a sandbox of the service, the receiver on a SQLite inbox, and `dagster-daemon` with
the shipped dagster.yaml (queued runs, each in its own process; the service's pool sized by
`one_box_pools`) and the shipped sensors running, `inbox_sensor` and `warehouse_follows_lake`
among them; nothing ticked by hand. A round makes `--records` new customers on the sandbox,
one every `--gap` seconds (`/sandbox/customers/create`: the connection completes and the
service sends its callbacks, TRANSACTIONS PRODUCT_IS_READY among them, to the receiver); a
reader polls `select count(*) from daily_balances where record_id = ?` through the warehouse
opened as `ledgerlake sql` opens it (`pipeline.cli.sql.open_warehouse`, afresh each poll)
until the record's rows are there. Latency: from when the receiver stored the record's
TRANSACTIONS callback (the inbox's `received_at`) to the first poll that finds a row.

Two sides, each from its own tree unpacked with `git archive` (the working tree, which others
edit, is never run), on the same .venv: `before` (default 869ef17: `daily_balances` and
`monthly_cashflow` views over the whole lake) and `after` (default HEAD: lake tables the
warehouse's build derives for the records that moved, 2be7bcd..78244dd). 869ef17, not
1534f8e, the parent of 2be7bcd: d35cb1b moved the two views' SQL to assets/sql/derived/,
which the build of 1534f8e does not read, so that commit's warehouse has no `daily_balances`
at all; 869ef17 is the same pipeline code with the views in place. Each side's
processes (sandbox, receiver, daemon and its code server and runs, the reader) run from its
tree, all of them up for the whole bench; rounds alternate the sides, the order rotating, and
each side's round starts once the other's is quiet (no run for `--settle` seconds). A warm-up
record a side first, not counted, makes the warehouse and the lake's tables. Where each
record's time went comes from the inbox (`landings`) and Dagster's runs: the inbox sensor,
the ingest run's launch, its landing, the warehouse sensor, the build's launch, the build
until the row is seen.

    .venv/bin/python bench/freshness.py                 # 2 rounds x 10 records a side, ~15 min
    .venv/bin/python bench/freshness.py --quick --out /tmp/freshness.json   # smoke, ~5 min

Writes bench/results/freshness.json and its table in bench/README.md (`--out`: elsewhere,
README left alone).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import harness
from harness import ROOT

SIDES = ("before", "after")
POLL_S = 0.5  # the reader's pace
SAY = "@@ "  # the agent's lines to the bench; anything else on its stdout is ignored
BUILDING = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


# -- the code of each side -----------------------------------------------------------------------

def short(rev: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev],
                          capture_output=True, text=True, check=True).stdout.strip()


def code_at(rev: str, work: Path) -> Path:
    """The tracked files of `rev`, unpacked (the working tree, which others edit, untouched)."""
    where = Path(tempfile.mkdtemp(prefix=f"code-{short(rev)}-", dir=work))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


@contextmanager
def inside(tree: Path):
    """Children started here import `tree`'s packages: `python -m` puts the working directory
    first on sys.path, and PYTHONPATH comes before the .venv's editable install (/work/main)."""
    cwd, path = os.getcwd(), os.environ.get("PYTHONPATH")
    os.chdir(tree)
    os.environ["PYTHONPATH"] = str(tree)
    try:
        yield
    finally:
        os.chdir(cwd)
        if path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = path


# -- the agent: a side's reader and bookkeeper, in a process running that side's code -----------

def say(**message) -> None:
    print(SAY + json.dumps(message, default=str), flush=True)


def agent() -> int:
    """Set up DAGSTER_HOME as `ledgerlake dev` does, then poll the warehouse for the records
    asked about, and answer questions about runs and landings; JSON lines in and out."""
    import duckdb
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    import pipeline
    from assets.warehouse import VIEWS
    from pipeline.cli import sql
    from pipeline.local import one_box_pools
    from pipeline.sensors import MIN_INTERVAL_S, warehouse_follows_lake
    from resources.config import Settings, local_path

    settings = Settings.from_env()
    tree = Path(pipeline.__file__).resolve().parents[1]
    dagster_home = Path(os.environ["DAGSTER_HOME"])
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tree / "dagster.yaml", dagster_home / "dagster.yaml")
    instance = DagsterInstance.from_config(str(dagster_home))
    one_box_pools(instance)
    coordinator = instance.run_coordinator
    derived = (tree / "assets" / "derived.py").is_file()  # the change: lake tables derived
    say(ready=True, tree=str(tree), views=[v.name for v in VIEWS],
        daily_balances="a lake table the build derives" if derived else "a view over the lake",
        # the interval the sensor is declared with: the `before` tree has a sensor, ours a
        # factory of it (pipeline/sensors.py), both this constant
        inbox_sensor_interval_s=MIN_INTERVAL_S,
        warehouse_sensor_interval_s=warehouse_follows_lake.minimum_interval_seconds,
        run_coordinator=type(coordinator).__name__,
        dequeue_interval_s=getattr(coordinator, "dequeue_interval_seconds", None),
        max_concurrent_runs=instance.get_concurrency_config().run_queue_config
        .max_concurrent_runs)

    commands: queue.Queue = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            if line.strip():
                commands.put(json.loads(line))
        commands.put(None)

    threading.Thread(target=read, daemon=True).start()
    lake = str(local_path(settings.lake) or settings.lake)
    pending: dict[str, None] = {}
    last_poll = 0.0

    def poll() -> None:
        try:
            con = sql.open_warehouse(settings.warehouse_path.resolve(), lake)
        except FileNotFoundError:
            return  # not built yet
        with con:
            marks = ",".join("?" * len(pending))
            try:
                found = con.execute(f"select record_id, count(*) from daily_balances where "
                                    f"record_id in ({marks}) group by record_id",
                                    list(pending)).fetchall()
            except duckdb.Error as exc:  # no view yet, a file gone: the next poll
                print(f"poll: {exc}", file=sys.stderr, flush=True)
                return
            at = time.time()
            for record, n in found:
                if n and record in pending:
                    t0 = time.perf_counter()  # what the user's own question costs
                    (rows,) = con.execute("select count(*) from daily_balances where "
                                          "record_id = ?", [record]).fetchone()
                    say(visible=record, at=at, rows=rows,
                        query_s=round(time.perf_counter() - t0, 4))
                    del pending[record]

    def state() -> dict:
        busy = instance.get_runs_count(RunsFilter(
            statuses=[DagsterRunStatus[s] for s in BUILDING]))
        recent = instance.get_run_records(limit=20)
        last = max([r.create_timestamp.timestamp() for r in recent]
                   + [r.end_time for r in recent if r.end_time] + [0.0])
        return {"busy": busy, "last_activity": last}

    def report(records: list[str]) -> dict:
        inbox = sqlite3.connect(f"file:{settings.inbox}?mode=ro", uri=True)
        marks = ",".join("?" * len(records))
        with inbox:
            events = inbox.execute(
                f"select record, method, code, received_at from events where record in "
                f"({marks}) order by id", records).fetchall()
            landings = inbox.execute(
                f"select record, product, outcome, run_id, landed_at from landings where "
                f"record in ({marks})", records).fetchall()
        inbox.close()
        runs = []
        for job in ("ingest_job", "warehouse_job"):
            for r in instance.get_run_records(RunsFilter(job_name=job)):
                runs.append({"run_id": r.dagster_run.run_id, "job": job,
                             "status": r.dagster_run.status.value,
                             "created": r.create_timestamp.timestamp(),
                             "start": r.start_time, "end": r.end_time})
        return {"events": events, "landings": landings, "runs": runs,
                "derived_table_in_lake": (Path(lake) / "daily_balances").is_dir()}

    while True:
        try:
            cmd = commands.get(timeout=POLL_S)
        except queue.Empty:
            cmd = {}
        if cmd is None or cmd.get("quit"):
            break
        if "watch" in cmd:
            pending.update(dict.fromkeys(cmd["watch"]))
        if cmd.get("state"):
            say(state=state())
        if "report" in cmd:
            say(report=report(cmd["report"]))
        if pending and time.monotonic() - last_poll >= POLL_S:
            last_poll = time.monotonic()
            poll()
    instance.dispose()
    return 0


class Agent:
    """A side's agent process, and what it has said."""

    def __init__(self, tree: Path, env: dict, log: Path) -> None:
        self.messages: queue.Queue = queue.Queue()
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--agent"], cwd=tree,
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        threading.Thread(target=self._pump, daemon=True).start()
        self.hello = self.wait_for("ready", 180)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(SAY):
                self.messages.put(json.loads(line[len(SAY):]))
        self.messages.put(None)

    def send(self, **cmd) -> None:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def wait_for(self, key: str, timeout: float, seen: list | None = None) -> dict:
        """The next message holding `key`; the others go to `seen`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.messages.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the agent said no {key} within {timeout:.0f}s") from None
            if msg is None:
                raise RuntimeError(f"the agent exited ({self.proc.wait()}) before {key}")
            if key in msg:
                return msg
            if seen is not None:
                seen.append(msg)

    def ask(self, key: str, value, timeout: float = 120) -> dict:
        seen: list = []
        self.send(**{key: value})
        msg = self.wait_for(key, timeout, seen)
        for m in seen:  # visibility reports that came meanwhile
            self.messages.put(m)
        return msg[key]

    def stop(self) -> None:
        with suppress(OSError):
            self.send(quit=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- a side: its sandbox, receiver, daemon and agent ---------------------------------------------

class Side:
    def __init__(self, name: str, rev: str, tree: Path, work: Path, seed: int,
                 stack: ExitStack) -> None:
        from pipeline.local import Server

        self.name, self.rev, self.tree = name, rev, tree
        self.home = work / name
        self.home.mkdir(parents=True)
        logs = self.home / "logs"
        logs.mkdir()
        token = os.urandom(16).hex()
        with inside(tree):
            self.box = stack.enter_context(harness.sandbox(self.home, seed, *harness.STILL))
            receiver = stack.enter_context(Server(
                "receiver", "--inbox", str(self.home / "inbox.sqlite3"),
                env={"LEDGERLAKE_RECEIVER_TOKEN": token}, log_path=logs / "receiver.log"))
        self.api = self.box.api(timeout=60)
        stack.callback(self.api.close)
        self.api.post("settings/webhook", json={"url": f"{receiver.url}/callbacks/",
                                                "token": token}).raise_for_status()
        self.env = {**os.environ, "PYTHONPATH": str(tree),
                    "DAGSTER_HOME": str(self.home / "dagster"),
                    "LEDGERLAKE_HOME": str(self.home),
                    "LEDGERLAKE_LAKE": str(self.home / "lake"),
                    "LEDGERLAKE_WAREHOUSE": str(self.home / "warehouse.duckdb"),
                    "LEDGERLAKE_INBOX": str(self.home / "inbox.sqlite3"),
                    "LEDGERLAKE_API_URL": self.box.url, "LEDGERLAKE_ENVIRONMENT": "sandbox",
                    "LEDGERLAKE_SECRET_KEY": self.box.key}
        self.agent = Agent(tree, self.env, logs / "agent.log")
        stack.callback(self.agent.stop)
        if Path(self.agent.hello["tree"]) != tree.resolve():
            raise RuntimeError(f"{name}'s agent runs {self.agent.hello['tree']}, not {tree}")
        if "daily_balances" not in self.agent.hello["views"]:  # 1534f8e and d35cb1b: none
            raise RuntimeError(f"{rev}'s warehouse has no daily_balances view to read")
        daemon_log = (logs / "daemon.log").open("ab")
        stack.callback(daemon_log.close)
        # its own session: whatever it starts (code server, runs) is stopped with it
        self.daemon = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
             str(tree / "workspace.yaml")], cwd=self.home, env=self.env, stdout=daemon_log,
            stderr=daemon_log, stdin=subprocess.DEVNULL, start_new_session=True)
        stack.callback(self.stop_daemon)
        self.made = 0

    def stop_daemon(self) -> None:
        from pipeline.local import stop_process

        stop_process(self.daemon, timeout_s=30)
        with suppress(ProcessLookupError):  # runs or a code server it left behind
            os.killpg(self.daemon.pid, signal.SIGKILL)

    def create(self) -> str:
        self.made += 1
        made = self.api.post("sandbox/customers/create", json={"customers": [
            {"accounts": 1 + self.made % 3}]})
        return made.raise_for_status().json()["data"]["customers"][0]["record"]

    def wave(self, n: int, gap: float, timeout: float) -> dict:
        """`n` new customers, one every `gap` seconds; when each was made and became visible."""
        made: dict[str, float] = {}
        visible: dict[str, dict] = {}
        start = time.monotonic()
        for i in range(n):
            time.sleep(max(0.0, start + i * gap - time.monotonic()))
            at = time.time()
            record = self.create()
            made[record] = at
            self.agent.send(watch=[record])
            self._take(visible, 0.0)
        deadline = time.monotonic() + timeout
        while len(visible) < n and time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise RuntimeError(f"{self.name}'s daemon exited; see {self.home}/logs")
            self._take(visible, 1.0)
        return {"made": made, "visible": visible}

    def _take(self, visible: dict, timeout: float) -> None:
        try:
            msg = self.agent.messages.get(timeout=timeout) if timeout else \
                self.agent.messages.get_nowait()
        except queue.Empty:
            return
        if msg is None:
            raise RuntimeError(f"{self.name}'s agent exited; see {self.home}/logs/agent.log")
        if "visible" in msg:
            visible[msg["visible"]] = msg

    def settle(self, quiet_s: float, timeout: float) -> float:
        """Wait until no run is in flight and none started or ended for `quiet_s` seconds
        (longer than the warehouse sensor's interval: a build it would still ask for has
        been asked for). Returns the seconds waited."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            s = self.agent.ask("state", True)
            if not s["busy"] and time.time() - s["last_activity"] >= quiet_s:
                break
            time.sleep(2)
        return round(time.monotonic() - t0, 1)


# -- figures -------------------------------------------------------------------------------------

STAGES = ("inbox sensor", "ingest launch", "landing", "warehouse sensor", "build launch",
          "build to visible")


def stages_of(record: str, visible_at: float, report: dict) -> dict:
    """Where a record's time went, from the callback the receiver stored to the row seen."""
    runs = {r["run_id"]: r for r in report["runs"]}
    called = [e[3] for e in report["events"]
              if e[0] == record and e[1] == "TRANSACTIONS" and e[2] == "PRODUCT_IS_READY"]
    first = min((e[3] for e in report["events"] if e[0] == record), default=None)
    landed = sorted((ld[4], ld[3]) for ld in report["landings"]
                    if ld[0] == record and ld[1] in ("transactions", "balances") and ld[4])
    out: dict = {"callback_at": called[0] if called else None, "first_callback_at": first}
    if not called:
        return out
    t_cb = called[0]
    out["latency_s"] = round(visible_at - t_cb, 3)
    if not landed or landed[0][1] not in runs:
        return out
    landed_at, run_id = landed[0]
    ingest = runs[run_id]
    builds = sorted((r for r in report["runs"] if r["job"] == "warehouse_job" and r["start"]
                     and r["start"] >= landed_at and r["start"] <= visible_at),
                    key=lambda r: r["start"])
    if not builds or not ingest["start"]:
        return out
    build = builds[0]
    marks = [t_cb, ingest["created"], ingest["start"], landed_at,
             max(build["created"], landed_at), build["start"], visible_at]
    out["stages_s"] = {name: round(b - a, 3) for name, a, b in
                       zip(STAGES, marks[:-1], marks[1:], strict=True)}
    out["ingest_run_s"] = round(ingest["end"] - ingest["start"], 3) if ingest["end"] else None
    out["build_run_s"] = round(build["end"] - build["start"], 3) if build["end"] else None
    return out


def summary(samples: list[dict]) -> dict:
    lat = [s["latency_s"] for s in samples if "latency_s" in s]
    if not lat:
        return {"n": 0}
    out = {"n": len(lat), "p50_s": round(statistics.median(lat), 2),
           "p95_s": round(harness.percentile(lat, 0.95), 2), "max_s": round(max(lat), 2),
           "min_s": round(min(lat), 2)}
    staged = [s["stages_s"] for s in samples if "stages_s" in s]
    if staged:
        out["stages_median_s"] = {k: round(statistics.median(s[k] for s in staged), 2)
                                  for k in STAGES}
    return out


def table_md(result: dict) -> str:
    head = ["code", "records seen", "p50 s", "p95 s", "max s", "rounds: p50 · p95",
            *[f"{s} s" for s in STAGES], "build run s"]
    rows = []
    for side in SIDES:
        s = result["sides"][side]
        a = s["all"]
        per = "; ".join(f"{r['p50_s']} · {r['p95_s']}" for r in s["rounds"] if r["n"])
        st = a.get("stages_median_s", {})
        rows.append([f"{side} ({s['commit']})", f"{a['n']} of {s['records']}",
                     f"**{a.get('p50_s')}**", f"**{a.get('p95_s')}**", a.get("max_s"), per,
                     *[st.get(k, "") for k in STAGES], s["build_run_s"].get("median", "")])
    r = result["after_over_before"]
    h = result["sides"]["after"]["settings"]
    return (harness.table(head, rows)
            + f"\n\nAfter / before, median of the rounds' ratios: p50 {r['p50']['median']}x "
              f"(rounds {r['p50']['rounds']}), p95 {r['p95']['median']}x "
              f"(rounds {r['p95']['rounds']}). {result['records_per_round']} records a side a "
              f"round, one every {result['gap_s']} s; stages are medians over records "
              f"(inbox sensor every {h['inbox_sensor_interval_s']} s, warehouse sensor every "
              f"{h['warehouse_sensor_interval_s']} s, run queue polled every "
              f"{h['dequeue_interval_s']} s, {h['max_concurrent_runs']} runs at once).")


# -- the bench -----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="869ef17",
                    help="the code before (default %(default)s: 1534f8e's pipeline, with the "
                         "daily_balances view that d35cb1b moved out of assets/sql/)")
    ap.add_argument("--after", default="HEAD", help="the code after (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records", type=int, default=10, help="new records a side a round")
    ap.add_argument("--gap", type=float, default=4.0, help="seconds between a round's records")
    ap.add_argument("--warmup", type=int, default=1, help="records a side first, not counted")
    ap.add_argument("--settle", type=float, default=35.0,
                    help="seconds without a run a side waits for after its round")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds a round waits for its records to be seen")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--quick", action="store_true",
                    help="1 round of 2 records a side (a smoke, ~5 minutes)")
    ap.add_argument("--work", type=Path, help="where the trees and data go (default /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the trees, data and logs")
    harness.arguments(ap, "freshness")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.records, args.warmup = 1, 2, 1

    revs = {"before": args.before, "after": args.after}
    work = Path(tempfile.mkdtemp(prefix="ledgerlake-freshness-", dir=args.work))
    samples: dict[str, list[dict]] = {s: [] for s in SIDES}
    reports: dict[str, dict] = {}
    rounds: dict[str, list[dict]] = {s: [] for s in SIDES}
    watched: dict[str, list[str]] = {s: [] for s in SIDES}
    try:
        with ExitStack() as stack:
            sides = {}
            for i, name in enumerate(SIDES):
                tree = code_at(revs[name], work)
                sides[name] = Side(name, short(revs[name]), tree, work, args.seed + i, stack)
                print(f"[freshness] {name} at {sides[name].rev}: {sides[name].agent.hello}",
                      flush=True)
            for name in SIDES:  # the first build makes the warehouse (and, after, the tables)
                got = sides[name].wave(args.warmup, args.gap, args.timeout)
                print(f"[freshness] {name} warm-up: {len(got['visible'])} of {args.warmup} "
                      f"seen; settled in {sides[name].settle(args.settle, 600)} s", flush=True)
            for k in range(args.rounds):
                for name in harness.rotated(SIDES, k):
                    side = sides[name]
                    load = round(os.getloadavg()[0], 2)
                    got = side.wave(args.records, args.gap, args.timeout)
                    waited = side.settle(args.settle, 600)
                    watched[name] += list(got["made"])
                    rep = side.agent.ask("report", list(got["made"]))
                    these = []
                    for record, made_at in got["made"].items():
                        seen = got["visible"].get(record)
                        sample = {"round": k, "record": record, "made_at": made_at,
                                  "visible": seen is not None}
                        if seen:
                            sample.update(seen_at=seen["at"], rows=seen["rows"],
                                          query_s=seen["query_s"],
                                          **stages_of(record, seen["at"], rep))
                        these.append(sample)
                    samples[name] += these
                    rounds[name].append({"round": k, "load_avg_1m": load, "settle_s": waited,
                                         **summary(these)})
                    print(f"[freshness] round {k} {name}: {rounds[name][-1]}", flush=True)
            for name in SIDES:
                reports[name] = sides[name].agent.ask("report", watched[name])
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    result: dict = {"what": __doc__.splitlines()[0], "rounds": args.rounds,
                    "records_per_round": args.records, "gap_s": args.gap,
                    "warmup": args.warmup, "settle_s": args.settle, "sides": {}}
    for name in SIDES:
        side, rep = sides[name], reports[name]
        builds = [r["end"] - r["start"] for r in rep["runs"]
                  if r["job"] == "warehouse_job" and r["start"] and r["end"]]
        ingests = [r["end"] - r["start"] for r in rep["runs"]
                   if r["job"] == "ingest_job" and r["start"] and r["end"]]
        hello = side.agent.hello
        result["sides"][name] = {
            "rev": revs[name], "commit": side.rev,
            "records": len(samples[name]),
            "all": summary(samples[name]), "rounds": rounds[name],
            "daily_balances": hello["daily_balances"],
            "settings": {k: hello[k] for k in (
                "inbox_sensor_interval_s", "warehouse_sensor_interval_s", "run_coordinator",
                "dequeue_interval_s", "max_concurrent_runs")},
            "derived_table_in_lake": rep["derived_table_in_lake"],
            "build_run_s": harness.spread(builds, 2) if builds else {},
            "ingest_run_s": harness.spread(ingests, 2) if ingests else {},
            "runs": {"ingest_job": len(ingests), "warehouse_job": len(builds),
                     "failed": sum(r["status"] != "SUCCESS" for r in rep["runs"])},
            "query_s": harness.spread([s["query_s"] for s in samples[name] if s["visible"]],
                                      4) if any(s["visible"] for s in samples[name]) else {},
            "samples": samples[name]}
    if result["sides"]["before"]["derived_table_in_lake"] or \
            not result["sides"]["after"]["derived_table_in_lake"]:
        raise RuntimeError("the sides are not the code they name: `daily_balances` should be a "
                           "lake table after and not before")
    pairs = [(b, a) for b, a in zip(rounds["before"], rounds["after"], strict=True)
             if b["n"] and a["n"]]
    if not pairs:
        raise RuntimeError("no round saw a record on both sides; see the logs (--keep)")
    result["after_over_before"] = {
        q: harness.ratios([a[f"{q}_s"] for _, a in pairs], [b[f"{q}_s"] for b, _ in pairs], 2)
        for q in ("p50", "p95")}
    harness.publish(result, args, "freshness", table_md(result))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--agent"]:
        raise SystemExit(agent())
    raise SystemExit(main())
