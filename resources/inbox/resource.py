"""The inbox as a Dagster resource: the one way the sensor, the schedules, the jobs and the
assets reach it (callbacks, record states, landing states).

Apart from the store so that a receiver, which only writes the inbox, starts without Dagster.
"""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from resources.config import inbox_from_env

from . import open_inbox
from .store import Inbox


class InboxResource(ConfigurableResource):
    """The inbox, opened for each use (never created: only the receiver does)."""

    path: str | None = Field(default=None, description=(
        "The inbox: a SQLite file or a postgresql:// URL (better without its password, which "
        "PGPASSWORD or ~/.pgpass can hold: this value shows in the UI); by default "
        "LEDGERLAKE_INBOX (or $LEDGERLAKE_HOME/inbox.sqlite3), read when it is opened"))

    def open(self) -> Inbox:
        # read at open, so one Definitions serves any setting
        return open_inbox(self.path if self.path is not None else inbox_from_env())
