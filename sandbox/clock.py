"""The sandbox clock: wall time plus an offset that `clock/advance` moves forward.

Redelivery, the periodic products and the verification window all read this clock, so tests
cover days in milliseconds. A frozen clock (`--freeze-clock`) moves only by `clock/advance`,
so a benchmark reading the same records for minutes reads the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime


class Clock:
    def __init__(self, offset_s: float = 0.0, frozen: bool = False) -> None:
        self.offset_s = offset_s
        self.frozen_at = time.time() if frozen else None
        self._listeners: list[Callable[[float], None]] = []

    def on_advance(self, listener: Callable[[float], None]) -> None:
        """Call `listener(now)` after every advance (webhook redelivery, periodic products), on
        the caller's thread: a listener must be quick, and schedule work rather than do it."""
        self._listeners.append(listener)

    def now(self) -> float:
        return (time.time() if self.frozen_at is None else self.frozen_at) + self.offset_s

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the sandbox clock only moves forward")
        self.offset_s += seconds
        now = self.now()
        for listener in list(self._listeners):
            listener(now)
        return now


def iso(ts: float) -> str:
    """ISO 8601 UTC with milliseconds and Z, as INTERFACE.md fixes."""
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
