"""Webhook delivery: POST each event, keep every attempt, raise it again hourly for 72 hours.

Deliveries live in the store, so a restart resumes the schedule. Each attempt runs in its
own task, so a slow receiver never holds up another's callbacks or the API.
"""

from __future__ import annotations

import asyncio
import logging

import httpx
import orjson

from .clock import Clock, iso
from .store import Store

log = logging.getLogger("sandbox.webhooks")

HOUR = 3600.0
WINDOW = 72 * HOUR


class Dispatcher:
    def __init__(self, store: Store, clock: Clock, timeout_s: float = 10.0) -> None:
        self.store = store
        self.clock = clock
        self.timeout_s = timeout_s
        self._wake = asyncio.Event()
        self._inflight: set[int] = set()
        self._tasks: set[asyncio.Task] = set()
        self._runner: asyncio.Task | None = None
        self._http: httpx.AsyncClient | None = None

    def settings(self, env: str) -> dict | None:
        return self.store.get_meta(f"webhook:{env}")

    def enqueue(self, env: str, payload: dict, *, record: str | None, method: str | None,
                url: str | None = None) -> int | None:
        """Queue an event for the environment's webhook (or `url`); None if none is set."""
        conf = self.settings(env) or {}
        target = url or conf.get("url")
        if not target:
            log.info("no webhook configured for %s; %s not sent", env, method)
            return None
        delivery_id = self.store.add_delivery(
            env, record, method, target, conf.get("token"), payload, self.clock.now()
        )
        self._wake.set()
        return delivery_id

    def kick(self) -> None:
        """Look for due deliveries now (after the clock moved)."""
        self._wake.set()

    async def start(self) -> None:
        self._http = httpx.AsyncClient(timeout=self.timeout_s)
        self._runner = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._runner:
            self._runner.cancel()
        for t in list(self._tasks):
            t.cancel()
        if self._http:
            await self._http.aclose()

    async def _run(self) -> None:
        while True:
            for d in self.store.due_deliveries(self.clock.now()):
                if d["id"] in self._inflight:
                    continue
                self._inflight.add(d["id"])
                task = asyncio.create_task(self._attempt(d))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)
            except TimeoutError:
                pass

    async def _attempt(self, d: dict) -> None:
        try:
            now = self.clock.now()
            first = d["first_attempt"] or now
            payload = dict(d["payload"])
            headers = {"Content-Type": "application/json"}
            if d["token"]:
                headers["Authorization"] = f"Bearer {d['token']}"
            try:
                resp = await self._http.post(d["url"], content=orjson.dumps(payload),
                                             headers=headers)
                ok = 200 <= resp.status_code < 300
                result = {"status": resp.status_code, "message": resp.reason_phrase}
            except httpx.HTTPError as exc:
                ok = False
                result = {"success": False, "error": type(exc).__name__}
            result["at"] = iso(now)
            attempts = [*d["attempts"], result]
            if ok:
                state, due = "acknowledged", now
            else:
                due = first + HOUR * len(attempts)
                state = "pending" if due <= first + WINDOW else "dropped"
            self.store.finish_attempt(d["id"], first_attempt=first, attempts=attempts,
                                      state=state, next_attempt=due)
            log.info("callback %s %s to %s: %s", d["method"], d["record"], d["url"],
                     result.get("status", result.get("error")))
        finally:
            self._inflight.discard(d["id"])
