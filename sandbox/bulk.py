"""Records made in bulk (`sandbox/records/bulk_create`): a million thin records for the price
of one stored row (docs/interface.md, "Records in bulk").

A batch stores its parameters; each of its records, their customers and accounts are derived
from (batch, index) when asked for, by the builders of customers/create. An id is decoded,
never looked up: kind (b0 record, b1 customer, c0-c2 account k), number (10 hex digits),
check (12, fixed by the seed). A record acted on is stored as any record is, and that copy
wins. `pace` raises paced batches' connection callbacks, a cursor kept with the batch.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time

from . import datagen
from .auth import SHORT
from .clock import iso
from .errors import integer, invalid
from .products import DAY, INTERNAL, account_doc, customer_doc, record_doc

log = logging.getLogger("sandbox.bulk")

MAX_COUNT = 1_000_000   # records per call
LISTED = 10_000         # a batch up to this size answers every id
BACKLOG = 1_000         # pending deliveries beyond which paced callbacks wait for receivers
TICK_S = 0.05           # the pacer's shortest step; it works for at most half of each
SPEC = {"login_type": "bank", "account_type": "personal", "products": datagen.PRODUCTS}


class Bulk:
    def _init_bulk(self) -> None:
        self.batches: list[dict] = self.store.get_meta("bulk_batches", [])
        self._bulk_check = datagen.object_id(self.seed, "bulk")[:12]

    def _bulk_id(self, b: dict, kind: str, i: int) -> str:
        return f"{kind}{b['start'] + i:010x}{self._bulk_check}"

    def _bulk_of(self, env: str, some_id: str, kind: str) -> tuple[dict | None, int]:
        """(batch, index) of a bulk id of `kind` in `env`; (None, 0) for any other id."""
        try:
            number = int(some_id[2:12], 16)
        except ValueError:
            return None, 0
        at = bisect.bisect_right(self.batches, number, key=lambda b: b["start"]) - 1
        b = self.batches[at] if at >= 0 else None
        if (b is None or b["env"] != env or number - b["start"] >= b["count"]
                or self._bulk_id(b, kind, number - b["start"]) != some_id):
            return None, 0
        return b, number - b["start"]

    def _bulk_record(self, env: str, record_id: str) -> dict | None:
        b, i = self._bulk_of(env, record_id, "b0")
        if b is None:
            return None
        since = (int(b["created_ts"]) // DAY - b["days"]) * DAY
        return record_doc(
            env, record_id, self._bulk_id(b, "b1", i), self.banks[i % len(self.banks)], SPEC,
            [self._bulk_id(b, f"c{k}", i) for k in range(b["accounts"])], b["created_ts"],
            auth=datagen.object_id(b["seed"], "auth", record_id), status="ready",
            bulk=b["batch"], gen={"seed": b["seed"], "volume": b["volume"] / b["accounts"],
                                  "income": True, "settlement": True, "since": since,
                                  "first_month": datagen.month_index(since),
                                  "created_month": datagen.month_index(b["created_ts"])})

    def _bulk_customer(self, env: str, customer_id: str) -> dict | None:
        b, _ = self._bulk_of(env, customer_id, "b1")
        name = b and datagen.person(b["seed"], customer_id)["name"]
        return b and customer_doc(env, b["seed"], customer_id, name, iso(b["created_ts"]))

    def _bulk_records_of(self, env: str, customer_id: str) -> list[dict]:
        """A bulk customer's record, unless it is stored (the store then lists it)."""
        record_id = "b0" + customer_id[2:]
        rec = None if (env, record_id) in self.records else self._bulk_record(env, record_id)
        return [rec] if rec else []

    def _bulk_account(self, env: str, account_id: str) -> dict | None:
        kind = account_id[:2]
        b, i = self._bulk_of(env, account_id, kind) if kind in ("c0", "c1", "c2") else (None, 0)
        if b is None or int(kind[1]) >= b["accounts"]:
            return None
        customer = self._customer(env, self._bulk_id(b, "b1", i))
        return account_doc(env, b["seed"], account_id, None, SPEC["account_type"],
                           self.banks[i % len(self.banks)],
                           {"_id": customer["_id"], "name": customer["name"]},
                           self._bulk_id(b, "b0", i), iso(b["created_ts"]))

    def _bulk_token(self, env: str, token: str) -> dict | None:
        """A bulk record's access token is `access-<env>-<record>`; it dies with the record."""
        prefix = f"access-{SHORT[env]}-"
        rec = self._find(env, token[len(prefix):]) if token.startswith(prefix) else None
        alive = rec is not None and "bulk" in rec[INTERNAL] and rec[INTERNAL]["state"] != "removed"
        return rec if alive else None

    # -- the control -------------------------------------------------------------------------
    def records_bulk_create(self, env: str, body: dict) -> dict:
        count = integer("count", body["count"], 1, MAX_COUNT)
        b = {"env": env, "count": count,
             "accounts": integer("accounts", body.get("accounts", 2), 1, 3),
             "volume": integer("volume", body.get("volume", 30), 1, 200),
             "days": integer("days", body.get("days", 31), 31, 366),
             "seed": integer("seed", body.get("seed", self.seed), 0, 2**32 - 1),
             "callbacks": body.get("callbacks", "none"), "rate": None, "sent": [0, 0]}
        if b["callbacks"] not in ("none", "paced"):
            raise invalid("callbacks", "must be none or paced")
        if b["callbacks"] == "paced":
            b["rate"] = integer("rate", body.get("rate", 100), 1, 5000)
            if not (self.webhooks.settings(env) or {}).get("url"):
                raise invalid("callbacks: paced", "needs a webhook URL (settings/webhook)")
        elif "rate" in body:
            raise invalid("rate", "is for callbacks: paced only")
        self._check_addition(env, count)
        n = len(self.batches) + 1
        b.update(batch=n, start=sum(x["count"] for x in self.batches), created_ts=self.clock.now())
        self.batches.append(b)
        self.store.set_meta("bulk_batches", self.batches)
        return {"batch": n, "count": count, "first": self._bulk_id(b, "b0", 0),
                "last": self._bulk_id(b, "b0", count - 1), "records": (
                    [self._bulk_id(b, "b0", i) for i in range(count)] if count <= LISTED else None)}

    # -- paced callbacks ---------------------------------------------------------------------
    async def pace(self) -> None:
        """Raise paced batches' connection callbacks, at most `rate` a second (wall time)."""
        tokens, last = 0.0, time.monotonic()
        while True:
            b = next((b for b in self.batches if b["callbacks"] == "paced"
                      and b["sent"][0] < b["count"]), None)
            tick = max(TICK_S, 1 / b["rate"]) if b else 1.0
            await asyncio.sleep(tick)
            now = time.monotonic()
            if b is not None:  # a bucket of one tick's callbacks: no burst after a pause
                tokens = min(tokens + b["rate"] * (now - last), b["rate"] * tick)
            last = now
            if b is None or tokens < 1 or self.webhooks.db.pending() >= BACKLOG:
                continue
            try:
                tokens -= self._raise_paced(b, int(tokens))
            except Exception:  # the next tick tries again
                log.exception("paced callbacks of batch %s failed", b["batch"])

    def _raise_paced(self, b: dict, n: int) -> int:
        """Raise up to `n` callbacks of `b` from its cursor, for half a tick at most (a record's
        callbacks take milliseconds: the API is served meanwhile); returns how many."""
        env, (i, j), raised = b["env"], b["sent"], 0
        until = time.monotonic() + TICK_S / 2
        with self.webhooks.db.transaction():
            while raised < n and i < b["count"] and time.monotonic() < until:
                rec = self._find(env, self._bulk_id(b, "b0", i))
                out = (self._connection_callbacks(env, rec)
                       if rec[INTERNAL]["state"] == "active" else [])  # removed: nothing
                for method, payload in out[j:j + n - raised]:
                    self.webhooks.enqueue(env, payload, record=rec["_id"], method=method)
                    raised, j = raised + 1, j + 1
                if j >= len(out):
                    i, j = i + 1, 0
        b["sent"] = [i, j]
        self.store.set_meta("bulk_batches", self.batches)
        return raised
