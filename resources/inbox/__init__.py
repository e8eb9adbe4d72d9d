"""The inbox: every callback the receiver accepted, and each record's state.

`callbacks` reads what a callback says (no database); `store` is the inbox, one class over
the dialect of `sqlite` (a file) or `postgres` (a database); `resource` the Dagster resource
over either. This package imports no Dagster, so the receiver starts without it.
"""

from pathlib import Path

from .callbacks import (
    CONNECTED,
    DISCONNECTED,
    NAME,
    PERSONAL_MEMBERS,
    RECORD_ID,
    InvalidEvent,
    describe,
    kept_body,
    scrubbed,
)
from .errors import InboxMissing, InboxUnavailable
from .store import (
    FAILED,
    HELD,
    LANDED_OK,
    Event,
    Inbox,
    LandingState,
    Product,
    RecordState,
    Vitals,
)


def is_database_url(location: str | Path) -> bool:
    """Whether `location` names a Postgres database rather than a SQLite file."""
    return isinstance(location, str) and location.lower().startswith(
        ("postgresql://", "postgres://"))


def open_inbox(location: str | Path, *, create: bool = False) -> Inbox:
    """The inbox at `location`, a SQLite path or a postgresql:// URL; `create=True` (the
    receiver's) makes it if missing, any other reader gets InboxMissing."""
    if is_database_url(location):
        from .postgres import PostgresInbox  # psycopg2 loaded only for a Postgres inbox

        return PostgresInbox(str(location), create=create)
    return Inbox(location, create=create)


__all__ = ["CONNECTED", "DISCONNECTED", "FAILED", "HELD", "LANDED_OK", "NAME",
           "PERSONAL_MEMBERS", "RECORD_ID", "Event", "Inbox", "InboxMissing",
           "InboxUnavailable", "InvalidEvent", "LandingState", "Product", "RecordState", "Vitals",
           "describe", "is_database_url", "kept_body", "open_inbox", "scrubbed"]
