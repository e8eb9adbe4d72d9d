"""The receiver: an ASGI app that takes the service's callbacks into the inbox.

It answers 200 only once the event is committed, so an acknowledged callback is never lost;
anything it cannot store it refuses, and the service will deliver it again. The event loop
checks the token and the size; a writer process of its own (pipeline/inbox_writer.py) reads
the bodies and commits them in groups: one disk sync acknowledges many.

Answers: 200 stored (or already stored), 400 not an event (kept as a dead letter), 401 wrong
or missing token, 413 body too large, 503 only when the inbox itself cannot write.

`GET /health` (and HEAD), for load balancers, needs no token: 200 while the writer process
runs and the inbox (its file, or its database) answers a read, 503 otherwise.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import hmac
import logging

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .inbox import InboxUnavailable, open_inbox
from .inbox_writer import NotAnEvent, Writer

log = logging.getLogger("ledgerlake.receiver")

MAX_BODY = 1 << 20  # 1 MiB: a callback is a few KiB
JSON = "application/json"
MAX_CONNECTIONS = 256  # uvicorn answers 503 beyond: with MAX_BODY, what a flood can hold
# Allocations between two collections of the youngest generation: above what MAX_CONNECTIONS
# callbacks waiting for their commit hold alive (about 90 objects each: 64 in flight peaked at
# 4,900 more, 256 at 22,900; bench/README.md, "Receivers")
GC_THRESHOLD = MAX_CONNECTIONS * 100


def settle_gc() -> None:
    """Keep the cyclic garbage collector off the callbacks in flight. Each waits for its
    group's commit with its request's objects alive, so at the default threshold (700) a
    collection ran every ~22 callbacks at 64 in flight, walking them all: 11 µs a callback of
    the event loop's CPU, where a 401 triggers none. What the start made lives as long as
    the process and is left out of every collection (gc.freeze)."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    log.debug("garbage collector: %d objects of the start frozen, the youngest collected "
              "after %d allocations", gc.get_freeze_count(), GC_THRESHOLD)


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def create_app(inbox_path: str, token: str, *, path: str = "/callbacks/",
               auth_header: str | None = None, max_body: int = MAX_BODY) -> Starlette:
    if not token:
        raise ValueError("the receiver needs a token: callbacks without one are refused")
    inbox = open_inbox(inbox_path, create=True)  # InboxUnavailable when its database is down
    writer = Writer(inbox_path)  # a process of its own (pipeline/inbox_writer.py)
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
        matches = [hmac.compare_digest(_digest(s), expected) for s in supplied]
        return any(matches)

    def refuse(status: int, reason: str) -> JSONResponse:
        return JSONResponse({"status": "error", "error": reason}, status_code=status)

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
            return JSONResponse({"status": "error", "error": "inbox unavailable"},
                                status_code=503, headers={"Retry-After": "60"})
        return Response(b'{"status":"ok","event":%d,"duplicate":%s}'
                        % (event_id, b"false" if new else b"true"), media_type=JSON)

    async def health(request: Request) -> JSONResponse:
        # nothing here names the file or the error: the answer may be public
        if not writer.running:
            log.error("health: the inbox writer has stopped")
            return JSONResponse({"status": "error", "error": "inbox writer stopped"},
                                status_code=503)
        try:
            await anyio.to_thread.run_sync(inbox.check)  # a dropped database is reconnected
        except InboxUnavailable as exc:  # which names the inbox
            log.error("health: %s", exc)
            return JSONResponse({"status": "error", "error": "inbox unavailable"},
                                status_code=503)
        except Exception as exc:
            log.error("health: inbox %s does not answer: %s", inbox.shown, exc)
            return JSONResponse({"status": "error", "error": "inbox unavailable"},
                                status_code=503)
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await writer.start()
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
