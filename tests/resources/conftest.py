"""Fixtures of the client's tests: the scripted fault server (see faults.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from faults import FaultServer


@pytest.fixture
def faulty() -> Iterator[FaultServer]:
    server = FaultServer()
    try:
        yield server
    finally:
        server.stop()
