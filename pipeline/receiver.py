"""The receiver: an ASGI app that takes the service's callbacks into the inbox.

It answers 200 only once the event is committed, so an acknowledged callback is never lost;
anything it cannot store it refuses, and the service will deliver it again. Concurrent
callbacks share one transaction (group commit): one disk sync acknowledges all of them.

Answers: 200 stored (or already stored), 400 not an event (kept as a dead letter), 401 wrong
or missing token, 413 body too large, 503 only when the inbox itself cannot write.

`GET /health` (and HEAD), for load balancers, needs no token: 200 while the writer runs and
the inbox (its file, or its database) answers a read, 503 otherwise.
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

from .inbox import (
    Inbox,
    InboxUnavailable,
    InvalidEvent,
    describe,
    kept_body,
    open_inbox,
    scrubbed,
)

log = logging.getLogger("ledgerlake.receiver")

MAX_BODY = 1 << 20  # 1 MiB: a callback is a few KiB
MAX_BATCH = 256
JSON = "application/json"


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


class GroupWriter:
    """One thread writes the inbox. Callbacks that arrive while it commits a batch wait in
    its queue and go in the next one, so a disk sync (or a database round trip)
    acknowledges many. The event loop only queues and settles: it never waits for a write.
    """

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def add(self, info: dict, raw: bytes) -> tuple[int, bool]:
        fut = self._loop.create_future()
        self._queue.put((info, raw, fut))
        # a sender that hangs up cancels only its wait: the write, queued, still happens
        return await fut

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="inbox-writer", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """False once its thread has ended: callbacks would then wait for ever."""
        return self._thread is not None and self._thread.is_alive()

    async def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(_STOP)  # after everything queued before it
            await anyio.to_thread.run_sync(self._thread.join)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch = [self._queue.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if _STOP in batch:
                stopping = True
                batch = [item for item in batch if item is not _STOP]
            if batch:
                try:
                    results = self._commit(batch)
                except Exception as exc:  # never leave a sender waiting for an answer
                    log.exception("inbox writer failed")
                    results = [exc] * len(batch)
                self._loop.call_soon_threadsafe(_settle, batch, results)

    def _commit(self, batch: list) -> list:
        """Each item's (event id, new) or the exception that kept it out of the inbox."""
        try:
            results = self.inbox.add_described([(info, raw) for info, raw, _ in batch])
        except Exception as exc:
            # keep one bad write from failing its neighbours (a database that does not
            # answer fails them all alike)
            if len(batch) > 1 and not isinstance(exc, InboxUnavailable):
                return [self._commit([item])[0] for item in batch]
            log.error("inbox write failed: %s", exc)
            return [exc] * len(batch)
        new = sum(1 for _, is_new in results if is_new)
        log.info("stored %d callbacks (%d already stored), events up to %d",
                 new, len(results) - new, max(event for event, _ in results))
        return results


_STOP = object()


def _settle(batch: list, results: list) -> None:
    for (_, _, fut), res in zip(batch, results, strict=True):
        if fut.done():
            continue
        if isinstance(res, Exception):
            fut.set_exception(res)
        else:
            fut.set_result(res)


def create_app(inbox_path: str, token: str, *, path: str = "/callbacks/",
               auth_header: str | None = None, max_body: int = MAX_BODY) -> Starlette:
    if not token:
        raise ValueError("the receiver needs a token: callbacks without one are refused")
    inbox = open_inbox(inbox_path, create=True)  # InboxUnavailable when its database is down
    writer = GroupWriter(inbox)
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
            payload = orjson.loads(raw)
            info = describe(payload)
        except (orjson.JSONDecodeError, InvalidEvent) as exc:
            reason = (f"body is not JSON: {exc}" if isinstance(exc, orjson.JSONDecodeError)
                      else str(exc))
        except Exception:  # a body we failed to read is still the sender's fault, never a 500
            log.exception("could not read a callback body")
            reason = "body could not be read as an event"
        else:
            reason = None
        if reason is not None:
            try:
                await anyio.to_thread.run_sync(inbox.dead_letter, reason, scrubbed(raw))
            except Exception as db_exc:  # the answer is still 400: the body is bad
                log.error("dead letter not kept: %s", db_exc)
            return refuse(400, reason)
        try:
            event_id, new = await writer.add(info, kept_body(payload, raw))
        except Exception as exc:  # the disk, not the sender: ask for a redelivery
            log.error("callback not stored: %s", exc)
            return JSONResponse({"status": "error", "error": "inbox unavailable"},
                                status_code=503, headers={"Retry-After": "60"})
        if log.isEnabledFor(logging.DEBUG):  # a line per callback; INFO has one per batch
            log.debug("event %d %s %s %s", event_id, "stored" if new else "duplicate",
                      info["method"], info["record"] or "-")
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
