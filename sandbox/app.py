"""The sandbox of the connection service: routes, body rules and the response envelope.

One server serves both environments: `/v2/...` is production and `/sandbox/v2/...` is
production-sandbox, each with its own key, webhook settings and data.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from . import datagen
from .auth import BASES, SANDBOX, SHORT, Keys
from .bulk import Bulk
from .clock import Clock, iso
from .connect import Connect
from .errors import ServiceError, check_fields, invalid, json_body, one_of
from .faults import REFUSALS, Faults, ResetResponse
from .products import INTERNAL, Products
from .store import Store
from .webhooks import METHODS, PRODUCT_MEMBERS, Dispatcher

log = logging.getLogger("sandbox")


# -- body rules --------------------------------------------------------------------------------

def _string(name: str, value):
    if not isinstance(value, str) or not value:
        raise invalid(name, "must be a non-empty string")
    return value


def _count(name: str, value, hi: int) -> int:
    """An integer from 1 to `hi`, or its digits (as a query string carries it)."""
    if isinstance(value, bool):
        raise invalid(name, "must be an integer")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or not 1 <= value <= hi:
        raise invalid(name, f"must be an integer between 1 and {hi}")
    return value


_page = functools.partial(_count, hi=10**9)  # bounded: pagination echoes it as a JSON int
_limit = functools.partial(_count, hi=100)


def _typed(kind: type, what: str):
    def check(name, value):
        if not isinstance(value, kind):
            raise invalid(name, f"must be {what}")
        return value
    return check


_array, _object = _typed(list, "an array"), _typed(dict, "an object")


def _url(name, value):
    value = _string(name, value)
    if not value.startswith(("http://", "https://")) or len(value) > 2048:
        raise invalid(name, "must be an http(s) URL")
    return value


def _urls(name, value):
    """One URL, or (a sandbox extension) a list of 1 to 8 distinct ones to deliver across."""
    if not isinstance(value, list):
        return _url(name, value)
    if not 1 <= len(value) <= 8:
        raise invalid(name, "must be a URL or a list of 1 to 8 URLs")
    urls = [_url(f"{name}[{i}]", v) for i, v in enumerate(value)]
    if len(set(urls)) != len(urls):
        raise invalid(name, "must not repeat a URL")
    return urls


_callback_method = functools.partial(one_of, options=METHODS)
CODE = r"[A-Z][A-Z0-9_]{0,63}"


def _callback_code(name, value):
    if not isinstance(value, str) or not re.fullmatch(CODE, value):
        raise invalid(name, "must be an upper-case code such as PRODUCT_IS_READY")
    return value


def _seconds(name, value):
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 <= value <= 366 * 86400):
        raise invalid(name, f"must be a number of seconds from 0 to {366 * 86400} (a year)")
    return value


def _any(name, value):  # the handler checks it
    return value


URL = {"type": "string", "format": "uri"}
SCHEMAS = {  # body rule -> its JSON schema, for /openapi.json
    _string: {"type": "string", "minLength": 1}, _page: {"type": ["integer", "string"]},
    _limit: {"type": ["integer", "string"]}, _array: {"type": "array"}, _object: {"type": "object"},
    _url: URL, _urls: {"oneOf": [URL, {"type": "array", "items": URL, "minItems": 1,
                                       "maxItems": 8}]},
    _callback_method: {"type": "string", "enum": list(METHODS)},
    _callback_code: {"type": "string", "pattern": f"^{CODE}$"},
    _seconds: {"type": "number", "minimum": 0}, _any: {}}


@dataclass
class Endpoint:
    path: str
    handler: Callable[[str, dict], dict]  # (env, checked body) -> the answer's data
    summary: str
    fields: dict[str, Callable] = field(default_factory=dict)
    required: str = ""  # space-separated; "a|b": one of them
    method: str = "POST"
    message: tuple[str, str] = ("message", "Request was successful")  # key and text

    @property
    def sandbox_only(self) -> bool:
        return self.path.startswith("sandbox/")

    def validate(self, body: dict) -> dict:
        check_fields(body, self.fields, self.required.split())
        return {k: self.fields[k](k, v) for k, v in body.items() if v is not None}


# -- the service -------------------------------------------------------------------------------

class Service(Products, Bulk):
    def __init__(self, data_dir: Path, keys: Keys, seed: int = 42,
                 webhook_timeout_s: float = 10.0, rate_limit: float = 1000.0,
                 addition_limit: int = 100_000, freeze_clock: bool = False) -> None:
        self.store = Store(data_dir)
        self.keys, self.seed = keys, seed
        self.clock = Clock(self.store.get_meta("clock_offset", 0.0), frozen=freeze_clock)
        self.faults = Faults()
        self.webhooks = Dispatcher(self.store, self.clock, timeout_s=webhook_timeout_s,
                                   faults=self.faults)
        self.banks = datagen.bank_objects(seed)
        self.public_base = ""  # learnt from the first request, for callback_url
        self._init_bulk()
        self._init_products(rate_limit, addition_limit)
        self.clock.on_advance(self._clock_moved)
        self.connect = Connect(self)
        self.endpoints = {(ep.method, ep.path): ep for ep in self._endpoints()}

    def _endpoints(self) -> list[Endpoint]:
        E = Endpoint
        record = {"record": _string}
        target = {"record": _string, "access_token": _string}  # a record, by either
        paging = {"page": _page, "limit": _limit}
        return [
            E("accounts/get", self.accounts_get, "Accounts of a record or customer",
              {**target, "customer": _string, **paging}, "record|access_token|customer"),
            E("auth/getByCustomer", self.auth_get_by_customer,
              "Auth records of a customer, paged", {"customer": _string, **paging}, "customer"),
            E("auth/get", self.auth_get, "Auth of a verified record with its account numbers",
              target, "record|access_token"),
            E("balance/get", self.balance_get,
              "Balances, with their daily history, of a record or account",
              {**target, "account": _string, **paging}, "record|access_token|account"),
            E("transactions/get", self.transactions_get,
              "Transactions of a record or account, by date then _id",
              {**target, "account": _string, "from": _string, "to": _string, **paging},
              "record|access_token|account"),
            E("income/get", self.income_get, "Income derived from the transactions",
              {**target, "customer": _string}, "record|access_token|customer"),
            E("identity/get", self.identity_get, "Identity the bank holds on the customer",
              {**target, "customer": _string}, "record|access_token|customer"),
            E("record/get", self.record_get, "A connection record", target, "record|access_token"),
            E("record/remove", self.record_remove,
              "Remove a record; its access tokens die, USER_DISCONNECT is sent", record, "record"),
            E("item/get", self.item_get, "Products supported and enabled, status, last webhook",
              target, "record|access_token"),
            E("token/exchange", self.token_exchange,
              "Exchange a public token for an access token", {"public_token": _string},
              "public_token"),
            E("sandbox/records/reset_login", self.reset_login,
              "Make a record need a new login (USER_REAUTH)", record, "record"),
            E("sandbox/records/verify", self.verify, "Check the two micro-deposits of a record",
              {"record": _string, "amounts": _array}, "record amounts"),
            E("sandbox/records/fail", self.records_fail,
              "Make a record's next N calls of one product answer an error",
              {"record": _string, "product": _string, "times": _any, "error_code": _string},
              "record product times"),
            E("sandbox/records/corrupt", self.records_corrupt,
              "Serve one posted line's running balance 1.00 naira off",
              {"record": _string, "account": _string, "line": _any}, "record"),
            E("sandbox/records/ledger", self.records_ledger,
              "What a full pull of a record would hold now, in exact figures", record, "record"),
            E("sandbox/banks/status", self.banks_status,
              "Set a bank's status (down, unavailable...)",
              {"bank": _string, "status": _string}, "bank status"),
            E("sandbox/maintenance", self.maintenance, "Turn maintenance mode on or off",
              {"on": _any}, "on"),
            E("sandbox/payments/initiate", self.payments_initiate,
              "Debit a record's first account (kobo), once or recurring",
              {"record": _string, "amount": _any, "recurring": _object}, "record amount"),
            E("settings/webhook", self.settings_webhook,
              "Set this environment's webhook URL (or URLs) and token",
              {"url": _urls, "token": _string}, "url"),
            E("settings/connect", self.connect.settings,
              "This environment's connect page: public key, URL, plan, wallet, signed "
              "agreement", {"plan": _string, "wallet": _any, "agreement": _any}),
            E("banks/list", lambda env, body: {"banks": self.banks_of(env)}, "Supported banks",
              method="GET"),
            E("sandbox/customers/create", self.customers_create,
              "Create customers whose connections then complete", {"customers": _array},
              "customers"),
            E("sandbox/records/bulk_create", self.records_bulk_create,
              "Create up to a million thin connected records in one call",
              dict.fromkeys(("count", "accounts", "volume", "days", "seed", "callbacks",
                             "rate"), _any), "count"),
            E("callback", self.callback_get, "Callback status of a record for one method",
              {"record": _string, "method": _callback_method}, "record method", method="GET"),
            E("callback/trigger", self.callback_trigger,
              "Re-send records' latest callbacks, to the saved URL or url",
              {"records": _array, "record": _string, "url": _url}, "records|record",
              message=("messgae", "Webhook trigger initiated")),
            E("sandbox/records/fire_webhook", self.fire_webhook,
              "Raise a product callback for a record now",
              {"record": _string, "method": _callback_method, "code": _callback_code},
              "record method"),
            E("sandbox/faults", lambda env, body: self.faults.set(body["rules"], body.get("seed")),
              "Inject faults: refusals, resets, stalls, truncated pages, doubled, late or "
              "shuffled webhooks (seeded)", {"rules": _array, "seed": _any}, "rules"),
            E("sandbox/faults", lambda env, body: self.faults.report(),
              "The fault rules and the faults injected, by kind", method="GET"),
            E("sandbox/faults", lambda env, body: self.faults.clear(),
              "Clear every fault rule (the counts stay)", method="DELETE"),
            E("sandbox/clock/advance", self.clock_advance,
              "Move the sandbox clock forward (redelivery, periodic products)",
              {"seconds": _seconds}, "seconds"),
        ]

    # -- handlers -------------------------------------------------------------------------
    def settings_webhook(self, env: str, body: dict) -> dict:
        url = body["url"]
        urls = url if isinstance(url, list) else [url]
        conf = {"url": urls[0], "token": body.get("token"), "env": env}
        if len(urls) > 1:  # several receivers: deliveries go round them
            conf["urls"] = urls
        self.store.set_meta(f"webhook:{env}", conf)
        self.webhooks.settings_changed(env)
        return {"url": url, "token_set": conf["token"] is not None, "env": env}

    # -- webhooks: the Dispatcher (webhooks.py) keeps every delivery and its attempts ----------
    def callback_get(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        product = METHODS[body["method"]][0]
        st = self.webhooks.callback_status(env, rec["_id"], body["method"])
        data = {"product": product, "record": rec["_id"]}
        if st:
            data.update({k: v for k, v in st["payload"].items() if k in PRODUCT_MEMBERS})
        data["status"] = {"process": {"running": st is None and product in rec["products"],
                                      "completed": st is not None},
                          "last_callback": st and st["sent_at"]}
        data["callback"] = st and {k: st[k] for k in ("method", "code", "state", "raised_at",
                                                      "sent_at", "next_attempt_at", "attempts")}
        return data

    def callback_trigger(self, env: str, body: dict) -> dict:
        records = body["records"] if "records" in body else [body["record"]]
        if not 1 <= len(records) <= 100:
            raise ServiceError("INVALID_FIELD", "records must hold 1 to 100 record ids")
        recs = [self._record(env, _string(f"records[{i}]", r)) for i, r in enumerate(records)]
        # a bulk record whose connection callbacks were never raised raises them now
        fresh = {r["_id"]: r for r in recs if "bulk" in r[INTERNAL]
                 and self.webhooks.callback_status(env, r["_id"], "AUTH") is None}
        try:
            self.webhooks.trigger(env, records, body.get("url"))
        except LookupError as exc:
            raise ServiceError("INVALID_FIELD", f"url: {exc}") from None
        for rec in fresh.values():
            for method, payload in self._connection_callbacks(env, rec):
                self.webhooks.enqueue(env, payload, record=rec["_id"], method=method,
                                      url=body.get("url"))
        return {}

    def fire_webhook(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        method = body["method"]
        _, callback_type, default_code, _ = METHODS[method]
        code = body.get("code", default_code)
        status = "is_failed" if code.endswith("FAILED") else "is_success"
        prior = self.webhooks.callback_status(env, rec["_id"], method)
        if prior and prior["method"] == method:  # same product members, new outcome
            payload = {**prior["payload"], "callback_code": code, "code": code,
                       "status": status, "ended_at": iso(self.clock.now())}
        else:
            payload = self.callback(env, rec, method, code, status=status,
                                    callback_type=callback_type)
        self.webhooks.enqueue(env, payload, record=rec["_id"], method=method)
        return {}

    def clock_advance(self, env: str, body: dict) -> dict:
        now = self.clock.advance(body["seconds"])
        self.store.set_meta("clock_offset", self.clock.offset_s)
        return {"now": iso(now)}

    def _clock_moved(self, now: float) -> None:
        with contextlib.suppress(RuntimeError):  # no loop yet: the next tick catches up
            asyncio.get_running_loop().call_soon(self.daily, now)

    # -- the HTTP door -----------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        if not self.public_base:
            self.public_base = str(request.base_url).rstrip("/")
        path = request.scope["path"]  # as sent, without building a URL object
        # (environment, what follows its base) of a path under /v2/ or /sandbox/v2/
        where = next(((env, path[len(base):]) for env, base in BASES.items()
                      if path.startswith(base)), None)
        if where and (where[1] == "connect" or where[1].startswith("connect/")):  # public key
            return await self.connect.handle(request, where[0], where[1].strip("/"))
        request_id, started = secrets.token_hex(12), time.perf_counter()
        headers = {"X-Request-Id": request_id}
        try:
            status, body = await self._dispatch(request, where)
        except ServiceError as err:
            status, body = err.http_code, err.body(request_id)
            headers.update(err.headers)
        except Exception:  # a bug must still answer with the spec's body, never a traceback
            log.exception("request %s failed", request_id)
            err = ServiceError("INTERNAL_SERVER_ERROR", "internal failure")
            status, body = 500, err.body(request_id)
        log.info("%s %s %s %d %.1fms", request_id, request.method, path, status,
                 (time.perf_counter() - started) * 1000)
        content = orjson.dumps(body)
        fault = request.scope.get("sandbox.fault")
        if fault is not None:  # the call was carried out; its answer is broken on the way
            log.info("%s fault %s", request_id, fault.kind)
            if fault.kind == "reset":
                return ResetResponse(content, status_code=status, media_type="application/json",
                                     headers=headers)
            if fault.kind == "truncate":  # any proper prefix of an object is invalid JSON
                return Response(content[:len(content) // 2], status_code=200,
                                media_type="application/json", headers=headers)
            await asyncio.sleep(fault.seconds)  # stall: other requests go on meanwhile
        return Response(content, status_code=status, media_type="application/json", headers=headers)

    def openapi(self) -> dict:
        """OpenAPI 3.1 of every route, both environments, made from the endpoint table."""
        paths, error = {}, {"$ref": "#/components/schemas/Error"}
        for ep in self.endpoints.values():
            props = {k: SCHEMAS[v] for k, v in ep.fields.items()}
            op: dict = {"summary": ep.summary, "operationId": ep.path.replace("/", "_"),
                        "security": [{"bearer": []}],
                        "responses": {"200": {"description": "success"},
                                      "400": {"description": "error", "content": {
                                          "application/json": {"schema": error}}},
                                      "401": {"description": "INVALID_API_KEYS"},
                                      "429": {"description": "rate limited"},
                                      "500": {"description": "API_ERROR"}}}
            if ep.method == "POST":
                op["requestBody"] = {"required": True, "content": {"application/json": {
                    "schema": {"type": "object", "properties": props,
                               "additionalProperties": False}}}}
            else:
                op["parameters"] = [{"name": k, "in": "query", "schema": props[k],
                                     "required": k in ep.required.split()} for k in props]
            for env in [SANDBOX] if ep.sandbox_only else BASES:
                paths.setdefault(BASES[env] + ep.path, {})[ep.method.lower()] = {
                    **op, "operationId": f"{SHORT[env]}_{op['operationId']}"}
        return {"openapi": "3.1.0",
                "info": {"title": "ledgerlake sandbox of the connection service", "version": "2"},
                "paths": paths, "components": {
                    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
                    "schemas": {"Error": {"type": "object", "required": [
                        "error_type", "error_code", "error_message", "display_message",
                        "http_code", "request_id"]}}}}

    async def _dispatch(self, request: Request, where: tuple[str, str] | None) -> tuple[int, dict]:
        path = request.scope["path"]
        if path == "/openapi.json" and request.method == "GET":
            return 200, self.openapi()
        if where is None:
            raise ServiceError("NOT_FOUND", f"no endpoint at {path}")
        env, sub = where[0], where[1].strip("/")
        if (ep := self.endpoints.get((request.method, sub))) is None:
            raise ServiceError("NOT_FOUND", f"no endpoint {request.method} {path}")
        self.keys.check(env, request.headers.get("authorization"))
        if ep.sandbox_only and env != SANDBOX:
            raise ServiceError("SANDBOX_ONLY", f"{sub} exists only in the sandbox environment")
        if self.maintenance_on and sub != "sandbox/maintenance":
            raise ServiceError("PLANNED_MAINTENANCE",
                               "maintenance mode: API operations are disabled")
        if not ep.sandbox_only and (fault := self.faults.for_request(env, sub)) is not None:
            if fault.kind in REFUSALS:
                raise self.faults.error(fault, sub)
            request.scope["sandbox.fault"] = fault
        if wait := self.limiter.take(env, sub):
            raise ServiceError(self.limiter.code(sub), f"too many requests to {sub}; retry in "
                               f"{wait:.2f}s", headers={"Retry-After": self.limiter.retry_after(wait)})
        body = await json_body(request) if request.method == "POST" else dict(request.query_params)
        key, text = ep.message
        return 200, {"status": "success", key: text, "data": ep.handler(env, ep.validate(body))}


class _App(Starlette):
    """Starlette for the lifespan; HTTP goes straight to the one handler, which answers every
    error itself, skipping the router and middleware on the hot path."""

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            response = await self.state.service.handle(Request(scope, receive))
            await response(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(data_dir: Path, keys: Keys, **options) -> Starlette:
    """The sandbox's ASGI app; `options` are `Service`'s."""
    service = Service(Path(data_dir), keys, **options)

    async def calendar():  # wall time moves the sandbox clock too
        while True:
            try:
                service.daily(service.clock.now())
            except Exception:
                log.exception("daily products failed")
            await asyncio.sleep(60)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.webhooks.start()
        tasks = [asyncio.create_task(calendar()), asyncio.create_task(service.pace())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await service.webhooks.stop()
            service.store.close()

    app = _App(lifespan=lifespan)
    app.state.service = service
    return app
