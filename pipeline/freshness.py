"""Freshness: every connected record's balances and transactions landed within 26 hours.

The service calls back with each record's periodic balances and transactions once a day, and
`daily_refresh` fetches every connected record at 02:00 UTC besides, so a connected record's
products are never a day old; 26 hours leaves two hours of slack. A record that is
disconnected or waiting for reauthentication is not expected to refresh, so it is never
stale; nor is one whose product never landed (its first landing is `ledgerlake status`'s
`waiting`).

Dagster's own freshness (FreshnessPolicy, 1.12 on, and the older
build_last_update_freshness_checks) judges an asset by its latest materialization of any
partition: with one partition per record, a single fresh record would hide a thousand stale
ones, and an asset whose records are all disconnected would fail. So each product gets an
asset check that asks per record: the partitions materialized since the cutoff (one query
of the event log) against the connected records (the inbox). `hourly_freshness` runs the
checks (the daemon evaluates it), and the UI shows each on its asset's Checks tab, with the
stale records in its metadata.
"""

# no `from __future__ import annotations`: Dagster reads the context's type hint at runtime
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import dagster as dg

from assets.partitions import records

from .inbox_resource import InboxResource

MAX_AGE = timedelta(hours=26)
CHECKED = ("balances", "transactions")
CHECK_NAME = "connected_records_fresh"
SHOWN = 20
EXPECTED = {None, "connected"}  # None: a record the inbox never heard of (added by hand)
clock = time.time  # the checks' "now" (a test moves it a day on)


@dataclass
class Freshness:
    expected: int = 0  # connected records whose product has landed
    stale: list[str] = field(default_factory=list)  # of those, not landed since the cutoff
    cutoff: float = 0.0


def landed_since(instance: dg.DagsterInstance, asset: str, cutoff: float) -> set[str] | None:
    """Records whose `asset` landed after `cutoff` (a POSIX time); None: all of them (nothing
    landed before it). Two queries of the event log, whatever the number of records."""
    key = dg.AssetKey(asset)
    before = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, before_timestamp=cutoff), limit=1).records
    if not before:
        return None
    return instance.get_materialized_partitions(key, after_cursor=before[0].storage_id)


def freshness(instance: dg.DagsterInstance, asset: str, states: Mapping[str, str | None],
              now: float | None = None, max_age: timedelta = MAX_AGE) -> Freshness:
    """Which records (`states`: record -> connection status) should be fresh, and are not."""
    cutoff = (clock() if now is None else now) - max_age.total_seconds()
    landed = instance.get_materialized_partitions(dg.AssetKey(asset))
    expected = sorted(r for r, s in states.items() if s in EXPECTED and r in landed)
    recent = landed_since(instance, asset, cutoff)
    stale = [] if recent is None else [r for r in expected if r not in recent]
    return Freshness(len(expected), stale, cutoff)


def freshness_check(asset: str) -> dg.AssetChecksDefinition:
    hours = int(MAX_AGE.total_seconds() // 3600)

    @dg.asset_check(asset=asset, name=CHECK_NAME, blocking=False,
                    description=f"every connected record's {asset} landed within the last "
                                f"{hours} hours (disconnected records, and those waiting "
                                f"for reauthentication, are not expected to refresh)")
    def check(context: dg.AssetCheckExecutionContext,
              inbox: InboxResource) -> dg.AssetCheckResult:
        keys = context.instance.get_dynamic_partitions(records.name)
        with inbox.open() as db:
            known = db.records(keys)
        states = {k: (known[k].status if k in known else None) for k in keys}
        got = freshness(context.instance, asset, states)
        return dg.AssetCheckResult(
            passed=not got.stale, severity=dg.AssetCheckSeverity.WARN,
            description=None if not got.stale else
            f"{len(got.stale)} of {got.expected} connected records not refreshed in "
            f"{hours} hours",
            metadata={"connected_records": got.expected, "stale_records": len(got.stale),
                      "stale": dg.MetadataValue.json(got.stale[:SHOWN]),
                      "cutoff": dg.MetadataValue.timestamp(got.cutoff),
                      "disconnected_or_reauth": sum(1 for s in states.values()
                                                    if s not in EXPECTED)})

    return check


freshness_checks = [freshness_check(a) for a in CHECKED]
freshness_job = dg.define_asset_job(
    "freshness_job", selection=dg.AssetSelection.checks(*freshness_checks),
    description="Every connected record's balances and transactions younger than "
                f"{int(MAX_AGE.total_seconds() // 3600)} hours (pipeline/freshness.py)")
hourly_freshness = dg.ScheduleDefinition(
    name="hourly_freshness", job=freshness_job, cron_schedule="41 * * * *",
    execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Evaluate the freshness checks of balances and transactions")
