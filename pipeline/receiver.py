"""The receiver: an ASGI app that takes the service's callbacks into the inbox.

It answers 200 only once the event is committed, so an acknowledged callback is never lost;
anything it cannot store it refuses, and the service will deliver it again. The event loop
checks the token and the size; a writer thread reads the bodies and commits them in groups:
the callbacks that arrive while it commits one group share the next commit (one disk sync).

Answers: 200 stored (or already stored), 400 not an event (kept as a dead letter), 401 wrong
or missing token, 413 body too large, 503 only when the inbox itself cannot write.

`GET /health` (and HEAD), for load balancers, needs no token: 200 while the writer thread
runs and the inbox (its file, or its database) answers a read, 503 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import queue
import threading

import anyio
import orjson
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
MAX_CONNECTIONS = 256  # uvicorn answers 503 beyond: with MAX_BODY, what a flood can hold
MAX_GROUP = 256  # callbacks a commit takes: within the inbox's bound on a statement's ids


class NotStored(RuntimeError):
    """The writer could not store this callback; the service will deliver it again."""


class NotAnEvent(ValueError):
    """The body is not an event we can act on (kept as a dead letter): the reason."""


class Writer:
    """A thread that stores callbacks in groups: each waiting callback's future is settled,
    on the event loop, with (event id, new), NotAnEvent or NotStored."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._serve, name="ledgerlake-inbox-writer",
                                        daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def add(self, raw: bytes) -> tuple[int, bool]:
        if not self.running:
            raise NotStored("the inbox writer has stopped")
        fut = self._loop.create_future()
        # a sender that hangs up cancels only its wait: the write, queued, still happens
        self._queue.put((raw, fut))
        return await fut

    async def stop(self) -> None:
        """Store what is queued, then end the thread."""
        if self.running:
            self._queue.put(None)
            await anyio.to_thread.run_sync(self._thread.join)

    def _serve(self) -> None:
        inbox = None
        try:
            while (first := self._queue.get()) is not None:
                group = [first]
                while len(group) < MAX_GROUP:
                    try:
                        group.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(item is None for item in group)
                group = [item for item in group if item is not None]
                if inbox is None:
                    try:
                        inbox = open_inbox(self.location)
                    except Exception as exc:  # down for now: these are refused, the next tried
                        log.error("inbox write failed: %s", exc)
                        self._settle(group, [NotStored(str(exc))] * len(group))
                        continue
                self._settle(group, _store(inbox, [raw for raw, _ in group]))
                if stop:
                    break
        finally:
            if inbox is not None:
                inbox.close()

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
        info = describe(payload)
    except orjson.JSONDecodeError as exc:
        return f"body is not JSON: {exc}"
    except InvalidEvent as exc:
        return str(exc)
    except Exception:  # a body we failed to read is still the sender's fault, never a 500
        log.exception("could not read a callback body")
        return "body could not be read as an event"
    return info, kept_body(payload)


def _store(inbox, group: list[bytes]) -> list:
    """Each body's answer: (event id, new), NotAnEvent, or NotStored."""
    read = [_read(raw) for raw in group]
    answers: list = [None] * len(group)
    events = [i for i, r in enumerate(read) if not isinstance(r, str)]
    for i, answer in zip(events, _commit(inbox, [read[i] for i in events]) if events else [],
                         strict=True):
        answers[i] = answer
        if log.isEnabledFor(logging.DEBUG) and not isinstance(answer, Exception):
            info = read[i][0]  # a line per callback; INFO has one per commit
            log.debug("event %d %s %s %s", answer[0], "stored" if answer[1] else "duplicate",
                      info["method"], info["record"] or "-")
    for i, r in enumerate(read):
        if isinstance(r, str):
            try:
                inbox.dead_letter(r, scrubbed(group[i]))
            except Exception as exc:  # the answer is still 400: the body is bad
                log.error("dead letter not kept: %s", exc)
            answers[i] = NotAnEvent(r)
    return answers


def _commit(inbox, group: list) -> list:
    """Each callback's (event id, new), or NotStored."""
    try:
        answers = inbox.add_described(group)
    except Exception as exc:
        # keep one bad write from failing its neighbours (a database that does not answer
        # fails them all alike)
        if len(group) > 1 and not isinstance(exc, InboxUnavailable):
            return [_commit(inbox, [item])[0] for item in group]
        if isinstance(exc, InboxUnavailable):
            log.error("inbox write failed: %s", exc)
        else:
            log.exception("inbox write failed")
        return [NotStored(str(exc) or type(exc).__name__)] * len(group)
    new = sum(1 for _, is_new in answers if is_new)
    log.info("stored %d callbacks (%d already stored), events up to %d",
             new, len(answers) - new, max(event for event, _ in answers))
    return answers


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def create_app(inbox_path: str, token: str, *, path: str = "/callbacks/",
               auth_header: str | None = None, max_body: int = MAX_BODY) -> Starlette:
    if not token:
        raise ValueError("the receiver needs a token: callbacks without one are refused")
    inbox = open_inbox(inbox_path, create=True)  # InboxUnavailable when its database is down
    writer = Writer(inbox_path)
    expected = _digest(token)
    header = auth_header.strip().lower() if auth_header else None

    def authorized(request: Request) -> bool:
        supplied = []
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            supplied.append(value.strip())
        if header and header in request.headers:
            supplied.append(request.headers[header].strip())
        # every candidate compared, each as a fixed-length digest: no early exit, no length leak
        return any([hmac.compare_digest(_digest(s), expected) for s in supplied])

    def refuse(status: int, reason: str, headers: dict | None = None) -> JSONResponse:
        return JSONResponse({"status": "error", "error": reason}, status_code=status,
                            headers=headers)

    async def read_body(request: Request) -> bytes | None:
        """The body, or None once it grows past the cap."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body:
            return None
        body = b""
        while True:  # the ASGI messages themselves: a callback is one, mostly
            message = await request.receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect
            body += message.get("body", b"")
            if len(body) > max_body:
                return None
            if not message.get("more_body", False):
                return body

    async def receive(request: Request) -> JSONResponse:
        if not authorized(request):
            return refuse(401, "missing or wrong token")
        try:
            raw = await read_body(request)
        except ClientDisconnect:
            return refuse(400, "the sender hung up before the body ended")
        if raw is None:
            return refuse(413, f"body larger than {max_body} bytes")
        try:
            event_id, new = await writer.add(raw)
        except NotAnEvent as exc:  # kept as a dead letter
            return refuse(400, str(exc))
        except Exception as exc:  # the disk, not the sender: ask for a redelivery
            log.error("callback not stored: %s", exc)
            return refuse(503, "inbox unavailable", {"Retry-After": "60"})
        return Response(b'{"status":"ok","event":%d,"duplicate":%s}'
                        % (event_id, b"false" if new else b"true"), media_type=JSON)

    async def health(request: Request) -> JSONResponse:
        # nothing here names the file or the error: the answer may be public
        if not writer.running:
            log.error("health: the inbox writer has stopped")
            return refuse(503, "inbox writer stopped")
        try:
            await anyio.to_thread.run_sync(inbox.check)  # a dropped database is reconnected
        except Exception as exc:  # InboxUnavailable names the inbox, other errors do not
            log.error("health: %s", exc if isinstance(exc, InboxUnavailable)
                      else f"inbox {inbox.shown} does not answer: {exc}")
            return refuse(503, "inbox unavailable")
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        writer.start()
        try:
            yield
        finally:
            await writer.stop()
            inbox.close()

    base = "/" + path.strip("/")
    paths = {base, base.rstrip("/") + "/"}  # a trailing slash is tolerated either way
    # GET and HEAD (Starlette adds HEAD to a GET route); a callback path of /health still
    # takes its POSTs, which only match the callback route
    routes = [Route("/health", health, methods=["GET"]),
              *(Route(p, receive, methods=["POST"]) for p in sorted(paths))]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.inbox = inbox
    return app
