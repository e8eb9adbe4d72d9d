"""How fast the sandbox serves /transactions/get: transactions per second to one client.

Starts the sandbox as a child process (as the tests do), makes one record of about 100,000
transactions, then pages all of it with `limit=100` over one httpx keep-alive client,
parsing every page. Then it times how long a data set of 1,000,000 transactions (ten such
records) takes to be ready: created, generated and its first page served for every record.
Prints the figures and writes bench/results/sandbox_throughput.json.

    .venv/bin/python bench/sandbox_throughput.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.local import Server  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "sandbox_throughput.json"


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def page_all(client: httpx.Client, record: str) -> tuple[int, int, float]:
    """Fetch every page; return (transactions, requests, seconds)."""
    started = time.perf_counter()
    page, n, requests = 1, 0, 0
    while page:
        resp = client.post("transactions/get", content=orjson.dumps(
            {"record": record, "page": page, "limit": 100}))
        resp.raise_for_status()
        data = orjson.loads(resp.content)["data"]
        n += len(data["transaction"])
        requests += 1
        page = data["pagination"]["nextPage"]
    return n, requests, time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--volume", type=int, default=27, help="transactions per account-day")
    ap.add_argument("--scale-records", type=int, default=10,
                    help="records of the data-set measurement (default: 10, ~1,000,000 lines)")
    args = ap.parse_args()
    key = "sk_test_" + secrets.token_hex(12)
    load = os.getloadavg()  # the machine is shared: say how busy it was
    with tempfile.TemporaryDirectory() as tmp:
        env = {"LEDGERLAKE_SANDBOX_KEY": key,
               "LEDGERLAKE_PRODUCTION_KEY": "sk_live_" + secrets.token_hex(12),
               "LEDGERLAKE_LOG_LEVEL": os.environ.get("LEDGERLAKE_LOG_LEVEL", "INFO")}
        # rate limiting off: this measures serving, not the limiter's budget
        with Server("sandbox", "--data-dir", f"{tmp}/sandbox", "--rate-limit", "0",
                    env=env, log_path=Path(tmp) / "sandbox.log") as server:
            client = httpx.Client(base_url=server.url + "/sandbox/v2/", timeout=60,
                                  headers={"Authorization": f"Bearer {key}",
                                           "Content-Type": "application/json"})
            made = client.post("sandbox/customers/create", json={"customers": [
                {"accounts": 5, "months": 24, "volume": args.volume, "seed": 1}]})
            made.raise_for_status()
            record = made.json()["data"]["customers"][0]["record"]
            t0 = time.perf_counter()
            first = client.post("transactions/get", json={"record": record, "limit": 1})
            first_s = time.perf_counter() - t0
            total = first.json()["data"]["pagination"]["totalDocs"]
            rounds = []
            for _ in range(args.rounds):
                server_cpu, client_cpu = cpu_of(server.proc.pid), time.process_time()
                n, requests, seconds = page_all(client, record)
                server_cpu = cpu_of(server.proc.pid) - server_cpu
                client_cpu = time.process_time() - client_cpu
                assert n == total, (n, total)
                rounds.append({"transactions": n, "requests": requests,
                               "seconds": round(seconds, 3),
                               "server_cpu_ms_per_request": round(server_cpu / requests * 1e3, 3),
                               "client_cpu_ms_per_request": round(client_cpu / requests * 1e3, 3),
                               "transactions_per_second": round(n / seconds),
                               "requests_per_second": round(requests / seconds)})
            # a million transactions: ten records of ~100,000, each served once
            t0 = time.perf_counter()
            made = client.post("sandbox/customers/create", json={"customers": [
                {"accounts": 5, "months": 24, "volume": args.volume, "seed": 100 + i}
                for i in range(args.scale_records)]})
            made.raise_for_status()
            created_s = time.perf_counter() - t0
            million = 0
            for c in made.json()["data"]["customers"]:
                resp = client.post("transactions/get", json={"record": c["record"], "limit": 100})
                resp.raise_for_status()
                million += resp.json()["data"]["pagination"]["totalDocs"]
            ready_s = time.perf_counter() - t0
            client.close()
    best = max(r["transactions_per_second"] for r in rounds)
    result = {"benchmark": "sandbox /transactions/get, limit=100, one keep-alive client",
              "record_transactions": total, "first_request_seconds": round(first_s, 3),
              "rounds": rounds, "best_transactions_per_second": best,
              "data_set": {"records": args.scale_records, "transactions": million,
                           "create_seconds": round(created_s, 2),
                           "ready_seconds": round(ready_s, 2)},
              "median_transactions_per_second": sorted(
                  r["transactions_per_second"] for r in rounds)[len(rounds) // 2],
              "target_transactions_per_second": 50_000,
              "load_average_at_start": load,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{total} transactions, first request (generation) {first_s:.2f}s")
    for r in rounds:
        print(f"  {r['transactions_per_second']:>8} transactions/s "
              f"({r['requests_per_second']} requests/s, {r['seconds']}s; CPU per request: "
              f"server {r['server_cpu_ms_per_request']}ms, "
              f"client {r['client_cpu_ms_per_request']}ms)")
    print(f"data set: {million} transactions in {args.scale_records} records ready in "
          f"{ready_s:.1f}s (created in {created_s:.1f}s)")
    print(f"median {result['median_transactions_per_second']} transactions/s; "
          f"written {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
