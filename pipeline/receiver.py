"""The receiver: an ASGI app that takes the service's callbacks into the inbox.

It answers 200 only once the event is committed, so an acknowledged callback is never lost;
anything it cannot store it refuses, and the service will deliver it again. The event loop
checks the token and the size; a writer thread reads the bodies and commits them in groups:
the callbacks that arrive while it commits one group share the next commit (one disk sync).
Should the writer thread die, the process exits (EXIT_WRITER_DIED) for its supervisor to
restart it. `GET /health` and `GET /metrics` need no token. Slow and idle clients are the
server's to close (pipeline/serve.py). Each answer, and what /health checks: docs/operations.md,
"The pieces" (the receiver), "What one party cannot do" (Bodies, Sockets, Writes), "Metrics".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable

import anyio
import orjson
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from resources.inbox import (
    InboxUnavailable,
    InvalidEvent,
    describe,
    kept_body,
    open_inbox,
    scrubbed,
)

log = logging.getLogger("ledgerlake.receiver")

MAX_BODY = 1 << 20  # 1 MiB: a callback is a few KiB
JSON = "application/json"
# callbacks being read or stored at once; beyond, 503 at once: with MAX_BODY, what a flood
# of bodies can hold in memory. Idle connections do not count (the server closes them).
MAX_IN_FLIGHT = 256
MAX_GROUP = 256  # callbacks a commit takes: within the inbox's bound on a statement's ids
# /health writes a probe when no write succeeded for this long, and waits this long for it
PROBE_AFTER_S = 10.0
PROBE_TIMEOUT_S = 5.0
EXIT_WRITER_DIED = 70  # EX_SOFTWARE: the process ends so that a supervisor restarts it
PROBE = object()  # a queued write probe, in place of a body


# the methods a metric's label may name: the spec's (pipeline/status.py's PRODUCTS, and the
# connection events; a test keeps them together); any other is "other", a body not read
# "none", so a sender cannot make a series per made-up method
METHODS = frozenset({"AUTH", "ACCOUNTS", "BALANCE", "PERIODIC_BALANCE", "TRANSACTIONS",
                     "PERIODIC_TRANSACTIONS", "INCOME", "IDENTITY", "PAYMENT",
                     "PAYMENT_RECURRING", "USER_DISCONNECT", "USER_REAUTH"})


class ReceiverMetrics:
    """The receiver's metrics, in a registry of its own (one per app): `GET /metrics`."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.callbacks = Counter(
            "ledgerlake_receiver_callbacks", "Callbacks answered, by the method they name "
            "(other: a method the spec does not name; none: no event read) and the answer "
            "(stored, duplicate, not_an_event, unauthorized, too_large, busy, not_stored, "
            "hung_up)", ["method", "answer"], registry=r)
        self.dead_letters = Counter(
            "ledgerlake_receiver_dead_letters", "Bodies kept as dead letters (answered 400: "
            "not an event)", registry=r)
        self.commit_seconds = Histogram(
            "ledgerlake_receiver_commit_seconds", "Time of one commit of a group of callbacks "
            "to the inbox", registry=r,
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.group_size = Histogram(
            "ledgerlake_receiver_commit_group_size", "Callbacks one commit stored",
            registry=r, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.inbox_errors = Counter(
            "ledgerlake_receiver_inbox_errors", "Writes the inbox refused or failed (their "
            "callbacks answered 503), probes of /health included", registry=r)
        self.in_flight = Gauge(
            "ledgerlake_receiver_callbacks_in_flight", "Callbacks being read or stored",
            registry=r)

    def answered(self, answer: str, method: str | None = None) -> None:
        label = "none" if method is None else method if method in METHODS else "other"
        self.callbacks.labels(method=label, answer=answer).inc()


class NotStored(RuntimeError):
    """The writer could not store this callback; the service will deliver it again."""


class NotAnEvent(ValueError):
    """The body is not an event we can act on (kept as a dead letter): the reason."""


def _exit_now() -> None:
    """End the process at once, non-zero: its supervisor (systemd, Kubernetes, compose)
    starts a new receiver, whose writer reopens the inbox."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    sys.stderr.flush()
    os._exit(EXIT_WRITER_DIED)


class Writer:
    """A thread that stores callbacks in groups: each waiting callback's future is settled,
    on the event loop, with (event id, new), NotAnEvent or NotStored.

    It also keeps how its writes went, for /health: when the last one succeeded, and whether
    the last one failed."""

    def __init__(self, location: str, *, on_death: Callable[[], None] = _exit_now,
                 metrics: ReceiverMetrics | None = None) -> None:
        self.location = location
        self.metrics = metrics or ReceiverMetrics()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_death = on_death
        self.dead = False
        # set by the writer thread, read by the loop's /health (a float or bool, read whole)
        self.last_ok: float | None = None  # monotonic time of the last write that committed
        self.failing = False  # the last write failed
        self._probing: asyncio.Future | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._serve, name="ledgerlake-inbox-writer",
                                        daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return not self.dead and self._thread is not None and self._thread.is_alive()

    async def add(self, raw: bytes) -> tuple[int, bool, str]:
        """(event id, whether it is new, its method), or NotAnEvent or NotStored."""
        if not self.running:
            raise NotStored("the inbox writer has stopped")
        fut = self._loop.create_future()
        # a sender that hangs up cancels only its wait: the write, queued, still happens
        self._queue.put((raw, fut))
        return await fut

    async def probe(self) -> None:
        """Raise NotStored unless the inbox takes writes: the last write's outcome when one
        committed lately, else a probe written now (one at a time, however many ask)."""
        recent = self.last_ok is not None and time.monotonic() - self.last_ok < PROBE_AFTER_S
        if recent and not self.failing:
            return
        if not self.running:
            raise NotStored("the inbox writer has stopped")
        if self._probing is None or self._probing.done():
            self._probing = self._loop.create_future()
            self._queue.put((PROBE, self._probing))
        try:
            await asyncio.wait_for(asyncio.shield(self._probing), PROBE_TIMEOUT_S)
        except TimeoutError:
            raise NotStored(f"a probe write took over {PROBE_TIMEOUT_S:g} s") from None

    async def stop(self) -> None:
        """Store what is queued, then end the thread."""
        if self.running:
            self._queue.put(None)
            await anyio.to_thread.run_sync(self._thread.join)

    def _serve(self) -> None:
        inbox = None
        try:
            while (first := self._queue.get()) is not None:
                group = self._take_waiting([first], MAX_GROUP)
                stop = any(item is None for item in group)
                inbox = self._write(inbox, [item for item in group if item is not None])
                if stop:
                    break
        except BaseException:
            self._die()
            raise
        finally:
            if inbox is not None:
                with contextlib.suppress(Exception):
                    inbox.close()

    def _take_waiting(self, group: list, limit: float = math.inf) -> list:
        """`group` with what waits in the queue after it, up to `limit` items in all."""
        with contextlib.suppress(queue.Empty):
            while len(group) < limit:
                group.append(self._queue.get_nowait())
        return group

    def _write(self, inbox, group: list):
        """Store one group and settle each of its futures; the inbox, opened if it was not.
        Nothing a group holds ends the thread: a fault refuses that group (503)."""
        probes = [item for item in group if item[0] is PROBE]
        bodies = [item for item in group if item[0] is not PROBE]
        try:
            if inbox is None:
                inbox = open_inbox(self.location)
            answers = _store(inbox, [raw for raw, _ in bodies], self.metrics) if bodies else []
            failed = any(isinstance(a, NotStored) for a in answers)
            if probes:
                try:
                    inbox.probe_write()
                except Exception as exc:
                    log.error("inbox probe write failed: %s", exc)
                    self.metrics.inbox_errors.inc()
                    failed = True
        except Exception as exc:  # the inbox down, or a fault of ours: refused, the next tried
            if isinstance(exc, InboxUnavailable):
                log.error("inbox write failed: %s", exc)
            else:
                log.exception("inbox write failed")
            answers, failed = [NotStored(str(exc) or type(exc).__name__)] * len(bodies), True
            self.metrics.inbox_errors.inc()
        self.failing = failed
        if not failed:
            self.last_ok = time.monotonic()
        down = NotStored("the inbox refuses writes")
        self._settle(bodies + probes, answers + [down if failed else None] * len(probes))
        return inbox

    def _die(self) -> None:
        """The thread is ending on an error nothing caught: refuse what waits, then exit."""
        self.dead = True  # /health answers 503 from now on
        log.critical("the inbox writer stopped on an unexpected error: exiting (%d) so that "
                     "a supervisor restarts the receiver", EXIT_WRITER_DIED, exc_info=True)
        waiting = [item for item in self._take_waiting([]) if item is not None]
        with contextlib.suppress(Exception):
            self._settle(waiting, [NotStored("the inbox writer has stopped")] * len(waiting))
        self._on_death()

    def _settle(self, group: list, answers: list) -> None:
        def settle() -> None:
            for (_, fut), answer in zip(group, answers, strict=True):
                if not fut.done():  # its sender may have hung up
                    (fut.set_exception if isinstance(answer, Exception) else fut.set_result)(answer)

        self._loop.call_soon_threadsafe(settle)


def _read(raw: bytes) -> tuple[dict, bytes] | str:
    """A body as the inbox takes it, (what names the event, the body kept), or why it is not
    an event."""
    try:
        payload = orjson.loads(raw)
        return describe(payload), kept_body(payload)
    except orjson.JSONDecodeError as exc:
        return f"body is not JSON: {exc}"
    except InvalidEvent as exc:
        return str(exc)
    except orjson.JSONEncodeError:  # orjson reads 1,024 levels but writes 255
        return "body is nested deeper than 255 levels: no callback is"
    except Exception:  # a body we failed to read is still the sender's fault, never a 500
        log.exception("could not read a callback body")
        return "body could not be read as an event"


def _store(inbox, group: list[bytes], metrics: ReceiverMetrics) -> list:
    """Each body's answer: (event id, new, method), NotAnEvent, or NotStored."""
    read = [_read(raw) for raw in group]
    answers: list = [None] * len(group)
    events = [i for i, r in enumerate(read) if not isinstance(r, str)]
    for i, answer in zip(events, _commit(inbox, [read[i] for i in events], metrics)
                         if events else [], strict=True):
        answers[i] = answer if isinstance(answer, Exception) else (*answer, read[i][0]["method"])
        if log.isEnabledFor(logging.DEBUG) and not isinstance(answer, Exception):
            info = read[i][0]  # a line per callback; INFO has one per commit
            log.debug("event %d %s %s %s", answer[0], "stored" if answer[1] else "duplicate",
                      info["method"], info["record"] or "-")
    for i, r in enumerate(read):
        if isinstance(r, str):
            try:
                inbox.dead_letter(r, scrubbed(group[i]))
                metrics.dead_letters.inc()
            except Exception as exc:  # the answer is still 400: the body is bad
                log.error("dead letter not kept: %s", exc)
                metrics.inbox_errors.inc()
            answers[i] = NotAnEvent(r)
    return answers


def _commit(inbox, group: list, metrics: ReceiverMetrics) -> list:
    """Each callback's (event id, new), or NotStored."""
    started = time.perf_counter()
    try:
        answers = inbox.add_described(group)
    except Exception as exc:
        # keep one bad write from failing its neighbours (a database that does not answer
        # fails them all alike)
        if len(group) > 1 and not isinstance(exc, InboxUnavailable):
            return [_commit(inbox, [item], metrics)[0] for item in group]
        metrics.inbox_errors.inc()
        if isinstance(exc, InboxUnavailable):
            log.error("inbox write failed: %s", exc)
        else:
            log.exception("inbox write failed")
        return [NotStored(str(exc) or type(exc).__name__)] * len(group)
    metrics.commit_seconds.observe(time.perf_counter() - started)
    metrics.group_size.observe(len(group))
    new = sum(1 for _, is_new in answers if is_new)
    log.info("stored %d callbacks (%d already stored), events up to %d",
             new, len(answers) - new, max(event for event, _ in answers))
    return answers


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def create_app(inbox_path: str, token: str, *, path: str = "/callbacks/",
               auth_header: str | None = None, max_body: int = MAX_BODY,
               max_in_flight: int = MAX_IN_FLIGHT) -> Starlette:
    receiver = Receiver(inbox_path, token, auth_header, max_body, max_in_flight)
    base = "/" + path.strip("/")
    paths = {base, base.rstrip("/") + "/"}  # a trailing slash is tolerated either way
    # GET and HEAD (Starlette adds HEAD to a GET route); a callback path of /health still
    # takes its POSTs, which only match the callback route
    routes = [Route("/health", receiver.health, methods=["GET"]),
              Route("/metrics", receiver.scrape, methods=["GET"]),
              *(Route(p, receiver.receive, methods=["POST"]) for p in sorted(paths))]
    app = Starlette(routes=routes, lifespan=receiver.lifespan)
    app.state.inbox = receiver.inbox
    app.state.metrics = receiver.metrics
    return app


class Receiver:
    """The app's routes, and what they share: the inbox, its writer, the token's digest."""

    def __init__(self, inbox_path: str, token: str, auth_header: str | None, max_body: int,
                 max_in_flight: int) -> None:
        if not token:
            raise ValueError("the receiver needs a token: callbacks without one are refused")
        self.inbox = open_inbox(inbox_path, create=True)  # InboxUnavailable: its database down
        self.metrics = ReceiverMetrics()
        self.writer = Writer(inbox_path, metrics=self.metrics)
        self.token_digest = _digest(token)
        self.header = auth_header.strip().lower() if auth_header else None
        self.max_body, self.max_in_flight = max_body, max_in_flight
        self.in_flight = 0

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette):
        self.writer.start()
        try:
            yield
        finally:
            await self.writer.stop()
            self.inbox.close()

    def authorized(self, request: Request) -> bool:
        supplied = []
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            supplied.append(value.strip())
        if self.header and self.header in request.headers:
            supplied.append(request.headers[self.header].strip())
        # every candidate compared, each as a fixed-length digest: no early exit, no length leak
        return any([hmac.compare_digest(_digest(s), self.token_digest) for s in supplied])

    async def read_body(self, request: Request) -> bytes | None:
        """The body, or None once it grows past the cap."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return None
        body = b""
        while True:  # the ASGI messages themselves: a callback is one, mostly
            message = await request.receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect
            body += message.get("body", b"")
            if len(body) > self.max_body:
                return None
            if not message.get("more_body", False):
                return body

    async def receive(self, request: Request) -> Response:
        if not self.authorized(request):
            self.metrics.answered("unauthorized")
            return _refuse(401, "missing or wrong token")
        if self.in_flight >= self.max_in_flight:  # the body unread: a flood holds no more memory
            log.warning("callback refused: %d already in flight", self.in_flight)
            self.metrics.answered("busy")
            return _refuse(503, "too many callbacks at once", {"Retry-After": "10"})
        self.in_flight += 1
        self.metrics.in_flight.inc()
        try:
            return await self.store(request)
        finally:
            self.in_flight -= 1
            self.metrics.in_flight.dec()

    async def store(self, request: Request) -> Response:
        try:
            raw = await self.read_body(request)
        except ClientDisconnect:
            self.metrics.answered("hung_up")
            return _refuse(400, "the sender hung up before the body ended")
        if raw is None:
            self.metrics.answered("too_large")
            return _refuse(413, f"body larger than {self.max_body} bytes")
        try:
            event_id, new, method = await self.writer.add(raw)
        except NotAnEvent as exc:  # kept as a dead letter
            self.metrics.answered("not_an_event")
            return _refuse(400, str(exc))
        except Exception as exc:  # the disk, not the sender: ask for a redelivery
            log.error("callback not stored: %s", exc)
            self.metrics.answered("not_stored")
            return _refuse(503, "inbox unavailable", {"Retry-After": "60"})
        self.metrics.answered("stored" if new else "duplicate", method)
        return Response(b'{"status":"ok","event":%d,"duplicate":%s}'
                        % (event_id, b"false" if new else b"true"), media_type=JSON)

    async def health(self, request: Request) -> JSONResponse:
        # nothing here names the file or the error: the answer may be public
        if not self.writer.running:
            log.error("health: the inbox writer has stopped")
            return _refuse(503, "inbox writer stopped")
        try:
            await self.writer.probe()
        except NotStored as exc:  # a full disk, a read-only file, a database refusing writes
            log.error("health: the inbox takes no writes: %s", exc)
            return _refuse(503, "inbox refuses writes")
        try:
            await anyio.to_thread.run_sync(self.inbox.check)  # a dropped database is reconnected
        except Exception as exc:  # InboxUnavailable names the inbox, other errors do not
            log.error("health: %s", exc if isinstance(exc, InboxUnavailable)
                      else f"inbox {self.inbox.shown} does not answer: {exc}")
            return _refuse(503, "inbox unavailable")
        return JSONResponse({"status": "ok"})

    async def scrape(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _refuse(status: int, reason: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"status": "error", "error": reason}, status_code=status,
                        headers=headers)
