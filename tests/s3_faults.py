"""A fault-injecting reverse proxy in front of an S3 store (moto's server), for the chaos suite.

It listens on a loopback port and passes each request of the lake's clients (delta-rs's
object_store, pyarrow's AWS SDK) to the store as it came: bytes, headers, signature. The rules
its caller sets (`set_rules`) make it answer some requests itself, the way object storage
misbehaves in production, per kind of request (`op`: PUT, GET, LIST, HEAD, DELETE, POST):

- `500`, `503`: an S3 error answer (InternalError, SlowDown), the request never forwarded;
- `slow`: the answer held back `seconds`, then given;
- `drop`: the request forwarded (a PUT lands), the answer cut mid-way, the connection reset;
- `timeout`: the request forwarded, no answer for `seconds`, then the connection closed;
- `hold`: the request kept, not forwarded, until the caller `release`s it (forwarded or
  dropped): the caller sees who sent it (`Held.client_port`) and acts meanwhile (kills the
  process, stops a database).

A rule applies to a share of the matching requests (`share`, drawn from the proxy's own
random generator, seeded: a seed's draws are the same), at most `count` times, while its
window lasts (`for_s`), to the keys that match `key` (a regular expression). It knows nothing
of Delta or of the pipeline: requests and answers only, like the sandbox's faults. Each
client connection carries one request (the answer says `Connection: close`), so a fault never
leaks into the next request.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

KINDS = ("500", "503", "slow", "drop", "timeout", "hold")
OPS = ("PUT", "GET", "LIST", "HEAD", "DELETE", "POST")
_ERRORS = {"500": (500, "InternalError", "We encountered an internal error. Please try again."),
           "503": (503, "SlowDown", "Please reduce your request rate.")}


@dataclass
class Rule:
    kind: str
    op: str | tuple[str, ...] = "*"
    share: float = 1.0
    count: int | None = None
    seconds: float = 5.0
    key: str | None = None  # a regular expression searched in the object's key
    until: float | None = None  # monotonic; None: until removed
    injected: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {', '.join(KINDS)}")
        ops = (self.op,) if isinstance(self.op, str) else tuple(self.op)
        if unknown := [o for o in ops if o != "*" and o not in OPS]:
            raise ValueError(f"unknown operation {unknown}; one of {', '.join(OPS)} or *")
        self.op = ops
        if not 0 <= self.share <= 1:
            raise ValueError(f"share {self.share} is not between 0 and 1")

    def matches(self, op: str, key: str, now: float) -> bool:
        return ((self.until is None or now < self.until)
                and (self.count is None or self.injected < self.count)
                and ("*" in self.op or op in self.op)
                and (self.key is None or re.search(self.key, key) is not None))


@dataclass
class Held:
    """A request the proxy keeps, unforwarded, until `S3Faults.release`."""
    op: str
    key: str
    client_port: int  # the sender's local port: /proc/net/tcp names its socket
    released: threading.Event = field(default_factory=threading.Event)
    forward: bool = False


@dataclass
class Request:
    method: str
    target: str
    head: bytes  # the request line and headers, as received
    body: bytes  # as received (chunked framing kept)
    headers: dict[str, str]

    @property
    def op(self) -> str:
        path = urlsplit(self.target).path
        if self.method == "GET" and path.strip("/").count("/") == 0:
            return "LIST"  # a bucket's listing (path style: /bucket?list-type=2&prefix=...)
        return self.method

    @property
    def key(self) -> str:
        parts = unquote(urlsplit(self.target).path).lstrip("/").split("/", 1)
        return parts[1] if len(parts) > 1 else ""


class S3Faults:
    """The proxy: `endpoint` (host:port) to give the lake's clients in place of the store's."""

    def __init__(self, upstream: str, seed: int = 0) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.rules: list[Rule] = []
        self.injected: Counter[str] = Counter()  # "<op> <kind>": times
        self.seen: Counter[str] = Counter()  # op: requests
        self.held: list[Held] = []
        self.held_event = threading.Condition(self.lock)
        self.stopping = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True, name="s3-faults")
        self.thread.start()

    # -- the caller's controls ---------------------------------------------------------------
    def set_rules(self, rules: list[dict | Rule]) -> None:
        """Replace the rules (dicts of Rule's fields; `for_s`: the window, from now)."""
        now = time.monotonic()
        made = []
        for rule in rules:
            if isinstance(rule, dict):
                rule = dict(rule)
                if (for_s := rule.pop("for_s", None)) is not None:
                    rule["until"] = now + float(for_s)
                rule = Rule(**rule)
            made.append(rule)
        with self.lock:
            self.rules = made

    def add_rule(self, rule: dict | Rule) -> Rule:
        """One more rule, kept with the others; returned, to be removed by `remove_rule`."""
        with self.lock:
            kept = self.rules
        self.set_rules([*kept, rule])
        with self.lock:
            return self.rules[-1]

    def remove_rule(self, rule: Rule) -> None:
        with self.lock:
            self.rules = [r for r in self.rules if r is not rule]

    def clear(self) -> None:
        with self.lock:
            self.rules = []

    def wait_held(self, timeout_s: float) -> Held | None:
        """The first request held and not yet released, waiting at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self.held_event:
            while not (waiting := [h for h in self.held if not h.released.is_set()]):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.held_event.wait(left)
            return waiting[0]

    def release(self, held: Held, forward: bool) -> None:
        """Let a held request go: to the store, or its connection closed unanswered."""
        held.forward = forward
        held.released.set()

    def report(self) -> dict[str, int]:
        with self.lock:
            return dict(self.injected)

    def close(self) -> None:
        self.stopping.set()
        with self.lock:
            for held in self.held:
                held.released.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=5)

    def __enter__(self) -> S3Faults:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- serving ---------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _draw(self, op: str, key: str) -> Rule | None:
        """The rule this request meets, if any (first matching, by its share); counted."""
        now = time.monotonic()
        with self.lock:
            self.seen[op] += 1
            for rule in self.rules:
                if rule.matches(op, key, now) and self.rng.random() < rule.share:
                    rule.injected += 1
                    self.injected[f"{op} {rule.kind}"] += 1
                    return rule
        return None

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(120)
            try:
                request = _read_request(conn)
            except (OSError, ValueError):
                return
            if request is None:
                return
            rule = self._draw(request.op, request.key)
            kind = rule.kind if rule else None
            if kind in _ERRORS:
                status, code, message = _ERRORS[kind]
                _answer(conn, status, code, message)
                return
            if kind == "hold":
                held = Held(request.op, request.key, conn.getpeername()[1])
                with self.held_event:
                    self.held.append(held)
                    self.held_event.notify_all()
                held.released.wait()
                if not held.forward or self.stopping.is_set():
                    return
            try:
                answer = self._forward(request)
            except OSError:
                return  # the store went away: the client sees the connection close
            if kind == "slow":
                self.stopping.wait(rule.seconds)
            elif kind == "timeout":
                self.stopping.wait(rule.seconds)
                return
            elif kind == "drop":
                # half of the body; of the head when there is no body (a PUT's answer)
                head_end = answer.find(b"\r\n\r\n") + 4
                body = len(answer) - head_end if head_end > 3 else 0
                cut = head_end + body // 2 if body > 1 else len(answer) // 2
                try:
                    conn.sendall(answer[:max(cut, 1)])
                finally:
                    _reset(conn)
                return
            try:
                conn.sendall(answer)
            except OSError:
                pass

    def _forward(self, request: Request) -> bytes:
        """The request to the store (on a connection of its own, closed after); its answer."""
        head = _with_close(request.head)
        with socket.create_connection(self.upstream, timeout=120) as up:
            up.sendall(head + request.body)
            chunks = []
            while chunk := up.recv(1 << 16):
                chunks.append(chunk)
        answer = b"".join(chunks)
        head, sep, body = answer.partition(b"\r\n\r\n")
        return _with_close(head) + body if sep else answer


# -- HTTP/1.1, as much as the proxy needs ------------------------------------------------------

def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return None
        data += chunk
        if len(data) > 1 << 20:
            raise ValueError("request head too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("expect", "").lower() == "100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _read_chunked(conn, rest)
    else:
        size = int(headers.get("content-length", 0))
        body = rest
        while len(body) < size:
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise ValueError("the body ended early")
            body += chunk
    return Request(method, target, head + b"\r\n\r\n", body, headers)


def _read_chunked(conn: socket.socket, data: bytes) -> bytes:
    """A chunked body, framing and all, up to its last chunk and trailers."""
    at = 0
    while True:
        while b"\r\n" not in data[at:]:
            data += _more(conn)
        line_end = data.index(b"\r\n", at)
        size = int(data[at:line_end].split(b";")[0], 16)
        at = line_end + 2
        if size == 0:  # trailers, then an empty line
            while True:
                while b"\r\n" not in data[at:]:
                    data += _more(conn)
                line_end = data.index(b"\r\n", at)
                empty = line_end == at
                at = line_end + 2
                if empty:
                    return data[:at]
        while len(data) < at + size + 2:
            data += _more(conn)
        at += size + 2


def _more(conn: socket.socket) -> bytes:
    chunk = conn.recv(1 << 16)
    if not chunk:
        raise ValueError("the body ended early")
    return chunk


def _with_close(head: bytes) -> bytes:
    """The request head with `Connection: close` (one request per connection to the store)."""
    lines = [line for line in head.rstrip(b"\r\n").split(b"\r\n")
             if not line.lower().startswith((b"connection:", b"keep-alive:"))]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"


def _answer(conn: socket.socket, status: int, code: str, message: str) -> None:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><RequestId>s3-faults</RequestId></Error>").encode()
    head = (f"HTTP/1.1 {status} {code}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    try:
        conn.sendall(head + body)
    except OSError:
        pass


def _reset(conn: socket.socket) -> None:
    """Close with a reset (RST), as a connection dropped mid-answer."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
