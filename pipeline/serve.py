"""The HTTP servers ledgerlake starts (the receiver, the sandbox): uvicorn on a socket bound
first, and for the receiver, which faces the internet, deadlines for slow and idle clients.

uvicorn closes a keep-alive connection left idle after a response, but not one that never
sends a request, nor one that sends its headers or its body a byte at a time: each holds a
socket for as long as its client likes. `Deadlines` gives each request what Apache's
mod_reqtimeout gives it (docs/decisions/0013-slow-clients.md): its headers within
`header_s` of the connection (or of the keep-alive after the previous response), its body
within `body_s`, extended by a second for every `min_rate` bytes that arrive. A connection
past its deadline is closed; what the app had read of it is a client that hung up.
"""

from __future__ import annotations

import asyncio
import logging
import socket

log = logging.getLogger("ledgerlake.serve")

HEADER_S = 10.0  # a request's headers, from the connection (or the keep-alive) on
BODY_S = 10.0  # its body, from the headers on, before the rate floor extends it
MIN_RATE = 1000  # bytes a second: a 1 MiB body may take up to ~17 minutes, never longer
KEEP_ALIVE_S = 30  # uvicorn closes a connection idle this long after a response


class Deadlines:
    """Mixed into uvicorn's HTTP/1.1 protocol (`deadlines`): it closes a connection whose
    request is late. (uvicorn is imported only by the commands that serve.)"""

    header_s = HEADER_S
    body_s = BODY_S
    min_rate = MIN_RATE
    SEND_BODY = IDLE = None  # h11's states of the client, set by `deadlines`

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer: asyncio.TimerHandle | None = None
        self._body_due: float | None = None
        self._arm(self.loop.time() + self.header_s)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow(len(data))

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        # uvicorn's keep-alive closes an idle connection; one that starts its next request
        # must have sent its headers by then and a little more
        self._body_due = None
        self._arm(self.loop.time() + self.timeout_keep_alive + self.header_s)
        self._follow(0)  # a pipelined request may be under way already

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _follow(self, received: int) -> None:
        """Move the deadline with the request: headers awaited (it stands), body arriving
        (each byte earns 1/min_rate s), the request whole (the app's to answer: none)."""
        state = self.conn.their_state
        if state is self.SEND_BODY:
            if self._body_due is None:
                self._body_due = self.loop.time() + self.body_s
            else:
                self._body_due += received / self.min_rate
            self._arm(self._body_due)
        elif state is not self.IDLE:
            self._disarm()

    def _arm(self, when: float) -> None:
        self._disarm()
        self._timer = self.loop.call_at(when, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if not self.transport.is_closing():
            # a line per connection would let a flood of them flood the log too
            log.debug("closed a connection whose request was late (%s)", self.conn.their_state)
            self.transport.close()


def deadlines(header_s: float = HEADER_S, body_s: float = BODY_S,
              min_rate: float = MIN_RATE) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with these deadlines (uvicorn takes a class, not an instance)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return type("DeadlinesH11Protocol", (Deadlines, H11Protocol),
                {"header_s": header_s, "body_s": body_s, "min_rate": min_rate,
                 "SEND_BODY": h11.SEND_BODY, "IDLE": h11.IDLE})


def serve(app, host: str, port: int, ready: str,
          protocol: type[asyncio.Protocol] | None = None) -> None:
    """Bind first (port 0 picks a free one), print the ready line, then serve until stopped.
    `protocol`: uvicorn's HTTP protocol class (default: its own, with no deadlines)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise SystemExit(f"ledgerlake: cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    url = f"http://{host}:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(
        app, http=protocol or "auto", log_level="warning", access_log=False, lifespan="on",
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=5))  # a stuck client never holds a stop
    print(f"READY {url}", flush=True)
    for line in ready.format(url=url).splitlines():
        print(line, flush=True)
    server.run(sockets=[sock])
