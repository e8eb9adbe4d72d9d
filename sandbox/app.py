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
from .clock import Clock, iso
from .errors import ServiceError
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
    return _integer(name, value, 1)


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


def paginate(items: list, page: int, limit: int) -> tuple[list, dict]:
    total = len(items)
    pages = max(1, -(-total // limit))
    start = (page - 1) * limit
    return items[start:start + limit], {
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

class Service:
    def __init__(self, data_dir: Path, keys: Keys, seed: int = 42,
                 webhook_timeout_s: float = 10.0) -> None:
        self.store = Store(data_dir)
        self.keys = keys
        self.seed = seed
        self.clock = Clock(self.store.get_meta("clock_offset", 0.0))
        self.webhooks = Dispatcher(self.store, self.clock, timeout_s=webhook_timeout_s)
        self.banks = datagen.bank_objects(seed)
        self.public_base = ""  # learnt from the first request, for callback_url
        self.endpoints: dict[tuple[str, str], Endpoint] = {}
        for ep in self._endpoints():
            self.endpoints[(ep.method, ep.path)] = ep

    def _endpoints(self) -> list[Endpoint]:
        paging = {"page": _page, "limit": _limit}
        return [
            Endpoint("accounts/get", self.accounts_get,
                     {"record": _string, "customer": _string, **paging},
                     [("record", "customer")], summary="Accounts of a record or customer"),
            Endpoint("settings/webhook", self.settings_webhook,
                     {"url": _url, "token": _string}, [("url",)],
                     summary="Set this environment's webhook URL and token"),
            Endpoint("banks/list", self.banks_list, method="GET", summary="Supported banks"),
            Endpoint("sandbox/customers/create", self.customers_create,
                     {"customers": _array}, [("customers",)], sandbox_only=True,
                     summary="Create customers whose connections then complete"),
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
            Endpoint("sandbox/clock/advance", self.clock_advance, {"seconds": _seconds},
                     [("seconds",)], sandbox_only=True,
                     summary="Move the sandbox clock forward (redelivery, periodic products)"),
        ]

    # -- handlers: each takes (env, body) and returns `data` -------------------------------
    async def accounts_get(self, env: str, body: dict) -> dict:
        if "record" in body:
            self._record(env, body["record"])
            accounts = self.store.find("accounts", env, "record", body["record"])
        else:
            records = self.store.find("records", env, "customer", body["customer"])
            if not records and not self.store.get("customers", env, body["customer"]):
                raise ServiceError("INVALID_FIELD", "customer does not exist")
            accounts = [a for r in records
                        for a in self.store.find("accounts", env, "record", r["_id"])]
        items, pagination = paginate(accounts, body.get("page", 1), body.get("limit", 20))
        return {"pagination": pagination, "accounts": items}

    async def settings_webhook(self, env: str, body: dict) -> dict:
        conf = {"url": body["url"], "token": body.get("token"), "env": env}
        self.store.set_meta(f"webhook:{env}", conf)
        return {"url": conf["url"], "token_set": conf["token"] is not None, "env": env}

    async def banks_list(self, env: str, body: dict) -> dict:
        return {"banks": self.banks}

    async def customers_create(self, env: str, body: dict) -> dict:
        specs = body["customers"]
        if not 1 <= len(specs) <= 100:
            raise ServiceError("INVALID_FIELD", "customers must hold 1 to 100 objects")
        for i, spec in enumerate(specs):
            if not isinstance(spec, dict):
                raise ServiceError("INVALID_FIELD", f"customers[{i}] must be an object")
            accounts = spec.get("accounts", 1)
            if isinstance(accounts, bool) or not isinstance(accounts, int) or not 1 <= accounts <= 5:
                raise ServiceError("INVALID_FIELD", f"customers[{i}].accounts must be 1 to 5")
        created = [self._create_customer(env, spec) for spec in specs]
        for c in created:
            asyncio.get_running_loop().call_soon(self._complete_connection, env, c["record"])
        return {"customers": created}

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
        for i, record in enumerate(records):
            self._record(env, _string(f"records[{i}]", record))
        try:
            self.webhooks.trigger(env, records, body.get("url"))
        except LookupError as exc:
            raise ServiceError("INVALID_FIELD", f"url: {exc}") from None
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

    # -- state changes ---------------------------------------------------------------------
    def _record(self, env: str, record_id: str) -> dict:
        rec = self.store.get("records", env, record_id)
        if rec is None:
            raise ServiceError("INVALID_FIELD", "record does not exist")
        return rec

    def _create_customer(self, env: str, spec: dict) -> dict:
        n = self.store.get_meta(f"counter:{env}", 0) + 1
        self.store.set_meta(f"counter:{env}", n)
        now = iso(self.clock.now())
        seed = spec.get("seed", self.seed)
        customer_id = datagen.object_id(seed, env, "customer", n)
        who = datagen.person(seed, customer_id)
        name = spec.get("name") or who["name"]
        bank = self.banks[n % len(self.banks)]
        self.store.put("customers", {"_id": customer_id, "id": customer_id, "name": name,
                                     "env": env, "created_at": now})
        record_id = datagen.object_id(seed, env, "record", n)
        account_ids = []
        for k in range(spec.get("accounts", 1)):
            account_id = datagen.object_id(seed, env, "account", n, k)
            acct_name, acct_type = datagen.account_name_type(seed, account_id, name)
            self.store.put("accounts", {
                "_id": account_id, "id": account_id,
                "nuban": datagen.nuban(seed, account_id),
                "name": acct_name, "type": acct_type, "currency": "NGN",
                "bank": bank["_id"], "customer": {"_id": customer_id, "name": name},
                "record": record_id, "balance": datagen.object_id(seed, "balance", account_id),
                "env": env, "created_at": now, "last_updated": now,
            }, record=record_id)
            account_ids.append(account_id)
        self.store.put("records", {
            "_id": record_id, "id": record_id, "customer": customer_id, "bank": bank["_id"],
            "env": env, "login_type": spec.get("login_type", "bank"),
            "account_type": spec.get("account_type", "personal"),
            "products": spec.get("products", datagen.PRODUCTS), "verified": True,
            "created_at": now, "last_updated": now,
        }, customer=customer_id)
        public_token = f"public-{ENV_SHORT[env]}-{record_id}"
        return {"customer": customer_id, "record": record_id, "public_token": public_token,
                "accounts": account_ids}

    def _complete_connection(self, env: str, record_id: str) -> None:
        rec = self.store.get("records", env, record_id)
        accounts = self.store.find("accounts", env, "record", record_id)
        if rec is None or not accounts:
            return
        payload = self.callback(env, rec, "ACCOUNTS", "ACCOUNTS_SUCCESS",
                                account=accounts[0], message="Accounts ready")
        self.webhooks.enqueue(env, payload, record=record_id, method="ACCOUNTS")

    def callback(self, env: str, rec: dict, method: str, code: str, *, callback_type=None,
                 message: str = "", **members) -> dict:
        """A product callback payload with the spec's common members."""
        bank = next((b for b in self.banks if b["_id"] == rec["bank"]), self.banks[0])
        now = iso(self.clock.now())
        conf = self.webhooks.settings(env) or {}
        return {
            "method": method, "callback_type": callback_type or method,
            "callback_code": code, "type": "CALLBACK", "code": code,
            "callbackURL": conf.get("url"),
            "callback_url": f"{self.public_base}{self._base(env)}callback"
                            f"?record={rec['_id']}&method={method}",
            "env": env, "status": "is_success", "started_at": rec["created_at"],
            "ended_at": now, "message": message, "meta": {}, "options": {}, "extras": {},
            "meta_responses": None, "bankName": bank["name"], "bankSlug": bank["slug"],
            "bankId": bank["_id"], "bankType": "ind", "record": rec["_id"],
            "recordId": rec["_id"], "login_type": rec["login_type"],
            "customerId": rec["customer"], "customerEmail": [], "customerBvn": None,
            "identityType": "bvn", "country": "NG", "current_project": "sandbox-project",
            "owner": "sandbox-owner", **members,
        }

    @staticmethod
    def _base(env: str) -> str:
        return "/sandbox/v2/" if env == SANDBOX else "/v2/"

    # -- the HTTP door -----------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        request_id = secrets.token_hex(12)
        started = time.perf_counter()
        try:
            status, body = await self._dispatch(request)
        except ServiceError as err:
            status, body = err.http_code, err.body(request_id)
        except Exception:  # a bug must still answer with the spec's body, never a traceback
            log.exception("request %s failed", request_id)
            err = ServiceError("INTERNAL_SERVER_ERROR", "internal failure")
            status, body = 500, err.body(request_id)
        log.info("%s %s %s %d %.1fms", request_id, request.method, request.url.path, status,
                 (time.perf_counter() - started) * 1000)
        return Response(orjson.dumps(body), status_code=status,
                        media_type="application/json", headers={"X-Request-Id": request_id})

    async def _dispatch(self, request: Request) -> tuple[int, dict]:
        path = request.url.path
        if not self.public_base:
            self.public_base = str(request.base_url).rstrip("/")
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
        body: dict = {}
        if request.method == "POST":
            ctype = request.headers.get("content-type", "")
            if ctype.split(";")[0].strip().lower() != "application/json":
                raise ServiceError("INVALID_HEADERS", "Content-Type must be application/json")
            try:
                body = orjson.loads(await request.body())
            except orjson.JSONDecodeError:
                raise ServiceError("INVALID_BODY", "body is not valid JSON") from None
            if not isinstance(body, dict):
                raise ServiceError("INVALID_BODY", "body must be a JSON object")
        else:
            body = dict(request.query_params)
        data = await ep.handler(env, validate_body(ep, body))
        key, text = ep.message
        return 200, {"status": "success", key: text, "data": data}


def create_app(data_dir: Path, keys: Keys, *, seed: int = 42,
               webhook_timeout_s: float = 10.0) -> Starlette:
    service = Service(Path(data_dir), keys, seed=seed, webhook_timeout_s=webhook_timeout_s)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.webhooks.start()
        try:
            yield
        finally:
            await service.webhooks.stop()
            service.store.close()

    app = Starlette(
        routes=[Route("/{path:path}", service.handle, methods=["GET", "POST", "PUT", "PATCH",
                                                                "DELETE", "HEAD", "OPTIONS"])],
        lifespan=lifespan,
    )
    app.state.service = service
    return app
