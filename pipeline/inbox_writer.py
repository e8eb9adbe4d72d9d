"""The receiver's inbox writer: a process of its own that commits callbacks in groups.

Callbacks that arrive while it commits a group wait and go in the next one, so one disk sync
(or one database round trip) acknowledges many. It is a process, not a thread, because under
load the receiver's event loop holds the GIL: a writer thread waited for it at every SQLite
step, and the waiting, not the disk, set the pace (bench/README.md, "Receivers").

The receiver checks the token and the size; the writer reads each body, stores it (an event,
or a dead letter when it is none) and answers, for each, its (event id, whether it was new),
why it is not an event (a 400) or why it was not stored (a 503). Reading bodies here too
leaves the event loop only HTTP to do.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
import signal
import socket
import struct
from multiprocessing.connection import Connection

import orjson

from .inbox import InboxUnavailable, InvalidEvent, describe, kept_body, open_inbox, scrubbed

log = logging.getLogger("ledgerlake.receiver")

MAX_GROUP = 256
MAX_GROUP_BYTES = 8 << 20  # bodies of up to 1 MiB each: a group hands over at most ~8 MiB


class NotStored(RuntimeError):
    """The writer could not store this callback; the service will deliver it again."""


class NotAnEvent(ValueError):
    """The body is not an event we can act on (kept as a dead letter): the reason."""


class Writer:
    """The receiver's side: queues callbacks, hands them to the writer process a group at a
    time over a socket pair (asyncio streams: the event loop never blocks on it), and settles
    each callback's future with its answer. Only the event loop touches it."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._pending: list[tuple[bytes, asyncio.Future]] = []
        self._inflight: list | None = None
        self._stopped: str | None = None  # why nothing more can be stored
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proc = self._out = self._answers = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads
        ours, theirs = socket.socketpair()
        theirs = Connection(theirs.detach())  # read and written as multiprocessing's pipes
        self._proc = ctx.Process(target=serve, name="ledgerlake-inbox-writer", daemon=True,
                                 args=(self.location, theirs, logging.getLogger().level))
        try:
            self._proc.start()
        finally:
            theirs.close()  # the child has its own copy: its end closing is our EOF
        reader, self._out = await asyncio.open_connection(sock=ours)
        self._answers = asyncio.create_task(self._read_answers(reader))
        log.info("inbox writer process %d started", self._proc.pid)

    @property
    def running(self) -> bool:
        """False once the writer process has ended: nothing more could be stored."""
        return self._stopped is None and self._proc is not None and self._proc.is_alive()

    async def add(self, raw: bytes) -> tuple[int, bool]:
        """Store a callback's body: its (event id, new); NotAnEvent or NotStored otherwise."""
        if self._stopped:
            raise NotStored(self._stopped)
        fut = self._loop.create_future()
        self._pending.append((raw, fut))
        if self._inflight is None and len(self._pending) == 1:
            # after the callbacks already read in this turn of the loop: they join the group
            self._loop.call_soon(self._send)
        self._idle.clear()
        # a sender that hangs up cancels only its wait: the write, queued, still happens
        return await fut

    def _send(self) -> None:
        if self._inflight is not None or not self._pending or self._stopped:
            return
        size, n = 0, 0
        for raw, _ in self._pending[:MAX_GROUP]:
            size += len(raw)
            n += 1
            if size > MAX_GROUP_BYTES:
                break
        group, self._pending = self._pending[:n], self._pending[n:]
        self._inflight = group
        data = pickle.dumps([raw for raw, _ in group], protocol=pickle.HIGHEST_PROTOCOL)
        # framed as multiprocessing's Connection reads it: a 4-byte length, then the bytes
        self._out.write(struct.pack("!i", len(data)) + data)  # buffered: never blocks

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = struct.unpack("!i", await reader.readexactly(4))
                answers = pickle.loads(await reader.readexactly(size))
                group, self._inflight = self._inflight, None
                _settle(group, [NotStored(a) if isinstance(a, str)
                                else NotAnEvent(a[1]) if a[0] is None else a for a in answers])
                if self._pending:
                    self._send()
                else:
                    self._idle.set()
        except (asyncio.IncompleteReadError, OSError):
            code = self._proc.exitcode
            self._stop("the inbox writer process ended"
                       + (f" with exit code {code}" if code is not None else ""))

    def _stop(self, reason: str) -> None:
        if self._stopped:
            return
        self._stopped = reason
        log.error("%s: callbacks are answered 503 until the receiver restarts", reason)
        waiting = (self._inflight or []) + self._pending
        self._inflight, self._pending = None, []
        _settle(waiting, [NotStored(reason)] * len(waiting))
        self._idle.set()

    async def stop(self) -> None:
        """Store what is queued, then end the writer process."""
        if self._proc is None:
            return
        await self._idle.wait()
        self._stopped = self._stopped or "the receiver is stopping"
        self._answers.cancel()
        self._out.close()  # its EOF: the writer ends
        await asyncio.to_thread(self._proc.join, 10)
        if self._proc.is_alive():
            self._proc.terminate()


def _settle(group: list, answers: list) -> None:
    for (_, fut), answer in zip(group, answers, strict=True):
        if fut.done():
            continue
        if isinstance(answer, Exception):
            fut.set_exception(answer)
        else:
            fut.set_result(answer)


def serve(location: str, conn, level: int) -> None:
    """The writer process: a group in, its answers out, until the receiver's end closes. It
    opens the inbox at its first group and again after the database went away."""
    # the receiver ends it by closing the pipe once what is queued is stored: a Ctrl-C at
    # the terminal (sent to the whole process group) must not cut that short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    inbox = None
    try:
        while True:
            try:
                group = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            if inbox is None:
                try:
                    inbox = open_inbox(location)
                except Exception as exc:  # down for now: these are refused, the next tried
                    log.error("inbox write failed: %s", exc)
                    conn.send_bytes(pickle.dumps([str(exc)] * len(group)))
                    continue
            answers = _store(inbox, group)
            try:
                conn.send_bytes(pickle.dumps(answers))
            except OSError:  # the receiver is gone: what was committed stays, unanswered
                return
    finally:
        if inbox is not None:
            inbox.close()


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
    return info, kept_body(payload, raw)


def _store(inbox, group: list[bytes]) -> list:
    """Each body's answer: (event id, new), (None, why it is not an event) or the text of
    what kept it out of the inbox."""
    read = [_read(raw) for raw in group]
    answers: list = [None] * len(group)
    events = [i for i, r in enumerate(read) if not isinstance(r, str)]
    for i, answer in zip(events, _commit(inbox, [read[i] for i in events]) if events else [],
                         strict=True):
        answers[i] = answer
        if log.isEnabledFor(logging.DEBUG) and not isinstance(answer, str):
            # a line per callback; INFO has one per commit
            info = read[i][0]
            log.debug("event %d %s %s %s", answer[0], "stored" if answer[1] else "duplicate",
                      info["method"], info["record"] or "-")
    for i, r in enumerate(read):
        if isinstance(r, str):
            try:
                inbox.dead_letter(r, scrubbed(group[i]))
            except Exception as exc:  # the answer is still 400: the body is bad
                log.error("dead letter not kept: %s", exc)
            answers[i] = (None, r)
    return answers


def _commit(inbox, group: list) -> list:
    """Each callback's (event id, new), or the text of what kept it out of the inbox."""
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
        return [str(exc) or type(exc).__name__] * len(group)
    new = sum(1 for _, is_new in answers if is_new)
    log.info("stored %d callbacks (%d already stored), events up to %d",
             new, len(answers) - new, max(event for event, _ in answers))
    return answers
