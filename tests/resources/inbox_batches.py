"""Random batches of callbacks and connection events, as several deliveries at once make them:
repeats inside a batch and across batches, products out of order, logins that do and do not
reconnect, disconnects and reauths between callbacks, callbacks that name no record, name no
customer or carry no date, and products of one record and method at one moment."""

from __future__ import annotations

import random

import orjson

from resources.inbox import describe


def random_batches(make, seed: int, events: int = 150) -> list[list[tuple[dict, bytes]]]:
    rng = random.Random(seed)
    records = [f"rec-{i}" for i in range(6)]
    at = [f"2026-01-0{d}T00:00:00.000Z" for d in range(1, 8)]

    def body() -> dict:
        rec, when = rng.choice(records), rng.choice(at)
        customer, account = f"c{records.index(rec) % 2}", f"acc-{rec}"
        kind = rng.random()
        if kind < 0.15:
            return make.disconnect(customer, when, accounts=rng.choice([[], [account]]))
        if kind < 0.2:
            return make.reauth(customer, when)
        if kind < 0.45:
            return make.callback(rec, "AUTH", "AUTH_SUCCESS", customer=customer,
                                 account=account, ended_at=when,
                                 status=rng.choice(["is_success", "is_failed"]))
        if kind < 0.5:  # a callback that names no record
            return {k: v for k, v in make.callback("x", "BALANCE", "BALANCE_SUCCESS",
                                                   ended_at=when).items()
                    if k not in ("record", "recordId")}
        method = rng.choice(["ACCOUNTS", "TRANSACTIONS", "INCOME"])
        out = make.callback(rec, method, rng.choice([f"{method}_SUCCESS", "PRODUCT_IS_READY"]),
                            customer=customer, account=account, ended_at=when)
        if rng.random() < 0.3:  # no customer named: the record keeps the first one given
            out["customerId"] = None
        if rng.random() < 0.1:  # undated: it happened when it was received
            out["started_at"] = out["ended_at"] = None
        return out

    bodies = [body() for _ in range(events)]
    batches, i = [], 0
    while i < len(bodies):
        n = rng.choice([1, 2, 5, 17, 40])
        batch = bodies[i:i + n] + rng.sample(bodies[:i + n], k=min(3, i + n))  # repeats
        batches.append([(describe(b), orjson.dumps(b)) for b in batch])
        i += n
    return batches
