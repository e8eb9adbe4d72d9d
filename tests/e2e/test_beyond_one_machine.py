"""Issue 14's proof: processes that share nothing but Postgres and the object store, as separate
machines would.

Two receivers on one Postgres inbox, the Dagster daemon and webserver on Postgres storage
(deploy/dagster.yaml: queued runs, each launched in its own process), the lake on S3 (moto's
server, checking signatures). The sandbox delivers the webhooks of 200 new records across both
receivers, half to each, each redelivery to the other; one receiver is SIGKILLed mid-stream and
the sandbox's hourly redelivery (its clock advanced) reaches the survivor. Then every record is
in the lake once, with exactly the sandbox's rows (count, ids and sum per record), the
warehouse over S3 answers, and the webserver's GraphQL lists the runs, the batches of
records they ran over and what they landed, from Postgres. No password, key or token appears
in any process's log.

The sandbox's clock is frozen and the daemon starts once the inbox holds every record's
callbacks (after the last clock advance), so the sandbox's history at the end is the history
every run fetched: the ground truth to compare with.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pyarrow as pa
import pytest
import yaml

from pipeline.local import Server, stop_process
from resources.inbox import open_inbox
from resources.lake import Lake
from tests.conftest import start_sandbox
from tests.e2e.test_forgotten import (
    found,
    found_in_postgres,
    found_in_store,
    holding,
    needles_for,
)
from tests.ground_truth import history, partitions, signed, wait
from tests.postgres import pg_env
from tests.s3 import free_port, moto_s3

REPO = Path(__file__).resolve().parents[2]
RECORDS = 200
BIN = Path(sys.executable).parent

GRAPHQL = """
{
  runsOrError(filter: {pipelineName: "ingest_job"}) {
    ... on Runs { results { runId status runConfigYaml } }
  }
  assetNodeOrError(assetKey: {path: ["transactions"]}) {
    ... on AssetNode { assetMaterializations(limit: 1000) {
      runId metadataEntries { label ... on IntMetadataEntry { intValue } } } }
  }
}
"""


def answer(env: dict[str, str], home: Path) -> str | None:
    """`ledgerlake sql`'s count of the records in the transactions view, or None."""
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "sql", "--format", "csv",
                          "select count(distinct record_id) as n from transactions"],
                         cwd=home, env=env, capture_output=True, text=True)
    return out.stdout.split()[-1] if out.returncode == 0 and out.stdout.split() else None


def graphql(port: int) -> dict | None:
    try:
        resp = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": GRAPHQL},
                          timeout=60)
    except httpx.HTTPError:
        return None
    data = resp.json().get("data") if resp.status_code == 200 else None
    runs = (data or {}).get("runsOrError", {}).get("results")
    # settled: later callbacks of landed records may still have runs queued
    if not runs or any(r["status"] not in ("SUCCESS", "FAILURE", "CANCELED") for r in runs):
        return None
    return data


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_receivers_a_daemon_and_runs_on_postgres_and_s3(postgres_server, tmp_path):
    inbox_url = postgres_server.create_database("inbox")
    dagster_url = postgres_server.create_database("dagster")
    token = secrets.token_hex(16)
    home = tmp_path / "home"
    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True)
    (dagster_home / "dagster.yaml").write_text((REPO / "deploy" / "dagster.yaml").read_text())
    logs: list[Path] = []
    procs: list[subprocess.Popen] = []

    with moto_s3(tmp_path) as s3:
        lake_root = s3.root()
        sandbox = start_sandbox(tmp_path / "sandbox", "--freeze-clock")
        env = {**s3.env(), **pg_env(dagster_url),
               "DAGSTER_HOME": str(dagster_home), "LEDGERLAKE_HOME": str(home),
               "LEDGERLAKE_LAKE": lake_root, "LEDGERLAKE_INBOX": inbox_url,
               "LEDGERLAKE_API_URL": sandbox.url, "LEDGERLAKE_ENVIRONMENT": "sandbox",
               "LEDGERLAKE_SECRET_KEY": sandbox.sandbox_key,
               "LEDGERLAKE_RECEIVER_TOKEN": token, "LEDGERLAKE_RETRY_DELAY_S": "0.5"}
        secrets_shown = [s3.secret, urlsplit(inbox_url).password, sandbox.sandbox_key, token]
        receivers = []
        for name in ("a", "b"):
            logs.append(tmp_path / f"receiver-{name}.log")
            receivers.append(Server("receiver", env=env, log_path=logs[-1]).start())
        try:
            with sandbox.api() as api:
                # a sandbox extension: first deliveries alternate, redeliveries go to the other
                api.post("settings/webhook", json={
                    "url": [r.url + "/callbacks/" for r in receivers], "token": token}
                         ).raise_for_status()

                def create(n: int) -> list[str]:
                    made = api.post("sandbox/customers/create", json={"customers": [
                        {"accounts": 1, "months": 1} for _ in range(n)]})
                    assert made.status_code == 200, made.text
                    return [c["record"] for c in made.json()["data"]["customers"]]

                def delivered() -> set[str]:
                    with open_inbox(inbox_url) as inbox:
                        return {e.record for e in inbox.after(0, 100_000)
                                if e.method == "TRANSACTIONS"}

                records = create(RECORDS // 2)
                # mid-stream: once some callbacks are in, receiver A dies without a word
                wait("first callbacks", lambda: len(delivered()) >= RECORDS // 8, 120)
                os.kill(receivers[0].proc.pid, signal.SIGKILL)
                receivers[0].proc.wait()
                records += create(RECORDS - RECORDS // 2)
                # deliveries to A failed; the next hour's redelivery goes to B

                def advance(seconds: int) -> str:
                    moved = api.post("sandbox/clock/advance", json={"seconds": seconds})
                    return moved.raise_for_status().json()["data"]["now"]

                def redelivered() -> bool:
                    """Every record's callback is in the inbox. While one waits for its next
                    hourly try (its last went to A), the sandbox's clock moves an hour: on a
                    loaded machine first tries still go out after a fixed few hours moved."""
                    missing, now = set(records) - delivered(), advance(0)
                    for record in missing:
                        got = api.get("callback", params={"record": record,
                                                          "method": "TRANSACTIONS"})
                        state = got.raise_for_status().json()["data"]["callback"]
                        if state and (state["next_attempt_at"] or "") > now:
                            advance(3600)
                            break
                    return not missing

                wait("every record's callbacks in the inbox", redelivered, 300,
                     receivers[1].proc, every_s=3)

            with open_inbox(inbox_url) as inbox:
                events = inbox.after(0, 100_000)
            # one event per delivery identity: redeliveries across receivers stored once
            assert len({e.id for e in events}) == len(events)
            per = {}
            for e in events:
                if e.record and e.method == "TRANSACTIONS":
                    per[e.record] = per.get(e.record, 0) + 1
            assert set(per) == set(records) and set(per.values()) == {1}

            # the Dagster side: its instance on Postgres, the service's pool set once
            subprocess.run([str(BIN / "dagster"), "instance", "concurrency", "set",
                            "connection_service", "4"], env=env, cwd=home, check=True,
                           capture_output=True)
            port = free_port()
            for name, cmd in (("daemon", [str(BIN / "dagster-daemon"), "run"]),
                              ("webserver", [str(BIN / "dagster-webserver"), "-h",
                                             "127.0.0.1", "-p", str(port)])):
                logs.append(tmp_path / f"{name}.log")
                log = open(logs[-1], "wb")  # noqa: SIM115
                procs.append(subprocess.Popen([*cmd, "-w", str(REPO / "workspace.yaml")],
                                              cwd=home, env=env, stdout=log,
                                              stderr=subprocess.STDOUT))
            daemon = procs[0]
            lake = Lake(root=lake_root)
            products = ("accounts", "transactions", "balance_history", "income", "identity")
            wait("every record in every product table",
                 lambda: all(set(records) <= set(partitions(lake, t)) for t in products),
                 600, daemon, every_s=3)
            wait("the warehouse over S3 answers for every record", lambda: answer(env, home)
                 == str(RECORDS), 240, daemon, every_s=5)

            # ground truth: the sandbox's own history of every record
            amounts = pa.schema([("record_id", pa.string()), ("transaction_id", pa.string()),
                                 ("amount", pa.decimal128(18, 2))])
            landed = lake.read("transactions", schema=amounts).to_pylist()
            ids: dict[str, list[str]] = {}
            sums: dict[str, Decimal] = {}
            for row in landed:
                ids.setdefault(row["record_id"], []).append(row["transaction_id"])
                sums[row["record_id"]] = sums.get(row["record_id"], Decimal(0)) + row["amount"]
            with sandbox.api() as api:
                for record in records:
                    truth = history(api, record)
                    got = ids.get(record, [])
                    assert len(got) == len(set(got)), f"{record}: a line landed twice"
                    assert sorted(got) == sorted(t["_id"] for t in truth), record
                    assert sums[record] == sum(signed(t) for t in truth)

            # the UI's API reads the runs, their batches and what they landed from Postgres
            body = wait("every run settled, in the webserver's GraphQL", lambda: graphql(port),
                        300, procs[1], every_s=3)
            runs = body["runsOrError"]["results"]
            assert runs and {r["status"] for r in runs} == {"SUCCESS"}
            ran = set()
            for run in runs:  # each names its records by number
                ran |= set(yaml.safe_load(run["runConfigYaml"])["resources"]["batch"]
                           ["config"]["records"])
            with open_inbox(inbox_url) as inbox:
                assert set(inbox.ids_of(ran).values()) == set(records)
            assert len(runs) < RECORDS  # records share runs
            landed = body["assetNodeOrError"]["assetMaterializations"]
            assert {m["runId"] for m in landed} <= {r["runId"] for r in runs}
            published = [e["intValue"] for m in landed for e in m["metadataEntries"]
                         if e["label"] == "published"]
            assert len(published) == len(landed) and sum(published) >= RECORDS
            # and each record's landing in the lake names one of those runs
            rows = lake.read("landings", schema=pa.schema([
                ("record_id", pa.string()), ("product", pa.string()),
                ("outcome", pa.string()), ("run_id", pa.string())])).to_pylist()
            by = {(r["record_id"], r["run_id"]) for r in rows
                  if r["product"] == "transactions" and r["outcome"] == "landed"}
            assert {record for record, _ in by} == set(records)
            assert {run for _, run in by} <= {m["runId"] for m in landed}

            # forgotten means forgotten here too: the customer's every value and record id
            # out of both databases, the lake's objects, the files and the logs
            rows = lake.read("accounts").select(["record_id", "customer_id"]).to_pylist()
            owners = {r["record_id"]: r["customer_id"] for r in rows}
            customer = owners[records[0]]
            needles = needles_for(sandbox, owners, customer, env,
                                  ("record", "names", "numbers", "contacts"))
            assert found_in_store(lake_root, needles)  # the scan sees them before
            gone = subprocess.run([sys.executable, "-m", "pipeline.cli", "forget", "--customer",
                                   customer, "--even-connected"], cwd=home, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert gone.returncode == 0, gone.stderr
            assert found_in_postgres(inbox_url, needles) == {}
            assert found_in_postgres(dagster_url, needles) == {}
            assert found_in_store(lake_root, needles) == {}
            assert found(home, needles) == {}
            assert [str(p) for p in logs if holding(p.read_bytes(), needles)] == []
        finally:
            for proc in procs:
                stop_process(proc, timeout_s=30)
            for server in receivers:
                server.stop()
            sandbox.server.stop()
    for log in logs:
        text = log.read_text(errors="replace")
        for secret in secrets_shown:
            assert secret not in text, f"a secret appears in {log.name}"
