"""Helpers of the client's sandbox tests: clients, customers made ready, sandboxes with options."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from resources.client import Client
from tests.conftest import Sandbox, start_sandbox


def client_for(box, env: str = "sandbox", **kw) -> Client:
    key = box.sandbox_key if env == "sandbox" else box.production_key
    return Client(**{"base_url": box.url, "secret_key": key, "environment": env,
                               **kw})


def make_customers(client: Client, *specs: dict, ready: bool = True) -> list[dict]:
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


@contextlib.contextmanager
def sandbox_with(tmp: Path, *options: str) -> Iterator[Sandbox]:
    """A fresh sandbox started with extra command-line options (say `--rate-limit 2`)."""
    box = start_sandbox(tmp / "sandbox", *options)
    try:
        yield box
    finally:
        box.server.stop()
