"""What landed and what did not: each record's products, as Dagster and the inbox know them.

`ledgerlake status` lists them; `ledgerlake rerun` runs a record's products again, here and
now, in the same Dagster instance the daemon uses (the runs show in the UI), without waiting
for a new callback. A product of a record is

- `landed`: its latest materialization is the latest word, and its checks passed;
- `held`: a blocking check failed on the newest rows, so the previous ones stay in view;
- `failed`: its last run failed after the engine's retries (nothing of it was written);
- `running`: a run is materializing it now;
- `waiting`: the service called back that it is ready, and it has not landed yet;
- `-`: nothing asked for it yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from assets.partitions import records

from .inbox import Inbox

# product asset -> the callback methods that announce it (the spec's Events table)
PRODUCTS: dict[str, tuple[str, ...]] = {
    "accounts": ("ACCOUNTS",), "balances": ("BALANCE", "PERIODIC_BALANCE"),
    "transactions": ("TRANSACTIONS", "PERIODIC_TRANSACTIONS"), "income": ("INCOME",),
    "identity": ("IDENTITY",), "payments": ("PAYMENT", "PAYMENT_RECURRING"),
}
NEEDS_ACTION = {"failed", "held"}


@dataclass
class RecordStatus:
    record: str
    connection: str  # connected, disconnected, reauth_required, or unknown to the inbox
    products: dict[str, str] = field(default_factory=dict)  # asset -> state (module docstring)
    details: dict[str, str] = field(default_factory=dict)  # asset -> why, for held ones

    @property
    def needs_action(self) -> list[str]:
        return [p for p, s in self.products.items() if s in NEEDS_ACTION]


def _blocking_checks(defs: dg.Definitions) -> dict[str, list[dg.AssetCheckKey]]:
    graph = defs.resolve_asset_graph()
    out: dict[str, list[dg.AssetCheckKey]] = {}
    for key in graph.asset_check_keys:
        if graph.get_check_spec(key).blocking:
            out.setdefault(key.asset_key.to_user_string(), []).append(key)
    return out


def statuses(defs: dg.Definitions, instance: dg.DagsterInstance, inbox: Inbox | None,
             only: Sequence[str] | None = None) -> list[RecordStatus]:
    """Every record's products (or those of `only`), in partition order."""
    keys = instance.get_dynamic_partitions(records.name)
    if only is not None:
        unknown = sorted(set(only) - set(keys))
        if unknown:
            raise ValueError(f"not a record partition: {', '.join(unknown[:5])}")
        keys = [k for k in keys if k in set(only)]
    states = inbox.records(keys) if inbox is not None else {}
    out = [RecordStatus(k, states[k].status if k in states else "unknown") for k in keys]
    if not keys:
        return out
    known = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    held = _held(instance, _blocking_checks(defs), keys)
    for asset in (a for a in PRODUCTS if a in known):
        by_partition = instance.get_status_by_partition(dg.AssetKey(asset), keys, records) or {}
        for row in out:
            got = by_partition.get(row.record)
            called = states.get(row.record) is not None and any(
                m in states[row.record].products for m in PRODUCTS[asset])
            if got == dg.AssetPartitionStatus.FAILED:
                state = "failed"
            elif got == dg.AssetPartitionStatus.IN_PROGRESS:
                state = "running"
            elif (asset, row.record) in held:
                state = "held"
                row.details[asset] = held[(asset, row.record)]
            elif got == dg.AssetPartitionStatus.MATERIALIZED:
                state = "landed"
            else:
                state = "waiting" if called else "-"
            row.products[asset] = state
    return out


def _held(instance: dg.DagsterInstance, checks: dict[str, list[dg.AssetCheckKey]],
          keys: list[str]) -> dict[tuple[str, str], str]:
    """(asset, record) whose latest blocking check failed, and which check."""
    flat = [k for ks in checks.values() for k in ks]
    if not flat:
        return {}
    out = {}
    for info in instance.event_log_storage.get_asset_check_partition_info(
            flat, partition_keys=keys):
        if info.latest_execution_status == AssetCheckExecutionRecordStatus.FAILED:
            out[(info.check_key.asset_key.to_user_string(), info.partition_key)] = \
                info.check_key.name
    return out


def rerun(defs: dg.Definitions, instance: dg.DagsterInstance, record: str,
          assets: Sequence[str], *, full_history: bool = False,
          run_config: dict | None = None) -> dg.ExecuteInProcessResult:
    """Run `assets` for one record now, in process, recorded in `instance` like any run."""
    config = dict(run_config or {})
    if full_history and "transactions" in assets:
        ops = dict(config.get("ops", {}))
        ops["transactions"] = {"config": {"full_history": True}}
        config["ops"] = ops
    job = defs.resolve_job_def("ingest_job")
    return job.execute_in_process(
        instance=instance, partition_key=record, run_config=config, raise_on_error=False,
        asset_selection=[dg.AssetKey(a) for a in assets],
        tags={"ledgerlake/rerun": "cli", "ledgerlake/full_history": str(full_history).lower()})
