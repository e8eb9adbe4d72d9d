"""Faults on demand (`sandbox/faults`): refused, broken and stalled answers, and webhooks sent
twice, late or out of order, for a share of requests (docs/interface.md, "Faults on demand").

Seeded: the same seed and sequence of requests (and of deliveries) inject the same faults.
Requests and deliveries draw from two streams, so webhook timing never changes which fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import math
import random
import socket
import struct
import time
from collections import Counter, deque
from dataclasses import dataclass

from starlette.responses import Response

from .auth import SHORT
from .errors import ServiceError, integer, invalid, one_of
from .ratelimit import RateLimiter

REFUSALS = ("429", "500", "503")  # answered at once; the call is not carried out
BROKEN = ("reset", "stall", "truncate")  # the call is carried out, its answer is broken
HTTP_KINDS = REFUSALS + BROKEN
WEBHOOK_KINDS = ("double", "late", "shuffle")
KINDS = HTTP_KINDS + WEBHOOK_KINDS
DATA_PATHS = ("*/get", "auth/getByCustomer")  # the product reads, and nothing that writes
ENVS = {short: env for env, short in SHORT.items()}  # as a rule names them
DEFAULT_SECONDS = {"429": 1, "stall": 30, "late": 5, "shuffle": 2}
MAX_RULES = 32
MAX_SECONDS = 3600
KEPT = 1000  # delivery faults listed by report(); the counts cover all of them
FIELDS = {"kind", "paths", "env", "share", "count", "for_s", "seconds", "batch"}


@dataclass
class Rule:
    kind: str
    paths: tuple[str, ...]
    env: str | None
    share: float
    count: int | None
    for_s: float | None
    seconds: float
    batch: int
    until: float | None = None  # time.monotonic() at which the window closes
    injected: int = 0

    def live(self, now: float) -> bool:
        return ((self.count is None or self.injected < self.count)
                and (self.until is None or now < self.until))

    def public(self, now: float) -> dict:
        out = {"kind": self.kind, "share": self.share, "count": self.count,
               "for_s": self.for_s, "seconds": self.seconds, "injected": self.injected,
               "active": self.live(now), "env": SHORT.get(self.env)}
        if self.kind in HTTP_KINDS:
            out["paths"] = list(self.paths)
        if self.kind == "shuffle":
            out["batch"] = self.batch
        if self.kind not in DEFAULT_SECONDS:
            del out["seconds"]
        return out


def _number(where: str, value, lo: float, hi: float, *, above_lo: bool = False) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value)
            or not (lo < value if above_lo else lo <= value) or value > hi):
        low = f"more than {lo:g}" if above_lo else f"from {lo:g}"
        raise invalid(where, f"must be a number {low} to {hi:g}")
    return value


def parse_rule(i: int, raw) -> Rule:
    """One rule of the control's body, checked whole; INVALID_FIELD names what is wrong."""
    at = f"rules[{i}]"
    if not isinstance(raw, dict):
        raise invalid(at, "must be an object")
    if unknown := sorted(set(raw) - FIELDS):
        raise invalid(at, f"has unknown fields: {', '.join(unknown)}")
    kind = raw.get("kind")
    kind = str(kind) if isinstance(kind, int) and not isinstance(kind, bool) else kind
    one_of(f"{at}.kind", kind, KINDS)
    paths = raw.get("paths")
    if kind in WEBHOOK_KINDS:
        if paths is not None:
            raise invalid(f"{at}.paths", f"does not apply to webhook faults ({kind})")
        paths = ()
    else:
        paths = DATA_PATHS if paths is None else paths
        paths = (paths,) if isinstance(paths, str) else paths
        if (not isinstance(paths, list | tuple) or not paths
                or not all(isinstance(p, str) and p.strip("/") for p in paths)):
            raise invalid(f"{at}.paths", "must be a path pattern or a non-empty list of them, "
                                         "such as transactions/get or */get")
        paths = tuple(p.strip("/") for p in paths)
        if any(p.startswith("sandbox") for p in paths):
            raise invalid(f"{at}.paths", "cannot name the sandbox controls (sandbox/...): "
                                         "they never fail")
    env = raw.get("env")
    if env is not None and env not in ENVS:
        raise invalid(f"{at}.env", "must be production or sandbox (omit it for both)")
    share = _number(f"{at}.share", raw.get("share", 1), 0, 1)
    if (count := raw.get("count")) is not None:
        integer(f"{at}.count", count, 1, 10**9)
    if (for_s := raw.get("for_s")) is not None:
        for_s = _number(f"{at}.for_s", for_s, 0, 366 * 86400, above_lo=True)
    if "seconds" in raw and kind not in DEFAULT_SECONDS:
        raise invalid(f"{at}.seconds", f"does not apply to {kind}")
    seconds = _number(f"{at}.seconds", raw.get("seconds", DEFAULT_SECONDS.get(kind, 0)),
                      0, MAX_SECONDS)
    if "batch" in raw and kind != "shuffle":
        raise invalid(f"{at}.batch", f"does not apply to {kind}")
    batch = integer(f"{at}.batch", raw.get("batch", 4), 2, 100)
    return Rule(kind, paths, ENVS.get(env), share, count, for_s, seconds, batch)


class Faults:
    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self.seed: int | None = None
        self.injected: Counter = Counter()  # since the sandbox started: never reset
        self.seen = Counter()  # requests and deliveries looked at while rules were set
        self.deliveries: deque = deque(maxlen=KEPT)
        self._requests, self._hooks = random.Random(), random.Random()  # reseeded by set()

    # -- the control -------------------------------------------------------------------------
    def set(self, rules: list, seed) -> dict:
        """Replace every rule (all checked before any is kept) and restart both streams."""
        if not 1 <= len(rules) <= MAX_RULES:
            raise invalid("rules", f"must hold 1 to {MAX_RULES} rules")
        seed = 0 if seed is None else seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise invalid("seed", "must be an integer from 0 to 2^63 - 1")
        parsed = [parse_rule(i, r) for i, r in enumerate(rules)]
        now = time.monotonic()
        for rule in parsed:
            rule.until = now + rule.for_s if rule.for_s is not None else None
        self.rules, self.seed = parsed, seed
        self._requests = random.Random(f"{seed}:requests")
        self._hooks = random.Random(f"{seed}:webhooks")
        return self.report()

    def clear(self) -> dict:
        self.rules = []
        return self.report()

    def report(self) -> dict:
        now = time.monotonic()
        return {"seed": self.seed, "rules": [r.public(now) for r in self.rules],
                "injected": {k: self.injected[k] for k in KINDS},
                "requests_seen": self.seen["requests"], "deliveries_seen": self.seen["deliveries"],
                "deliveries": list(self.deliveries)}

    # -- deciding --------------------------------------------------------------------------
    def _pick(self, seen: str, kinds: tuple[str, ...], env: str, path: str | None,
              rng: random.Random) -> Rule | None:
        """The first live rule that matches and whose draw falls within its share.

        Every live matching rule draws once, in order, until one fires, so the draws depend
        only on the sequence of calls, never on wall time (except a window's end)."""
        if not self.rules:
            return None
        self.seen[seen] += 1
        now = time.monotonic()
        for rule in self.rules:
            if rule.kind not in kinds or not rule.live(now) or rule.env not in (None, env):
                continue
            if path is not None and not any(fnmatch.fnmatchcase(path, p) for p in rule.paths):
                continue
            if rng.random() < rule.share:
                rule.injected += 1
                self.injected[rule.kind] += 1
                return rule
        return None

    def for_request(self, env: str, path: str) -> Rule | None:
        return self._pick("requests", HTTP_KINDS, env, path, self._requests)

    def for_delivery(self, delivery: dict) -> Rule | None:
        """The fault of this delivery's attempt, if any, noted for report()."""
        rule = self._pick("deliveries", WEBHOOK_KINDS, delivery["env"], None, self._hooks)
        if rule is not None:
            self.deliveries.append({"kind": rule.kind, "delivery": delivery["id"],
                                    "record": delivery["record"], "method": delivery["method"],
                                    "attempt": len(delivery["attempts"])})
        return rule

    def permutation(self, n: int) -> list[int]:
        order = list(range(n))
        self._hooks.shuffle(order)
        if n > 1 and order == sorted(order):  # out of order is the point: rotate by one
            order = order[1:] + order[:1]
        return order

    # -- answering -------------------------------------------------------------------------
    @staticmethod
    def error(rule: Rule, path: str) -> ServiceError:
        note = f"(sandbox/faults, {rule.kind})"
        if rule.kind == "429":
            return ServiceError(RateLimiter.code(path), f"too many requests to {path} {note}",
                                headers={"Retry-After": str(math.ceil(rule.seconds))})
        if rule.kind == "503":
            return ServiceError("SERVICE_UNAVAILABLE", f"{path} is unavailable {note}",
                                error_type="API_ERROR", http_code=503)
        return ServiceError("INTERNAL_SERVER_ERROR", f"{path} failed {note}")


class ResetResponse(Response):
    """The status line, the headers (with the whole body's Content-Length) and half the body;
    then the connection is reset (RST, not a clean close), as a dying proxy would do it."""

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body[:len(self.body) // 2],
                    "more_body": True})
        # uvicorn's send is a method of the connection's request cycle, which holds the
        # transport: a linger of 0 makes close() send RST instead of FIN
        if (transport := getattr(getattr(send, "__self__", None), "transport", None)) is None:
            raise ConnectionResetError("sandbox/faults: reset")  # the server drops it
        if (sock := transport.get_extra_info("socket")) is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
        for _ in range(3):  # let the server see the connection lost before the app returns
            await asyncio.sleep(0)
