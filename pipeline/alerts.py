"""Alerts: what fails unattended reaches an operator as a message, before an analyst notices.

One sensor, `alerts` (every 30 s), judges each incident (failed:<product>, held:<product>,
run:<job>, stale:<product>, quiet, behind, dead_letters, receiver, inbox) from the inbox and
the Dagster instance, and posts to LEDGERLAKE_ALERT_URL when one opens and when it clears
(Slack's `{"text": ...}`, or LEDGERLAKE_ALERT_FORMAT=json), at most
LEDGERLAKE_ALERT_MAX_PER_HOUR an hour. Its cursor holds the open incidents and the messages
not yet delivered. It starts no run, so nothing here can fail one. Messages name records by
their number (`#12`), never an id. docs/operations.md, "Alerts", says when each incident
opens and clears, what it means and what a message carries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
import orjson
from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from resources.config import Alerting
from resources.inbox import CONNECTED, FAILED, HELD, Inbox, InboxMissing, InboxUnavailable, Vitals
from resources.inbox.resource import InboxResource

from . import watch
from .freshness import CHECKED, MAX_AGE
from .jobs import ingest_job, refresh_job
from .status import PRODUCTS

log = logging.getLogger("ledgerlake.alerts")

INTERVAL_S = 30
LISTED = 5  # record numbers a message lists
DEAD_LETTERS_CALM_S = 3600.0  # dead letters stop growing this long: resolved
KEEP_UNSENT_S = 86400.0  # a message not delivered within a day is dropped (logged)
OUTBOX = 200  # messages kept waiting at most
DELIVERY_TIMEOUT_S = 5.0
PRODUCT_JOBS = {ingest_job.name, refresh_job.name}  # their failures say which records
WILL_RETRY = "dagster/will_retry"  # Dagster's tag on a failed run its run retries restart


@dataclass(frozen=True)
class Incident:
    """Something wrong, as the sensor sees it now: `key` names it across ticks, `title` in a
    few words (the resolved message repeats it), `text` in full, `fields` its counts and
    links (the json format's)."""
    key: str
    title: str
    text: str
    fields: dict = field(default_factory=dict)


def _link(settings: Alerting, run_id: str | None) -> str:
    return f"{settings.dagster_url}/runs/{run_id}" if run_id else settings.dagster_url


def _numbers(db: Inbox, records: list[str], count: int) -> str:
    """The first `records` of `count` as the Dagster UI names them, by number (`#12`; a
    forgotten one `#?`), with `...` when there are more."""
    numbers = db.numbers(records)
    listed = ", ".join(f"#{numbers[r]}" if r in numbers else "#?" for r in records)
    return listed + (", ..." if count > len(records) else "")


def inbox_incidents(db: Inbox, instance: DagsterInstance, settings: Alerting, now: float,
                    state: dict) -> dict[str, Incident]:
    """The incidents the inbox tells (all but `run:`, `receiver` and `inbox`)."""
    vitals = db.vitals(watch.inbox_cursor(instance))
    found = {i.key: i for i in _failing(db, settings, going=watch.running(instance))}
    hours = int(MAX_AGE.total_seconds() // 3600)
    for product in CHECKED:
        expected, stale, first = db.stale(product, now - MAX_AGE.total_seconds(), LISTED)
        if stale:
            found[f"stale:{product}"] = Incident(
                f"stale:{product}", f"{product} stale",
                f"{stale} of {expected} connected records' {product} not landed in {hours} "
                f"hours ({_numbers(db, first, stale)}): the freshness check "
                f"connected_records_fresh fails. Then: `ledgerlake rerun --products {product}` "
                "for them, and see whether the daily refresh ran.",
                {"records": stale, "connected": expected, "product": product})
    connected = vitals.statuses.get(CONNECTED, 0)
    quiet_s = now - vitals.last_received_at if vitals.last_received_at else 0.0
    if connected and quiet_s > settings.quiet_minutes * 60:
        found["quiet"] = Incident(
            "quiet", "callbacks quiet",
            f"No callback stored for {_span(quiet_s)} while {connected} records are "
            "connected. Check the webhook URL and token at the service's dashboard, and the "
            "receiver's log.", {"quiet_seconds": round(quiet_s), "connected": connected})
    if vitals.oldest_waiting_at is not None:
        waited = now - vitals.oldest_waiting_at
        if waited > settings.backlog_minutes * 60:
            found["behind"] = Incident(
                "behind", "the inbox sensor behind",
                f"{_count(vitals.waiting, 'callback')} not yet read by the inbox sensor, the "
                f"oldest stored {_span(waited)} ago. Check that inbox_sensor and the Dagster "
                f"daemon run: {settings.dagster_url}/automation",
                {"callbacks": vitals.waiting, "oldest_seconds": round(waited)})
    if (growing := _dead_letters(vitals, state, now)) is not None:
        found["dead_letters"] = growing
    return found


def _failing(db: Inbox, settings: Alerting, going: list[str]) -> Iterator[Incident]:
    """`failed:` and `held:` of each product, in the runs not `going` (a run still going may
    try again)."""
    for product in PRODUCTS:
        for outcome, title, why in (
                (FAILED, f"{product} failed", "failed after every retry"),
                (HELD, f"{product} held", "held: a blocking check failed, the previous rows "
                                          "stay in view")):
            count, first, run_id = db.failing(product, outcome, not_runs=going, limit=LISTED)
            if count:
                yield Incident(
                    f"{outcome}:{product}", f"{_records(count)} {title}",
                    f"{_records(count)} {product} {why} ({_numbers(db, first, count)}). "
                    f"Run: {_link(settings, run_id)} . Then: `ledgerlake status --failed`, "
                    "`ledgerlake rerun --failed`.",
                    {"records": count, "product": product, "outcome": outcome,
                     "link": _link(settings, run_id)})


def _dead_letters(vitals: Vitals, state: dict, now: float) -> Incident | None:
    """Dead letters that grew within the last DEAD_LETTERS_CALM_S, by `state`'s count."""
    seen, grew_at = state.get("dead_letters"), state.get("dead_letters_grew_at")
    if seen is not None and vitals.dead_letters > seen:
        grew_at = now
        state["dead_letters_since"] = state.get("dead_letters_since") or seen
    state["dead_letters"] = vitals.dead_letters
    state["dead_letters_grew_at"] = grew_at
    if grew_at is None or now - grew_at >= DEAD_LETTERS_CALM_S:
        state.pop("dead_letters_since", None)
        return None
    new = vitals.dead_letters - state.get("dead_letters_since", seen or 0)
    return Incident(
        "dead_letters", "dead letters growing",
        f"{_count(new, 'new dead letter')} ({vitals.dead_letters} in all): bodies the receiver "
        "answered 400 and kept, scrubbed, in the inbox's dead_letters table. A sender "
        "posts something that is not a callback, or the service changed its format.",
        {"new": new, "dead_letters": vitals.dead_letters})


def run_incidents(db: Inbox | None, instance: DagsterInstance, settings: Alerting,
                  state: dict) -> None:
    """Move the `run:<job>` incidents in `state["runs"]` by the runs that ended since the
    last look: a failure opens its job's, a success clears it."""
    runs: dict[str, dict] = state.setdefault("runs", {})
    after = state.get("runs_after", time.time() - 3600)
    for record in watch.finished_runs(instance, after):
        run = record.dagster_run
        after = max(after, record.update_timestamp.timestamp())
        if run.status == DagsterRunStatus.SUCCESS:
            runs.pop(run.job_name, None)
            continue
        if run.tags.get(WILL_RETRY) == "true" or run.job_name in runs:
            continue
        if run.job_name in PRODUCT_JOBS and db is not None and db.landings(
                run_id=run.run_id, outcomes=[FAILED, HELD], limit=1):
            continue  # the records it failed or held say it (failed:, held:)
        runs[run.job_name] = {"run": run.run_id, "records": run.tags.get("ledgerlake/records")}
    state["runs_after"] = after


def _span(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 1:
        return "under a minute"
    return f"{minutes} minute{'s' * (minutes > 1)}" if minutes < 120 else \
        f"{minutes / 60:.1f} hours"


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def _records(count: int) -> str:
    return f"{count} record's" if count == 1 else f"{count} records'"


def judge(instance: DagsterInstance, inbox: InboxResource, settings: Alerting,
          state: dict, now: float) -> dict[str, Incident]:
    """Every incident open now. `state` carries what a judgement needs from the last one
    (updated here): the dead letters seen, the runs read, the incidents open."""
    found: dict[str, Incident] = {}
    db = None
    try:
        db = inbox.open()
    except (InboxMissing, InboxUnavailable) as exc:
        found["inbox"] = Incident("inbox", "inbox unreadable",
                                  f"The inbox does not answer: {exc}", {})
    try:
        if db is not None:
            found |= inbox_incidents(db, instance, settings, now, state)
        else:  # not seen: the incidents it tells stay as they were
            found |= {k: Incident(k, v["title"], "") for k, v in state.get("open", {}).items()
                      if k.split(":")[0] in (FAILED, HELD, "stale", "quiet", "behind",
                                             "dead_letters")}
        run_incidents(db, instance, settings, state)
    finally:
        if db is not None:
            db.close()
    for job, failed in state.get("runs", {}).items():
        records = f" over {failed['records']} records" if failed.get("records") else ""
        found[f"run:{job}"] = Incident(
            f"run:{job}", f"{job} failing",
            f"A run of {job}{records} failed: {_link(settings, failed['run'])} . It clears "
            f"when a run of {job} succeeds.", {"job": job, "link": _link(settings,
                                                                       failed["run"])})
    if settings.receiver_url and (why := watch.receiver_answers(settings.receiver_url)):
        found["receiver"] = Incident(
            "receiver", "receiver unhealthy",
            f"The receiver's /health fails: {why}. Callbacks are refused (the service "
            "redelivers for 72 hours) or lost: check its process and the inbox's disk or "
            "database.", {"receiver": settings.receiver_url})
    return found


def messages(found: dict[str, Incident], state: dict, now: float) -> list[dict]:
    """The messages the change from `state["open"]` to `found` calls for; `state` moved."""
    was: dict[str, dict] = state.setdefault("open", {})
    out = []
    for key, incident in found.items():
        if key not in was:
            was[key] = {"title": incident.title, "since": now}
            out.append({"key": key, "state": "firing", "at": now,
                        "text": f"ledgerlake alert: {incident.text}", "fields": incident.fields})
    for key in [k for k in was if k not in found]:
        opened = was.pop(key)
        out.append({"key": key, "state": "resolved", "at": now,
                    "text": f"ledgerlake resolved: {opened['title']} (open "
                            f"{_span(now - opened['since'])})", "fields": {}})
    return out


def body(message: dict, fmt: str) -> dict:
    """What is posted: Slack's `{"text"}`, or the text with the incident's fields."""
    if fmt == "slack":
        return {"text": message["text"]}
    return {"text": message["text"], "incident": message["key"],
            "kind": message["key"].split(":")[0], "state": message["state"],
            "at": datetime.fromtimestamp(message["at"], UTC).isoformat(timespec="seconds"),
            **message["fields"]}


def deliver(outbox: list[dict], state: dict, settings: Alerting, now: float,
            client: httpx.Client) -> list[str]:
    """Send what waits, oldest first, within the hour's allowance; what fails stays for the
    next tick. Returns lines for the tick's log."""
    lines = []
    sent = [t for t in state.get("sent", []) if now - t < 3600]
    while outbox:
        message = outbox[0]
        if now - message["at"] > KEEP_UNSENT_S:
            log.error("alert %s (%s) dropped: not delivered for a day", message["key"],
                      message["state"])
            outbox.pop(0)
            continue
        if len(sent) >= settings.max_per_hour:
            lines.append(f"{len(outbox)} alerts wait: {settings.max_per_hour} sent this hour")
            break
        try:
            resp = client.post(settings.url, json=body(message, settings.format),
                               timeout=DELIVERY_TIMEOUT_S)
            failure = None if resp.is_success else f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            failure = type(exc).__name__
        if failure:
            message["tries"] = message.get("tries", 0) + 1
            # the URL holds the webhook's secret: only its host is named
            log.warning("alert %s (%s) not delivered to %s: %s; tried again next tick (%d "
                        "tries)", message["key"], message["state"], settings.url.shown,
                        failure, message["tries"])
            lines.append(f"alert {message['key']} not delivered: {failure}")
            break
        sent.append(now)
        outbox.pop(0)
        lines.append(f"alert {message['key']} ({message['state']}) delivered")
    state["sent"] = sent
    return lines


def evaluate(instance: DagsterInstance, inbox: InboxResource, settings: Alerting,
             cursor: str | None, now: float | None = None,
             client: httpx.Client | None = None) -> tuple[str, list[str]]:
    """One tick: judge, queue the messages, deliver. Returns the new cursor and log lines."""
    now = time.time() if now is None else now
    state = orjson.loads(cursor) if cursor else {}
    found = judge(instance, inbox, settings, state, now)
    outbox: list[dict] = state.get("outbox", [])
    for message in messages(found, state, now):
        if message["state"] == "resolved" and (pending := next(
                (m for m in outbox if m["key"] == message["key"]), None)):
            outbox.remove(pending)  # opened and cleared before anyone heard: neither goes
            continue
        outbox.append(message)
    if len(outbox) > OUTBOX:
        log.error("%d alerts dropped: more than %d waiting", len(outbox) - OUTBOX, OUTBOX)
        outbox = outbox[-OUTBOX:]
    lines = [f"{m['state']}: {m['text']}" for m in outbox if m.get("tries") is None]
    if settings.url is None:
        for line in lines:  # no webhook: the sensor's log is all there is
            log.warning("%s (no LEDGERLAKE_ALERT_URL)", line)
        outbox = []
    else:
        own = client is None
        client = client or httpx.Client()
        try:
            lines += deliver(outbox, state, settings, now, client)
        finally:
            if own:
                client.close()
    state["outbox"] = outbox
    open_now = ", ".join(sorted(state.get("open", {}))) or "none"
    return orjson.dumps(state).decode(), [*lines, f"open incidents: {open_now}"]


def alerts(settings: Alerting) -> SensorDefinition:
    """The `alerts` sensor, posting as `settings` say (read once by pipeline/definitions.py)."""
    @sensor(name="alerts", minimum_interval_seconds=INTERVAL_S,
            default_status=DefaultSensorStatus.RUNNING,
            description="Post a message to LEDGERLAKE_ALERT_URL when an incident opens and "
                        "when it clears (pipeline/alerts.py; docs/operations.md, \"Alerts and "
                        "metrics\")")
    def tick(context: SensorEvaluationContext, inbox: InboxResource):
        """Judge the incidents, tell of those that opened or cleared; starts no run."""
        cursor, lines = evaluate(context.instance, inbox, settings, context.cursor)
        for line in lines:
            context.log.info(line)
        return SensorResult(skip_reason=lines[-1], cursor=cursor)
    return tick
