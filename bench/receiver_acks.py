"""Durable acknowledgements per second of the receiver, SQLite and Postgres inboxes, 1, 2 and 4
receivers, against the bare HTTP floor in the same run; and callback-to-run latency.

Receivers run as real child processes on loopback, all on one inbox: a SQLite file (WAL,
`synchronous=full`) or a Postgres database of a private cluster (`synchronous_commit` on),
started here from the machine's PostgreSQL binaries as the tests start theirs. One sender
process (asyncio, keep-alive HTTP/1.1 connections, written on asyncio streams to leave the
cores to the receivers) spreads `--concurrency` connections over the receivers. An
acknowledgement (200) means the event is committed; after each configuration every callback
is checked present in the inbox exactly once.

The callbacks are shaped as the service sends them (the sandbox's own payload builders): per
record, AUTH, IDENTITY, ACCOUNTS, a BALANCE per account, TRANSACTIONS and INCOME, close
together, with record ids of 24 random hex characters, as the service makes them.

Peer measured in the same run, for the ratio: `http_floor`, the same sender against the same
receivers with a wrong token (401 before the body is read, nothing stored): what the HTTP
path alone costs. Each round sends one chunk to the floor and the same to be stored, seconds
apart, the floor first in one round and last in the next, so the ratio is taken within a
round (this machine's speed drifts over minutes); the median of the rounds' ratios is
reported, with each round's.
Beside the rates, the CPU each acknowledgement cost the receivers (with their inbox writer
processes), the database server and the sender (from /proc), which the machine's load moves
far less than the rates.

Callback-to-run latency: a callback POSTed at a random moment, the inbox sensor evaluated
(`build_sensor_context`, the Definitions of pipeline/definitions.py) every `MIN_INTERVAL_S`
seconds as the Dagster daemon would, the time until the evaluation that returns its
RunRequest finishes. Also with the sensor evaluated back to back, the floor.

    .venv/bin/python bench/receiver_acks.py [--callbacks 3000] [--rounds 7] [--receivers 1,2,4]
        [--inboxes sqlite,postgres] [--concurrency 64] [--latency-samples 8 (0: none)]

Writes bench/results/receiver.json and prints it. Sender, receivers and database share the
machine's cores, so the figures are a floor for receivers with machines of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import secrets
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.inbox import kept_body, open_inbox  # noqa: E402
from pipeline.local import Server  # noqa: E402
from sandbox import callbacks as shapes  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "receiver.json"
TICK = os.sysconf("SC_CLK_TCK")
PRODUCTS = [("AUTH", "AUTH_SUCCESS"), ("IDENTITY", "PRODUCT_IS_READY"),
            ("ACCOUNTS", "ACCOUNTS_SUCCESS"), ("BALANCE", "BALANCE_SUCCESS"),
            ("TRANSACTIONS", "PRODUCT_IS_READY"), ("INCOME", "PRODUCT_IS_READY")]


def connection(rng: random.Random, at: float) -> list[dict]:
    """The callbacks of one new connection, as the sandbox builds them."""
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
            out.append(body)
    return out


def callbacks(n: int, seed: int) -> list[bytes]:
    """`n` distinct callbacks: whole connections, one after another."""
    rng, out, at = random.Random(seed), [], 1_767_225_600.0
    while len(out) < n:
        out += [orjson.dumps(b) for b in connection(rng, at)]
        at += 7
    return out[:n]


async def send_all(urls: list[str], token: str, bodies: list[bytes], concurrency: int
                   ) -> tuple[float, list[int], list[float]]:
    """`concurrency` senders, each on its own keep-alive connection to one of `urls` (in
    turn), taking the next body as it gets its answer."""
    queue = list(reversed(bodies))
    statuses: list[int] = []
    latencies: list[float] = []

    async def worker(url: str) -> None:
        parsed = httpx.URL(url)
        head = (f"POST {parsed.raw_path.decode()} HTTP/1.1\r\nHost: {parsed.host}:"
                f"{parsed.port}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\n").encode()
        reader = writer = None
        while queue:
            body = queue.pop()
            if writer is None:
                reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
            t = time.perf_counter()
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            status_line = await reader.readline()
            length, close = 0, False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
                elif name.lower() == "connection" and "close" in value.lower():
                    close = True
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t)
            statuses.append(int(status_line.split()[1]))
            if close:
                writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker(urls[i % len(urls)]) for i in range(concurrency)))
    return time.perf_counter() - started, statuses, latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds of these processes so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def family(pid: int) -> list[int]:
    """`pid` and its descendants."""
    out = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        out += family(int(child))
    return out


def postgres_pids(cluster) -> list[int]:
    """The cluster's processes: the postmaster and its children (backends, WAL writer...)."""
    return family(int((cluster.data / "postmaster.pid").read_text().split()[0]))


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def configuration(work: Path, kind: str, inbox: str, receivers: int, bodies: list[bytes],
                  n: int, rounds: int, concurrency: int, cluster=None) -> dict:
    """`rounds` rounds of n distinct callbacks to `receivers` receivers on one inbox, each
    round beside a floor round; medians reported."""
    token = secrets.token_hex(16)
    name = f"{kind}-{receivers}"
    rates, floors, lat, cpu = [], [], [], {"receivers": 0.0, "database": 0.0, "sender": 0.0}
    floor_cpu = 0.0
    with ExitStack() as stack:
        servers = [stack.enter_context(Server(
            "receiver", "--token", token, env={"LEDGERLAKE_INBOX": inbox},
            log_path=work / f"{name}-{i}.log")) for i in range(receivers)]
        urls = [s.url + "/callbacks/" for s in servers]
        asyncio.run(send_all(urls, token, bodies[:64], concurrency))  # warm up: connections
        # after the warm-up: the inbox writers connect at their first callbacks
        pids = [p for s in servers for p in family(s.proc.pid)]
        db_pids = postgres_pids(cluster) if cluster else []
        def floor(chunk: list[bytes]) -> float:
            nonlocal floor_cpu
            before = cpu_s(pids)
            took, statuses, _ = asyncio.run(send_all(urls, "wrong", chunk, concurrency))
            floor_cpu += cpu_s(pids) - before
            assert set(statuses) == {401}
            return took

        for k in range(rounds):
            chunk = bodies[64 + k * n:64 + (k + 1) * n]
            if k % 2 == 0:  # the floor first in one round, last in the next: drift cancels
                floor_s = floor(chunk)
            before = (cpu_s(pids), cpu_s(db_pids), own_cpu_s())
            seconds, statuses, latencies = asyncio.run(send_all(urls, token, chunk,
                                                                concurrency))
            after = (cpu_s(pids), cpu_s(db_pids), own_cpu_s())
            if k % 2:
                floor_s = floor(chunk)
            for key, b, a in zip(cpu, before, after, strict=True):
                cpu[key] += a - b
            assert statuses == [200] * n, sorted(set(statuses))
            rates.append(n / seconds)
            floors.append(n / floor_s)
            lat += latencies
    sent = bodies[:64 + rounds * n]
    with open_inbox(inbox) as ib:
        stored = sorted(orjson.dumps(e.body) for e in ib.after(0, 10 * len(sent)))
    # the inbox keeps a body with its personal members nulled (issue 20)
    kept = sorted(kept_body(orjson.loads(b), b) for b in sent)
    assert stored == kept, "an acknowledged callback is missing or doubled"
    per_ack = {k: round(v / (n * rounds) * 1e6, 1) for k, v in cpu.items()}
    ratios = [r / f for r, f in zip(rates, floors, strict=True)]
    return {"inbox": kind, "receivers": receivers, "concurrency": concurrency,
            "callbacks_per_round": n, "rounds": rounds,
            "acks_per_s": round(statistics.median(rates)),
            "acks_per_s_rounds": [round(r) for r in rates],
            "ack_latency_ms_p50": round(pct(lat, 0.5) * 1000, 1),
            "ack_latency_ms_p99": round(pct(lat, 0.99) * 1000, 1),
            "http_floor_per_s": round(statistics.median(floors)),
            "acks_over_http_floor": round(statistics.median(ratios), 2),
            "acks_over_http_floor_rounds": [round(r, 2) for r in ratios],
            "cpu_us_per_ack": per_ack,
            "cpu_us_per_floor_request_receivers": round(floor_cpu / (n * rounds) * 1e6, 1),
            "verified_in_inbox": len(stored)}


def latency(work: Path, interval_s: float, samples: int, spread_s: float) -> dict:
    """Callbacks POSTed at random moments; the sensor evaluated every `interval_s`."""
    from dagster import DagsterInstance, build_sensor_context

    token = secrets.token_hex(16)
    inbox = work / f"latency-{interval_s}.sqlite3"
    os.environ["LEDGERLAKE_INBOX"] = str(inbox)
    os.environ.setdefault("LEDGERLAKE_HOME", str(work / "home"))
    from pipeline.definitions import defs
    from pipeline.inbox_resource import InboxResource

    sensor = defs.resolve_sensor_def("inbox_sensor")
    bodies = [orjson.loads(b) for b in callbacks(samples * 8, seed=7)]
    bodies = [b for b in bodies if b["method"] == "TRANSACTIONS"][:samples]
    posted: dict[str, float] = {}
    ran: dict[str, float] = {}
    evals: list[float] = []
    with Server("receiver", "--inbox", str(inbox), "--token", token,
                log_path=work / "receiver-latency.log") as server, \
            DagsterInstance.ephemeral() as instance:
        url = server.url + "/callbacks/"
        rng = random.Random(7)
        moments = sorted(rng.uniform(0, spread_s) for _ in range(samples))

        def sender() -> None:
            with httpx.Client() as client:
                start = time.monotonic()
                for body, at in zip(bodies, moments, strict=True):
                    time.sleep(max(0.0, start + at - time.monotonic()))
                    posted[body["record"]] = time.monotonic()
                    r = client.post(url, content=orjson.dumps(body),
                                    headers={"Authorization": f"Bearer {token}"})
                    r.raise_for_status()

        thread = threading.Thread(target=sender)
        thread.start()
        cursor = None
        deadline = time.monotonic() + spread_s + interval_s + 30
        while len(ran) < samples and time.monotonic() < deadline:
            tick = time.monotonic()
            with build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                      resources={"inbox": InboxResource()}) as ctx:
                result = sensor(ctx)
            done = time.monotonic()
            evals.append(done - tick)
            # as the daemon would, the new records are added before the runs
            for req in getattr(result, "dynamic_partitions_requests", None) or []:
                instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            known = instance.get_dynamic_partitions("records")
            for rr in getattr(result, "run_requests", None) or []:
                start = rr.tags.get("dagster/asset_partition_range_start")
                if start is None:  # a run of one record
                    ran.setdefault(rr.partition_key, done)
                    continue
                end = rr.tags["dagster/asset_partition_range_end"]
                for record in known[known.index(start):known.index(end) + 1]:
                    ran.setdefault(record, done)
            if getattr(result, "cursor", None):
                cursor = result.cursor
            time.sleep(max(0.0, tick + interval_s - time.monotonic()))
        thread.join()
    lat = [ran[r] - posted[r] for r in ran]
    assert len(lat) == samples, f"{samples - len(lat)} callbacks never became runs"
    return {"sensor_interval_s": interval_s, "samples": samples,
            "callback_to_run_request_s_median": round(statistics.median(lat), 3),
            "callback_to_run_request_s_max": round(max(lat), 3),
            "sensor_evaluation_s_median": round(statistics.median(evals), 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callbacks", type=int, default=3000, help="per round")
    # the ratio of one round moved 0.4-1.0 on a 2-core machine: the median of several
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--receivers", default="1,2,4")
    parser.add_argument("--inboxes", default="sqlite,postgres")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-samples", type=int, default=8, help="0: no latency part")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    counts = [int(x) for x in args.receivers.split(",")]
    kinds = args.inboxes.split(",")

    from pipeline.sensors import MIN_INTERVAL_S

    started = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ledgerlake-bench-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        cluster = None
        if "postgres" in kinds:
            from tests.postgres import INSTALL, PostgresServer, find_bin

            folder = find_bin()
            if folder is None:
                raise SystemExit(f"bench/receiver_acks.py: {INSTALL}")
            cluster = PostgresServer(folder).start()
            stack.callback(cluster.remove)
        for kind in kinds:
            for count in counts:
                bodies = callbacks(64 + args.rounds * args.callbacks, seed=count)
                inbox = (str(work / f"inbox-{count}.sqlite3") if kind == "sqlite"
                         else cluster.create_database(f"acks{count}"))
                open_inbox(inbox, create=True).close()
                row = configuration(work, kind, inbox, count, bodies, args.callbacks,
                                    args.rounds, args.concurrency,
                                    cluster if kind == "postgres" else None)
                print(json.dumps(row), flush=True)
                rows.append(row)
        lat = [latency(work, float(MIN_INTERVAL_S), args.latency_samples,
                       spread_s=3 * MIN_INTERVAL_S),
               latency(work, 0.0, args.latency_samples, spread_s=MIN_INTERVAL_S)
               ] if args.latency_samples else []
    result = {
        "what": "durable acknowledgements per second of `ledgerlake receiver` processes on "
                "loopback sharing one inbox (200 only after the commit: SQLite "
                "synchronous=full, Postgres synchronous_commit on; group commit), against "
                "the same receivers' HTTP floor; callback-to-run-request latency with the "
                "inbox sensor's interval",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average_1m_at_end": round(os.getloadavg()[0], 2),
                    "platform": platform.platform()},
        "command": "bench/receiver_acks.py " + " ".join(sys.argv[1:]),
        "wall_s": round(time.monotonic() - started, 1),
        "acks": rows,
        "latency": lat,
        "sensor_minimum_interval_s": MIN_INTERVAL_S,
        "note": "medians over rounds; sender, receivers and Postgres share the machine's "
                "cores. http_floor: the same sender and receivers answered 401 before any "
                "body is read or stored. cpu_us_per_ack: CPU of the receivers, the database "
                "server's processes and the sender per stored callback",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
