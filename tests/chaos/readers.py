"""Analysts asking the warehouse's views questions while the chaos suite runs (tests/chaos/run.py).

One reader per deployment, from the first fault to the end of the settling, each question a
`ledgerlake sql` process with the deployment's settings (an S3 lake through the fault proxy),
as an analyst runs it. In turn:

- `lake`: over every record, each account's posted lines against `daily_balances`: the sum of
  the amounts posted after the account's first day with lines, through its last, equals the
  end-of-day balance of the last day less that of the first (one query, one snapshot);
- `record`: the same, for one record;
- `landings`: each run's landing of a product, with the records it names (one commit of the
  `landings` table: the final checks compare each answer with the lake's settled table, so a
  batch seen in part is caught);
- `as_of`: `lake` again, `--as-of` a moment of the run so far (time travel);
- `erased`: a forgotten record's rows in every view that names records, once its erasure has
  finished: none.

An error is counted by its kind (`classify`). The documented ones (docs/operations.md,
"Readers while the pipeline writes") are retried, as an analyst would, or are refusals
`--as-of` owes; any other is a problem. How long each answer took is a figure, not a check:
a question runs as long as it needs, and only one with no answer in `HUNG_S` is a problem.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import shutil
import statistics
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

QUESTIONS = ("lake", "landings", "record", "as_of", "erased")
# a question with no answer in this long is hung: a problem. Not a speed limit: at a load of
# 50 on 2 cores (three seeds at once) an `--as-of` question, which reads every table's log and
# files from the store (moto, a Python server, behind the fault proxy), took over 300 s
HUNG_S = 1800
# the views that name records, where an erased record must have no row (the audits of
# erasures and reveals name it by design)
NAMING = ("accounts", "balance_history", "balances", "checks", "daily_balances", "identity",
          "income_streams", "income_summary", "landings", "monthly_cashflow", "payments",
          "records", "transactions")

# the errors a question may meet, as `ledgerlake sql` words them: (kind, retried, words)
DOCUMENTED = (
    # the views name the files of the snapshot they were built over: an erasure's purge, a
    # compaction's or vacuum's removal since, under a query of an older build
    ("file removed under the query", True,
     ("No such file", "No files found", "NoSuchKey", "Path does not exist", "HTTP 404",
      "File not found", "FileNotFoundError")),
    # the store failing past the client's own retries (S3 faults), or its access check
    ("store failed", True,
     ("AWS Error", "curlCode", "did not answer", "Generic S3 error", "S3 error",
      "Connection reset", "connection error", "Timeout")),
    # before the deployment's first warehouse build
    ("no warehouse yet", True, ("no warehouse at",)),
    # --as-of before an erasure: its history is cut, by design
    ("as-of refused: history cut by an erasure", False, ("its history before",)),
    ("as-of refused: files vacuumed", False, ("removed by the lake's vacuum",)),
    ("as-of refused: before the table", False, ("has no version", "does not exist, so")),
)


def classify(stderr: str) -> tuple[str, bool]:
    """The kind of a failed question's error and whether it is retried."""
    for kind, retried, words in DOCUMENTED:
        if any(w in stderr for w in words):
            return kind, retried
    return "undocumented", False


def movement(timezone: str, record: str | None = None) -> str:
    """Each account's posted lines against daily_balances, in one query: how many accounts
    were compared, and those whose lines' sum differs from the balances' movement."""
    only = f"and record_id = '{record}'" if record else ""
    return f"""
with lines as (
    select record_id, account_id, timezone('{timezone}', cleared_date)::date as date, amount
    from transactions
    where not pending {only}
),
spans as (
    select record_id, account_id, min(date) as first_day, max(date) as last_day
    from lines group by all
),
moved as (
    select s.record_id, s.account_id, s.first_day, s.last_day,
           coalesce(sum(l.amount) filter (where l.date > s.first_day), 0) as lines_sum
    from spans s join lines l using (record_id, account_id)
    group by all
),
ends as (
    select m.*, f.balance as first_balance, t.balance as last_balance
    from moved m
    left join daily_balances f on f.record_id = m.record_id and f.account_id = m.account_id
         and f.date = m.first_day
    left join daily_balances t on t.record_id = m.record_id and t.account_id = m.account_id
         and t.date = m.last_day
)
select count(*) as accounts,
       count(*) filter (where first_balance is null or last_balance is null
                        or lines_sum <> last_balance - first_balance) as mismatched,
       coalesce(list(struct_pack(record_id, account_id, first_day, last_day, lines_sum,
                                 movement := last_balance - first_balance))
                filter (where first_balance is null or last_balance is null
                        or lines_sum <> last_balance - first_balance), []) as which
from ends"""


LANDINGS = ("select run_id, product, landed_at::varchar as landed_at, "
            "string_agg(record_id, ',' order by record_id) as records "
            "from landings group by all")


def erased_rows(record: str) -> str:
    counts = ", ".join(f"(select count(*) from {v} where record_id = '{record}') as {v}"
                       for v in NAMING)
    return f"select {counts}"


def in_flux(record: str, answer: Answer, erased: dict[str, tuple[str, float | None]]
            ) -> bool:
    """Whether `record` was being erased when `answer` was asked: forgotten, its erasure
    not known finished before the question began."""
    if record not in erased:
        return False
    finished = erased[record][1]
    return finished is None or finished >= answer.started


@dataclass
class Answer:
    env: str
    question: str
    started: float  # wall time
    rows: list[dict] | None = None  # None: failed
    error: str | None = None
    kind: str | None = None  # of the error
    record: str | None = None
    as_of: str | None = None
    seconds: float | None = None  # how long it took, answered or not


@dataclass
class Readers:
    deployments: dict  # env -> tests.chaos.world.Deployment
    erased: Callable[[], dict[str, tuple[str, float | None]]]  # record: (env, finished)
    say: Callable[[str], None]
    rng: random.Random
    pause_s: float = 5.0
    answers: list[Answer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stopping = threading.Event()
        self.started_at = time.time()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, args=(env,), daemon=True,
                                         name=f"reader-{env}") for env in self.deployments]

    def start(self) -> None:
        self.started_at = time.time()
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            if thread.is_alive():
                thread.join(timeout=HUNG_S + 60)

    def _loop(self, env: str) -> None:
        turn = 0
        while not self.stopping.is_set():
            question = QUESTIONS[turn % len(QUESTIONS)]
            turn += 1
            try:
                self.ask(env, question)
            except subprocess.TimeoutExpired as exc:
                self._keep(Answer(env, question, time.time() - exc.timeout,
                                  error=f"no answer in {exc.timeout:.0f} s",
                                  kind="hung", seconds=exc.timeout))
            except Exception as exc:  # a reader's own failure is a finding, not a crash
                self._keep(Answer(env, question, time.time(), error=f"reader: {exc}",
                                  kind="undocumented"))
            self.stopping.wait(self.pause_s)

    def _keep(self, answer: Answer) -> None:
        with self.lock:
            self.answers.append(answer)

    def ask(self, env: str, question: str) -> None:
        dep = self.deployments[env]
        zone = dep.settings.get("LEDGERLAKE_TIMEZONE", "Africa/Lagos")
        args: list[str] = []
        record = as_of = None
        if question in ("lake", "as_of"):
            query = movement(zone)
            if question == "as_of":
                with self.lock:
                    rng_at = self.rng.uniform(self.started_at, time.time())
                as_of = dt.datetime.fromtimestamp(rng_at, dt.UTC).isoformat()
                args = ["--as-of", as_of]
        elif question == "landings":
            query = LANDINGS
        elif question == "record":
            record = self._some_record(dep)
            if record is None:
                return
            query = movement(zone, record)
        else:
            mine = sorted(r for r, (e, at) in self.erased().items() if e == env and at)
            if not mine:
                return
            with self.lock:
                record = self.rng.choice(mine)
            query = erased_rows(record)
        for _ in range(3):
            started = time.time()
            # a copy of the published file (one build, at rest): kept when its answer is wrong
            copy = self._copy(dep) if not args else None
            where = ["--warehouse", str(copy)] if copy else []
            out = dep.cli("sql", query, "--format", "json", *args, *where, timeout_s=HUNG_S)
            took = time.time() - started
            if out.returncode == 0:
                rows = json.loads(out.stdout or "[]", parse_float=Decimal)
                if copy and question in ("lake", "record") and rows and \
                        int(rows[0]["mismatched"]):
                    copy = copy.rename(copy.with_name(f"disagreed-{copy.name}"))
                    self.say(f"    reader of {env} ({question}) disagreed: kept {copy}")
                elif copy:
                    copy.unlink(missing_ok=True)
                self._keep(Answer(env, question, started, rows=rows, record=record,
                                  as_of=as_of, seconds=took))
                return
            if copy:
                copy.unlink(missing_ok=True)
            error = (out.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
            kind, retried = classify(out.stderr)
            self._keep(Answer(env, question, started, error=error[:500], kind=kind,
                              record=record, as_of=as_of, seconds=took))
            if kind == "undocumented":
                self.say(f"    reader of {env} ({question}): {error[:300]}")
            if not retried or self.stopping.wait(2):
                return

    def _copy(self, dep) -> Path | None:
        """A copy of the deployment's published warehouse, None before the first build."""
        copy = dep.home / f"reader-{uuid.uuid4().hex[:8]}.duckdb"
        try:
            shutil.copyfile(dep.warehouse, copy)
        except FileNotFoundError:
            return None
        return copy

    def _some_record(self, dep) -> str | None:
        out = dep.cli("sql", "select distinct record_id from transactions order by 1",
                      "--format", "json", timeout_s=HUNG_S)
        if out.returncode != 0:
            return None
        ids = [r["record_id"] for r in json.loads(out.stdout or "[]")]
        with self.lock:
            return self.rng.choice(ids) if ids else None

    # -- after the settling -------------------------------------------------------------------
    def check(self, final_landings: dict[str, dict[tuple, set[str]]],
              erased: dict[str, tuple[str, float | None]]) -> tuple[list[str], dict]:
        """Problems in the answers, and the figures: questions asked and answered, errors by
        kind. `final_landings[env][(run_id, product, landed_at)]`: the records of each
        landing in the settled lake."""
        problems: list[str] = []
        asked: Counter[str] = Counter()
        answered: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        examples: dict[str, str] = {}
        compared = 0
        gone = set(erased)
        for a in self.answers:
            asked[a.question] += 1
            if a.rows is None:
                errors[a.kind] += 1
                examples.setdefault(a.kind, a.error[:300])
                if a.kind in ("undocumented", "hung"):
                    problems.append(f"{a.env}: a reader's {a.question} question failed: "
                                    f"{a.error}")
                continue
            answered[a.question] += 1
            if a.question in ("lake", "record", "as_of"):
                row = a.rows[0] if a.rows else {"accounts": 0, "mismatched": 0, "which": []}
                compared += int(row["accounts"])
                # a record whose erasure had not finished is erased table by table, and a
                # build meanwhile derives it no more: in flux, by design (docs/operations.md)
                which = [w for w in row["which"] if not in_flux(w["record_id"], a, erased)]
                if which:
                    problems.append(
                        f"{a.env}: a reader ({a.question}{' ' + a.record if a.record else ''}"
                        f"{' as of ' + a.as_of if a.as_of else ''}) saw transactions and "
                        f"daily_balances disagree on {len(which)} account(s): "
                        f"{str(which)[:400]}")
            elif a.question == "landings":
                final = final_landings.get(a.env, {})
                for row in a.rows:
                    key = (row["run_id"], row["product"], row["landed_at"])
                    seen = set(row["records"].split(",")) - gone
                    whole = final.get(key, set()) - gone
                    if seen != whole:
                        problems.append(
                            f"{a.env}: a reader saw run {key[0]}'s landing of {key[1]} at "
                            f"{key[2]} with {len(seen)} of its {len(whole)} records")
            elif a.question == "erased":
                finished = erased.get(a.record, (a.env, None))[1]
                if finished is not None and finished < a.started:
                    held = {k: v for k, v in a.rows[0].items() if v}
                    if held:
                        problems.append(f"{a.env}: erased record {a.record} still read "
                                        f"after its erasure: {held}")
        return problems, {"asked": dict(asked), "answered": dict(answered),
                          "errors": dict(errors), "error_examples": examples,
                          "accounts_compared": compared, "seconds": self.seconds()}

    def seconds(self) -> dict[str, dict[str, float]]:
        """How long the questions took, by question: median and slowest (answered or not)."""
        took: dict[str, list[float]] = {}
        for a in self.answers:
            if a.seconds is not None:
                took.setdefault(a.question, []).append(a.seconds)
        return {q: {"median": round(statistics.median(t), 1), "max": round(max(t), 1)}
                for q, t in sorted(took.items())}
