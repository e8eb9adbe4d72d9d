"""Rate limits: one token bucket per secret key and endpoint, as INTERFACE.md fixes.

A bucket holds `rate` tokens (one at least: a rate under one a second allows one call every
1/rate seconds) and refills `rate` per second, so a burst of `rate` calls passes and the next
one is told, in `Retry-After`, how long until a token is back.
"""

from __future__ import annotations

import math
import threading
import time

# endpoint -> the spec's code for too many calls to it; everything else is RATE_LIMIT
CODES = {"accounts/get": "ACCOUNTS_LIMIT", "auth/get": "AUTH_LIMIT",
         "auth/getByCustomer": "AUTH_LIMIT", "identity/get": "IDENTITY_LIMIT",
         "income/get": "INCOME_LIMIT", "record/get": "RECORD_GET_LIMIT",
         "transactions/get": "TRANSACTIONS_LIMIT"}


class RateLimiter:
    def __init__(self, rate: float) -> None:
        """`rate` calls per second per key and endpoint; 0 turns limiting off."""
        self.rate = float(rate)
        self.burst = max(1.0, self.rate)  # a bucket of fewer than one token never allows a call
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, endpoint: str) -> float:
        """Spend a token; return 0 if allowed, else seconds until one is available."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get((key, endpoint), (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            spent = 1.0 if tokens >= 1.0 else 0.0
            self._buckets[(key, endpoint)] = (tokens - spent, now)
            return 0.0 if spent else (1.0 - tokens) / self.rate

    @staticmethod
    def code(endpoint: str) -> str:
        return CODES.get(endpoint, "RATE_LIMIT")

    @staticmethod
    def retry_after(wait_s: float) -> str:
        return str(max(1, math.ceil(wait_s)))
