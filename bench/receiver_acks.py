"""Durable acknowledgements per second of the receiver, and callback-to-run latency.

The receiver runs as a real child process on loopback (as in the tests); senders are
asyncio tasks over httpx keep-alive connections in this process, each POSTing distinct
callbacks. An acknowledgement (200) means the event is committed with `synchronous=full`;
after each level every callback is checked present in the inbox, exactly once.

Peers measured in the same run, for ratios:
- `per_event_commit`: `Inbox.add` in process, one transaction (one disk sync) per event, the
  rate a receiver without group commit could at best acknowledge;
- `http_floor`: the same senders against the same receiver with a wrong token (401 before
  the body is read, no disk): what the HTTP path alone costs.

Callback-to-run latency: a callback POSTed at a random moment, the inbox sensor evaluated
(`build_sensor_context`, the Definitions of pipeline/definitions.py) every
`MIN_INTERVAL_S` seconds as the Dagster daemon would, the time until the evaluation that
returns its RunRequest finishes. Also with the sensor evaluated back to back, the floor.

    .venv/bin/python bench/receiver_acks.py [--callbacks 1000] [--rounds 3] [--levels 8,16,32]

Writes bench/results/receiver.json and prints it. Sender and receiver share the machine's
cores, so the figures are a floor for a receiver with a machine of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.inbox import Inbox  # noqa: E402
from pipeline.local import Server  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "receiver.json"


def callback(record: str, i: int) -> dict:
    return {"method": "ACCOUNTS", "callback_type": "ACCOUNTS", "callback_code":
            "ACCOUNTS_SUCCESS", "type": "CALLBACK", "code": "ACCOUNTS_SUCCESS",
            "env": "production-sandbox", "status": "is_success",
            "started_at": "2026-01-01T00:00:00.000Z",
            "ended_at": f"2026-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
            "message": "Accounts ready", "meta": {}, "options": {}, "extras": {},
            "bankName": "Sandbox Bank", "bankSlug": "sandbox-bank", "record": record,
            "recordId": record, "customerId": "c" + record, "customerEmail": [],
            "country": "NG", "current_project": "p", "owner": "o"}


async def send_all(url: str, token: str, bodies: list[bytes], concurrency: int
                   ) -> tuple[float, list[int], list[float]]:
    """`concurrency` asyncio senders, each on its own keep-alive HTTP/1.1 connection.

    Written on asyncio streams rather than httpx: the senders share the receiver's cores,
    and a lean sender leaves more of them to the receiver being measured.
    """
    parsed = httpx.URL(url)
    head = (f"POST {parsed.raw_path.decode()} HTTP/1.1\r\nHost: {parsed.host}:{parsed.port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n").encode()
    queue = list(reversed(bodies))
    statuses: list[int] = []
    latencies: list[float] = []

    async def worker() -> None:
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
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, statuses, latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def acks(work: Path, concurrency: int, n: int, rounds: int) -> dict:
    """`rounds` rounds of n distinct callbacks, each beside a floor round; medians reported."""
    token = secrets.token_hex(16)
    inbox = work / f"acks-{concurrency}.sqlite3"
    records = [f"bench{concurrency}-{i:07d}" for i in range(n * rounds + 50)]
    bodies = [orjson.dumps(callback(r, i)) for i, r in enumerate(records)]
    rates, floors, singles, lat = [], [], [], []
    with Server("receiver", "--inbox", str(inbox), "--token", token,
                log_path=work / "receiver.log") as server:
        url = server.url + "/callbacks/"
        asyncio.run(send_all(url, token, bodies[:50], concurrency))  # warm up: connections
        for k in range(rounds):
            chunk = bodies[50 + k * n:50 + (k + 1) * n]
            floor_s, floor_statuses, _ = asyncio.run(send_all(url, "wrong", chunk, concurrency))
            assert set(floor_statuses) == {401}
            seconds, statuses, latencies = asyncio.run(send_all(url, token, chunk, concurrency))
            assert statuses == [200] * n, sorted(set(statuses))
            singles.append(per_event_commit(work, 200))
            rates.append(n / seconds)
            floors.append(n / floor_s)
            lat += latencies
    with Inbox(inbox, create=True) as ib:
        stored = sorted(e.record for e in ib.after(0, len(records) * 2))
    assert stored == records, "an acknowledged callback is missing or doubled"
    return {"concurrency": concurrency, "callbacks_per_round": n, "rounds": rounds,
            "acks_per_s": round(statistics.median(rates)),
            "ack_latency_ms_p50": round(pct(lat, 0.5) * 1000, 1),
            "ack_latency_ms_p99": round(pct(lat, 0.99) * 1000, 1),
            "http_floor_per_s": round(statistics.median(floors)),
            "acks_over_http_floor": round(statistics.median(
                r / f for r, f in zip(rates, floors, strict=True)), 2),
            "per_event_commit_per_s": round(statistics.median(singles)),
            "acks_over_per_event_commit": round(statistics.median(
                r / s for r, s in zip(rates, singles, strict=True)), 2),
            "verified_in_inbox": len(stored)}


def per_event_commit(work: Path, n: int) -> float:
    """One transaction, one disk sync, per event, in process: no group commit."""
    path = work / f"single-{secrets.token_hex(4)}.sqlite3"
    with Inbox(path, create=True) as ib:
        bodies = [callback(f"single-{i}", i) for i in range(n)]
        started = time.perf_counter()
        for b in bodies:
            ib.add(b)
        return n / (time.perf_counter() - started)


def latency(work: Path, interval_s: float, samples: int, spread_s: float) -> dict:
    """Callbacks POSTed at random moments; the sensor evaluated every `interval_s`."""
    from dagster import DagsterInstance, build_sensor_context

    token = secrets.token_hex(16)
    inbox = work / f"latency-{interval_s}.sqlite3"
    os.environ["LEDGERLAKE_INBOX"] = str(inbox)
    os.environ.setdefault("LEDGERLAKE_HOME", str(work / "home"))
    from pipeline.definitions import defs

    sensor = defs.resolve_sensor_def("inbox_sensor")
    posted: dict[str, float] = {}
    ran: dict[str, float] = {}
    evals: list[float] = []
    with Server("receiver", "--inbox", str(inbox), "--token", token,
                log_path=work / "receiver-latency.log") as server, \
            DagsterInstance.ephemeral() as instance:
        url = server.url + "/callbacks/"
        Inbox(inbox, create=True).close()  # the file exists before the first evaluation
        rng = random.Random(7)
        moments = sorted(rng.uniform(0, spread_s) for _ in range(samples))

        def sender() -> None:
            with httpx.Client() as client:
                start = time.monotonic()
                for i, at in enumerate(moments):
                    time.sleep(max(0.0, start + at - time.monotonic()))
                    record = f"lat{int(interval_s * 1000)}-{i}"
                    posted[record] = time.monotonic()
                    r = client.post(url, content=orjson.dumps(callback(record, i)),
                                    headers={"Authorization": f"Bearer {token}"})
                    r.raise_for_status()

        thread = threading.Thread(target=sender)
        thread.start()
        cursor = None
        deadline = time.monotonic() + spread_s + interval_s + 30
        while len(ran) < samples and time.monotonic() < deadline:
            tick = time.monotonic()
            with build_sensor_context(instance=instance, cursor=cursor,
                                      definitions=defs) as ctx:
                result = sensor(ctx)
            done = time.monotonic()
            evals.append(done - tick)
            for rr in getattr(result, "run_requests", None) or []:
                ran.setdefault(rr.partition_key, done)
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
    parser.add_argument("--callbacks", type=int, default=1000)
    parser.add_argument("--levels", default="8,16,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=8)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    from pipeline.sensors import MIN_INTERVAL_S

    with tempfile.TemporaryDirectory(prefix="ledgerlake-bench-") as tmp:
        work = Path(tmp)
        rows = [acks(work, c, args.callbacks, args.rounds) for c in levels]
        lat = [latency(work, float(MIN_INTERVAL_S), args.latency_samples,
                       spread_s=3 * MIN_INTERVAL_S),
               latency(work, 0.0, args.latency_samples, spread_s=MIN_INTERVAL_S)]
    result = {
        "what": "durable acknowledgements per second of `ledgerlake receiver` on loopback "
                "(200 only after a synchronous=full SQLite commit; group commit), and "
                "callback-to-run-request latency with the inbox sensor's interval",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average_1m": round(os.getloadavg()[0], 2),
                    "platform": platform.platform()},
        "acks": rows,
        "latency": lat,
        "sensor_minimum_interval_s": MIN_INTERVAL_S,
        "note": "medians over rounds; senders and receiver share the machine's cores. "
                "http_floor: the same senders answered 401 before any body is read or stored. "
                "per_event_commit: Inbox.add in process, one synchronous transaction per event, "
                "measured between rounds",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
