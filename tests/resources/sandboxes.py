"""Helpers of the client's sandbox tests: clients, customers made ready, sandboxes with options."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.local import Server
from resources.client import ConnectionClient


def client_for(box, env: str = "sandbox", **kw) -> ConnectionClient:
    key = box.sandbox_key if env == "sandbox" else box.production_key
    return ConnectionClient(**{"base_url": box.url, "secret_key": key, "environment": env,
                               **kw})


def make_customers(client: ConnectionClient, *specs: dict, ready: bool = True) -> list[dict]:
    """Create customers (at most 100 per call) and wait until each record's products settle."""
    made = []
    for start in range(0, len(specs), 100):
        made += client.post("sandbox/customers/create",
                            {"customers": list(specs[start:start + 100])})["customers"]
    deadline = time.monotonic() + 30
    for c in made if ready else []:
        while set(client.record(c["record"])["status"].values()) - {"ready", "failed"}:
            assert time.monotonic() < deadline, f"record {c['record']} never got ready"
            time.sleep(0.05)
    return made


@dataclass
class Box:
    url: str
    sandbox_key: str
    production_key: str
    server: Server


@contextlib.contextmanager
def sandbox_with(tmp: Path, *options: str) -> Iterator[Box]:
    """A fresh sandbox started with extra command-line options (say `--rate-limit 2`)."""
    prod, sand = "sk_live_" + secrets.token_hex(12), "sk_test_" + secrets.token_hex(12)
    server = Server("sandbox", "--data-dir", str(tmp / "sandbox"), *options,
                    env={"LEDGERLAKE_PRODUCTION_KEY": prod, "LEDGERLAKE_SANDBOX_KEY": sand},
                    log_path=tmp / "sandbox.log").start()
    try:
        yield Box(server.url, sand, prod, server)
    finally:
        server.stop()
