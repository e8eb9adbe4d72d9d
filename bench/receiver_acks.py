"""The receiver against its target, in one run beside the pipeline it feeds.

Target: the receiver sustains at least 10x the callbacks a second the pipeline lands on the
same machine, with a p99 acknowledgement latency of at most 50 ms at that rate.

1. The pipeline's rate: a sandbox's new customers call back into a receiver's inbox; then the
   inbox sensor is ticked and its runs executed in this process (as `make demo` does, the
   faster of the pipeline's two profiles) until every callback is read. Records and callbacks
   landed a second.
2. The receiver (its own process, a SQLite inbox): sandbox-shaped callbacks sent open-loop at
   10x that callback rate for `--seconds`, each latency counted from when it was due (a sender
   that falls behind shows as latency, not as a lower rate); then as fast as 64 senders go.

    .venv/bin/python bench/receiver_acks.py [--customers 40] [--seconds 20]

Writes bench/results/receiver.json (or --out) and prints a table; whether the target was met
is in both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from pipeline.local import Server
from resources.inbox import Inbox
from sandbox import callbacks as shapes

RESULTS = Path(__file__).parent / "results" / "receiver.json"
TARGET_FACTOR, TARGET_P99_MS = 10, 50.0
PRODUCTS = [("AUTH", "AUTH_SUCCESS"), ("IDENTITY", "PRODUCT_IS_READY"),
            ("ACCOUNTS", "ACCOUNTS_SUCCESS"), ("BALANCE", "BALANCE_SUCCESS"),
            ("TRANSACTIONS", "PRODUCT_IS_READY"), ("INCOME", "PRODUCT_IS_READY")]


def pipeline_rate(work: Path, customers: int) -> dict:
    """Records and callbacks a second the pipeline lands in process, from callbacks already
    in its inbox to every run done."""
    from pipeline.cli import demo

    home = work / "pipeline"
    demo.prepare_home(home)
    sandbox, receiver, api, env = demo.start_upstream(home)
    try:
        os.environ.update(env)
        os.environ.setdefault("LEDGERLAKE_PII_KEY", secrets.token_hex(32))  # a throwaway key
        os.environ["DAGSTER_HOME"] = str(demo.dagster_home(home))
        records = demo.create_customers(api, customers)
        events = demo.wait_for_events(home / "inbox.sqlite3", len(records), timeout_s=300,
                                      settle_s=3.0)
        from dagster import DagsterInstance

        from pipeline.definitions import defs
        from pipeline.local import drain

        with DagsterInstance.get() as instance:
            started = time.perf_counter()
            runs = drain(defs, instance)
            elapsed = time.perf_counter() - started
            failed = sum(1 for r in runs if not instance.get_run_by_id(r).is_success)
    finally:
        api.close()
        receiver.stop()
        sandbox.stop()
    return {"records": len(records), "callbacks": events, "runs": len(runs),
            "failed_runs": failed, "seconds": round(elapsed, 2),
            "records_per_s": round(len(records) / elapsed, 1),
            "callbacks_per_s": round(events / elapsed, 1)}


def connection(rng: random.Random, at: float) -> list[bytes]:
    """The callbacks of one new connection, shaped as the sandbox sends them."""
    def oid() -> str:
        return f"{rng.getrandbits(96):024x}"

    customer, record = oid(), oid()
    identity = {"bvn": f"{rng.getrandbits(36):011d}", "firstname": "Ada", "lastname": "Obi",
                "email": ["ada@example.com"], "phone": ["08030000000"], "dob": "1990-01-01"}
    rec = {"_id": record, "created_at": shapes.iso(at), "login_type": "bank",
           "customer": customer, "env": "production-sandbox"}
    bank = {"_id": oid(), "name": "Sandbox Bank", "slug": "sandbox-bank"}
    accounts = [{"_id": oid(), "bank": bank["_id"], "env": rec["env"],
                 "nuban": f"{rng.getrandbits(32):010d}", "created_at": rec["created_at"],
                 "last_updated": rec["created_at"], "customer": customer, "name": "Ada Obi",
                 "type": "Savings", "currency": "NGN"} for _ in range(rng.choice((1, 1, 2)))]
    out = []
    for n, (method, code) in enumerate(PRODUCTS):
        for account in accounts if method == "BALANCE" else [None]:
            body = shapes.common(env=rec["env"], rec=rec, bank=bank, method=method, code=code,
                                 now=at + n, callback_url=f"https://api.example/callback?"
                                 f"record={record}&method={method}",
                                 webhook_url="https://app.example/callbacks/",
                                 customer={"identity": identity})
            if method == "IDENTITY":
                body["identity"] = shapes.identity_member(
                    identity, customer=customer, bank=bank["_id"], env=rec["env"],
                    details=body["callback_url"], ident_id=oid())
            elif method == "ACCOUNTS":
                body["account"] = shapes.account_member(accounts[0])
            elif method == "BALANCE":
                body.update(accountId=account["_id"], nuban=account["nuban"])
            elif method == "TRANSACTIONS":
                body["newTransactions"] = rng.randrange(20, 400)
            out.append(orjson.dumps(body))
    return out


def bodies(n: int, seed: int) -> list[bytes]:
    """`n` distinct callbacks: whole connections, one after another."""
    rng, out, at = random.Random(seed), [], 1_767_225_600.0
    while len(out) < n:
        out += connection(rng, at)
        at += 7
    return out[:n]


def sender(url: str, token: str) -> httpx.AsyncClient:
    """64 keep-alive connections to the receiver: with another 64 open, still within its
    limit of 256 (past it, a 503)."""
    return httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=64),
                             timeout=httpx.Timeout(60, pool=None),
                             headers={"Authorization": f"Bearer {token}",
                                      "Content-Type": "application/json"})


async def post(http: httpx.AsyncClient, body: bytes, acked: set[bytes]) -> int:
    """One callback sent; `acked` gets it when the receiver answers 200."""
    status = (await http.post("/callbacks/", content=body)).status_code
    if status == 200:
        acked.add(body)
    return status


async def open_loop(url: str, token: str, payloads: list[bytes], rate: float,
                    acked: set[bytes]) -> dict:
    """Each callback due at start + i/rate; its latency runs from then to its answer."""
    latencies: list[float] = []
    statuses: list[int] = []
    async with sender(url, token) as http:
        async def one(body: bytes, due: float) -> None:
            statuses.append(await post(http, body, acked))
            latencies.append(time.perf_counter() - due)

        start = time.perf_counter()
        tasks = []
        for i, body in enumerate(payloads):
            due = start + i / rate
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(one(body, due)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {"offered_per_s": round(rate, 1), "sent": len(payloads),
            "acks_per_s": round(statuses.count(200) / elapsed, 1),
            "not_200": len(statuses) - statuses.count(200),
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
            "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1),
            "max_ms": round(1000 * latencies[-1], 1)}


async def closed_loop(url: str, token: str, payloads: list[bytes], senders: int,
                      acked: set[bytes]) -> dict:
    queue = list(reversed(payloads))
    ok = 0
    async with sender(url, token) as http:
        async def worker() -> None:
            nonlocal ok
            while queue:
                status = await post(http, queue.pop(), acked)
                ok += status == 200  # after the await: `ok += await ...` loses counts

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(senders)))
        elapsed = time.perf_counter() - start
    return {"senders": senders, "sent": len(payloads), "acks_per_s": round(ok / elapsed, 1)}


def receiver_load(work: Path, rate: float, seconds: float) -> dict:
    token = "bench-" + os.urandom(8).hex()
    inbox = work / "receiver" / "inbox.sqlite3"
    inbox.parent.mkdir(parents=True)
    steady = bodies(int(rate * seconds), seed=1)
    burst = bodies(20_000, seed=2)
    acked: set[bytes] = set()
    with Server("receiver", "--inbox", str(inbox), env={"LEDGERLAKE_RECEIVER_TOKEN": token},
                log_path=work / "receiver.log") as receiver:
        held = asyncio.run(open_loop(receiver.url, token, steady, rate, acked))
        fastest = asyncio.run(closed_loop(receiver.url, token, burst, 64, acked))
    with Inbox(inbox) as stored:  # each stored once
        held["stored"] = stored.count()
    assert held["stored"] == len(acked), held  # each acknowledged callback stored, once
    return {"at_target_rate": held, "as_fast_as_64_senders": fastest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=40,
                        help="new customers (1 to 100) whose landing sets the pipeline's rate")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="seconds of callbacks at the target rate")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args()
    if not 1 <= args.customers <= 100:  # the sandbox creates at most 100 customers a call
        parser.error("--customers must be 1 to 100")
    with tempfile.TemporaryDirectory(prefix="ledgerlake-receiver-") as tmp:
        work = Path(tmp)
        pipeline = pipeline_rate(work, args.customers)
        rate = TARGET_FACTOR * pipeline["callbacks_per_s"]
        receiver = receiver_load(work, rate, args.seconds)
    held = receiver["at_target_rate"]
    met = held["acks_per_s"] >= 0.98 * rate and held["p99_ms"] <= TARGET_P99_MS \
        and held["not_200"] == 0
    out = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cpus": os.cpu_count(), "pipeline": pipeline, "receiver": receiver,
           "target": f">= {TARGET_FACTOR}x the pipeline's callbacks/s, p99 <= "
                     f"{TARGET_P99_MS:g} ms", "met": met}
    print(json.dumps(out, indent=2))
    print(f"\n| pipeline lands | receiver at {TARGET_FACTOR}x | p99 | fastest |\n|---|---|---|---|\n"
          f"| {pipeline['records_per_s']} records/s, {pipeline['callbacks_per_s']} callbacks/s "
          f"| {held['acks_per_s']} acks/s of {held['offered_per_s']} offered | "
          f"{held['p99_ms']} ms | {receiver['as_fast_as_64_senders']['acks_per_s']} acks/s |")
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
