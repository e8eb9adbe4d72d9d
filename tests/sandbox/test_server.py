"""The sandbox as a server: deterministic data, state that survives a restart, concurrent
clients, and the knobs that reach large records."""

from __future__ import annotations

import concurrent.futures as cf
import datetime as dt
import time

import httpx
import pytest

from tests.conftest import start_sandbox

SPEC = {"accounts": 2, "months": 2, "volume": 5, "seed": 1234}


def ok(resp: httpx.Response) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def wait_ready(api: httpx.Client, record: str) -> None:
    for _ in range(300):
        rec = ok(api.post("record/get", json={"record": record}))["record"]
        if all(s != "pending" for s in rec["status"].values()):
            return


def snapshot(api: httpx.Client, record: str) -> tuple:
    lines = ok(api.post("transactions/get", json={"record": record, "limit": 100}))
    balances = ok(api.post("balance/get", json={"record": record}))["balance"]
    income = ok(api.post("income/get", json={"record": record}))["income"]
    ident = ok(api.post("identity/get", json={"record": record}))["identity"]
    return (lines["pagination"]["totalDocs"], lines["transaction"],
            [(b["account"], b["ledger_balance"]) for b in balances], income["streams"],
            ident[0]["bvn"])


def test_same_seed_same_data_other_seed_other_data(tmp_path):
    snaps = []
    for name, seed in (("a", 1234), ("b", 1234), ("c", 99)):
        box = start_sandbox(tmp_path / name)
        try:
            with box.api() as api:
                c = ok(api.post("sandbox/customers/create",
                                json={"customers": [{**SPEC, "seed": seed}]}))["customers"][0]
                wait_ready(api, c["record"])
                snaps.append((c["record"], c["accounts"], snapshot(api, c["record"])))
        finally:
            box.server.stop()
    assert snaps[0] == snaps[1]
    assert snaps[0][0] != snaps[2][0] and snaps[0][2][1] != snaps[2][2][1]


def test_state_survives_a_restart(tmp_path):
    box = start_sandbox(tmp_path / "s")
    try:
        with box.api() as api:
            api.post("settings/webhook", json={"url": "http://127.0.0.1:9/x"}).raise_for_status()
            c = ok(api.post("sandbox/customers/create", json={"customers": [SPEC]}))["customers"][0]
            wait_ready(api, c["record"])
            token = ok(api.post("token/exchange", json={"public_token": c["public_token"]}))
            gone = ok(api.post("sandbox/customers/create", json={"customers": [{}]}))
            gone = gone["customers"][0]
            api.post("record/remove", json={"record": gone["record"]}).raise_for_status()
            bank = ok(api.get("banks/list"))["banks"][0]["_id"]
            api.post("sandbox/banks/status", json={"bank": bank, "status": "down"})
            api.post("sandbox/clock/advance", json={"seconds": 3600}).raise_for_status()
            before = snapshot(api, c["record"])
    finally:
        box.server.stop()
    # same data dir, same keys: the new process finds everything where it was
    from pipeline.local import Server
    server = Server("sandbox", "--data-dir", str(box.data_dir),
                    env={"LEDGERLAKE_PRODUCTION_KEY": box.production_key,
                         "LEDGERLAKE_SANDBOX_KEY": box.sandbox_key}).start()
    try:
        with httpx.Client(base_url=server.url + "/sandbox/v2/", timeout=30,
                          headers={"Authorization": f"Bearer {box.sandbox_key}"}) as api:
            assert snapshot(api, c["record"]) == before
            item = ok(api.post("item/get", json={"access_token": token["access_token"]}))
            assert item["item"]["record"] == c["record"]
            spent = api.post("token/exchange", json={"public_token": c["public_token"]})
            assert spent.json()["error_code"] == "INVALID_PUBLIC_TOKEN"
            assert api.post("record/get", json={"record": gone["record"]}).status_code == 400
            banks = {b["_id"]: b["status"] for b in ok(api.get("banks/list"))["banks"]}
            assert banks[bank] == "down"
    finally:
        server.stop()


def test_concurrent_clients(shared_sandbox):
    with shared_sandbox.api() as api:
        c = ok(api.post("sandbox/customers/create",
                        json={"customers": [{**SPEC, "volume": 10}]}))["customers"][0]
        wait_ready(api, c["record"])
        total = ok(api.post("transactions/get", json={"record": c["record"]}))
        total = total["pagination"]["totalDocs"]

    def page_all(_):
        seen = []
        with shared_sandbox.api() as client:
            page = 1
            while page:
                data = ok(client.post("transactions/get",
                                      json={"record": c["record"], "page": page, "limit": 100}))
                seen += [t["_id"] for t in data["transaction"]]
                page = data["pagination"]["nextPage"]
        return seen

    def make(_):
        with shared_sandbox.api() as client:
            return ok(client.post("sandbox/customers/create",
                                  json={"customers": [{}, {}]}))["customers"]

    with cf.ThreadPoolExecutor(8) as pool:
        pages = [pool.submit(page_all, i) for i in range(4)]
        made = [pool.submit(make, i) for i in range(4)]
        results = [f.result() for f in pages]
        created = [r for f in made for r in f.result()]
    assert all(r == results[0] for r in results) and len(set(results[0])) == total
    assert len({r["record"] for r in created}) == 8


@pytest.mark.slow
def test_knobs_reach_100000_transactions_on_one_record(shared_sandbox):
    with shared_sandbox.api() as api:
        c = ok(api.post("sandbox/customers/create", json={"customers": [
            {"accounts": 5, "months": 24, "volume": 30, "seed": 5}]}))["customers"][0]
        wait_ready(api, c["record"])
        data = ok(api.post("transactions/get",
                           json={"record": c["record"], "page": 1000, "limit": 100}))
    assert data["pagination"]["totalDocs"] >= 100_000
    assert len(data["transaction"]) == 100


@pytest.mark.slow
def test_knobs_reach_10000_records(tmp_path):
    box = start_sandbox(tmp_path / "many")
    try:
        with box.api() as api:
            records = set()
            for _ in range(100):
                made = ok(api.post("sandbox/customers/create",
                                   json={"customers": [{"months": 1, "volume": 1}] * 100}))
                records |= {c["record"] for c in made["customers"]}
            assert len(records) == 10_000
            last = sorted(records)[-1]
            assert ok(api.post("record/get", json={"record": last}))["record"]["_id"] == last
    finally:
        box.server.stop()


def test_a_frozen_clock_moves_only_when_advanced(tmp_path):
    box = start_sandbox(tmp_path / "frozen", "--freeze-clock")
    try:
        with box.api() as api:
            first = ok(api.post("sandbox/clock/advance", json={"seconds": 1}))["now"]
            time.sleep(1.5)  # on a running clock the next answer would be >= 2.5 s later
            second = ok(api.post("sandbox/clock/advance", json={"seconds": 1}))["now"]
    finally:
        box.server.stop()
    stamps = [dt.datetime.fromisoformat(s.replace("Z", "+00:00")) for s in (first, second)]
    assert (stamps[1] - stamps[0]).total_seconds() == pytest.approx(1.0, abs=0.002)
