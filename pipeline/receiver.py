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

import anyio
import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .inbox import Inbox, InboxUnavailable, InvalidEvent, describe, open_inbox

log = logging.getLogger("ledgerlake.receiver")

MAX_BODY = 1 << 20  # 1 MiB: a callback is a few KiB
MAX_BATCH = 256


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


class GroupWriter:
    """One task writes the inbox; callbacks that arrive while it syncs go in the next batch."""

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox
        self._pending: list[tuple[dict, bytes, asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False

    async def add(self, info: dict, raw: bytes) -> tuple[int, bool]:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((info, raw, fut))
        self._wake.set()
        # shielded: a sender that hangs up does not cancel a write others share
        return await asyncio.shield(fut)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    @property
    def running(self) -> bool:
        """False once its task has ended: callbacks would then wait for ever."""
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task:
            await self._task

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                await self._commit(batch)
            if self._closing:
                return

    async def _commit(self, batch: list) -> None:
        try:
            results = await anyio.to_thread.run_sync(
                self.inbox.add_described, [(info, raw) for info, raw, _ in batch])
        except Exception as exc:
            # keep one bad write from failing its neighbours (a database that does not
            # answer fails them all alike)
            if len(batch) > 1 and not isinstance(exc, InboxUnavailable):
                for item in batch:
                    await self._commit([item])
                return
            log.error("inbox write failed: %s", exc)
            results = [exc] * len(batch)
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
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body:
                return None
        return bytes(body)

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
            info = describe(orjson.loads(raw))
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
                await anyio.to_thread.run_sync(inbox.dead_letter, reason, raw)
            except Exception as db_exc:  # the answer is still 400: the body is bad
                log.error("dead letter not kept: %s", db_exc)
            return refuse(400, reason)
        try:
            event_id, new = await writer.add(info, raw)
        except Exception as exc:  # the disk, not the sender: ask for a redelivery
            log.error("callback not stored: %s", exc)
            return JSONResponse({"status": "error", "error": "inbox unavailable"},
                                status_code=503, headers={"Retry-After": "60"})
        log.info("event %d %s %s %s", event_id, "stored" if new else "duplicate",
                 info["method"], info["record"] or "-")
        return JSONResponse({"status": "ok", "event": event_id, "duplicate": not new})

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
