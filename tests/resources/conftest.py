"""Fixtures of the resources' tests: the scripted fault server (see faults.py), one client of
the module's shared sandbox, and an inbox in each of its stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from faults import FaultServer
from sandboxes import client_for

from resources.inbox import open_inbox


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


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path):
    """Where the inbox is: a SQLite file, or a Postgres database of its own."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return tmp_path / "inbox.sqlite3"


@pytest.fixture
def inbox(where):
    with open_inbox(where, create=True) as ib:
        yield ib
