"""A scripted HTTP server on a raw socket, for faults the real sandbox cannot be made to show.

Each request takes the next action of the script (resets, stalls, bad bodies, canned errors);
every answer closes its connection, so no fault leaks into the next request.
"""

from __future__ import annotations

import secrets
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from resources.client import Client

KEY = "sk_test_" + "f" * 24


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return orjson.loads(self.body)


Action = Callable[[socket.socket, Seen], None]


@dataclass
class FaultServer:
    script: list[Action] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stopping = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def client(self, **kw) -> Client:
        kw = {"base_url": self.url, "secret_key": KEY, "backoff_base_s": 0.01,
              "backoff_max_s": 0.05, "read_timeout_s": 2.0, **kw}
        return Client(**kw)

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip()
                       for k, _, v in (line.partition(":") for line in lines[1:])}
            size = int(headers.get("content-length", 0))
            while len(body) < size:
                body += conn.recv(65536)
            seen = Seen(method, target, headers, body)
            self.seen.append(seen)
            action = self.script.pop(0) if self.script else answer(599, b"script exhausted")
            action(conn, seen)

    def stop(self) -> None:
        self.stopping.set()
        try:  # wakes the accept() now rather than at its next 0.2 s timeout
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=5)


def _head(status: int, length: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {length}", "Connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(status: int, body: bytes = b"", headers: dict[str, str] | None = None,
           request_id: str | None = None) -> Action:
    """A whole answer; `X-Request-Id` is set unless `request_id` is the empty string."""
    def act(conn: socket.socket, seen: Seen) -> None:
        extra = dict(headers or {})
        rid = secrets.token_hex(12) if request_id is None else request_id
        if rid:
            extra["X-Request-Id"] = rid
        conn.sendall(_head(status, len(body), extra) + body)
    return act


def success(data: dict, **kw) -> Action:
    return answer(200, orjson.dumps({"status": "success", "message": "ok", "data": data}),
                  {"Content-Type": "application/json"}, **kw)


def error(status: int, error_type: str, code: str, message: str = "it failed",
          headers: dict[str, str] | None = None, **extra) -> Action:
    rid = secrets.token_hex(12)
    return answer(status, orjson.dumps({
        "error_type": error_type, "error_code": code, "error_message": message,
        "display_message": None, "http_code": status, "request_id": rid, **extra}),
        {"Content-Type": "application/json", **(headers or {})}, request_id=rid)


def reset_mid_body(status: int = 200, *, reset: bool = True) -> Action:
    """Promise 4096 bytes, send a few, then reset the connection (RST; or a plain FIN)."""
    def act(conn: socket.socket, seen: Seen) -> None:
        conn.sendall(_head(status, 4096, {"X-Request-Id": secrets.token_hex(12)})
                     + b'{"status": "success", "data": {"acc')
        if reset:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return act


def stall(server: FaultServer, seconds: float = 10.0) -> Action:
    """Read the request, answer nothing until the test ends (or `seconds` pass)."""
    def act(conn: socket.socket, seen: Seen) -> None:
        server.stopping.wait(seconds)
    return act


def page(n: int, of: int, key: str = "accounts", size: int = 2, **kw) -> Action:
    items = [{"_id": f"{n:02d}{i:022x}", "page": n} for i in range(size)]
    return success({key: items, "pagination": {
        "totalDocs": of * size, "limit": size, "page": n, "totalPages": of,
        "pagingCounter": (n - 1) * size + 1, "hasPrevPage": n > 1, "hasNextPage": n < of,
        "prevPage": n - 1 if n > 1 else None, "nextPage": n + 1 if n < of else None}}, **kw)
