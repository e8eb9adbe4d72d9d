"""How the client spends a 100,000-transaction fetch: its own CPU versus waiting on the wire.

Starts a real sandbox (child process, loopback), makes one record with about 110,000
transactions, then, alternating, in rounds:

- client: `ConnectionClient.transaction_batches` (httpx, orjson, Arrow) until 100,000 rows;
  `time.thread_time()` of the fetching thread is the client's CPU, the rest of the wall
  clock is waiting for the sandbox and the wire;
- table: `ConnectionClient.transactions` over the whole record (the assets' path, which
  converts 2,000 rows at a time), its CPU scaled to 100,000 rows;
- floor: the same page requests with a bare keep-alive httpx client that only reads the
  bytes (no parse), the fastest this sandbox can be fetched one page at a time.

The client round also times, where they run, its orjson parse with the envelope checks and
its page-to-Arrow conversion; the rest of its CPU is httpx, sockets and the paging loop.

Then, offline on the floor's bodies (warm), the per-step CPU: orjson alone; orjson + the one
struct pass into Arrow; orjson + `Table.from_pylist` to the same types (which first builds a
Python list per column); and orjson + the client's whole page-to-batch conversion.

    .venv/bin/python bench/client_fetch.py [--rows 100000] [--rounds 5]

Writes bench/results/client_fetch.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import resources.client as client_module  # noqa: E402
from pipeline.local import Server  # noqa: E402
from resources.client import ConnectionClient  # noqa: E402
from resources.columns import TRANSACTION_WIRE, transactions_batch  # noqa: E402
from resources.errors import RecordError  # noqa: E402

PAGE = 100
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of another process so far, from /proc; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def measured(pid: int, fn, *args):
    """fn(*args), with the sandbox's CPU seconds spent meanwhile added to its result."""
    before = process_cpu(pid)
    out = fn(*args)
    after = process_cpu(pid)
    stats = out[0] if isinstance(out, tuple) else out
    stats["sandbox_cpu_s"] = None if before is None or after is None else after - before
    return out


def make_record(client: ConnectionClient, rows: int) -> str:
    # volume is transactions per day on average; 36 months of 100 a day is about 110,000
    spec = {"accounts": 1, "months": 36, "volume": max(1, -(-rows * 11 // 10 // 1095))}
    made = client.post("sandbox/customers/create", {"customers": [spec]})["customers"][0]
    deadline = time.monotonic() + 120
    while True:  # the connection completes on its own; wait for its transactions
        try:
            next(client.transaction_pages(made["record"]))
            return made["record"]
        except RecordError as err:
            if err.error_code != "PRODUCT_NOT_READY" or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def timed(steps: dict, name: str, fn):
    """fn, adding the fetching thread's CPU seconds spent in it to steps[name]."""
    def wrapper(*args):
        t0 = time.thread_time()
        try:
            return fn(*args)
        finally:
            steps[name] += time.thread_time() - t0
    return wrapper


def client_round(client: ConnectionClient, record: str, rows: int) -> dict:
    """Fetch until `rows`, timing the client's own parse and Arrow steps where they run."""
    got = pages = 0
    steps = {"orjson_and_checks": 0.0, "arrow": 0.0}
    originals = client_module._envelope, client_module.transactions_batch
    client_module._envelope = timed(steps, "orjson_and_checks", originals[0])
    client_module.transactions_batch = timed(steps, "arrow", originals[1])
    try:
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        batches = client.transaction_batches(record)
        for batch in batches:
            got += batch.num_rows
            pages += 1
            if got >= rows:
                break
        batches.close()
        cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    finally:
        client_module._envelope, client_module.transactions_batch = originals
    return {"rows": got, "pages": pages, "wall_s": wall, "cpu_s": cpu,
            "httpx_and_rest": cpu - sum(steps.values()), **steps}


def table_round(client: ConnectionClient, record: str) -> dict:
    """`ConnectionClient.transactions`, the assets' path: the whole record as one table."""
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    rows = client.transactions(record).num_rows
    return {"rows": rows, "wall_s": time.perf_counter() - wall0,
            "cpu_s": time.thread_time() - cpu0}


def floor_round(url: str, key: str, record: str, pages: int) -> tuple[dict, list[bytes]]:
    bodies = []
    with httpx.Client(base_url=url + "/sandbox/v2/", timeout=60,
                      headers={"Authorization": f"Bearer {key}",
                               "Content-Type": "application/json"}) as http:
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        for n in range(1, pages + 1):
            resp = http.post("transactions/get", content=orjson.dumps(
                {"record": record, "page": n, "limit": PAGE}))
            resp.raise_for_status()
            bodies.append(resp.content)
        cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    return {"wall_s": wall, "cpu_s": cpu}, bodies


def offline(bodies: list[bytes]) -> dict:
    wire = pa.schema(list(TRANSACTION_WIRE))
    def cpu(fn) -> float:
        best = float("inf")
        for _ in range(5):
            t0 = time.thread_time()
            for b in bodies:
                fn(b)
            best = min(best, time.thread_time() - t0)
        return best

    return {
        "orjson_only_s": cpu(orjson.loads),
        "orjson_struct_pass_s": cpu(
            lambda b: pa.array(orjson.loads(b)["data"]["transaction"], type=TRANSACTION_WIRE)),
        "orjson_from_pylist_same_types_s": cpu(
            lambda b: pa.Table.from_pylist(orjson.loads(b)["data"]["transaction"], schema=wire)),
        "orjson_full_batch_as_the_client_s": cpu(
            lambda b: transactions_batch(orjson.loads(b)["data"]["transaction"])),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench/results/client_fetch.json"))
    args = ap.parse_args()

    key = "sk_test_" + secrets.token_hex(12)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        server = Server("sandbox", "--data-dir", f"{tmp}/sandbox", "--rate-limit", "1000000",
                        env={"LEDGERLAKE_SANDBOX_KEY": key,
                             "LEDGERLAKE_PRODUCTION_KEY": "sk_live_" + secrets.token_hex(12)},
                        log_path=Path(tmp) / "sandbox.log").start()
        try:
            with ConnectionClient(base_url=server.url, secret_key=key) as client:
                record = make_record(client, args.rows)
                # warm: the connection, the sandbox's caches, Arrow's first compute call (~1 s)
                client_round(client, record, PAGE)
                runs, tables, floors, bodies = [], [], [], []
                for _ in range(args.rounds):
                    runs.append(measured(server.proc.pid, client_round, client, record,
                                         args.rows))
                    tables.append(table_round(client, record))
                    floor, bodies = measured(server.proc.pid, floor_round, server.url, key,
                                             record, runs[-1]["pages"])
                    floors.append(floor)
        finally:
            server.stop()

    def med(items, name):
        values = [r[name] for r in items if r[name] is not None]
        return statistics.median(values) if values else None

    rows = runs[-1]["rows"]
    wall, cpu = med(runs, "wall_s"), med(runs, "cpu_s")
    floor_wall = med(floors, "wall_s")
    served = med(runs, "sandbox_cpu_s")
    result = {
        "what": "ConnectionClient.transaction_batches over one sandbox record, loopback HTTP",
        "rows": rows, "pages": runs[-1]["pages"], "page_size": PAGE, "rounds": args.rounds,
        "client": {
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "waiting_s": round(wall - cpu, 3), "cpu_share": round(cpu / wall, 3),
            "rows_per_s": round(rows / wall),
            "sandbox_cpu_s_meanwhile": _round(med(runs, "sandbox_cpu_s")),
        },
        "floor_bytes_only": {
            "wall_s": round(floor_wall, 3), "cpu_s": round(med(floors, "cpu_s"), 3),
            "rows_per_s": round(rows / floor_wall),
            "sandbox_cpu_s_meanwhile": _round(med(floors, "sandbox_cpu_s")),
        },
        "table_path_whole_record": {
            "rows": tables[-1]["rows"],
            "wall_s": round(med(tables, "wall_s"), 3), "cpu_s": round(med(tables, "cpu_s"), 3),
            "cpu_s_per_100k_rows": round(med(tables, "cpu_s") * 1e5 / tables[-1]["rows"], 3),
            "rows_per_s": round(tables[-1]["rows"] / med(tables, "wall_s")),
            "how": "ConnectionClient.transactions: converts 2,000 rows at a time, not per page",
        },
        "client_cpu_s_by_step": {
            name: round(med(runs, name), 3)
            for name in ("httpx_and_rest", "orjson_and_checks", "arrow")},
        "split_of_client_wall": None if served is None else {
            "client_cpu": round(cpu / wall, 3),
            "sandbox_cpu": round(served / wall, 3),
            "rest_wire_kernel_scheduling": round(max(0.0, wall - cpu - served) / wall, 3),
        },
        "client_wall_over_floor": round(wall / floor_wall, 3),
        "per_round": [{"client_wall_s": round(r["wall_s"], 3),
                       "client_cpu_s": round(r["cpu_s"], 3),
                       "floor_wall_s": round(f["wall_s"], 3),
                       "floor_cpu_s": round(f["cpu_s"], 3)}
                      for r, f in zip(runs, floors, strict=True)],
        "offline_cpu_same_bodies_warm": {k: round(v, 3) for k, v in offline(bodies).items()},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_avg_1m_before_after": [round(load_before, 2),
                                                 round(os.getloadavg()[0], 2)],
                    "note": "cores shared by this process, the sandbox and other work"},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
