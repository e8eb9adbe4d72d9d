"""Records and their products: connecting customers, the data endpoints, the record's state.

`Products` is mixed into app.py's `Service`, which owns the store, clock, keys and dispatcher;
this module owns what a record is, which errors its state answers with, the data each
product serves and the callbacks that follow each action.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import UTC, date, datetime

import orjson

from . import callbacks, datagen, lines
from .auth import BASES, SHORT
from .clock import iso
from .errors import CODES, CONNECTION_ERRORS, ServiceError, boolean, integer, invalid, one_of
from .ratelimit import RateLimiter

log = logging.getLogger("sandbox.products")

DAY = 86400
VERIFY_WINDOW = 7 * DAY
MICRO_DEPOSITS = (0.01, 0.02)  # naira, as Plaid's sandbox: the amounts records/verify expects
MAX_VERIFY_FAILURES = 3
BANK_STATUS = {"healthy": None, "down": "BANK_DOWN", "not_responding": "BANK_NOT_RESPONDING",
               "unavailable": "BANK_NOT_AVAILABLE", "unsupported": "BANK_NO_LONGER_SUPPORTED"}
# customers/create: each field's default, and the bounds of the integer ones
CUSTOMER_DEFAULTS = {"accounts": 1, "months": 6, "volume": 4, "login_type": "bank",
                     "account_type": "personal", "products": list(datagen.PRODUCTS),
                     "income": True, "settlement": True, "name": None, "password": None,
                     "seed": None, "bank": None}
# volume: up to a merchant's 2,000 lines a day, so one record can hold 2,000,000 lines
CUSTOMER_INTS = {"accounts": (1, 5), "months": (1, 60), "volume": (1, 2000),
                 "seed": (0, 2**32 - 1)}
# products whose endpoint sandbox/records/fail can make fail, and that endpoint
FAILABLE = {p: f"{p}/get" for p in ("accounts", "balance", "transactions", "income", "identity",
                                    "auth")}
CORRUPT_KOBO = 100  # records/corrupt: the served running balance is off by 1.00 naira
INTERNAL = "_sandbox"  # record members the API never shows


def _date(name: str, value) -> float:
    try:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError):
        raise invalid(name, "must be a date YYYY-MM-DD") from None


def known_products(value: list) -> list[str]:
    """`value`'s products once each, or INVALID_PRODUCT."""
    if bad := [p for p in value if p not in datagen.PRODUCTS]:
        raise ServiceError("INVALID_PRODUCT", f"no access to product(s) {', '.join(bad)}; "
                                              f"products are {', '.join(datagen.PRODUCTS)}")
    return list(dict.fromkeys(value))


def paged(key: str, items: list, body: dict) -> dict:
    """The answer of a paged call: the page of `items` that `body` asks for, under `key`."""
    page, limit = body.get("page", 1), body.get("limit", 20)
    start = (page - 1) * limit
    return {"pagination": pagination(len(items), page, limit), key: items[start:start + limit]}


def pagination(total: int, page: int, limit: int) -> dict:
    """The spec's Pagination object for `total` items."""
    pages = max(1, -(-total // limit))
    return {"totalDocs": total, "limit": limit, "page": page, "totalPages": pages,
            "pagingCounter": (page - 1) * limit + 1, "hasPrevPage": page > 1,
            "hasNextPage": page < pages, "prevPage": page - 1 if page > 1 else None,
            "nextPage": page + 1 if page < pages else None}


def _kept(cache: dict, most: int, key, make):
    """`cache[key]`, made (unless None) on a miss; a cache past `most` entries starts again
    (a million bulk records are read one by one)."""
    value = cache.get(key)
    if value is None and (value := make()) is not None:
        if len(cache) > most:
            cache.clear()
        cache[key] = value
    return value


# -- what a record is made of: customers/create stores these, records/bulk_create derives them

def customer_doc(env: str, seed: int, customer_id: str, name: str, stamp: str) -> dict:
    return {"_id": customer_id, "id": customer_id, "name": name, "env": env,
            "created_at": stamp, "identity": datagen.identity(seed, customer_id, name)}


def account_doc(env: str, seed: int, account_id: str, name_type: list | None, account_type: str,
                bank: dict, customer: dict, record_id: str, stamp: str) -> dict:
    """`name_type`: the account's name and type as the connect page offered them, if it did."""
    name, kind = name_type[:2] if name_type else datagen.account_name_type(
        seed, account_id, customer["name"], account_type)
    nuban = name_type[2] if name_type and len(name_type) > 2 else datagen.nuban(seed, account_id)
    return {"_id": account_id, "id": account_id, "nuban": nuban, "name": name, "type": kind,
            "currency": "NGN", "bank": bank["_id"], "customer": customer, "record": record_id,
            "balance": datagen.object_id(seed, "balance", account_id), "env": env,
            "created_at": stamp, "last_updated": stamp}


def record_doc(env: str, record_id: str, customer_id: str, bank: dict, spec: dict,
               account_ids: list[str], now: float, *, auth: str, gen: dict,
               error: str | None = None, status: str = "pending", **internal) -> dict:
    """A record of `spec`'s login_type, account_type and products; its products `status`."""
    verified = spec["login_type"] != "account_number"  # manual: micro-deposits first
    stamp = iso(now)
    return {"_id": record_id, "id": record_id, "customer": customer_id, "bank": bank["_id"],
            "env": env, "login_type": spec["login_type"], "account_type": spec["account_type"],
            "products": spec["products"], "status": {p: status for p in spec["products"]},
            "verified": verified, "created_at": stamp, "last_updated": stamp,
            INTERNAL: {"state": "active" if verified else "unverified", "error": error,
                       "accounts": account_ids, "created_ts": now, "verify_failures": 0,
                       "auth": auth, "gen": gen, **internal}}


class Products:
    def _init_products(self, rate_limit: float, addition_limit: int) -> None:
        self.limiter, self.addition_limit = RateLimiter(rate_limit), addition_limit
        self.bank_by_id = {b["_id"]: b for b in self.banks}
        self.records = {(r["env"], r["_id"]): r for r in self.store.all("records")}
        self.tokens = {t["_id"]: t for t in self.store.all("tokens")}
        self._views, self._customers, self._specs, self._bank_status = {}, {}, {}, {}
        self.maintenance_on = bool(self.store.get_meta("maintenance", False))
        if self.store.get_meta("periodic_day") is None:
            self.store.set_meta("periodic_day", int(self.clock.now() // DAY))

    # -- look-ups ----------------------------------------------------------------------------
    def bank_status(self, env: str) -> dict:
        """Kept in memory (every data call reads it), and changed in place."""
        return _kept(self._bank_status, 2, env,
                     lambda: self.store.get_meta(f"bank_status:{env}", {}))

    def bank_view(self, env: str, bank: dict) -> dict:
        return {**bank, "status": self.bank_status(env).get(bank["_id"], "healthy")}

    def banks_of(self, env: str) -> list[dict]:
        return [self.bank_view(env, b) for b in self.banks]

    def _find(self, env: str, record_id: str) -> dict | None:
        """A stored record (a bulk record's stored copy wins), else a bulk record, else None."""
        return self.records.get((env, record_id)) or self._bulk_record(env, record_id)

    def _record(self, env: str, record_id: str) -> dict:
        rec = self._find(env, record_id)
        if rec is None or rec[INTERNAL]["state"] == "removed":
            raise ServiceError("INVALID_FIELD", "record does not exist")
        return rec

    def _customer(self, env: str, customer_id: str) -> dict | None:
        """Customers never change once made, so they are kept after the first read."""
        return _kept(self._customers, 50_000, (env, customer_id), lambda: (
            self.store.get("customers", env, customer_id) or self._bulk_customer(env, customer_id)))

    def _account_doc(self, env: str, account_id: str) -> dict | None:
        return self._bulk_account(env, account_id) or self.store.get("accounts", env, account_id)

    def _save(self, rec: dict) -> None:
        self.store.put("records", rec, customer=rec["customer"])
        self.records[(rec["env"], rec["_id"])] = rec

    def _target(self, env: str, body: dict) -> dict:
        """The record a data call names, by `record` or `access_token`."""
        if "access_token" not in body:
            return self._record(env, body["record"])
        doc = self.tokens.get(token := body["access_token"])
        if doc is None and (rec := self._bulk_token(env, token)) is not None:
            return rec
        if doc is None or doc["kind"] != "access" or doc["env"] != env or doc.get("dead"):
            raise ServiceError("INVALID_TOKEN",
                               "access_token is invalid, of another environment or removed")
        return self.records[(env, doc["record"])]

    def _named(self, env: str, body: dict, product: str) -> tuple[dict, int | None]:
        """The record a data call names, and the index of the `account` it names, if any;
        a records/fail failure of `product` is answered first."""
        rec, k = self._account(env, body["account"]) if "account" in body else (
            self._target(env, body), None)
        self._inject(rec, product)
        return rec, k

    def _records(self, env: str, body: dict, product: str) -> list[dict]:
        """The record a call names (answering a records/fail failure of `product` first), or
        every record of its `customer`."""
        return ([self._named(env, body, product)[0]] if "record" in body or "access_token" in body
                else self._customer_records(env, body["customer"]))

    def _token(self, env: str, kind: str, record_id: str) -> str:
        token = f"{kind}-{SHORT[env]}-{secrets.token_hex(12)}"
        doc = {"_id": token, "env": env, "kind": kind, "record": record_id}
        self.store.put("tokens", doc, record=record_id)
        self.tokens[token] = doc
        return token

    @staticmethod
    def _expired(rec: dict, now: float) -> bool:
        st = rec[INTERNAL]
        return st["state"] == "unverified" and now >= st["created_ts"] + VERIFY_WINDOW

    def _check_unexpired(self, rec: dict) -> None:
        """Answered at once, though daily() marks the record and sends the error webhook a
        moment later."""
        st = rec[INTERNAL]
        if st["state"] == "expired" or self._expired(rec, self.clock.now()):
            raise ServiceError("VERIFICATION_EXPIRED", "the record was not verified in 7 days",
                               extra={"account_id": st["accounts"][0]})

    def _check(self, rec: dict, product: str, *, auth_call: bool = False) -> None:
        """Raise what the record's state answers for `product`, if anything."""
        st = rec[INTERNAL]
        if code := BANK_STATUS.get(self.bank_status(rec["env"]).get(rec["bank"], "healthy")):
            raise ServiceError(code, f"the bank of this record reports {code}")
        if err := st.get("error"):
            raise ServiceError(err, "unsupported bank response" if err == "INTERNAL_SERVER_ERROR"
                               else f"the connection failed: {err}")
        if st["state"] == "locked":
            raise ServiceError("TOO_MANY_VERIFICATION_ATTEMPTS",
                               "the record is permanently locked after failed verifications")
        if st["state"] == "login_required":
            raise ServiceError("RECORD_LOGIN_REQUIRED", "the user must log in again")
        self._check_unexpired(rec)
        if product not in rec["products"]:
            raise ServiceError("PRODUCTS_NOT_SUPPORTED",
                               f"{product} is not enabled for this record")
        if not rec["verified"] and auth_call:
            raise ServiceError("PRODUCT_NOT_READY", "the record is not verified yet",
                               error_type="AUTH_ERROR", extra={"account_id": st["accounts"][0]})
        if (status := rec["status"].get(product)) != "ready":
            why = ("could not be processed for this record" if status == "failed"
                   else "is not ready yet")
            raise ServiceError("PRODUCT_NOT_READY", f"{product} {why}")

    # -- bulk data views -----------------------------------------------------------------------
    def _spec(self, rec: dict, k: int, account_id: str) -> datagen.AccountSpec:
        g, bank = rec[INTERNAL]["gen"], self.bank_by_id[rec["bank"]]
        return datagen.AccountSpec(
            seed=g["seed"], account_id=account_id, bank_short=bank["slug"][:3].upper(),
            business=rec["account_type"] == "business", income=g["income"], primary=k == 0,
            volume=g["volume"], first_month=g["first_month"], created_month=g["created_month"],
            settlement=g.get("settlement", True), since=g.get("since", 0))

    def _histories(self, rec: dict, now: float) -> list[tuple[str, datagen.History, int]]:
        last = max(datagen.month_index(now), rec[INTERNAL]["gen"]["created_month"])
        specs = _kept(self._specs, 50_000, (rec["env"], rec["_id"]), lambda: [
            self._spec(rec, k, a) for k, a in enumerate(rec[INTERNAL]["accounts"])])
        lead = datagen.lead(last, now)
        return [(h.spec.account_id, h, h.visible(now))
                for h in (datagen.history(spec, last, lead) for spec in specs)]

    def _view(self, rec: dict, now: float, k: int | None = None) -> lines.View:
        """The lines of a record (or of its account `k`) in the API's order, kept per month
        of history (and its last two days): within that, the clock changes only what is
        visible."""
        last = max(datagen.month_index(now), rec[INTERNAL]["gen"]["created_month"])
        key = (rec["env"], rec["_id"], k, last, datagen.lead(last, now))

        def build() -> lines.View:
            parts = self._histories(rec, now)
            ids = {f: rec[f] for f in ("customer", "bank", "env")} | {"record": rec["_id"]}
            return lines.View.build([(a, h, datagen.rows(h, {"account": a, **ids}))
                                     for a, h, _ in (parts if k is None else [parts[k]])])
        return _kept(self._views, 64, key, build)

    def _patches(self, rec: dict, k: int | None) -> tuple:
        """records/corrupt's patches as (part of the view, posted index, kobo)."""
        accounts = rec[INTERNAL]["accounts"]
        return tuple(sorted((accounts.index(c["account"]) if k is None else 0, c["index"],
                             CORRUPT_KOBO) for c in rec[INTERNAL].get("corrupt", ())
                            if k is None or c["account"] == accounts[k]))

    def _inject(self, rec: dict, product: str) -> None:
        """Answer the failure records/fail set for this product, while some remain."""
        fails = rec[INTERNAL].get("fail") or {}
        if not (fail := fails.get(product)):
            return
        fail["remaining"] -= 1
        if fail["remaining"] <= 0:
            del fails[product]
        self._save(rec)
        code = fail["error_code"]
        raise ServiceError(
            code, f"{FAILABLE[product]} failed: {code} (sandbox/records/fail)",
            extra=({"account_id": rec[INTERNAL]["accounts"][0]}
                   if code == "VERIFICATION_EXPIRED" else None),
            headers={"Retry-After": "1"} if CODES[code][0] == "RATE_LIMIT_EXCEEDED" else None)

    def _balance_doc(self, rec: dict, account: dict, h: datagen.History, upto: int) -> dict:
        """balance/get's document but its daily history (`periodic`)."""
        amount = h.closing(upto) / 100
        stamp = iso(int(h.ts[upto - 1])) if upto else rec["created_at"]
        return {"_id": account["balance"], "account": account["_id"],
                "available_balance": amount, "ledger_balance": amount, "currency": "NGN",
                "customer": rec["customer"], "record": rec["_id"], "env": rec["env"],
                "created_at": rec["created_at"], "last_updated": stamp}

    def _balance_members(self, rec: dict, account: dict, h: datagen.History, upto: int) -> dict:
        return {"accountId": account["_id"], "nuban": account["nuban"],
                "balance": callbacks.balance_member(self._balance_doc(rec, account, h, upto))}

    # -- data endpoints --------------------------------------------------------------------
    def accounts_get(self, env: str, body: dict) -> dict:
        recs = self._records(env, body, "accounts")
        for rec in recs:
            self._check(rec, "accounts")
        return paged("accounts", [self._account_doc(env, a) for r in recs
                                  for a in r[INTERNAL]["accounts"]], body)

    def _customer_records(self, env: str, customer: str) -> list[dict]:
        if self._customer(env, customer) is None:
            raise ServiceError("INVALID_FIELD", "customer does not exist")
        recs = (self._bulk_records_of(env, customer)
                + self.store.find("records", env, "customer", customer))
        return [r for r in recs if r[INTERNAL]["state"] != "removed"]

    def _account(self, env: str, account_id: str) -> tuple[dict, int]:
        acct = self._account_doc(env, account_id)
        rec = acct and self._find(env, acct["record"])
        if acct is None or rec is None or rec[INTERNAL]["state"] == "removed":
            raise ServiceError("INVALID_ACCOUNT_ID", "account does not exist")
        return rec, rec[INTERNAL]["accounts"].index(account_id)

    def balance_get(self, env: str, body: dict) -> dict:
        rec, k = self._named(env, body, "balance")
        self._check(rec, "balance")
        docs = [{**self._balance_doc(rec, self._account_doc(env, account_id), h, upto),
                 "periodic": datagen.periodic(h, upto)}
                for i, (account_id, h, upto) in enumerate(self._histories(rec, self.clock.now()))
                if k is None or i == k]
        return paged("balance", docs, body)

    def transactions_get(self, env: str, body: dict) -> dict:
        now = self.clock.now()
        since = int(_date("from", body["from"])) if "from" in body else None
        until = int(_date("to", body["to"])) + DAY if "to" in body else None
        rec, k = self._named(env, body, "transactions")
        self._check(rec, "transactions")
        view = self._view(rec, now, k)
        pos, tkey = view.visible(now)
        # search with ints: a float key would make numpy convert the whole int64 column
        lo = int(tkey.searchsorted(since, side="left")) if since is not None else 0
        hi = max(lo, int(tkey.searchsorted(until, side="left")) if until is not None else len(pos))
        page, limit = body.get("page", 1), body.get("limit", 20)
        start = lo + (page - 1) * limit
        chunk = (view.serve(pos[start:min(hi, start + limit)], self._patches(rec, k))
                 if start < hi else [])
        return {"pagination": pagination(hi - lo, page, limit),
                "transaction": orjson.Fragment(b"[" + b",".join(chunk) + b"]")}

    def income_get(self, env: str, body: dict) -> dict:
        if not (recs := self._records(env, body, "income")):
            raise ServiceError("NO_ACCOUNTS", "the customer has no connected record")
        rec = recs[-1]
        self._check(rec, "income")
        now = self.clock.now()
        if (value := datagen.income(self._histories(rec, now), now)) is None:
            raise ServiceError("PRODUCT_NOT_READY", "no income stream in the transactions")
        return {"income": {"_id": datagen.object_id("income", rec["_id"]),
                           "customer": rec["customer"], "record": rec["_id"], **value,
                           "env": env, "created_at": rec["created_at"]}}

    def _identity(self, rec: dict) -> dict:
        return callbacks.identity_member(
            self._customer(rec["env"], rec["customer"])["identity"], customer=rec["customer"],
            bank=rec["bank"], env=rec["env"], details=self._callback_url(rec, "IDENTITY"),
            ident_id=datagen.object_id("identity", rec["_id"]))

    def identity_get(self, env: str, body: dict) -> dict:
        recs = self._records(env, body, "identity")
        for rec in recs:
            self._check(rec, "identity")
        return paged("identity", [self._identity(r) for r in recs], {"limit": 100})

    def _auth_doc(self, rec: dict) -> dict:
        cust = self._customer(rec["env"], rec["customer"])
        return {"_id": rec[INTERNAL]["auth"], "id": rec[INTERNAL]["auth"], "__v": 0,
                "record": rec["_id"], "bank": self.bank_view(rec["env"],
                                                             self.bank_by_id[rec["bank"]]),
                "created_at": rec["created_at"], "last_updated": rec["last_updated"],
                "customer": {"_id": cust["_id"], "name": cust["name"]}, "env": rec["env"],
                "owner": callbacks.OWNER, "validated": rec["verified"],
                "current_project": callbacks.PROJECT, "projects": [callbacks.PROJECT]}

    def auth_get_by_customer(self, env: str, body: dict) -> dict:
        recs = self._customer_records(env, body["customer"])
        return paged("auths", [self._auth_doc(r) for r in recs], body)

    def auth_get(self, env: str, body: dict) -> dict:
        rec, _ = self._named(env, body, "auth")
        self._check(rec, "auth", auth_call=True)
        accounts = [self._account_doc(env, a) for a in rec[INTERNAL]["accounts"]]
        return {"auth": {**self._auth_doc(rec), "accounts": [
            {"account_id": a["_id"], "nuban": a["nuban"], "name": a["name"], "type": a["type"],
             "bank_code": self.bank_by_id[rec["bank"]]["code"]} for a in accounts]}}

    def record_get(self, env: str, body: dict) -> dict:
        return {"record": {k: v for k, v in self._target(env, body).items() if k != INTERNAL}}

    def record_remove(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        st = rec[INTERNAL]
        st["state"] = "removed"
        rec["last_updated"] = iso(self.clock.now())
        with self.store.transaction():
            self._save(rec)
            for tok in [t for t in self.tokens.values() if t["record"] == rec["_id"]
                        and t["env"] == env]:
                tok["dead"] = True
                self.store.put("tokens", tok, record=tok["record"])
        self.webhooks.enqueue(env, callbacks.user_event(
            "USER_DISCONNECT", "User disconnected their account", rec,
            {"accounts": st["accounts"], "customer": rec["customer"], "record": rec["_id"],
             "disconnected_at": iso(self.clock.now())}),
            record=rec["_id"], method="USER_DISCONNECT")
        return {}

    def item_get(self, env: str, body: dict) -> dict:
        rec = self._target(env, body)
        bank = self.bank_by_id[rec["bank"]]
        return {"item": {
            "_id": rec["_id"], "record": rec["_id"], "bank": bank["_id"],
            "institution": {"name": bank["name"], "slug": bank["slug"]},
            "products_supported": bank["products"], "products_enabled": rec["products"],
            "status": rec["status"], "state": rec[INTERNAL]["state"],
            "error": rec[INTERNAL].get("error"), "verified": rec["verified"],
            "last_webhook": self.webhooks.last_webhook(env, rec["_id"]),
            "env": env, "created_at": rec["created_at"]}}

    def token_exchange(self, env: str, body: dict) -> dict:
        doc = self.tokens.get(body["public_token"])
        if doc is None or doc["kind"] != "public" or doc["env"] != env or doc.get("dead"):
            raise ServiceError("INVALID_PUBLIC_TOKEN",
                               "public_token is invalid, of another environment or spent")
        rec = self._record(env, doc["record"])
        doc["dead"] = True
        with self.store.transaction():
            self.store.put("tokens", doc, record=doc["record"])
            access = self._token(env, "access", rec["_id"])
        return {"access_token": access, "record": rec["_id"]}

    # -- sandbox controls ------------------------------------------------------------------
    def customers_create(self, env: str, body: dict) -> dict:
        specs = body["customers"]
        if not 1 <= len(specs) <= 100:
            raise ServiceError("INVALID_FIELD", "customers must hold 1 to 100 objects")
        specs = [self._customer_spec(env, i, s) for i, s in enumerate(specs)]
        self._check_addition(env, len(specs))
        with self.store.transaction():
            created = [self._create_customer(env, s) for s in specs]
        for c in created:
            asyncio.get_running_loop().call_soon(self._complete_connection, env, c["record"])
        return {"customers": created}

    def _check_addition(self, env: str, count: int) -> None:
        """ADDITION_LIMIT unless `count` more records fit: stored records (a bulk record's
        stored copy aside) and bulk batches' records count, removed ones too."""
        held = (sum(1 for (e, _), r in self.records.items()
                    if e == env and "bulk" not in r[INTERNAL])
                + sum(b["count"] for b in self.batches if b["env"] == env))
        if held + count > self.addition_limit:
            raise ServiceError("ADDITION_LIMIT", f"this environment holds at most "
                               f"{self.addition_limit} records (--addition-limit)")

    def _customer_spec(self, env: str, i: int, spec) -> dict:
        where = f"customers[{i}]"
        if not isinstance(spec, dict):
            raise invalid(where, "must be an object")
        if unknown := sorted(set(spec) - set(CUSTOMER_DEFAULTS)):
            raise ServiceError("UNKNOWN_FIELDS", "unknown fields: "
                               + ", ".join(f"{where}.{u}" for u in unknown))
        out = {**CUSTOMER_DEFAULTS, "products": list(datagen.PRODUCTS)}  # a list of its own
        for key, value in spec.items():
            f = f"{where}.{key}"
            if value is None:
                continue
            if key in CUSTOMER_INTS:
                integer(f, value, *CUSTOMER_INTS[key])
            elif key in ("name", "password", "bank"):
                if not isinstance(value, str) or not 0 < len(value) <= 200:
                    raise invalid(f, "must be a non-empty string")
            elif key == "login_type":
                one_of(f, value, datagen.LOGIN_TYPES)
            elif key == "account_type":
                if value not in ("personal", "business"):
                    raise invalid(f, "must be personal or business")
            elif key in ("income", "settlement"):
                boolean(f, value)
            else:  # products
                if (not isinstance(value, list) or not value
                        or not all(isinstance(p, str) for p in value)):
                    raise invalid(f, "must be a non-empty array of product names")
                value = known_products(value)
            out[key] = value
        if out["bank"] is not None:
            if out["bank"] not in self.bank_by_id:
                raise ServiceError("INVALID_BANK", f"{where}.bank does not exist")
            if code := BANK_STATUS[self.bank_status(env).get(out["bank"], "healthy")]:
                raise ServiceError(code, f"the bank reports {code}")
        if (pw := out["password"]) and pw.startswith("error_") and pw[6:] not in CONNECTION_ERRORS:
            raise invalid(f"{where}.password",
                          "error_<CODE> needs a RECORD_ERROR or BANK_ERROR code")
        return out

    def _create_customer(self, env: str, spec: dict) -> dict:
        n = self.store.get_meta(f"counter:{env}", 0) + 1
        self.store.set_meta(f"counter:{env}", n)
        now = self.clock.now()
        stamp = iso(now)
        seed = spec["seed"] if spec["seed"] is not None else self.seed
        known = spec.get("customer") and self._customer(env, spec["customer"])
        customer_id = known["_id"] if known else datagen.object_id(seed, env, "customer", n)
        name = known["name"] if known else spec["name"] or datagen.person(seed, customer_id)["name"]
        if spec["bank"] is None:  # round robin over the banks that are up
            status = self.bank_status(env)
            up = [b for b in self.banks if status.get(b["_id"], "healthy") == "healthy"]
            bank = (up or self.banks)[n % len(up or self.banks)]
        else:
            bank = self.bank_by_id[spec["bank"]]
        if not known:  # the connect page links a known customer's further banks to them
            self.store.put("customers", customer_doc(env, seed, customer_id, name, stamp))
        chosen = spec.get("offers")  # the connect page's accounts, as the user saw them
        record_id = datagen.object_id(seed, env, "record", n)
        account_ids = [datagen.object_id(seed, env, "account", n, k)
                       for k in range(spec["accounts"])]
        for k, account_id in enumerate(account_ids):
            self.store.put("accounts", account_doc(
                env, seed, account_id, chosen[k] if chosen else None, spec["account_type"],
                bank, {"_id": customer_id, "name": name}, record_id, stamp), record=record_id)
        pw = spec["password"] or ""
        created_month = datagen.month_index(now)
        rec = record_doc(env, record_id, customer_id, bank, spec, account_ids, now,
                         auth=datagen.object_id(seed, env, "auth", n),
                         error=pw[6:] if pw.startswith("error_") else None,
                         gen={"seed": seed, "months": spec["months"], "volume": spec["volume"],
                              "income": spec["income"], "settlement": spec["settlement"],
                              "created_month": created_month,
                              "first_month": created_month - spec["months"]})
        self._save(rec)
        return {"customer": customer_id, "record": record_id,
                "public_token": self._token(env, "public", record_id), "accounts": account_ids}

    def reset_login(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        rec[INTERNAL]["state"] = "login_required"
        rec["last_updated"] = iso(self.clock.now())
        self._save(rec)
        self.webhooks.enqueue(env, callbacks.user_event(
            "USER_REAUTH", "User must log in again to their bank", rec,
            {"customer": rec["customer"], "record": rec["_id"],
             "deauthorized_at": iso(self.clock.now())}), record=rec["_id"], method="USER_REAUTH")
        return {}

    def verify(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        amounts = body["amounts"]
        if (len(amounts) != 2 or not all(isinstance(a, int | float) and not isinstance(a, bool)
                                         for a in amounts)):
            raise ServiceError("INVALID_FIELD", "amounts must be the two micro-deposits, "
                                                "as numbers")
        st = rec[INTERNAL]
        if st["state"] == "locked" or st["verify_failures"] >= MAX_VERIFY_FAILURES:
            st["state"] = "locked"
            self._save(rec)
            raise ServiceError("TOO_MANY_VERIFICATION_ATTEMPTS",
                               "the record is permanently locked; use another bank")
        self._check_unexpired(rec)
        if rec["verified"]:
            return {"verified": True}
        if sorted(round(a, 2) for a in amounts) != sorted(MICRO_DEPOSITS):
            st["verify_failures"] += 1
            self._save(rec)
            raise ServiceError("INCORRECT_DEPOSIT_AMOUNTS", f"the amounts do not match ("
                               f"{st['verify_failures']} of {MAX_VERIFY_FAILURES} failed attempts)")
        rec["verified"] = True
        st["state"] = "active"
        self._save(rec)
        asyncio.get_running_loop().call_soon(self._complete_connection, env, rec["_id"])
        return {"verified": True}

    def records_fail(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        product = one_of("product", body["product"], FAILABLE)
        times = integer("times", body["times"], 1, 1000)
        if (code := body.get("error_code", "INTERNAL_SERVER_ERROR")) not in CODES:
            raise invalid("error_code", "must be an error code the sandbox answers "
                                        "(docs/interface.md lists them)")
        rec[INTERNAL].setdefault("fail", {})[product] = {"error_code": code, "remaining": times}
        self._save(rec)
        return {"record": rec["_id"], "product": product, "remaining": times}

    def records_corrupt(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        accounts = rec[INTERNAL]["accounts"]
        if (account_id := body.get("account", accounts[0])) not in accounts:
            raise invalid("account", "is not an account of this record")
        _, h, upto = self._histories(rec, self.clock.now())[accounts.index(account_id)]
        if not upto:
            raise invalid("account", "has no posted line yet")
        line = integer("line", body["line"], 0, upto - 1) if "line" in body else upto // 2
        bad = rec[INTERNAL].setdefault("corrupt", [])
        if not any(c["account"] == account_id and c["index"] == line for c in bad):
            bad.append({"account": account_id, "index": line})
            self._save(rec)
        true = int(h.balance[line])
        return {"transaction": h.id_of(line), "account": account_id,
                "balance_served": (true + CORRUPT_KOBO) / 100, "balance_true": true / 100}

    def records_ledger(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        now = self.clock.now()
        parts = [lines.ledger(account_id, h, now) for account_id, h, _ in self._histories(rec, now)]
        ids = [i for _, account_ids in parts for i in account_ids]
        return {"record": rec["_id"], "now": iso(now), "lines": len(ids),
                "ids_sha256": lines.ids_sha256(ids), "accounts": [doc for doc, _ in parts]}

    def banks_status(self, env: str, body: dict) -> dict:
        if body["bank"] not in self.bank_by_id:
            raise ServiceError("INVALID_BANK", "bank does not exist")
        one_of("status", body["status"], BANK_STATUS)
        status = self.bank_status(env)  # the kept dict: changed in place
        status[body["bank"]] = body["status"]
        self.store.set_meta(f"bank_status:{env}", status)
        return {"bank": self.bank_view(env, self.bank_by_id[body["bank"]])}

    def maintenance(self, env: str, body: dict) -> dict:
        self.maintenance_on = boolean("on", body["on"])
        self.store.set_meta("maintenance", self.maintenance_on)
        return {"maintenance": self.maintenance_on}

    def payments_initiate(self, env: str, body: dict) -> dict:
        rec = self._record(env, body["record"])
        amount = integer("amount", body["amount"], 1, 10**12)
        recurring, schedule = body.get("recurring"), None
        if recurring is not None:
            if set(recurring) - {"interval", "start_date", "end_date"}:
                raise invalid("recurring", "must be an object of interval, start_date and end_date")
            if recurring.get("interval") not in ("daily", "weekly", "monthly"):
                raise invalid("recurring.interval", "must be daily, weekly or monthly")
            _date("recurring.start_date", recurring.get("start_date"))
            if recurring.get("end_date") is not None:
                _date("recurring.end_date", recurring["end_date"])
            schedule = {"interval": recurring["interval"], "startDate": recurring["start_date"],
                        "endDate": recurring.get("end_date"), "history": [],
                        "current_amount": amount}
        self._check(rec, "payment")
        return {"payment": self._pay(env, rec, amount, schedule, self.clock.now())}

    def _pay(self, env: str, rec: dict, amount: int, schedule: dict | None, now: float) -> dict:
        """Make one payment (of a schedule, if given) and send its callbacks."""
        n = self.store.get_meta(f"payments:{env}", 0) + 1
        self.store.set_meta(f"payments:{env}", n)
        pid = datagen.object_id(self.seed, env, "payment", n)
        account_id, h, upto = self._histories(rec, now)[0]
        available = h.closing(upto) / 100
        ok = amount / 100 <= available
        if schedule is not None:
            schedule["history"].append(pid)
            schedule.setdefault("paymentId", pid)  # the schedule's first payment names it
        payment = callbacks.payment_object(
            pid=pid, rec=rec, bank=self.bank_by_id[rec["bank"]], amount=amount, ok=ok,
            debit_account=self._account_doc(env, account_id), available=available,
            now=now, env=env, ref=f"PAY{n:010d}", schedule=schedule)
        self.store.put("payments", {**payment, "env": env}, record=rec["_id"])
        if schedule is not None:
            first = self.store.get("payments", env, schedule["paymentId"])
            first["schedule"] = schedule
            self.store.put("payments", first, record=rec["_id"])
        code, status = ("PAYMENT_SUCCESS", "is_success") if ok else ("PAYMENT_FAILED", "is_failed")
        self._send(env, rec, "PAYMENT", code, status=status, message="Payment processed",
                   paymentId=pid, link=None, garnishment={"amount_collected": amount if ok else 0},
                   schedule={"current_amount": amount,
                             "paymentId": schedule["paymentId"] if schedule else pid},
                   payment=payment)
        if schedule is not None:
            self._send(env, rec, "PAYMENT_RECURRING", code, callback_type="PAYMENT_RECURRING",
                       status=status, message="Recurring payment made",
                       schedule=dict(schedule), paymentId=pid)
        return payment

    def _recur(self, day: int) -> None:
        """Recurring schedules due on `day` (days since the epoch) make their next payment."""
        when = date.fromordinal(day + 719163)
        for doc in self.store.all("payments"):
            if not (sched := doc.get("schedule")) or sched.get("paymentId") != doc["_id"]:
                continue
            start = date.fromisoformat(sched["startDate"])
            end = sched["endDate"] and date.fromisoformat(sched["endDate"])
            created = datetime.strptime(doc["created_at"][:10], "%Y-%m-%d").date()
            if when <= max(start, created) or (end and when > end):
                continue
            due = {"daily": True, "weekly": (when - start).days % 7 == 0,
                   "monthly": when.day == start.day}[sched["interval"]]
            rec = self._find(doc["env"], doc["record"])
            if not due or rec is None or rec[INTERNAL]["state"] != "active":
                continue
            try:
                self._pay(doc["env"], rec, sched["current_amount"], sched, day * DAY + 9 * 3600)
            except Exception:  # the next schedule still pays
                log.exception("recurring payment %s failed", doc["_id"])

    # -- callbacks that follow -----------------------------------------------------------
    def _callback_url(self, rec: dict, method: str) -> str:
        return (f"{self.public_base}{BASES[rec['env']]}callback"
                f"?record={rec['_id']}&method={method}")

    def _send(self, env: str, rec: dict, method: str, code: str, **kw) -> None:
        self.webhooks.enqueue(env, self.callback(env, rec, method, code, **kw),
                              record=rec["_id"], method=method)

    def callback(self, env: str, rec: dict, method: str, code: str, *, callback_type=None,
                 message: str = "", status: str = "is_success", **members) -> dict:
        """A product callback payload: the spec's common members, then the product's."""
        return {**callbacks.common(
            env=env, rec=rec, bank=self.bank_by_id[rec["bank"]], method=method, code=code,
            now=self.clock.now(), callback_url=self._callback_url(rec, method),
            webhook_url=(self.webhooks.settings(env) or {}).get("url"),
            customer=self._customer(env, rec["customer"]), callback_type=callback_type,
            status=status, message=message), **members}

    def _complete_connection(self, env: str, record_id: str) -> None:
        """The bank answered: each enabled product gets ready and its callback goes out."""
        rec = self.records.get((env, record_id))
        if rec is None or rec[INTERNAL]["state"] != "active" or not rec["verified"]:
            return
        if rec[INTERNAL].get("error"):
            rec["status"] = {p: "failed" for p in rec["products"]}
            self._save(rec)
            return
        try:
            out = self._connection_callbacks(env, rec)
            rec["status"] = {p: "ready" for p in rec["products"]}
            if any(payload["code"] == "INCOME_FAILED" for _, payload in out):
                rec["status"]["income"] = "failed"
            rec["last_updated"] = iso(self.clock.now())
            self._save(rec)
            for method, payload in out:
                self.webhooks.enqueue(env, payload, record=rec["_id"], method=method)
        except Exception:  # a failed callback must not leave the record half-ready
            log.exception("connection of %s failed", record_id)

    def _connection_callbacks(self, env: str, rec: dict) -> list[tuple[str, dict]]:
        """(method, payload) of each callback a completed connection sends, in order."""
        now = self.clock.now()
        parts = self._histories(rec, now)
        accounts = [self._account_doc(env, a) for a, _, _ in parts]
        products = rec["products"]
        out: list[tuple[str, dict]] = []

        def add(method: str, code: str, message: str, **members) -> None:
            out.append((method, self.callback(env, rec, method, code, message=message, **members)))

        if "auth" in products:
            add("AUTH", "AUTH_SUCCESS", "Authentication successful")
        if "identity" in products:
            add("IDENTITY", "PRODUCT_IS_READY", "Identity ready", identity=self._identity(rec))
        if "accounts" in products:
            add("ACCOUNTS", "ACCOUNTS_SUCCESS", "Accounts ready",
                account=callbacks.account_member(accounts[0]))
        if "balance" in products:
            for acct, (_, h, upto) in zip(accounts, parts, strict=True):
                add("BALANCE", "BALANCE_SUCCESS", "Balance ready",
                    **self._balance_members(rec, acct, h, upto))
        if "transactions" in products:
            add("TRANSACTIONS", "PRODUCT_IS_READY", "Transactions ready",
                newTransactions=sum(upto for _, _, upto in parts))
        if "income" in products and datagen.income(parts, now) is None:
            add("INCOME", "INCOME_FAILED", "No income stream found", status="is_failed")
        elif "income" in products:
            add("INCOME", "PRODUCT_IS_READY", "Income ready")
        return out

    def daily(self, now: float) -> None:
        """What the calendar does: periodic products once a day, the 7-day verification window.
        Called when the clock moves and now and then; each sandbox day is handled once."""
        today = int(now // DAY)
        last = self.store.get_meta("periodic_day", today)
        for (env, _), rec in list(self.records.items()):
            st = rec[INTERNAL]
            if self._expired(rec, now):
                st["state"] = "expired"
                self._save(rec)
                self._send(env, rec, "AUTH", "VERIFICATION_EXPIRED", status="is_failed",
                           message="The record was not verified within 7 days", error={
                               "error_type": "AUTH_ERROR", "error_code": "VERIFICATION_EXPIRED",
                               "error_message": "record not verified after 7 days",
                               "display_message": None, "account_id": st["accounts"][0]})
        if today <= last:
            return
        self.store.set_meta("periodic_day", today)
        for day in range(max(last + 1, today - 30), today + 1):
            end = day * DAY  # the day that just closed is [end - DAY, end)
            self._recur(day - 1)
            for (env, _), rec in list(self.records.items()):
                if (rec[INTERNAL]["state"] != "active" or rec[INTERNAL].get("error")
                        or "bulk" in rec[INTERNAL]  # bulk records send no periodic callbacks
                        or rec["status"].get("transactions", rec["status"].get("balance"))
                        != "ready"):
                    continue
                try:
                    self._periodic(env, rec, end)
                except Exception:  # one record's failure must not cost the others their day
                    log.exception("periodic products of %s failed", rec["_id"])

    def _periodic(self, env: str, rec: dict, end: float) -> None:
        parts = self._histories(rec, end)
        if "balance" in rec["products"]:
            for account_id, h, upto in parts:
                self._send(env, rec, "PERIODIC_BALANCE", "BALANCE_SUCCESS",
                           callback_type="BALANCE", message="Periodic balance ready",
                           **self._balance_members(rec, self._account_doc(env, account_id), h,
                                                   upto))
        if "transactions" in rec["products"]:
            self._send(env, rec, "PERIODIC_TRANSACTIONS", "PRODUCT_IS_READY",
                       callback_type="TRANSACTIONS", message="Periodic transactions ready",
                       newTransactions=sum(upto - h.visible(end - DAY) for _, h, upto in parts))
