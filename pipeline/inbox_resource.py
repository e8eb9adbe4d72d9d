"""The inbox as a Dagster resource: what the sensor, the schedules and the replay job read.

Apart from pipeline/inbox.py so that a receiver, which only writes the inbox, starts without
importing Dagster.
"""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from .inbox import Inbox, open_inbox


class InboxResource(ConfigurableResource):
    """The inbox as the sensor, the schedules and the replay job read it (never creating it:
    only the receiver does)."""

    path: str | None = Field(default=None, description=(
        "The inbox: a SQLite file or a postgresql:// URL (better without its password, which "
        "PGPASSWORD or ~/.pgpass can hold: this value shows in the UI); by default "
        "LEDGERLAKE_INBOX (or $LEDGERLAKE_HOME/inbox.sqlite3), read when it is opened"))

    def open(self) -> Inbox:
        if self.path is not None:
            return open_inbox(self.path)
        from .config import Settings  # read at open, so one Definitions serves any setting

        return open_inbox(Settings.from_env().inbox)
