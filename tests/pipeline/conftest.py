"""The sensors' tests' fixtures: a real inbox file the sensors read (LEDGERLAKE_INBOX), and
the project's Definitions."""

from __future__ import annotations

import pytest

from resources.inbox import Inbox


@pytest.fixture
def inbox(tmp_path, monkeypatch):
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    with Inbox(path, create=True) as ib:
        yield ib


@pytest.fixture(scope="module")
def defs():
    from pipeline.definitions import defs

    return defs
