"""Turns between the processes of one machine: a lock file per purpose and key in the
temporary folder, held (flock) until the block ends or its process does, so a killed holder
never leaves it taken. Threads take turns by it too: each opens the file for itself."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def machine_lock(purpose: str, key: str) -> Iterator[None]:
    """Hold this machine's lock of `purpose` for `key` (a table's or a lake's location, never
    shown: only its hash names the file) for the block."""
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"ledgerlake-{purpose}-{name}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        yield
