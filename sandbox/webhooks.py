"""Webhook delivery: POST each event, keep every attempt, raise it again hourly for 72 hours
of the sandbox clock, as docs/interface.md ("Webhook delivery") tells.

Deliveries live in their own SQLite file under the data dir (`webhooks.sqlite3`), so a
restart resumes the schedule; an attempt cut short by a restart is simply made again.
Each attempt runs in its own task, at most PER_TARGET at a time per receiver (scheme, host,
port) and MAX_INFLIGHT in all, so a slow or dead receiver holds up only its own queue.
Attempts held by a fault (faults.py: late, shuffled) are outside the per-receiver limit
(they hold no connection while they wait) but within MAX_INFLIGHT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson

from .clock import Clock, iso
from .faults import Faults
from .store import SqliteFile, Store

log = logging.getLogger("sandbox.webhooks")

HOUR = 3600.0
WINDOW = 72 * HOUR
PER_TARGET = 4
MAX_INFLIGHT = 64
IDLE_POLL_S = 30.0  # longest sleep; wall time also moves the sandbox clock

# method -> (product, callback_type, default code, the methods GET /callback shows for it:
# the query value shown for balance is BALANCE, which covers PERIODIC_BALANCE too)
METHODS = {
    "AUTH": ("auth", "AUTH", "AUTH_SUCCESS", ("AUTH",)),
    "IDENTITY": ("identity", "IDENTITY", "PRODUCT_IS_READY", ("IDENTITY",)),
    "ACCOUNTS": ("accounts", "ACCOUNTS", "ACCOUNTS_SUCCESS", ("ACCOUNTS",)),
    "BALANCE": ("balance", "BALANCE", "BALANCE_SUCCESS", ("BALANCE", "PERIODIC_BALANCE")),
    "PERIODIC_BALANCE": ("balance", "BALANCE", "BALANCE_SUCCESS", ("PERIODIC_BALANCE",)),
    "TRANSACTIONS": ("transactions", "TRANSACTIONS", "PRODUCT_IS_READY",
                     ("TRANSACTIONS", "PERIODIC_TRANSACTIONS")),
    "PERIODIC_TRANSACTIONS": ("transactions", "TRANSACTIONS", "PRODUCT_IS_READY",
                              ("PERIODIC_TRANSACTIONS",)),
    "INCOME": ("income", "INCOME", "PRODUCT_IS_READY", ("INCOME",)),
    "PAYMENT": ("payment", "PAYMENT", "PAYMENT_SUCCESS", ("PAYMENT", "PAYMENT_RECURRING")),
    "PAYMENT_RECURRING": ("payment", "PAYMENT_RECURRING", "PAYMENT_SUCCESS",
                          ("PAYMENT_RECURRING",)),
}
# payload members that are a product's data rather than the spec's common fields
PRODUCT_MEMBERS = ("accountId", "nuban", "identity", "account", "balance", "newTransactions",
                   "income", "paymentId", "link", "garnishment", "schedule", "payment")

COLUMNS = ("id", "env", "record", "method", "event_key", "code", "url", "target", "payload",
           "raised_at", "first_attempt", "next_attempt", "last_attempt", "attempts", "state",
           "urls")
SELECT = f"select {', '.join(COLUMNS)} from deliveries"


def _target(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or ''}"


def _not_in(column: str, values: list) -> str:
    return f" and {column} not in ({','.join('?' * len(values))})" if values else ""


class Deliveries(SqliteFile):
    """The delivery queue on disk: one row per event sent (or to send) to one URL."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, Path(__file__).with_name("webhooks.sql"))

    def _rows(self, where: str, args: Iterable = ()) -> list[dict]:
        rows = self._run(f"{SELECT} where {where}", args)
        return [d | {"payload": orjson.loads(d["payload"]), "attempts": orjson.loads(d["attempts"]),
                     "urls": orjson.loads(d["urls"]) if d["urls"] else None}
                for d in (dict(zip(COLUMNS, row, strict=True)) for row in rows)]

    def _row(self, where: str, args: Iterable) -> dict | None:
        return next(iter(self._rows(where + " limit 1", args)), None)

    def add(self, env: str, record: str | None, method: str | None, url: str | None,
            payload: dict, now: float, urls: list[str] | None = None) -> int:
        code = payload.get("code") or payload.get("event")
        event_key = "|".join(str(x or "") for x in (method, payload.get("accountId"),
                                                    payload.get("paymentId")))
        with self._lock:
            return self._db.execute(
                "insert into deliveries (env, record, method, event_key, code, url, target,"
                " payload, raised_at, next_attempt, state, urls) values (?,?,?,?,?,?,?,?,?,?,?,?)",
                (env, record, method, event_key, code, url,
                 _target(url) if url else None, orjson.dumps(payload), now,
                 now if url else None, "pending" if url else "unsent",
                 orjson.dumps(urls) if urls else None)).lastrowid

    def due_targets(self, now: float) -> list[str]:
        return [r[0] for r in self._run("select distinct target from deliveries "
                                        "where state = 'pending' and next_attempt <= ?", (now,))]

    def due(self, target: str, now: float, limit: int, skip_ids: Iterable[int] = ()) -> list[dict]:
        ids = list(skip_ids)
        return self._rows(f"state = 'pending' and target = ? and next_attempt <= ?"
                          f"{_not_in('id', ids)} order by next_attempt, id limit ?",
                          (target, now, *ids, limit))

    def pending(self) -> int:
        """How many deliveries are waiting for an attempt or a redelivery."""
        return self._run("select count(*) from deliveries where state = 'pending'")[0][0]

    def next_due(self, skip_targets: Iterable[str], skip_ids: Iterable[int]) -> float | None:
        targets, ids = list(skip_targets), list(skip_ids)
        sql = ("select min(next_attempt) from deliveries where state = 'pending'"
               + _not_in("target", targets) + _not_in("id", ids))
        return self._run(sql, (*targets, *ids))[0][0]

    def finish(self, delivery_id: int, *, first_attempt: float, last_attempt: float,
               attempts: list, state: str, next_attempt: float | None, url: str) -> None:
        """Record an attempt; `url` is where the next one goes."""
        self._run("update deliveries set first_attempt = ?, last_attempt = ?, attempts = ?,"
                  " state = ?, next_attempt = ?, url = ?, target = ? where id = ?",
                  (first_attempt, last_attempt, orjson.dumps(attempts), state, next_attempt,
                   url, _target(url), delivery_id))

    def latest(self, env: str, record: str, methods: tuple[str, ...]) -> dict | None:
        return self._row(f"env = ? and record = ? and method in ({','.join('?' * len(methods))})"
                         " order by id desc", (env, record, *methods))

    def latest_per_event(self, env: str, record: str) -> list[dict]:
        return self._rows("id in (select max(id) from deliveries where env = ? and record = ?"
                          " group by event_key) order by id", (env, record))

    def last_sent(self, env: str, record: str) -> dict | None:
        return self._row("env = ? and record = ? and last_attempt is not null"
                         " order by last_attempt desc, id desc", (env, record))


class Dispatcher:
    def __init__(self, store: Store, clock: Clock, timeout_s: float, faults: Faults) -> None:
        self.store, self.clock, self.timeout_s, self.faults = store, clock, timeout_s, faults
        self.db = Deliveries(Path(store.path).parent / "webhooks.sqlite3")
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inflight: dict[int, str] = {}  # delivery id -> target
        self._per_target: dict[str, int] = {}
        self._tasks: set[asyncio.Task] = set()
        self._runner: asyncio.Task | None = None
        self._http: httpx.AsyncClient | None = None
        self._turn: dict[str, int] = {}  # env -> first deliveries sent round its URLs
        self._batch: list[dict] = []  # attempts held by a shuffle fault
        self._batch_timer: asyncio.Task | None = None
        clock.on_advance(lambda _now: self.kick())

    # -- the public surface ----------------------------------------------------------------
    def settings(self, env: str) -> dict | None:
        return self.store.get_meta(f"webhook:{env}")

    def settings_changed(self, env: str) -> None:
        self._turn.pop(env, None)

    def enqueue(self, env: str, payload: dict, *, record: str | None, method: str | None,
                url: str | None = None) -> int:
        """Queue an event for the environment's webhook, or `url`; if neither, it is kept
        unsent, for GET /callback to show and callback/trigger to send."""
        conf = self.settings(env) or {}
        target, urls = url or conf.get("url"), None
        if not url and (urls := conf.get("urls")):  # delivery i goes to URL i mod n
            turn = self._turn.get(env, 0)
            self._turn[env] = turn + 1
            target = urls[turn % len(urls)]
        payload = {k: v for k, v in payload.items() if k != "serverResponse"}
        if target and "callbackURL" in payload:
            payload["callbackURL"] = target
        delivery_id = self.db.add(env, record, method, target, payload, self.clock.now(), urls)
        if not target:
            log.info("no webhook set for %s; %s of %s kept unsent", env, method, record)
        self.kick()
        return delivery_id

    def kick(self) -> None:
        """Look for due deliveries now (after the clock moved, or something was queued)."""
        if (loop := self._loop) is not None and not loop.is_closed():  # from its thread or another
            loop.call_soon_threadsafe(self._wake.set)

    def trigger(self, env: str, records: Iterable[str], url: str | None = None) -> None:
        """Re-send each record's latest event of every kind."""
        if not (url or (self.settings(env) or {}).get("url")):
            raise LookupError("no webhook URL is set for this environment and none was given")
        with self.db.transaction():  # a trigger of 100 records is one commit
            for record in dict.fromkeys(records):
                for d in self.db.latest_per_event(env, record):
                    self.enqueue(env, d["payload"], record=record, method=d["method"], url=url)

    def callback_status(self, env: str, record: str, method: str) -> dict | None:
        """The latest event of `method`'s family (BALANCE covers PERIODIC_BALANCE...)."""
        d = self.db.latest(env, record, METHODS[method][3])
        return d and {"payload": d["payload"], "method": d["method"], "code": d["code"],
                      "state": d["state"], "raised_at": iso(d["raised_at"]),
                      "sent_at": iso(d["last_attempt"]) if d["last_attempt"] else None,
                      "next_attempt_at": (iso(d["next_attempt"]) if d["state"] == "pending"
                                          else None),
                      "attempts": d["attempts"]}

    def last_webhook(self, env: str, record: str) -> dict | None:
        d = self.db.last_sent(env, record)
        return d and {"code": d["code"], "sent_at": iso(d["last_attempt"])}

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # httpx logs every request's full URL at INFO; a receiver's URL may carry a secret
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self._http = httpx.AsyncClient(
            timeout=self.timeout_s, follow_redirects=False,
            limits=httpx.Limits(max_connections=MAX_INFLIGHT,
                                max_keepalive_connections=PER_TARGET * 4),
            headers={"User-Agent": "ledgerlake-sandbox-webhooks"})
        self._runner = asyncio.create_task(self._run())

    async def stop(self) -> None:
        tasks = [t for t in (self._runner, *self._tasks) if t]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._http:
            await self._http.aclose()
        self._loop = None
        self.db.close()

    # -- the schedule ----------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                self._launch_due()
            except Exception:  # a bad row must not stop every later delivery
                log.exception("webhook scheduler failed; retrying")
            await self._sleep()

    def _launch_due(self) -> None:
        now = self.clock.now()
        for target in self.db.due_targets(now):
            free = min(PER_TARGET - self._per_target.get(target, 0),
                       MAX_INFLIGHT - len(self._inflight))
            if free <= 0:
                continue
            for d in self.db.due(target, now, free, self._inflight):
                self._inflight[d["id"]] = target
                if (fault := self.faults.for_delivery(d)) is not None and fault.kind == "late":
                    self._spawn(self._late(d, fault.seconds))
                elif fault is not None and fault.kind == "shuffle":
                    self._hold(d, fault.batch, fault.seconds)
                else:
                    self._per_target[target] = self._per_target.get(target, 0) + 1
                    self._spawn(self._attempt(d, double=fault is not None))

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _late(self, d: dict, seconds: float) -> None:
        await asyncio.sleep(seconds)  # wall time: a frozen sandbox clock still lets it go
        await self._attempt(d, slot=False)

    def _hold(self, d: dict, batch: int, seconds: float) -> None:
        """Keep `d` until `batch` are held or `seconds` have passed, then send them shuffled."""
        self._batch.append(d)
        if len(self._batch) >= batch:
            self._release()
        elif self._batch_timer is None:
            async def timer() -> None:
                await asyncio.sleep(seconds)
                self._batch_timer = None
                self._release()
            self._batch_timer = self._spawn(timer())

    def _release(self) -> None:
        held, self._batch = self._batch, []
        if self._batch_timer is not None and self._batch_timer is not asyncio.current_task():
            self._batch_timer.cancel()
        self._batch_timer = None
        order = self.faults.permutation(len(held))

        async def one_by_one() -> None:  # in turn, so the receiver sees this very order
            for i in order:
                await self._attempt(held[i], slot=False)
        self._spawn(one_by_one())

    async def _sleep(self) -> None:
        """Until woken, or until the next delivery not held up by a full receiver is due."""
        if len(self._inflight) >= MAX_INFLIGHT:
            delay = IDLE_POLL_S  # a finishing attempt wakes us
        else:
            full = [t for t, n in self._per_target.items() if n >= PER_TARGET]
            due = self.db.next_due(full, self._inflight)
            delay = IDLE_POLL_S if due is None else min(IDLE_POLL_S, due - self.clock.now())
        if delay <= 0:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=delay)

    async def _attempt(self, d: dict, *, slot: bool = True, double: bool = False) -> None:
        """One attempt; `slot`: it holds one of its receiver's PER_TARGET places."""
        target = self._inflight[d["id"]]
        try:
            await self._deliver(d, double=double)
        except asyncio.CancelledError:
            raise  # shutting down: the row stays due, and is attempted after a restart
        except Exception:
            log.exception("webhook delivery %s failed unexpectedly", d["id"])
        finally:
            del self._inflight[d["id"]]
            if slot:
                self._per_target[target] -= 1
                if not self._per_target[target]:
                    del self._per_target[target]
            self._wake.set()

    async def _post(self, url: str, content: bytes, headers: dict) -> tuple[bool, dict]:
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._http.stream("POST", url, content=content, headers=headers) as resp:
                    ok = 200 <= resp.status_code < 300  # the body is ignored
                    return ok, {"status": resp.status_code, "message": resp.reason_phrase}
        except (TimeoutError, httpx.TimeoutException):
            return False, {"success": False, "error": f"no answer within {self.timeout_s:g} s"}
        except httpx.HTTPError as exc:
            reason = ("could not connect" if isinstance(exc, httpx.ConnectError)
                      else type(exc).__name__)
            return False, {"success": False, "error": reason}

    async def _deliver(self, d: dict, double: bool = False) -> None:
        now = self.clock.now()
        first = d["first_attempt"] or now
        payload = dict(d["payload"])
        if d["attempts"]:
            payload["serverResponse"] = {k: v for k, v in d["attempts"][-1].items()
                                         if k not in ("attempt", "at")}  # its result
        headers = {"Content-Type": "application/json"}
        if token := (self.settings(d["env"]) or {}).get("token"):
            headers["Authorization"] = f"Bearer {token}"
        content = orjson.dumps(payload)
        ok, result = await self._post(d["url"], content, headers)
        if double:  # the same attempt again; the first answer is the one recorded
            await self._post(d["url"], content, headers)
        attempts = [*d["attempts"], {"attempt": len(d["attempts"]), "at": iso(now), **result}]
        due = first + HOUR * len(attempts)  # the next try, unless acknowledged or past the window
        state = "acknowledged" if ok else "pending" if due <= first + WINDOW else "dropped"
        url = d["url"]
        if state == "pending" and (urls := d["urls"]):  # the next attempt: the next receiver
            url = urls[(urls.index(url) + 1) % len(urls)] if url in urls else urls[0]
        self.db.finish(d["id"], first_attempt=first, last_attempt=now, attempts=attempts,
                       state=state, next_attempt=due if state == "pending" else None, url=url)
        log.info("callback %s of %s, attempt %d to %s: %s -> %s", d["method"], d["record"],
                 len(attempts) - 1, d["target"], result.get("status", result.get("error")), state)
