"""The receiver: an ASGI app that takes the service's callbacks into the inbox.

It answers 200 only once the event is committed, so an acknowledged callback is never lost;
anything it cannot store it refuses, and the service will deliver it again.
"""

from __future__ import annotations

import contextlib
import hmac
import logging

import anyio
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .inbox import Inbox, InvalidEvent

log = logging.getLogger("ledgerlake.receiver")

MAX_BODY = 1 << 20  # 1 MiB: a callback is a few KiB


def create_app(inbox_path: str, token: str | None, *, path: str = "/callbacks/",
               auth_header: str | None = None, max_body: int = MAX_BODY) -> Starlette:
    inbox = Inbox(inbox_path)
    expected = token.encode() if token else None

    def authorized(request: Request) -> bool:
        if expected is None:
            return True
        supplied = []
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            supplied.append(value.strip())
        if auth_header and auth_header in request.headers:
            supplied.append(request.headers[auth_header].strip())
        # compare every candidate, in constant time each
        return any([hmac.compare_digest(s.encode(), expected) for s in supplied])

    async def receive(request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body:
                return JSONResponse({"error": f"body larger than {max_body} bytes"},
                                    status_code=413)
        raw = bytes(body)
        try:
            payload = orjson.loads(raw)
            event_id, new = await anyio.to_thread.run_sync(inbox.add, payload)
        except (orjson.JSONDecodeError, InvalidEvent) as exc:
            reason = "body is not JSON" if isinstance(exc, orjson.JSONDecodeError) else str(exc)
            await anyio.to_thread.run_sync(inbox.dead_letter, reason, raw)
            return JSONResponse({"error": reason}, status_code=400)
        log.info("event %d %s (%s)", event_id, "stored" if new else "duplicate",
                 payload.get("method") or payload.get("event"))
        return JSONResponse({"status": "ok", "event": event_id, "duplicate": not new})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            inbox.close()

    base = "/" + path.strip("/")
    paths = {base, base.rstrip("/") + "/"}  # a trailing slash is tolerated either way
    routes = [Route(p, receive, methods=["POST"]) for p in sorted(paths)]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.inbox = inbox
    return app
