"""Replay: ask the service to send again the callbacks a record should have had by now.

A record we heard from (AUTH, ACCOUNTS...) but whose expected products have not called back
after a delay most likely lost a callback in an outage longer than the service's redelivery,
or to a receiver that refused it. `/callback/trigger` re-sends a record's webhooks; the inbox
deduplicates what was already stored, so asking too often costs nothing but calls.
"""

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from dagster import Config, OpExecutionContext, ResourceParam, op

from assets.publish import record_label
from resources.client import Client
from resources.inbox import CONNECTED, Inbox
from resources.inbox.resource import InboxResource

TRIGGER_LIMIT = 100  # records per /callback/trigger call (the spec's limit)
EXPECTED = ("ACCOUNTS", "TRANSACTIONS")  # every connection of ours enables these
DEFAULT_AFTER_MINUTES = 60.0
MAX_RECORDS = 5000  # per replay: a backlog larger than this drains over several replays

log = logging.getLogger("ledgerlake.replay")


@dataclass(frozen=True)
class Overdue:
    record: str
    missing: tuple[str, ...]
    waiting_s: float  # since the record's first callback


@dataclass
class Replay:
    overdue: list[Overdue]
    triggered: list[str] = field(default_factory=list)
    calls: int = 0


def overdue(inbox: Inbox, *, after_s: float, expect: Sequence[str] = EXPECTED,
            now: float | None = None, limit: int = MAX_RECORDS) -> list[Overdue]:
    """Connected records heard from over `after_s` ago that still miss an expected product.

    A record replayed less than `after_s` ago is left alone until that replay had its chance.
    """
    now = time.time() if now is None else now
    found = []
    for rec in inbox.records(status=CONNECTED).values():
        if not rec.products:
            continue
        first = min(p.received_at for p in rec.products.values())
        if now - first < after_s:
            continue
        if rec.replayed_at is not None and now - rec.replayed_at < after_s:
            continue
        missing = tuple(m for m in expect
                        if m not in rec.products and f"PERIODIC_{m}" not in rec.products)
        if missing:
            found.append(Overdue(rec.record, missing, now - first))
    found.sort(key=lambda o: -o.waiting_s)  # the longest wait first
    return found[:limit]


def replay(inbox: Inbox, client: Client | None, *, after_s: float,
           expect: Sequence[str] = EXPECTED, dry_run: bool = False, now: float | None = None,
           say: Callable[[str], None] = log.info,
           label: Callable[[str], str] = "record {}".format) -> Replay:
    """Find overdue records and, unless `dry_run`, trigger their callbacks 100 at a time;
    `say` tells of each, named by `label`.

    Each call's records are marked replayed only once the call succeeded, so a failure part
    way leaves the rest for the next replay.
    """
    result = Replay(overdue(inbox, after_s=after_s, expect=expect, now=now))
    for o in result.overdue:
        say(f"{label(o.record)}: no {', '.join(o.missing)} after {o.waiting_s / 60:.0f} min")
    if dry_run or not result.overdue:
        return result
    return _trigger_all(inbox, client, result, now=now, say=say)


def replay_named(inbox: Inbox, client: Client | None, records: Sequence[str], *,
                 dry_run: bool = False, now: float | None = None,
                 say: Callable[[str], None] = log.info) -> Replay:
    """Trigger the callbacks of the records named, whatever the inbox knows of them: a record
    linked while every receiver was down for longer than the service redelivers left no trace
    here, but its application has its id (the connect page's onSuccess)."""
    gone = inbox.forgotten(records)
    for record in sorted(gone):
        say(f"record {record}: forgotten; not replayed")
    result = Replay([Overdue(r, (), 0.0) for r in dict.fromkeys(records) if r not in gone])
    known = inbox.records([o.record for o in result.overdue])
    for o in result.overdue:
        say(f"record {o.record}: " + (f"{known[o.record].status} in the inbox"
                                      if o.record in known else "never heard of"))
    if dry_run or not result.overdue:
        return result
    return _trigger_all(inbox, client, result, known=known, now=now, say=say)


def _trigger_all(inbox: Inbox, client: Client | None, result: Replay, *,
                 known: Collection[str] | None = None, now: float | None,
                 say: Callable[[str], None]) -> Replay:
    """Trigger `result.overdue`'s callbacks 100 a call, each call's records marked replayed
    once it succeeded (only those of `known`, when given: the inbox has no row for others)."""
    if client is None:
        raise ValueError("replay needs an API client unless it is a dry run")
    ids = [o.record for o in result.overdue]
    for start in range(0, len(ids), TRIGGER_LIMIT):
        chunk = ids[start:start + TRIGGER_LIMIT]
        client.trigger_callbacks(chunk)
        inbox.mark_replayed(chunk if known is None else [r for r in chunk if r in known], now)
        result.triggered += chunk
        result.calls += 1
    say(f"triggered callbacks of {len(result.triggered)} records in {result.calls} calls")
    return result


class ReplayConfig(Config):
    after_minutes: float = DEFAULT_AFTER_MINUTES
    dry_run: bool = False
    expect: list[str] = list(EXPECTED)


@op(description="Re-trigger the callbacks of records whose expected products never called back")
def replay_missing_callbacks(context: OpExecutionContext, config: ReplayConfig,
                             client: ResourceParam[Client], inbox: InboxResource) -> int:
    with inbox.open() as db:  # Dagster hears of records by number (assets/batch.py)
        def label(record: str) -> str:
            return record_label(db.numbers([record]).get(record))

        result = replay(db, client, after_s=config.after_minutes * 60, expect=config.expect,
                        dry_run=config.dry_run, say=context.log.info, label=label)
        listed = ", ".join(label(o.record) for o in result.overdue[:50])
    context.add_output_metadata({
        "overdue": len(result.overdue), "triggered": len(result.triggered),
        "calls": result.calls, "dry_run": config.dry_run, "records": listed})
    return len(result.triggered)
