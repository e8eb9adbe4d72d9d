"""What landed and what did not: each record's products, as the inbox keeps them.

`ledgerlake status` lists them; `ledgerlake rerun` runs records' products again, here and
now, in the Dagster instance the daemon uses, without waiting for a callback. A product is

- `landed`: its latest landing published it;
- `held`: a blocking check failed on the newest rows, so the previous ones stay in view;
- `failed`: its latest landing failed after the engine's retries (nothing of it was written);
- `waiting`: the service called back that it is ready, and it has not landed yet;
- `-`: nothing asked for it yet.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from resources.inbox import FAILED, HELD, Inbox, LandingState, RecordState

# product asset -> the callback methods that announce it (the spec's Events table)
PRODUCTS: dict[str, tuple[str, ...]] = {
    "accounts": ("ACCOUNTS",), "balances": ("BALANCE", "PERIODIC_BALANCE"),
    "transactions": ("TRANSACTIONS", "PERIODIC_TRANSACTIONS"), "income": ("INCOME",),
    "identity": ("IDENTITY",), "payments": ("PAYMENT", "PAYMENT_RECURRING"),
}
NEEDS_ACTION = (FAILED, HELD)
LISTED = 1000  # records `status` lists without --all


@dataclass
class RecordStatus:
    record: str
    connection: str  # connected, disconnected, reauth_required, or unknown to the inbox
    number: int | None = None  # how Dagster's runs, metadata and logs name it (#N)
    products: dict[str, str] = field(default_factory=dict)  # asset -> state (module docstring)
    landings: dict[str, LandingState] = field(default_factory=dict)  # asset -> latest landing
    callbacks: dict[str, tuple[str, str]] = field(default_factory=dict)  # method -> code, at

    @property
    def needs_action(self) -> list[str]:
        return [p for p, s in self.products.items() if s in NEEDS_ACTION]

    def as_json(self) -> dict:
        return {"record": self.record, "number": self.number, "connection": self.connection,
                "products": self.products,
                "landings": {p: {"outcome": s.outcome, "at": _iso(s.at), "run_id": s.run_id,
                                 "last_landed_at": _iso(s.landed_at), "rows": s.row_count,
                                 **s.detail} for p, s in self.landings.items()},
                "callbacks": {m: {"code": c, "at": at} for m, (c, at) in self.callbacks.items()}}


def statuses(inbox: Inbox, only: Sequence[str] | None = None, *, failed: bool = False,
             limit: int | None = LISTED) -> list[RecordStatus]:
    """The named records (`only`, by id or by number `#N`; ValueError naming those the inbox
    does not know), or those with a failed or held product (`failed`), or the first `limit`
    records, in order."""
    if only is not None:
        only = by_id(inbox, only)
        states = inbox.records(only)
        unknown = sorted(set(only) - set(states))
        if gone := inbox.forgotten(unknown):
            raise ValueError(f"forgotten: {', '.join(sorted(gone)[:5])} (ledgerlake forget)")
        if unknown:
            raise ValueError(f"the inbox has no record {', '.join(unknown[:5])}")
    elif failed:
        wanting = inbox.landings(outcomes=NEEDS_ACTION)
        states = inbox.records({s.record for s in wanting})
    else:
        states = inbox.records(inbox.ids_of(inbox.numbered(0, limit)).values()
                               if limit else None)
    landings: dict[str, dict[str, LandingState]] = {}
    for s in inbox.landings(states):
        landings.setdefault(s.record, {})[s.product] = s
    numbers = inbox.numbers(states)
    out = [_status(states[r], landings.get(r, {}), numbers.get(r)) for r in sorted(states)]
    return [r for r in out if r.needs_action] if failed else out


def by_id(inbox: Inbox, names: Sequence[str]) -> list[str]:
    """Records named by id or by number (`#N`, as the Dagster UI names them), as ids."""
    numbers = {int(n[1:]) for n in names if n.startswith("#")}
    ids = inbox.ids_of(numbers)
    if missing := sorted(numbers - set(ids)):
        raise ValueError("no record has number " + ", ".join(f"#{n}" for n in missing[:5])
                         + " (forgotten, or never known)")
    return list(dict.fromkeys(ids[int(n[1:])] if n.startswith("#") else n for n in names))


def _status(state: RecordState, landed: dict[str, LandingState], number: int | None
            ) -> RecordStatus:
    row = RecordStatus(state.record, state.status, number, landings=landed,
                       callbacks={m: (p.code, p.occurred_at) for m, p in state.products.items()})
    for asset, methods in PRODUCTS.items():
        if asset in landed:
            row.products[asset] = landed[asset].outcome
        else:
            row.products[asset] = "waiting" if any(m in state.products for m in methods) else "-"
    return row


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


def explain(row: RecordStatus) -> list[str]:
    """One record told in full: each product's last landing and why, then its callbacks."""
    lines = [f"record {row.record}: {row.connection} (number #{row.number})"]
    for asset, state in row.products.items():
        landing = row.landings.get(asset)
        if landing is None:
            lines.append(f"  {asset:<13}{state}")
            continue
        d = landing.detail
        failing = [f"{name} failed ({n} problems)" for name, n in d.get("checks", {}).items()
                   if n]
        why = [d.get("pull", ""), *failing,
               "; ".join(p.get("problem", str(p)) for p in d.get("problems", [])),
               d.get("error", "")]
        last = "" if landing.landed_at in (None, landing.at) else \
            f" (last landed {_iso(landing.landed_at)})"
        lines.append(f"  {asset:<13}{state:<8} {_iso(landing.at)}{last}  run {landing.run_id}"
                     f"  {landing.row_count or 0} rows"
                     + "".join(f"; {w}" for w in why if w))
    # each check's verdict on the product's latest landing (the checks view keeps them all)
    verdicts = [f"{name} {'failed (' + str(n) + ' problems)' if n else 'passed'} ({asset})"
                for asset in PRODUCTS if (landing := row.landings.get(asset))
                for name, n in landing.detail.get("checks", {}).items()]
    lines.append("  checks: " + ("; ".join(verdicts) or "none evaluated yet"))
    lines.append("  callbacks: " + ("; ".join(
        f"{m} {code} {at}" for m, (code, at) in sorted(row.callbacks.items(),
                                                      key=lambda kv: kv[1][1]))
                                     or "none"))
    return lines


def rerun(defs, instance, numbers: Sequence[int], assets: Sequence[str], *,
          full_history: bool = False, run_config: dict | None = None):
    """Run `assets` for the records numbered `numbers` now, in one run in process, recorded
    in `instance` like any run."""
    import dagster as dg

    from assets.batch import batch_config, record_tags

    config = {**(run_config or {}), **batch_config(list(numbers))}
    if full_history and "transactions" in assets:
        config["ops"] = {"transactions": {"config": {"full_history": True}}}
    return defs.resolve_job_def("ingest_job").execute_in_process(
        instance=instance, run_config=config, raise_on_error=False,
        asset_selection=[dg.AssetKey(a) for a in assets],
        tags={"ledgerlake/rerun": "cli", **record_tags(list(numbers)),
              "ledgerlake/full_history": str(full_history).lower()})
