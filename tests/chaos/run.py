"""`make chaos`: exactly once under faults, proven against the sandbox's ground truth.

A sandbox with records in both of the service's environments, each read by its own deployment
of the pipeline (tests/chaos/world.py: receivers, the Dagster daemon and the runs it launches
in their own processes). While callbacks flow, runs land and the daily refresh runs, a schedule
drawn from the seed, and printed first so that a failing seed can be replayed:

- SIGKILLs a receiver, the daemon, a run mid-fetch (while the sandbox holds one of its answers),
  a run mid-commit (between its Delta data files and their commit, seen as they are created)
  and the warehouse build mid-publish (while its temporary file is open), and restarts each;
- turns the sandbox's faults on and off (429, 500, 503, resets, stalls, truncated pages;
  webhooks doubled, late, shuffled), and once cuts one deployment's receivers off for longer
  than the service redelivers (73 hours of its clock);
- advances the sandbox clock (redeliveries every hour, the periodic callbacks every day; the
  records gain lines), adds records, takes payments, disconnects records and reauthenticates
  others (USER_REAUTH, then a new login through the connect page).

Then it lets the system settle (the faults off, everything up, the clock advanced until no
delivery is pending, `ledgerlake replay` for what was lost past the redelivery window, the daily
refresh), and checks (tests/chaos/checks.py) that every connected record's tables equal the
sandbox's own data, that nothing is doubled, half-committed or left behind, that disconnected
records were not refreshed and reauthenticated ones were, that every inbox event was read, and
that no secret reached a log. Its figures go to tests/chaos/results.json and (with `--docs`)
the table in docs/operations.md.

    .venv/bin/python tests/chaos/run.py --seed 7       # one seed, the short run's size
    .venv/bin/python tests/chaos/run.py --seeds 10 --records 300 --window 240 --docs  # make chaos

Exit status 0 when every seed passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import heapq
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import commit, machine, write_marked
from tests.chaos import checks
from tests.chaos.readers import Readers
from tests.chaos.world import (
    ROOT,
    Deployment,
    Watch,
    World,
    holding,
    sending_from,
    signal_all,
    talking_to,
    tidy,
)

RESULTS = Path(__file__).with_name("results.json")
DOCS = ROOT / "docs" / "operations.md"
ENVS = ("production", "sandbox")
HOUR = 3600
# steps that wait for their moment (or take long): each in a thread, the schedule goes on
WAITING = {"kill_run_mid_fetch", "kill_run_mid_commit", "kill_warehouse_mid_publish",
           "refresh", "restart_postgres", "forget"}
# the product reads, as the sandbox's fault rules name them
READS = ["*/get", "auth/getByCustomer"]
# what the production lake's store does wrong, a few kinds at a time (tests/s3_faults.py)
S3_KINDS = [{"kind": "500", "op": ["PUT", "GET", "LIST", "HEAD"], "share": 0.05},
            {"kind": "503", "op": "*", "share": 0.05},
            {"kind": "slow", "op": ["GET", "LIST", "PUT"], "share": 0.1, "seconds": 2},
            {"kind": "drop", "op": ["PUT", "GET", "LIST"], "share": 0.03},
            {"kind": "timeout", "op": ["PUT", "GET", "LIST", "HEAD"], "share": 0.02,
             "count": 3, "seconds": 15}]
# the production lake's commits, as the store names them (bucket prefix "production")
COMMIT = r"^production/[a-z_]+/_delta_log/\d+\.json$"


@dataclass(order=True)
class Step:
    """One thing the schedule does, `at` seconds into the fault window."""
    at: float
    action: str = field(compare=False)
    args: dict = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        args = " ".join(f"{k}={v}" for k, v in self.args.items())
        return f"{self.at:7.1f}s  {self.action} {args}"


def draw(seed: int, window_s: float, records: int) -> list[Step]:
    """The seed's schedule: what happens when, over `window_s` seconds. A function of its
    arguments alone, so a seed's schedule is the same on any machine."""
    rng = random.Random(seed)
    w = window_s

    def at(lo: float = 0.05, hi: float = 0.9) -> float:
        return round(rng.uniform(lo * w, hi * w), 1)

    first = {"production": records // 3, "sandbox": records - records // 3}
    steps = [Step(0.0, "create", {"env": e, "n": first[e] * 4 // 5}) for e in ENVS]
    steps += [Step(at(0.2, 0.5), "create", {"env": e, "n": first[e] - first[e] * 4 // 5})
              for e in ENVS]
    # the service misbehaving, for a while each time
    api_kinds = [{"kind": 429, "share": 0.1, "seconds": 1}, {"kind": 500, "share": 0.05},
                 {"kind": 503, "share": 0.05}, {"kind": "reset", "share": 0.05},
                 {"kind": "truncate", "share": 0.05},
                 {"kind": "stall", "seconds": 35, "count": 1}]
    hook_kinds = [{"kind": "double", "share": 0.2}, {"kind": "late", "share": 0.15, "seconds": 3},
                  {"kind": "shuffle", "share": 0.3, "batch": 4, "seconds": 2}]
    for _ in range(3):
        rules = rng.sample(api_kinds, 3) + rng.sample(hook_kinds, 2)
        steps.append(Step(at(0.0, 0.8), "faults", {"rules": rules,
                                                    "for_s": round(rng.uniform(15, 40))}))
    # processes killed, each restarted after a while
    for _ in range(3):
        env = rng.choice(ENVS)
        steps.append(Step(at(), "kill_receiver", {
            "env": env, "i": rng.randrange(2 if env == "production" else 1),
            "down_s": round(rng.uniform(2, 20), 1)}))
    for _ in range(2):
        steps.append(Step(at(), "kill_daemon", {"env": rng.choice(ENVS),
                                                "down_s": round(rng.uniform(2, 15), 1)}))
    steps.append(Step(at(0.1, 0.7), "kill_run_mid_fetch", {"env": rng.choice(ENVS)}))
    # the clock: redeliveries hourly, periodic callbacks (a run per product set) daily; a
    # run killed mid-commit just after, while those runs land
    for _ in range(3):
        steps.append(Step(at(), "advance", {"hours": 1}))
    day = at(0.15, 0.45)
    steps.append(Step(day, "advance", {"hours": 24}))
    steps.append(Step(day + 1, "kill_run_mid_commit", {"env": rng.choice(ENVS)}))
    refresh = at(0.5, 0.75)
    for env in ENVS:
        steps.append(Step(refresh, "refresh", {"env": env}))
    steps.append(Step(refresh + 2, "kill_run_mid_commit", {"env": rng.choice(ENVS)}))
    steps.append(Step(at(0.3, 0.9), "kill_warehouse_mid_publish", {"env": rng.choice(ENVS)}))
    # the records' lives
    n = max(1, records // 60)
    for env in ENVS:
        steps.append(Step(at(0.3, 0.9), "disconnect", {"env": env, "n": n}))
    steps.append(Step(at(0.3, 0.9), "reauth", {"env": "sandbox", "n": n}))
    steps.append(Step(at(0.1, 0.9), "pay", {"env": "sandbox", "n": n}))
    # one outage longer than the service redelivers: what it raised then is lost for good
    steps.append(Step(at(0.55, 0.85), "outage", {"env": rng.choice(ENVS), "hours": 73,
                                                  "new": max(1, records // 50)}))
    # the production lake's store misbehaving (tests/s3_faults.py), for a while each time
    for _ in range(3):
        steps.append(Step(at(0.0, 0.8), "s3_faults", {"rules": rng.sample(S3_KINDS, 3),
                                                      "for_s": round(rng.uniform(15, 40))}))
    # Postgres (production's instance and inbox) stopped hard and started again: while the
    # day's callbacks are stored, while a run records its landings, while the sensor ticks
    down = [round(rng.uniform(2, 10), 1) for _ in range(3)]
    steps.append(Step(day + 0.5, "restart_postgres", {"during": "receivers", "down_s": down[0]}))
    steps.append(Step(at(0.1, 0.8), "restart_postgres", {"during": "landings",
                                                         "down_s": down[1]}))
    steps.append(Step(at(0.1, 0.8), "restart_postgres", {"during": "sensor", "down_s": down[2]}))
    # erasures: a customer forgotten while the day's runs land theirs and others' records, and
    # one more in each environment (production also forgets each record it hears disconnected)
    steps.append(Step(day + 3, "forget", {"env": rng.choice(ENVS)}))
    for env in ENVS:
        steps.append(Step(at(0.2, 0.9), "forget", {"env": env}))
    return sorted(steps)


@dataclass
class Rec:
    env: str
    customer: str
    # connected, disconnected, reauth (its user logged in anew), erased (forgotten: by
    # `ledgerlake forget`, or by production when it hears the record disconnected), unheard
    # (its disconnect or reauthentication never reached ledgerlake: see `unheard_moves`)
    state: str = "connected"
    since: float | None = None  # wall time of the disconnect, reauthentication or erasure
    payments: list[str] = field(default_factory=list)
    erased_by: str | None = None  # forget, or disconnect


class Chaos:
    """One seed's run: the world, the schedule carried out, the settling, the checks."""

    def __init__(self, seed: int, work: Path, window_s: float, records: int,
                 settle_s: float) -> None:
        self.seed, self.work, self.window_s = seed, work, window_s
        self.records_wanted, self.settle_bound_s = records, settle_s
        self.rng = random.Random(seed * 7919 + 1)  # for choices made while running
        self.records: dict[str, Rec] = {}
        self.rules: list[tuple[float, dict]] = []  # (until, rule) of the sandbox's faults
        self.kills: dict[str, int] = {}
        self.landed: dict[str, dict[str, int]] = {}
        self.restarts = 0
        self.lost: set[str] = set()  # records created while their deployment heard nothing
        self.unheard: set[str] = set()  # records whose connection event the service dropped
        self.log: list[str] = []
        self.lock = threading.RLock()  # the steps that wait run in threads of their own
        self.waited_until = 0.0
        self.postgres_restarts: list[str] = []  # what each restart of Postgres struck
        self.postgres_lock = threading.Lock()
        self.readers: Readers | None = None
        self.seen: list[str] = []  # problems seen as they happened (a command that crashed)

    def say(self, line: str) -> None:
        stamp = f"[seed {self.seed} {time.strftime('%H:%M:%S')}] {line}"
        self.log.append(stamp)
        print(stamp, flush=True)

    # -- running --------------------------------------------------------------------------
    def run(self) -> dict:
        started = time.monotonic()
        plan = draw(self.seed, self.window_s, self.records_wanted)
        self.say(f"schedule of seed {self.seed} ({len(plan)} steps over {self.window_s:g} s):")
        for step in plan:
            self.say(f"  {step}")
        self.world = World(self.work, say=self.say, seed=self.seed)
        try:
            self.say(f"world up in {time.monotonic() - started:.0f} s")
            last_fault = self.carry_out(plan)
            try:
                settled = self.settled = self.settle(last_fault)
                unsettled = None
            except AssertionError as exc:  # checked all the same: the checks say what broke
                self.say(f"did not settle: {exc}; checking what there is")
                settled = self.settled = {"settle_s": None, "refresh_at": time.time()}
                unsettled = f"did not settle: {exc}"
            self.readers.stop()
            both(lambda env: self.hold_still(env, time.monotonic() + 1800))
            found = checks.run_all(self)
            found["problems"] += self.seen
            if unsettled:
                found["problems"].insert(0, unsettled)
        except BaseException:
            self.diagnose()
            raise
        else:
            if found["problems"]:
                self.diagnose()
        finally:
            if self.readers is not None:
                self.readers.stop()
            self.world.close()
        return self.report(found, settled, time.monotonic() - started)

    def carry_out(self, plan: list[Step]) -> float:
        """Each step at its time (restarts queued as they fall due; the steps that wait for
        a moment to strike, and the refresh, in threads of their own); returns when the last
        fault ended (monotonic)."""
        queue = list(plan)
        heapq.heapify(queue)
        while queue and queue[0].at == 0:  # the first records, before any fault
            step = heapq.heappop(queue)
            self.say(f"   start  {step.action} {step.args}")
            self.attempt(step)
        self.warm_up()
        # analysts' questions, from the first fault to the end of the settling
        self.readers = Readers(self.world.deployments, self.erased, self.say,
                               random.Random(self.seed * 104729 + 3))
        self.readers.start()
        t0 = last = time.monotonic()
        waiting: list[threading.Thread] = []
        while queue:
            step = heapq.heappop(queue)
            delay = t0 + step.at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.say(f"{time.monotonic() - t0:7.1f}s  {step.action} {step.args}")
            if step.action in WAITING:
                waiting.append(threading.Thread(target=self.attempt, args=(step,), daemon=True))
                waiting[-1].start()
                continue
            for follow in self.attempt(step):
                heapq.heappush(queue, Step(time.monotonic() - t0 + follow.at, follow.action,
                                           follow.args))
            if step.action != "create":
                last = time.monotonic()
        for thread in waiting:
            thread.join()
        last = max(last, self.waited_until)
        self.post_rules()  # the windows still open close by their own `for_s`
        if self.rules:
            last = max(last, max(until for until, _ in self.rules))
        return last

    def warm_up(self, timeout_s: float = 900) -> None:
        """Until each deployment has landed some of the first records: the faults strike a
        pipeline at work, not one still starting (its daemon's first ticks, its first runs'
        processes)."""
        started = time.monotonic()
        for env in ENVS:
            lake = self.dep(env).store()
            while not (lake.version("transactions") or 0) >= 1:
                assert time.monotonic() - started < timeout_s, f"{env} landed nothing"
                time.sleep(2)
        self.say(f"first records landed in both environments after "
                 f"{time.monotonic() - started:.0f} s: the faults begin")

    def attempt(self, step: Step) -> list[Step]:
        """Carry out one step; what it queues. A step that fails is reported, not fatal."""
        try:
            later = getattr(self, f"do_{step.action}")(**step.args) or []
        except Exception as exc:
            self.say(f"    {step.action} failed: {type(exc).__name__}: {exc}")
            self.count(step.action, "not carried out")
            later = []
        if step.action in WAITING:
            with self.lock:
                self.waited_until = max(self.waited_until, time.monotonic())
        return later

    def diagnose(self) -> None:
        for env, dep in self.world.deployments.items():
            try:
                checks.diagnose(dep, self.work / f"runs-{env}.txt")
            except Exception as exc:  # the instance itself may be what broke
                self.say(f"no run list of {env}: {exc}")

    def dep(self, env: str) -> Deployment:
        return self.world.deployments[env]

    def api(self, env: str):
        return self.world.api[env]

    def count(self, what: str, outcome: str) -> None:
        with self.lock:
            if outcome != "not carried out" and not outcome.startswith("missed"):
                self.kills[what] = self.kills.get(what, 0) + 1
            if outcome:
                self.landed.setdefault(what, {}).setdefault(outcome, 0)
                self.landed[what][outcome] += 1

    def note(self, what: str, outcome: str) -> None:
        """An outcome that is no fault injected (a process found exited, started again)."""
        with self.lock:
            self.landed.setdefault(what, {}).setdefault(outcome, 0)
            self.landed[what][outcome] += 1

    # -- the records' lives -----------------------------------------------------------------
    def do_create(self, env: str, n: int) -> None:
        if n <= 0:
            return
        if env == "sandbox":
            specs = [{"accounts": 1 + (self.rng.random() < 0.3),
                      "months": self.rng.choice([1, 2, 3])} for _ in range(n)]
            for start in range(0, n, 100):
                resp = self.api(env).post("sandbox/customers/create",
                                          json={"customers": specs[start:start + 100]})
                resp.raise_for_status()
                for c in resp.json()["data"]["customers"]:
                    self.records[c["record"]] = Rec(env, c["customer"])
        else:
            for _ in range(n):
                self.link(env)

    def link(self, env: str, customer: str | None = None) -> str:
        """A user links a bank through the connect page (production records are made only
        this way); `customer` logs in again as a known user. The new record's id."""
        base = f"{self.world.sandbox.url}{'/v2/' if env == 'production' else '/sandbox/v2/'}"
        conf = self.api(env).post("settings/connect", json={"agreement": True}).json()["data"]
        banks = [b for b in self.api(env).get("banks/list").json()["data"]["banks"]
                 if "bank" in b["login_types"] and b["status"] == "healthy"]
        chosen = self.rng.choice(banks)["_id"]

        def step(name: str, **body) -> dict:
            import httpx

            resp = httpx.post(f"{base}connect/api/{name}", json=body, timeout=300)
            assert resp.status_code == 200, f"connect {name}: {resp.text}"
            return resp.json()["data"]

        sess = step("session", key=conf["public_key"],
                    **({"customer": customer} if customer else {}))["session"]
        who = {"username": f"chaos_{self.seed}_{len(self.records)}", "password": "pass_good"}
        if step("login", session=sess, bank=chosen, login_type="bank",
                credentials=who)["step"] == "mfa":
            step("mfa", session=sess, answer="123456")
        done = step("finish", session=sess, accounts=[0] if self.rng.random() < 0.7 else [0, 1],
                    consent=True)
        self.records[done["record"]] = Rec(env, done["customer"]["_id"])
        return done["record"]

    def erased(self) -> dict[str, tuple[str, float | None]]:
        """Records forgotten (or to be, by production's disconnect): their environment and
        when their erasure was known to be finished (None: not yet known)."""
        with self.lock:
            return {r: (rec.env, rec.since if rec.erased_by == "forget" else None)
                    for r, rec in self.records.items() if rec.state == "erased"}

    def connected(self, env: str) -> list[str]:
        return [r for r, rec in self.records.items()
                if rec.env == env and rec.state == "connected" and r not in self.lost]

    def do_disconnect(self, env: str, n: int) -> None:
        for record in self.rng.sample(self.connected(env), min(n, len(self.connected(env)))):
            self.api(env).post("record/remove", json={"record": record}).raise_for_status()
            rec = self.records[record]
            rec.state, rec.since = "disconnected", time.time()
            if self.dep(env).settings.get("LEDGERLAKE_FORGET_ON_DISCONNECT") == "true":
                rec.state, rec.erased_by = "erased", "disconnect"
            self.say(f"    disconnected {record}"
                     + (" (the deployment forgets it)" if rec.state == "erased" else ""))

    def do_reauth(self, env: str, n: int) -> None:
        for record in self.rng.sample(self.connected(env), min(n, len(self.connected(env)))):
            rec = self.records[record]
            self.api(env).post("sandbox/records/reset_login",
                               json={"record": record}).raise_for_status()
            rec.state, rec.since = "reauth", time.time()
            new = self.link(env, customer=rec.customer)
            self.say(f"    {record} needs a new login; its user logged in again: {new}")

    def do_pay(self, env: str, n: int) -> None:
        for record in self.rng.sample(self.connected(env), min(n, len(self.connected(env)))):
            resp = self.api(env).post("sandbox/payments/initiate",
                                      json={"record": record, "amount": 150_00})
            resp.raise_for_status()
            self.records[record].payments.append(resp.json()["data"]["payment"]["_id"])

    # -- the service misbehaving ------------------------------------------------------------
    def post_rules(self) -> None:
        """Post the rules whose windows are open (each with what is left of its window)."""
        with self.lock:
            self._post_rules()

    def _post_rules(self) -> None:
        now = time.monotonic()
        self.rules = [(until, rule) for until, rule in self.rules if until > now + 0.5]
        api = self.api("sandbox")
        if not self.rules:
            api.delete("sandbox/faults").raise_for_status()
            return
        rules = [{**rule, "for_s": round(until - now, 1)} for until, rule in self.rules]
        resp = api.post("sandbox/faults", json={"rules": rules,
                                                "seed": self.rng.randrange(2**31)})
        assert resp.status_code == 200, resp.text

    def do_faults(self, rules: list[dict], for_s: float) -> None:
        with self.lock:
            self.rules += [(time.monotonic() + for_s, rule) for rule in rules]
            self.post_rules()

    def do_advance(self, hours: float) -> None:
        now = self.api("sandbox").post("sandbox/clock/advance",
                                       json={"seconds": hours * HOUR}).json()["data"]["now"]
        self.say(f"    sandbox clock at {now}")

    # -- processes killed ---------------------------------------------------------------------
    def do_kill_receiver(self, env: str, i: int, down_s: float) -> list[Step]:
        if self.dep(env).kill_receiver(i):
            self.count("receiver", "killed")
        return [Step(down_s, "restart_receiver", {"env": env, "i": i})]

    def do_restart_receiver(self, env: str, i: int) -> list[Step]:
        """Start a receiver again; one that cannot start (its inbox's database is down: it
        exits at once) is tried again 5 s later, as a supervisor would."""
        if self.dep(env).receivers[i] is None:
            try:
                self.dep(env).start_receiver(i)
            except RuntimeError as exc:
                self.say(f"    receiver {i} of {env} did not start ({exc}): again in 5 s")
                self.note("receiver_start", "exited: its inbox did not answer")
                return [Step(5.0, "restart_receiver", {"env": env, "i": i})]
            self.restarts += 1
        return []

    def do_kill_daemon(self, env: str, down_s: float) -> list[Step]:
        if self.dep(env).kill_daemon():
            self.count("daemon", "killed")
        return [Step(down_s, "restart_daemon", {"env": env})]

    def do_restart_daemon(self, env: str) -> None:
        dep = self.dep(env)
        if dep.daemon is None or dep.daemon.poll() is not None:
            dep.start_daemon()
            self.restarts += 1

    def do_kill_run_mid_fetch(self, env: str, timeout_s: float = 60) -> None:
        """Have the sandbox hold the next product read of this environment, then SIGKILL the
        run that is talking to it: the run dies mid-fetch, its answer never read."""
        dep, port = self.dep(env), int(self.world.sandbox.url.rsplit(":", 1)[1])
        stall = {"kind": "stall", "env": env, "paths": READS, "seconds": 60, "count": 1}
        with self.lock:
            self.rules.append((time.monotonic() + timeout_s, stall))
            self.post_rules()
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                report = self.api("sandbox").get("sandbox/faults").json()["data"]
                held = any(r["kind"] == "stall" and r.get("env") == env and r["injected"]
                           for r in report["rules"])
                runs = [p.pid for p in dep.processes("run")]
                fetching = talking_to(runs, port) if held else []
                if fetching:
                    target = self.rng.choice(fetching)
                    signal_all([target], signal.SIGKILL)
                    self.say(f"    run process {target} SIGKILLed while the sandbox held "
                             f"its read ({len(fetching)} run(s) talking to the sandbox)")
                    self.count("run_mid_fetch", "mid-fetch")
                    return
                time.sleep(0.2)
            self.count("run_mid_fetch", "missed: no run fetched in time")
        finally:
            with self.lock:
                self.rules = [(u, r) for u, r in self.rules if r is not stall]
                self.post_rules()

    def _writer(self, dep: Deployment, watch: Watch, folders, wanted,
                deadline: float) -> tuple[int, Path] | None:
        """The run process that opens a file `wanted(path)` in `folders()` (asked again as it
        goes: tables appear), caught as it writes: when the file appears, the deployment's
        runs are frozen (SIGSTOP), the one holding it open is the writer. Left frozen."""
        runs, scanned = [], 0.0
        while time.monotonic() < deadline:
            if time.monotonic() - scanned > 1:  # /proc is read ahead, not when the file comes
                for folder in folders():
                    watch.add(folder)
                runs, scanned = [p.pid for p in dep.processes("run")], time.monotonic()
            for path in watch.created(0.1):
                if not wanted(path) or not runs:
                    continue
                signal_all(runs, signal.SIGSTOP)
                writer = holding(runs, path)
                signal_all([p for p in runs if p not in writer], signal.SIGCONT)
                if writer:
                    return writer[0], path
        return None

    def do_kill_run_mid_commit(self, env: str, timeout_s: float = 90) -> None:
        """SIGKILL a run between writing a Delta table's data files and committing them.

        On a local lake, delta-rs writes each data file under a staging name
        (`part-...parquet#1`) and renames it when whole, then commits (`_delta_log/N.json`).
        The run that opens a staging file is the writer; it goes on until the file is
        renamed, and is killed then. On S3 the commit is a conditional put of
        `_delta_log/N.json` after the data files' puts: the proxy holds it, the process that
        sent it is killed, and the put is dropped, never reaching the store."""
        dep = self.dep(env)
        if dep.on_s3:
            found = self.held_sender(env, timeout_s, COMMIT)
            if found is None:
                self.count("run_mid_commit", "missed: no commit in time")
                return
            held, pid, _kind = found
            signal_all([pid], signal.SIGKILL)
            self.world.s3_faults.release(held, forward=False)
            self.say(f"    run process {pid} SIGKILLed mid-commit on S3: its put of "
                     f"{held.key} held and dropped")
            self.count("run_mid_commit", "between its data files and commit (S3)")
            return

        def tables() -> list[Path]:
            return [t for t in dep.lake.iterdir() if (t / "_delta_log").is_dir()] \
                if dep.lake.is_dir() else []

        watch = Watch([])
        deadline = time.monotonic() + timeout_s
        try:
            found = self._writer(dep, watch, tables, lambda p: ".parquet#" in p.name, deadline)
            if found is None:
                self.count("run_mid_commit", "missed: no commit in time")
                return
            writer, staged = found
            whole = staged.with_name(staged.name.split("#")[0])
            signal_all([writer], signal.SIGCONT)
            while whole not in watch.created(5) and not whole.exists():
                if not os.path.exists(f"/proc/{writer}") or time.monotonic() > deadline:
                    self.count("run_mid_commit", "missed: the writer never finished its file")
                    return
            signal_all([writer], signal.SIGKILL)
        finally:
            watch.close()
        time.sleep(1)
        committed = checks.referenced(whole.parent, whole.name)
        self.say(f"    run process {writer} SIGKILLed mid-commit: {whole.relative_to(dep.home)} "
                 f"written, {'and committed' if committed else 'not committed'}")
        self.count("run_mid_commit",
                   "after its commit" if committed else "between its data files and commit")

    def do_kill_warehouse_mid_publish(self, env: str, timeout_s: float = 120) -> None:
        """SIGKILL the warehouse build while its new file is written beside the published one."""
        dep = self.dep(env)
        name = f".{dep.warehouse.name}."
        watch = Watch([])
        try:
            hit = self._writer(dep, watch, lambda: [dep.warehouse.parent],
                               lambda p: p.name.startswith(name) and p.name.endswith(".tmp"),
                               time.monotonic() + timeout_s)
        finally:
            watch.close()
        if hit is None:
            self.count("warehouse_mid_publish", "missed: no build in time")
            return
        signal_all([hit[0]], signal.SIGKILL)
        self.say(f"    run process {hit[0]} SIGKILLed mid-publish, writing {hit[1].name}")
        self.count("warehouse_mid_publish", "while its new file was written")

    def do_refresh(self, env: str) -> None:
        """The daily refresh: `daily_refresh` evaluated now, its runs launched through the
        instance's queue (as the daemon would at 02:00 UTC)."""
        self.say(f"    daily refresh of {env}: {launch_refresh(self.dep(env))}")

    def do_outage(self, env: str, hours: float, new: int) -> list[Step]:
        """Every receiver of `env` down while the clock runs `hours` (past the service's 72 h
        of redelivery) and `new` records link: their callbacks are dropped."""
        dep = self.dep(env)
        for i in range(len(dep.ports)):
            if dep.kill_receiver(i):
                self.count("receiver", "killed (outage)")
        before = set(self.records)
        self.do_create(env, new)
        self.lost |= set(self.records) - before
        self.do_advance(hours)
        return [Step(1.0, "restart_receiver", {"env": env, "i": i})
                for i in range(len(dep.ports))]

    # -- the production lake's store misbehaving -----------------------------------------------
    def do_s3_faults(self, rules: list[dict], for_s: float) -> None:
        """Rules for the proxy between production's processes and its store, for `for_s`;
        the hold rules of the steps that wait are kept."""
        proxy = self.world.s3_faults
        with self.lock:
            kept = [r for r in proxy.rules if r.kind == "hold"]
            until = time.monotonic() + for_s
            self.s3_windows = [(u, r) for u, r in getattr(self, "s3_windows", [])
                               if u > time.monotonic()] + [(until, r) for r in rules]
            proxy.set_rules([*kept, *({**r, "for_s": u - time.monotonic()}
                                      for u, r in self.s3_windows)])

    def held_sender(self, env: str, timeout_s: float, key: str,
                    kinds: tuple[str, ...] = ("run", "worker")) -> tuple | None:
        """Hold the next commit to production's store whose key matches `key` and find the
        deployment's process that sent it: (held request, pid, its kind) or None. A commit
        held from another kind of process is let through, and the next one held."""
        proxy, dep = self.world.s3_faults, self.dep(env)
        port = int(proxy.endpoint.rsplit(":", 1)[1])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            rule = proxy.add_rule({"kind": "hold", "op": "PUT", "key": key, "count": 1})
            try:
                held = proxy.wait_held(max(0.1, deadline - time.monotonic()))
            finally:
                proxy.remove_rule(rule)
            if held is None:
                return None
            procs = {p.pid: p.kind for p in dep.processes()}
            sender = sending_from(list(procs), held.client_port, port)
            if sender and procs[sender[0]] in kinds:
                return held, sender[0], procs[sender[0]]
            proxy.release(held, forward=True)
        return None

    # -- Postgres stopped hard ---------------------------------------------------------------
    def do_restart_postgres(self, during: str, down_s: float, timeout_s: float = 90) -> None:
        """Stop production's Postgres at once (`pg_ctl -m immediate`) and start it again after
        `down_s`: `during` the day's callbacks (now), while a run records its landings (its
        `landings` commit held at the store until Postgres is down: the run goes on to the
        inbox and Dagster's event log with the database gone), or while the sensor has
        callbacks to read (unread events in the inbox)."""
        from resources.inbox import open_inbox

        dep = self.dep("production")
        held = None
        if during == "landings":
            found = self.held_sender("production", timeout_s,
                                     r"^production/landings/_delta_log/\d+\.json$")
            if found is None:
                self.count("postgres_restart", "missed: no landings commit in time")
                return
            held = found[0]
        elif during == "sensor":
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    with dep.instance() as instance:
                        cursor = int(checks.sensor_cursor(instance))
                    with open_inbox(dep.inbox) as inbox:
                        if inbox.after(cursor, 1):
                            break
                except Exception:  # Postgres down: another restart of it under way
                    pass
                if time.monotonic() > deadline:
                    self.count("postgres_restart", "missed: nothing for the sensor in time")
                    return
                time.sleep(0.2)
        with self.postgres_lock:  # one restart at a time
            self.world.stop_postgres()
            if held is not None:
                self.world.s3_faults.release(held, forward=True)
            self.say(f"    postgres stopped (immediate) {during}; up again in {down_s} s")
            time.sleep(down_s)
            self.world.start_postgres()
        self.postgres_restarts.append(during)
        self.count("postgres_restart", f"while {during}")
        time.sleep(5)
        self.supervise("production")

    def supervise(self, env: str) -> None:
        """What a process supervisor does (systemd, Kubernetes): a daemon or receiver that
        exited is started again."""
        dep = self.dep(env)
        if dep.daemon is not None and dep.daemon.poll() is not None:
            self.say(f"    {env}'s daemon exited ({dep.daemon.returncode}): started again")
            dep.start_daemon()
            self.restarts += 1
            self.note("exited", "daemon")
        for i, server in enumerate(dep.receivers):
            if server is not None and server.proc.poll() is not None:
                self.say(f"    {env}'s receiver {i} exited: started again")
                dep.start_receiver(i)
                self.restarts += 1
                self.note("exited", "receiver")

    # -- erasures ----------------------------------------------------------------------------
    def do_forget(self, env: str, wait_s: float = 60) -> None:
        """A customer asks to be forgotten: each of their records removed at the service
        (USER_DISCONNECT), then, once the inbox has heard (or after `wait_s`: it is still told
        to, `--even-connected`), `ledgerlake forget --customer`, while runs land."""
        from resources.inbox import CONNECTED, open_inbox

        dep = self.dep(env)
        with self.lock:
            choices = self.connected(env)
            if not choices:
                self.count("erasure", "missed: no connected record")
                return
            customer = self.records[self.rng.choice(choices)].customer
            records = sorted(r for r, rec in self.records.items()
                             if rec.customer == customer and rec.env == env
                             and rec.state != "erased")
            for record in records:
                rec = self.records[record]
                if rec.state in ("connected", "reauth"):
                    self.api(env).post("record/remove", json={"record": record})
                rec.state, rec.erased_by, rec.since = "erased", "forget", None
        self.say(f"    forgetting customer {customer} of {env}: {', '.join(records)}")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                with open_inbox(dep.inbox) as inbox:
                    if not any(inbox.status(r) == CONNECTED for r in records):
                        break
            except Exception:  # the inbox's database restarting
                pass
            time.sleep(1)
        for attempt in range(5):  # a pass that failed or was stopped is finished by the next
            try:
                out = dep.cli("forget", "--customer", customer, "--reason", "chaos",
                              "--even-connected", timeout_s=900)
            except subprocess.TimeoutExpired:
                self.say(f"    forget {customer} still running after 900 s: stopped, again")
                continue
            if out.returncode == 0:
                break
            said = [x for x in out.stderr.strip().splitlines() if x.strip(" ^~")]
            self.say(f"    forget {customer} failed (try {attempt + 1}): {said[-3:]}")
            if "Traceback" in out.stderr:  # a clear error is owed, never a crash
                self.seen.append(f"{dep.name}: forget {customer} crashed: {said[-3:]}")
            time.sleep(5)
        else:
            raise AssertionError(f"forget {customer} did not finish in 5 tries")
        with self.lock:
            for record in records:
                self.records[record].since = time.time()
        self.say(f"    {out.stdout.strip()}")
        self.count("erasure", "forget --customer")

    # -- settling -------------------------------------------------------------------------
    def settle(self, last_fault: float) -> dict:
        """Faults off, everything up, every delivery made, lost callbacks replayed, the daily
        refresh run; until each deployment is quiet. Seconds from the last fault."""
        self.say("settling")
        self.rules = []
        self.post_rules()
        self.world.s3_faults.clear()
        if self.world.postgres_down:
            self.world.start_postgres()
        for env in ENVS:
            dep = self.dep(env)
            for i, server in enumerate(dep.receivers):
                if server is None or server.proc.poll() is not None:
                    dep.start_receiver(i)
                    self.restarts += 1
            if dep.daemon is None or dep.daemon.poll() is not None:
                dep.start_daemon()
                self.restarts += 1
        deadline = time.monotonic() + self.settle_bound_s
        self.deliver(deadline)
        both(self.replay)
        self.deliver(deadline)
        self.unheard_moves()
        both(lambda env: self.wait_quiet(env, deadline))
        refresh_at = time.time()
        both(self.do_refresh)
        both(lambda env: self.wait_quiet(env, deadline))
        settled = time.monotonic()
        self.say(f"settled {settled - last_fault:.0f} s after the last fault")
        return {"settle_s": round(settled - last_fault, 1), "refresh_at": refresh_at}

    def deliver(self, deadline: float) -> None:
        """Until the sandbox has no delivery pending: while some are due it is sending them,
        and the harness waits; when every one left waits for its next try, the clock moves an
        hour (the service tries each hourly, for 72 hours). A clock moved while deliveries
        were still going out (an hour each 3 s, 12 at most) raised the day's periodic
        callbacks on top of them, and a busy seed ran out of hours with 26 left."""
        hours = 0
        while pending := self.world.pending_tries():
            assert time.monotonic() < deadline, "deliveries still pending at the time bound"
            if min(pending) > self.sandbox_now():
                assert hours < 73, "deliveries still pending after 73 hours of the sandbox clock"
                self.say(f"    {len(pending)} deliveries wait for their next try: the clock "
                         "moves an hour")
                self.do_advance(1)
                hours += 1
            time.sleep(3)

    def unheard_moves(self) -> None:
        """A disconnect or reauthentication whose callback the service dropped, every one of
        its 72 hourly tries meeting receivers that were down or answering 5xx (the clock runs an
        hour in seconds here, so an outage or a Postgres restart can outlast the window), never
        reached ledgerlake: it still holds the record as connected, and keeps its rows. Such
        records are expected as they were when last heard of, and counted. A try that was
        answered 4xx is ledgerlake refusing the event, which stays a problem."""
        moves = [d for d in self.world.delivery_log() if d[2] in ("USER_DISCONNECT", "USER_REAUTH")]
        told = {(env, record) for env, record, _m, state, _tries in moves
                if state == "acknowledged"}  # a replay's, say
        dropped = {(env, record) for env, record, _m, state, tries in moves
                   if state == "dropped" and (env, record) not in told
                   and all(t.get("error") or t.get("status", 0) >= 500 for t in tries)}
        with self.lock:
            for record, rec in self.records.items():
                if (rec.env, record) in dropped and rec.erased_by != "forget" \
                        and rec.state in ("disconnected", "reauth", "erased"):
                    self.say(f"    {record}: its {rec.state} event was dropped by the "
                             "service; ledgerlake never heard of it")
                    rec.state, rec.erased_by = "unheard", None
                    self.unheard.add(record)

    def sandbox_now(self) -> float:
        """The sandbox clock, in seconds (it is frozen: it moves when the harness moves it)."""
        now = self.api("sandbox").post("sandbox/clock/advance", json={"seconds": 0}
                                       ).json()["data"]["now"]
        return dt.datetime.fromisoformat(now.replace("Z", "+00:00")).timestamp()

    def replay(self, env: str) -> None:
        """`ledgerlake replay`: records heard from but missing a product, at once; and the
        records linked while nothing was heard, by name (as an application knows them from
        the connect page's onSuccess)."""
        dep = self.dep(env)
        out = dep.cli("replay", "--after-minutes", "0")
        self.say(f"    replay {env}: {out.stdout.strip().splitlines()[-1:] or out.stderr}")
        assert out.returncode == 0, out.stderr
        lost = sorted(r for r in self.lost if self.records[r].env == env)
        if lost:
            out = dep.cli("replay", "--records", ",".join(lost))
            self.say(f"    replay {env} --records: {out.stdout.strip().splitlines()[-1:]}")
            assert out.returncode == 0, out.stderr

    def wait_quiet(self, env: str, deadline: float) -> None:
        """Until the deployment has read its whole inbox, no run is queued or in progress and
        the warehouse was built after the last product landed, twice in a row 5 s apart."""
        dep, calm = self.dep(env), 0
        while calm < 2:
            state = checks.quiet(dep)
            calm = calm + 1 if state is True else 0
            if calm < 2:
                assert time.monotonic() < deadline, f"{env} did not settle: {state}"
                time.sleep(5)

    def hold_still(self, env: str, deadline: float) -> None:
        """Before the final checks: the deployment's daemon stopped, so that no sensor or
        schedule starts anything while they read (the real `daily_refresh` fired at 02:00 UTC
        during a seed's checks, which then read its commits and its warehouse build half
        done), and quiet without it. A run the daemon queued just before it stopped would
        never start: the daemon runs it, and it is stopped again."""
        dep = self.dep(env)
        for _ in range(3):
            dep.kill_daemon()
            if (state := self.still(dep)) is True:
                return
            self.say(f"    {env} not still without its daemon ({state}): it runs again")
            dep.start_daemon()
            self.wait_quiet(env, deadline)
        raise AssertionError(f"{env} did not hold still: {state}")

    def still(self, dep) -> bool | str:
        """Quiet without the daemon, once the runs under way end by themselves (5 minutes at
        most: a run process that died needs the daemon's monitoring to be marked failed); what
        it is still doing otherwise."""
        until = time.monotonic() + 300
        while (state := checks.quiet(dep, daemon=False)) is not True:
            if ("queued or in progress" not in state or self.queued(dep)
                    or time.monotonic() > until):
                return state
            time.sleep(2)
        return True

    @staticmethod
    def queued(dep) -> bool:
        """Whether a run of the deployment waits for a daemon to dequeue it."""
        from dagster import DagsterRunStatus, RunsFilter

        with dep.instance() as instance:
            return bool(instance.get_run_records(
                RunsFilter(statuses=[DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED])))

    # -- the report -----------------------------------------------------------------------
    def report(self, found: dict, settled: dict, wall_s: float) -> dict:
        injected = found.pop("injected", {})
        return {
            "seed": self.seed,
            "passed": not found["problems"],
            "records": {env: sum(1 for r in self.records.values() if r.env == env)
                        for env in ENVS},
            "faults": {**{k: v for k, v in injected.items() if v}, **self.kills,
                       **{f"s3 {k}": v for k, v in found["s3_faults"].items()}},
            "kills_landed": self.landed,
            "restarts": self.restarts,
            **found,
            "settle_s": settled["settle_s"],
            "window_s": self.window_s,
            "wall_s": round(wall_s, 1),
            "commit": commit(),
        }


def both(work) -> None:
    """`work(env)` for each environment at once (each waits on its own processes); the
    first error is raised."""
    errors: list[BaseException] = []

    def one(env: str) -> None:
        try:
            work(env)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(env,)) for env in ENVS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def launch_refresh(dep: Deployment) -> str:
    """The daily refresh of a deployment, now: `refresh_here` in a process with its settings."""
    done = subprocess.run([sys.executable, __file__, "--refresh-here"], cwd=dep.home,
                          env=dep.env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return next(line for line in done.stdout.splitlines() if line.startswith("queued "))


def refresh_here() -> int:
    """What the daemon does at 02:00 UTC, now: evaluate `daily_refresh` against this
    deployment's instance and inbox (from the environment) and queue each run it asks for, as
    `dagster job launch` does but with one workspace for all of them (Dagster's CLI helpers);
    the daemon dequeues and launches them like any run. Prints how many."""
    from dagster import DagsterInstance, SkipReason, build_schedule_context
    from dagster._cli.job import _create_run
    from dagster._cli.workspace.cli_target import (
        get_code_location_from_workspace,
        get_remote_job_from_remote_repo,
        get_remote_repository_from_code_location,
        get_workspace_from_cli_opts,
    )
    from dagster.version import __version__
    from dagster_shared.cli import WorkspaceOpts

    from pipeline.schedules import daily_refresh
    from resources.inbox.resource import InboxResource

    with DagsterInstance.get() as instance:
        with build_schedule_context(  # entered: it opens an instance its exit closes
                instance=instance, scheduled_execution_time=dt.datetime.now(dt.UTC),
                resources={"inbox": InboxResource()}) as context:
            requests = daily_refresh(context)
        if isinstance(requests, SkipReason):
            requests = []
        opts = WorkspaceOpts(workspace=[str(ROOT / "workspace.yaml")])
        with get_workspace_from_cli_opts(instance, __version__, opts) as workspace:
            location = get_code_location_from_workspace(workspace, None)
            repo = get_remote_repository_from_code_location(location, None)
            job = get_remote_job_from_remote_repo(repo, "refresh_job")
            for request in requests:
                # the request's run config carries its batch of records
                run = _create_run(instance=instance, code_location=location, remote_repo=repo,
                                  remote_job=job, run_config=request.run_config,
                                  op_selection=None, run_id=None,
                                  tags={**request.tags, "ledgerlake/chaos": "daily_refresh"})
                instance.submit_run(run.run_id, workspace)
    print(f"queued {len(requests)} run(s)", flush=True)
    return 0


def summary(results: list[dict], command: str) -> dict:
    """Every seed's figures and their totals."""
    total: dict = {"faults": {}, "restarts": 0, "events_received": 0, "deliveries": 0,
                   "redelivered": 0, "records_checked": 0, "mismatches": 0,
                   "s3_faults": 0, "s3_requests": 0, "postgres_restarts": 0,
                   "customers_forgotten": 0, "records_erased": 0,
                   "lake_files_schema_checked": 0, "reader_queries": 0,
                   "reader_answers": 0, "reader_errors": {}, "reader_accounts_compared": 0,
                   "reader_seconds": {}}
    for r in results:
        for k, v in r["faults"].items():
            total["faults"][k] = total["faults"].get(k, 0) + v
        total["restarts"] += r["restarts"]
        total["s3_faults"] += sum(r.get("s3_faults", {}).values())
        total["s3_requests"] += sum(r.get("s3_requests", {}).values())
        total["postgres_restarts"] += r.get("postgres_restarts", 0)
        erasures = r.get("erasures", {})
        for k in ("customers_forgotten", "records_erased", "lake_files_schema_checked"):
            total[k] += erasures.get(k, 0)
        readers = r.get("readers", {})
        total["reader_queries"] += sum(readers.get("asked", {}).values())
        total["reader_answers"] += sum(readers.get("answered", {}).values())
        total["reader_accounts_compared"] += readers.get("accounts_compared", 0)
        for k, v in readers.get("errors", {}).items():
            total["reader_errors"][k] = total["reader_errors"].get(k, 0) + v
        for q, took in readers.get("seconds", {}).items():
            total["reader_seconds"].setdefault(q, []).append(took)
        total["events_received"] += r["events"]["received"]
        total["deliveries"] += r["events"]["deliveries"]
        total["redelivered"] += r["events"]["redelivered"]
        total["records_checked"] += r["records_checked"]
        total["mismatches"] += r["mismatches"]
    # each seed's median and slowest answer, by question: the median of the seeds' medians
    total["reader_seconds"] = {
        q: {"median": sorted(t["median"] for t in took)[len(took) // 2],
            "max": max(t["max"] for t in took)}
        for q, took in sorted(total["reader_seconds"].items())}
    settle = [r["settle_s"] for r in results if r["settle_s"] is not None] or [0.0]
    return {"what": "Exactly once under faults: the lake against the sandbox's ground truth "
                    "(tests/chaos/run.py)",
            "command": command, "seeds": [r["seed"] for r in results],
            "passed": all(r["passed"] for r in results), "totals": total,
            "settle_s": {"min": min(settle), "median": sorted(settle)[len(settle) // 2],
                         "max": max(settle)},
            "wall_s": round(sum(r["wall_s"] for r in results), 1),
            "measured_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": _commits(results) or commit(),
            "changed_since": changed_since(results), "machine": machine(), "runs": results}


# what a seed's outcome depends on: a merged seed counts for the code as it stands only if
# none of these changed between the commit it ran at and HEAD
RAN = ["pipeline", "assets", "resources", "sandbox", "pyproject.toml", "uv.lock",
       "dagster.yaml", "deploy/dagster.yaml", "workspace.yaml",
       "tests/chaos/run.py", "tests/chaos/world.py", "tests/chaos/checks.py",
       "tests/chaos/readers.py",
       "tests/s3_faults.py"]


def changed_since(results: list[dict]) -> list[str]:
    """The files of RAN that differ between any seed's commit and HEAD (empty: the seeds are
    of the code as it stands)."""
    changed: set[str] = set()
    for at in {r["commit"].split()[0] for r in results if r.get("commit")}:
        diff = subprocess.run(["git", "-C", str(ROOT), "diff", "--name-only", at, "HEAD", "--",
                               *RAN], capture_output=True, text=True)
        changed |= set(diff.stdout.split()) if diff.returncode == 0 else {f"unknown ({at})"}
    return sorted(changed)


def _commits(results: list[dict]) -> str:
    """The commit the seeds ran at, or each seed's where they differ (merged runs)."""
    at = {r["seed"]: r["commit"] for r in results if r.get("commit")}
    if len(set(at.values())) <= 1:
        return next(iter(at.values()), "")
    return ", ".join(f"seed {s} at {c}" for s, c in sorted(at.items()))


def merged(files: list[Path]) -> tuple[list[dict], str]:
    """The seeds of earlier runs' results files (`--seed N --out F`, one call each, so a long
    `make chaos` can be run in parts) and their commands."""
    runs: dict[int, dict] = {}
    commands = []
    for f in files:
        out = json.loads(f.read_text())
        commands.append(out["command"])
        for r in out["runs"]:
            if r["seed"] in runs:
                raise SystemExit(f"seed {r['seed']} is in more than one of the files merged")
            runs[r["seed"]] = r
    return [runs[s] for s in sorted(runs)], "; ".join(dict.fromkeys(commands))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="run this seed alone (replays its schedule)")
    ap.add_argument("--seeds", type=int, default=1, help="run seeds 1..N (default 1)")
    ap.add_argument("--records", type=int, default=36,
                    help="records across both environments (a third in production)")
    ap.add_argument("--window", type=float, default=90.0,
                    help="seconds over which the schedule's faults happen")
    ap.add_argument("--settle", type=float, default=3600.0,
                    help="the time bound for settling after the last fault, in seconds (a "
                         "bound for a stuck deployment, not a target: a full seed settles in "
                         "~1,260 s on a quiet machine, and later on a busy one)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--docs", action="store_true",
                    help="also write the figures into docs/operations.md's table")
    ap.add_argument("--work", type=Path, help="where the runs' files go (kept)")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="RESULTS",
                    help="run nothing: write --out (and --docs) from the seeds of earlier "
                         "runs' results files")
    ap.add_argument("--refresh-here", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.refresh_here:  # a child: the daily refresh of the deployment in its environment
        return refresh_here()
    # stopped from outside (a session's end, `kill`): the world's processes closed on the way
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.merge:
        return publish(*merged(args.merge), args.out, args.docs)
    seeds = [args.seed] if args.seed is not None else list(range(1, args.seeds + 1))
    command = "tests/chaos/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results = []
    for seed in seeds:
        work = (args.work or Path(tempfile.mkdtemp(prefix="ledgerlake-chaos-"))) / f"seed-{seed}"
        work.mkdir(parents=True, exist_ok=True)
        chaos = Chaos(seed, work, args.window, args.records, args.settle)
        try:
            result = chaos.run()
        except Exception as exc:
            chaos.say(f"seed {seed} failed: {type(exc).__name__}: {exc}")
            result = {"seed": seed, "passed": False, "error": f"{type(exc).__name__}: {exc}",
                      "faults": {}, "restarts": 0, "records_checked": 0, "mismatches": 0,
                      "events": {"received": 0, "deliveries": 0, "redelivered": 0},
                      "settle_s": 0.0, "wall_s": 0.0, "problems": [str(exc)]}
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "problems"}, indent=1),
              flush=True)
        for line in result.get("problems", [])[:40]:
            print(f"PROBLEM seed {seed}: {line}", flush=True)
        if result["passed"] and args.work is None:
            tidy(work.parent)
        elif not result["passed"]:
            print(f"seed {seed}: its files are kept in {work}", flush=True)
    return publish(results, command, args.out, args.docs)


def publish(results: list[dict], command: str, path: Path, docs: bool) -> int:
    """The seeds' summary into `path` (and docs/operations.md's table): 0 if all passed."""
    out = summary(results, command)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    if docs:
        write_marked(DOCS, "chaos", checks.table(out))
    print(f"{'passed' if out['passed'] else 'FAILED'}: {len(results)} seed(s), "
          f"{out['totals']['mismatches']} mismatches; {path}", flush=True)
    if out["changed_since"]:
        print("note: changed since the seeds ran: " + ", ".join(out["changed_since"]), flush=True)
    return 0 if out["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
