"""The sandbox of the connection service: routes, body rules and the response envelope.

One server serves both environments: `/v2/...` is production and `/sandbox/v2/...` is
production-sandbox, each with its own key, webhook settings and data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import datagen
from .auth import PRODUCTION, SANDBOX, Keys
from .bulk import Bulk
from .clock import Clock, iso
from .connect import Connect
from .errors import ServiceError
from .faults import REFUSALS, Faults
from .products import INTERNAL, Products
from .store import Store
from .webhooks import METHODS, PRODUCT_MEMBERS, Dispatcher

log = logging.getLogger("sandbox")

PREFIXES = (("/sandbox/v2/", SANDBOX), ("/v2/", PRODUCTION))
ENV_SHORT = {PRODUCTION: "production", SANDBOX: "sandbox"}


# -- body rules --------------------------------------------------------------------------------

def _string(name: str, value):
    if not isinstance(value, str) or not value:
        raise ServiceError("INVALID_FIELD", f"{name} must be a non-empty string")
    return value


def _integer(name: str, value, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool):
        raise ServiceError("INVALID_FIELD", f"{name} must be an integer")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        bound = f" between {lo} and {hi}" if hi is not None else f" of at least {lo}"
        raise ServiceError("INVALID_FIELD", f"{name} must be an integer{bound}")
    return value


def _page(name, value):
    return _integer(name, value, 1, 10**9)  # bounded: pagination echoes it as a JSON int


def _limit(name, value):
    return _integer(name, value, 1, 100)


def _array(name, value):
    if not isinstance(value, list):
        raise ServiceError("INVALID_FIELD", f"{name} must be an array")
    return value


def _url(name, value):
    value = _string(name, value)
    if not value.startswith(("http://", "https://")) or len(value) > 2048:
        raise ServiceError("INVALID_FIELD", f"{name} must be an http(s) URL")
    return value


def _callback_method(name, value):
    if value not in METHODS:
        raise ServiceError("INVALID_FIELD", f"{name} must be one of {', '.join(METHODS)}")
    return value


def _callback_code(name, value):
    if not isinstance(value, str) or not re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}", value):
        raise ServiceError("INVALID_FIELD", f"{name} must be an upper-case code such as "
                                            "PRODUCT_IS_READY")
    return value


def _urls(name, value):
    """One URL, or (a sandbox extension) a list of 1 to 8 distinct ones to deliver across."""
    if not isinstance(value, list):
        return _url(name, value)
    if not 1 <= len(value) <= 8:
        raise ServiceError("INVALID_FIELD", f"{name} must be a URL or a list of 1 to 8 URLs")
    urls = [_url(f"{name}[{i}]", v) for i, v in enumerate(value)]
    if len(set(urls)) != len(urls):
        raise ServiceError("INVALID_FIELD", f"{name} must not repeat a URL")
    return urls


def _seconds(name, value):
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 <= value <= 366 * 86400):
        raise ServiceError("INVALID_FIELD", f"{name} must be a number of seconds from 0 to "
                                            f"{366 * 86400} (a year)")
    return value


@dataclass
class Endpoint:
    path: str
    handler: Callable[..., Awaitable[dict]]
    fields: dict[str, Callable] = field(default_factory=dict)
    required: list[tuple[str, ...]] = field(default_factory=list)  # each: one of these
    method: str = "POST"
    sandbox_only: bool = False
    summary: str = ""
    message: tuple[str, str] = ("message", "Request was successful")  # key and text


def validate_body(ep: Endpoint, body: dict) -> dict:
    unknown = sorted(set(body) - set(ep.fields))
    if unknown:
        raise ServiceError("UNKNOWN_FIELDS", f"unknown fields: {', '.join(unknown)}")
    missing = [" or ".join(group) for group in ep.required
               if not any(body.get(f) is not None for f in group)]
    if missing:
        raise ServiceError("MISSING_FIELDS", f"missing fields: {', '.join(missing)}")
    return {k: ep.fields[k](k, v) for k, v in body.items() if v is not None}


def _object(name, value):
    if not isinstance(value, dict):
        raise ServiceError("INVALID_FIELD", f"{name} must be an object")
    return value


def _any(name, value):
    return value


# body rule -> its JSON schema, for /openapi.json
SCHEMAS = {_string: {"type": "string", "minLength": 1}, _page: {"type": ["integer", "string"]},
           _limit: {"type": ["integer", "string"]}, _array: {"type": "array"},
           _url: {"type": "string", "format": "uri"}, _object: {"type": "object"},
           _urls: {"oneOf": [{"type": "string", "format": "uri"},
                             {"type": "array", "items": {"type": "string", "format": "uri"},
                              "minItems": 1, "maxItems": 8}]},
           _seconds: {"type": "number", "minimum": 0}, _any: {},
           _callback_method: {"type": "string", "enum": list(METHODS)},
           _callback_code: {"type": "string", "pattern": "^[A-Z][A-Z0-9_]{0,63}$"}}


def paginate(items: list, page: int, limit: int) -> tuple[list, dict]:
    start = (page - 1) * limit
    return items[start:start + limit], pagination(len(items), page, limit)


def pagination(total: int, page: int, limit: int) -> dict:
    """The spec's Pagination object for `total` items."""
    pages = max(1, -(-total // limit))
    start = (page - 1) * limit
    return {
        "totalDocs": total,
        "limit": limit,
        "page": page,
        "totalPages": pages,
        "pagingCounter": start + 1,
        "hasPrevPage": page > 1,
        "hasNextPage": page < pages,
        "prevPage": page - 1 if page > 1 else None,
        "nextPage": page + 1 if page < pages else None,
    }


# -- the service -------------------------------------------------------------------------------

class Service(Products, Bulk):
    paginate = staticmethod(paginate)
    pages = staticmethod(pagination)

    def __init__(self, data_dir: Path, keys: Keys, seed: int = 42,
                 webhook_timeout_s: float = 10.0, rate_limit: float = 1000.0,
                 addition_limit: int = 100_000, freeze_clock: bool = False) -> None:
        self.store = Store(data_dir)
        self.keys = keys
        self.seed = seed
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
        self.endpoints: dict[tuple[str, str], Endpoint] = {}
        for ep in self._endpoints():
            self.endpoints[(ep.method, ep.path)] = ep

    def _endpoints(self) -> list[Endpoint]:
        paging = {"page": _page, "limit": _limit}
        return [
            Endpoint("accounts/get", self.accounts_get,
                     {"record": _string, "access_token": _string, "customer": _string, **paging},
                     [("record", "access_token", "customer")],
                     summary="Accounts of a record or customer"),
            Endpoint("auth/getByCustomer", self.auth_get_by_customer,
                     {"customer": _string, **paging}, [("customer",)],
                     summary="Auth records of a customer, paged"),
            Endpoint("auth/get", self.auth_get, {"record": _string, "access_token": _string},
                     [("record", "access_token")],
                     summary="Auth of a verified record with its account numbers"),
            Endpoint("balance/get", self.balance_get,
                     {"record": _string, "access_token": _string, "account": _string,
                      **paging}, [("record", "access_token", "account")],
                     summary="Balances, with their daily history, of a record or account"),
            Endpoint("transactions/get", self.transactions_get,
                     {"record": _string, "access_token": _string, "account": _string,
                      "from": _string, "to": _string, **paging},
                     [("record", "access_token", "account")],
                     summary="Transactions of a record or account, by date then _id"),
            Endpoint("income/get", self.income_get,
                     {"record": _string, "access_token": _string, "customer": _string},
                     [("record", "access_token", "customer")],
                     summary="Income derived from the transactions"),
            Endpoint("identity/get", self.identity_get,
                     {"record": _string, "access_token": _string, "customer": _string},
                     [("record", "access_token", "customer")],
                     summary="Identity the bank holds on the customer"),
            Endpoint("record/get", self.record_get, {"record": _string, "access_token": _string},
                     [("record", "access_token")],
                     summary="A connection record"),
            Endpoint("record/remove", self.record_remove, {"record": _string}, [("record",)],
                     summary="Remove a record; its access tokens die, USER_DISCONNECT is sent"),
            Endpoint("item/get", self.item_get, {"record": _string, "access_token": _string},
                     [("record", "access_token")],
                     summary="Products supported and enabled, status, last webhook"),
            Endpoint("token/exchange", self.token_exchange, {"public_token": _string},
                     [("public_token",)], summary="Exchange a public token for an access token"),
            Endpoint("sandbox/records/reset_login", self.reset_login, {"record": _string},
                     [("record",)], sandbox_only=True,
                     summary="Make a record need a new login (USER_REAUTH)"),
            Endpoint("sandbox/records/verify", self.verify,
                     {"record": _string, "amounts": _array}, [("record",), ("amounts",)],
                     sandbox_only=True, summary="Check the two micro-deposits of a record"),
            Endpoint("sandbox/records/fail", self.records_fail,
                     {"record": _string, "product": _string, "times": _any,
                      "error_code": _string}, [("record",), ("product",), ("times",)],
                     sandbox_only=True,
                     summary="Make a record's next N calls of one product answer an error"),
            Endpoint("sandbox/records/corrupt", self.records_corrupt,
                     {"record": _string, "account": _string, "line": _any}, [("record",)],
                     sandbox_only=True,
                     summary="Serve one posted line's running balance 1.00 naira off"),
            Endpoint("sandbox/records/ledger", self.records_ledger, {"record": _string},
                     [("record",)], sandbox_only=True,
                     summary="What a full pull of a record would hold now, in exact figures"),
            Endpoint("sandbox/banks/status", self.banks_status,
                     {"bank": _string, "status": _string}, [("bank",), ("status",)],
                     sandbox_only=True, summary="Set a bank's status (down, unavailable...)"),
            Endpoint("sandbox/maintenance", self.maintenance, {"on": _any}, [("on",)],
                     sandbox_only=True, summary="Turn maintenance mode on or off"),
            Endpoint("sandbox/payments/initiate", self.payments_initiate,
                     {"record": _string, "amount": _any, "recurring": _object},
                     [("record",), ("amount",)], sandbox_only=True,
                     summary="Debit a record's first account (kobo), once or recurring"),
            Endpoint("settings/webhook", self.settings_webhook,
                     {"url": _urls, "token": _string}, [("url",)],
                     summary="Set this environment's webhook URL (or URLs) and token"),
            Endpoint("settings/connect", self.connect.settings,
                     {"plan": _string, "wallet": _any, "agreement": _any},
                     summary="This environment's connect page: public key, URL, plan, wallet, "
                             "signed agreement"),
            Endpoint("banks/list", self.banks_list, method="GET", summary="Supported banks"),
            Endpoint("sandbox/customers/create", self.customers_create,
                     {"customers": _array}, [("customers",)], sandbox_only=True,
                     summary="Create customers whose connections then complete"),
            Endpoint("sandbox/records/bulk_create", self.records_bulk_create,
                     {k: _any for k in ("count", "accounts", "volume", "days", "seed",
                                        "callbacks", "rate")}, [("count",)],
                     sandbox_only=True,
                     summary="Create up to a million thin connected records in one call"),
            Endpoint("callback", self.callback_get,
                     {"record": _string, "method": _callback_method}, [("record",), ("method",)],
                     method="GET", summary="Callback status of a record for one method"),
            Endpoint("callback/trigger", self.callback_trigger,
                     {"records": _array, "record": _string, "url": _url},
                     [("records", "record")], message=("messgae", "Webhook trigger initiated"),
                     summary="Re-send records' latest callbacks, to the saved URL or url"),
            Endpoint("sandbox/records/fire_webhook", self.fire_webhook,
                     {"record": _string, "method": _callback_method, "code": _callback_code},
                     [("record",), ("method",)], sandbox_only=True,
                     summary="Raise a product callback for a record now"),
            Endpoint("sandbox/faults", self.faults_set, {"rules": _array, "seed": _any},
                     [("rules",)], sandbox_only=True,
                     summary="Inject faults: refusals, resets, stalls, truncated pages, "
                             "doubled, late or shuffled webhooks (seeded)"),
            Endpoint("sandbox/faults", self.faults_report, method="GET", sandbox_only=True,
                     summary="The fault rules and the faults injected, by kind"),
            Endpoint("sandbox/faults", self.faults_clear, method="DELETE", sandbox_only=True,
                     summary="Clear every fault rule (the counts stay)"),
            Endpoint("sandbox/clock/advance", self.clock_advance, {"seconds": _seconds},
                     [("seconds",)], sandbox_only=True,
                     summary="Move the sandbox clock forward (redelivery, periodic products)"),
        ]

    # -- handlers: each takes (env, body) and returns `data` -------------------------------
    async def settings_webhook(self, env: str, body: dict) -> dict:
        url = body["url"]
        conf = {"url": url, "token": body.get("token"), "env": env}
        if isinstance(url, list):  # several receivers: deliveries go round them
            conf["url"] = url[0]
            if len(url) > 1:
                conf["urls"] = url
        self.store.set_meta(f"webhook:{env}", conf)
        self.webhooks.settings_changed(env)
        return {"url": url, "token_set": conf["token"] is not None, "env": env}

    async def faults_set(self, env: str, body: dict) -> dict:
        return self.faults.set(body["rules"], body.get("seed"))

    async def faults_report(self, env: str, body: dict) -> dict:
        return self.faults.report()

    async def faults_clear(self, env: str, body: dict) -> dict:
        return self.faults.clear()

    async def banks_list(self, env: str, body: dict) -> dict:
        return {"banks": self.banks_of(env)}

    # -- webhooks: the Dispatcher (webhooks.py) keeps every delivery and its attempts ----------
    async def callback_get(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        product = METHODS[body["method"]][0]
        st = self.webhooks.callback_status(env, rec["_id"], body["method"])
        data = {"product": product, "record": rec["_id"]}
        if st:
            data.update({k: v for k, v in st["payload"].items() if k in PRODUCT_MEMBERS})
        enabled = product in rec.get("products", [product])
        data["status"] = {"process": {"running": st is None and enabled,
                                      "completed": st is not None},
                          "last_callback": st and st["sent_at"]}
        data["callback"] = st and {k: st[k] for k in ("method", "code", "state", "raised_at",
                                                      "sent_at", "next_attempt_at", "attempts")}
        return data

    async def callback_trigger(self, env: str, body: dict) -> dict:
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

    async def fire_webhook(self, env: str, body: dict) -> dict:
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

    async def clock_advance(self, env: str, body: dict) -> dict:
        now = self.clock.advance(body["seconds"])
        self.store.set_meta("clock_offset", self.clock.offset_s)
        return {"now": iso(now)}

    def _clock_moved(self, now: float) -> None:
        with contextlib.suppress(RuntimeError):  # no loop yet: the next tick catches up
            asyncio.get_running_loop().call_soon(self.daily, now)

    @staticmethod
    def _base(env: str) -> str:
        return "/sandbox/v2/" if env == SANDBOX else "/v2/"

    # -- the HTTP door -----------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        path = request.scope["path"]
        for prefix, env in PREFIXES:  # the connect page: public key, its own error shapes
            if path.startswith(prefix + "connect") and path[len(prefix) + 7:][:1] in ("", "/"):
                if not self.public_base:
                    self.public_base = str(request.base_url).rstrip("/")
                return await self.connect.handle(request, env, path[len(prefix):].strip("/"))
        request_id = secrets.token_hex(12)
        started = time.perf_counter()
        headers = {"X-Request-Id": request_id}
        try:
            status, body = await self._dispatch(request)
        except ServiceError as err:
            status, body = err.http_code, err.body(request_id)
            headers.update(err.headers)
        except Exception:  # a bug must still answer with the spec's body, never a traceback
            log.exception("request %s failed", request_id)
            err = ServiceError("INTERNAL_SERVER_ERROR", "internal failure")
            status, body = 500, err.body(request_id)
        log.info("%s %s %s %d %.1fms", request_id, request.method, request.scope["path"], status,
                 (time.perf_counter() - started) * 1000)
        content = orjson.dumps(body)
        fault = request.scope.get("sandbox.fault")
        if fault is not None:  # the call was carried out; its answer is broken on the way
            log.info("%s fault %s", request_id, fault.kind)
            if fault.kind == "reset":
                return self.faults.reset(content, status, headers)
            if fault.kind == "truncate":  # any proper prefix of an object is invalid JSON
                return Response(content[:len(content) // 2], status_code=200,
                                media_type="application/json", headers=headers)
            await asyncio.sleep(fault.seconds)  # stall: other requests go on meanwhile
        return Response(content, status_code=status, media_type="application/json",
                        headers=headers)

    def openapi(self) -> dict:
        """OpenAPI 3.1 of every route, both environments, made from the endpoint table."""
        paths: dict = {}
        error = {"$ref": "#/components/schemas/Error"}
        for ep in self.endpoints.values():
            props = {k: SCHEMAS.get(v, {"type": "string"}) for k, v in ep.fields.items()}
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
                                     "required": any(k in g and len(g) == 1
                                                     for g in ep.required)} for k in props]
            for prefix, env in PREFIXES:
                if ep.sandbox_only and env != SANDBOX:
                    continue
                paths.setdefault(prefix + ep.path, {})[ep.method.lower()] = {
                    **op, "operationId": f"{ENV_SHORT[env]}_{op['operationId']}"}
        return {"openapi": "3.1.0",
                "info": {"title": "ledgerlake sandbox of the connection service",
                         "version": "2"},
                "paths": paths,
                "components": {
                    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
                    "schemas": {"Error": {"type": "object", "required": [
                        "error_type", "error_code", "error_message", "display_message",
                        "http_code", "request_id"]}}}}

    async def _dispatch(self, request: Request) -> tuple[int, dict]:
        path = request.scope["path"]  # as sent, without building a URL object
        if not self.public_base:
            self.public_base = str(request.base_url).rstrip("/")
        if path == "/openapi.json" and request.method == "GET":
            return 200, self.openapi()
        env = next((e for prefix, e in PREFIXES if path.startswith(prefix)), None)
        if env is None:
            raise ServiceError("NOT_FOUND", f"no endpoint at {path}")
        sub = path[len(self._base(env)):].strip("/")
        ep = self.endpoints.get((request.method, sub))
        if ep is None:
            raise ServiceError("NOT_FOUND", f"no endpoint {request.method} {path}")
        self.keys.check(env, request.headers.get("authorization"))
        if ep.sandbox_only and env != SANDBOX:
            raise ServiceError("SANDBOX_ONLY", f"{sub} exists only in the sandbox environment")
        if self.maintenance_on and sub != "sandbox/maintenance":
            raise ServiceError("PLANNED_MAINTENANCE", "maintenance mode: API operations are "
                                                      "disabled")
        fault = None if ep.sandbox_only else self.faults.for_request(env, sub)
        if fault is not None:
            if fault.kind in REFUSALS:
                raise self.faults.error(fault, sub)
            request.scope["sandbox.fault"] = fault
        wait = self.limiter.take(env, sub)
        if wait:
            raise ServiceError(self.limiter.code(sub), f"too many requests to {sub}; retry in "
                               f"{wait:.2f}s", headers={"Retry-After": self.limiter.retry_after(wait)})
        body: dict = {}
        if request.method == "POST":
            ctype = request.headers.get("content-type", "")
            if ctype.split(";")[0].strip().lower() != "application/json":
                raise ServiceError("INVALID_HEADERS", "Content-Type must be application/json")
            try:
                body = orjson.loads(await request.body())
            except (orjson.JSONDecodeError, UnicodeDecodeError):
                raise ServiceError("INVALID_BODY", "body is not valid JSON") from None
            if not isinstance(body, dict):
                raise ServiceError("INVALID_BODY", "body must be a JSON object")
        else:
            body = dict(request.query_params)
        data = await ep.handler(env, validate_body(ep, body))
        key, text = ep.message
        return 200, {"status": "success", key: text, "data": data}


class _App(Starlette):
    """Starlette for the lifespan; HTTP goes straight to the one handler, which answers every
    error itself, skipping the router and middleware on the hot path."""

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            response = await self.state.service.handle(Request(scope, receive))
            await response(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(data_dir: Path, keys: Keys, *, seed: int = 42,
               webhook_timeout_s: float = 10.0, rate_limit: float = 1000.0,
               addition_limit: int = 100_000, freeze_clock: bool = False) -> Starlette:
    service = Service(Path(data_dir), keys, seed=seed, webhook_timeout_s=webhook_timeout_s,
                      rate_limit=rate_limit, addition_limit=addition_limit,
                      freeze_clock=freeze_clock)

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

    app = _App(
        routes=[Route("/{path:path}", service.handle, methods=["GET", "POST", "PUT", "PATCH",
                                                                "DELETE", "HEAD", "OPTIONS"])],
        lifespan=lifespan,
    )
    app.state.service = service
    return app
