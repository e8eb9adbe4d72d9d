"""Fixtures of the client's tests: the scripted fault server (see faults.py) and one
client of the module's shared sandbox."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from faults import FaultServer
from sandboxes import client_for


@pytest.fixture
def faulty() -> Iterator[FaultServer]:
    server = FaultServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(shared_sandbox):
    """A client of the module's shared sandbox, closed after the module."""
    with client_for(shared_sandbox) as c:
        yield c
