"""The hosted connect page: the steps a user clicks through to link a bank, and the small API
behind them (`<base>connect/api/<step>`), which answers the spec's widget errors (1000-1026).

The page (static/connect/) carries the environment's public key, never a secret one.
Finishing it creates the record through customers/create's own path, callbacks and all.
Sessions live in memory: a restarted sandbox forgets half-done logins.
"""

from __future__ import annotations

import re
import secrets
from functools import partial
from pathlib import Path

import orjson
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from . import datagen
from .auth import BASES, SANDBOX
from .errors import ServiceError, boolean, check_fields, invalid, json_body, one_of
from .products import BANK_STATUS, INTERNAL, MAX_VERIFY_FAILURES, MICRO_DEPOSITS, known_products
from .webhooks import METHODS

STATIC = Path(__file__).parent / "static" / "connect"
FILES = {"connect.js": "text/javascript", "page.js": "text/javascript",
         "connect.css": "text/css", "demo.js": "text/javascript"}
PAGES = {"connect": "index.html", "connect/demo": "demo.html"}
# the page's own files only: nothing from elsewhere, no inline script
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'")

# code -> (method, message), the spec's table
WIDGET_ERRORS = {
    1000: ("Validation", "Validation failed, please confirm your credentials"),
    1002: ("Transactions Fetch Error", "Unable to fetch your transactions from the bank"),
    1003: ("Balance Fetch Error", "Unable to fetch your balance from the bank"),
    1004: ("No Plan", "This application has no plan: select a plan"),
    1005: ("Wallet Insufficient Funds", "The application's wallet is too low: top up the wallet"),
    1006: ("Invalid API credentials", "The public key is not valid: get API credentials"),
    1007: ("Plan expired, or Free Calls Exhausted",
           "The plan expired or its free calls are used up: upgrade the plan or top up"),
    1008: ("Data Extraction", "Data is not available on the selected bank right now, retry"),
    1009: ("Validation", "Validation error: the bank could not match these details, "
                         "please confirm them"),
    1010: ("Invalid Token", "The token is invalid"),
    1011: ("Invalid Security Question", "The answer to the security question is invalid"),
    1012: ("Processed Killed", "The session ended after inactivity, please start again"),
    1013: ("Insufficient Funds - Direct Debit", "Insufficient funds for the debit"),
    1026: ("SLA Error", "The service agreement for this environment is not signed yet"),
}

IDLE_S = 600  # of the sandbox clock: clock/advance past it ends a session (1012)
OFFERED = 3  # accounts the bank holds for every user, of which the user picks some
PRODUCT_PRICE = 5_000  # kobo per paid product (auth is free) of each new connection
WALLET = 100_000_000  # kobo an environment's wallet starts with
PLANS = ("active", "none", "expired")
GOOD_PASSWORD, GOOD_PIN = "pass_good", "1234"
SECURITY_QUESTION = "What was the name of your first school?"
HINT = {"bank": f"any username, password {GOOD_PASSWORD} (or a customer id from "
                "customers/create as the username)",
        "mobile": f"any user id, PIN {GOOD_PIN}",
        "bvn": "any 11-digit BVN starting 22",
        "account_number": "any 10-digit account number but 0000000000; the record then "
                          "awaits its two micro-deposits",
        "micro_deposits": f"{MICRO_DEPOSITS[0]:.2f} and {MICRO_DEPOSITS[1]:.2f}, in any order",
        "security_question": "any answer but error_1011",
        "token": "any six digits but 000000"}
NAME_RE = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
NAIRA_RE = re.compile(r"\d{1,9}(\.\d{1,2})?")  # a deposit as typed: 0.01, 1, 12.5
ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class WidgetError(Exception):
    """One of the spec's widget errors, answered as the page's onError receives it."""

    def __init__(self, code: int, detail: str = "") -> None:
        method, message = WIDGET_ERRORS[code]
        super().__init__(message)
        self.code = code
        self.body = {"type": "error", "status": False, "code": code, "method": method,
                     "message": f"{message}. {detail}" if detail else message}


def _fields(body: dict, allowed: str, required: str = "") -> None:
    """`allowed` and `required`: space-separated names."""
    check_fields(body, allowed.split(), sorted(required.split()))


def _text(name: str, value, hi: int = 200, pattern: re.Pattern | None = None) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= hi:
        raise invalid(name, f"must be a string of 1 to {hi} characters")
    if pattern and not pattern.fullmatch(value):
        raise invalid(name, f"holds characters it may not (allowed: {pattern.pattern})")
    return value


def _digits(name: str, value, n: int) -> str:
    if not isinstance(value, str) or not re.fullmatch(rf"\d{{{n}}}", value):
        raise invalid(name, f"must be {n} digits")
    return value


def _kobo(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= 10**12:
        raise invalid(name, f"must be kobo, an integer from {lo} to 10^12")
    return value


class Connect:
    """The page's API over one `Service` (app.py), whose records, clock and store it uses."""

    def __init__(self, service) -> None:
        self.s = service
        self.sessions: dict[str, dict] = {}
        self.steps = {"session": self.open_session, "login": self.login, "mfa": self.mfa,
                      "finish": self.finish, "verify": self.verify}

    # -- the HTTP door: static files and the page's API -------------------------------------
    async def handle(self, request: Request, env: str, sub: str) -> Response:
        request_id = secrets.token_hex(12)
        try:
            if request.method == "GET":
                if sub == "connect" and request.url.path.endswith("/"):  # relative links
                    query = f"?{request.url.query}" if request.url.query else ""
                    return RedirectResponse(request.url.path.rstrip("/") + query, 308)
                return self._file(sub)
            step = sub.removeprefix("connect/api/")
            if request.method != "POST" or step == sub or step not in self.steps:
                raise ServiceError("NOT_FOUND", f"no endpoint {request.method} {sub}")
            body = await json_body(request, max_bytes=65_536)
            if self.s.maintenance_on:
                raise ServiceError("PLANNED_MAINTENANCE", "maintenance mode: the service is "
                                                          "not taking connections")
            status, out = 200, {"status": "success", "message": "Request was successful",
                                "data": self.steps[step](env, body)}
        except WidgetError as err:
            status, out = (401 if err.code == 1006 else 400), err.body
        except ServiceError as err:
            status, out = err.http_code, err.body(request_id)
        return Response(orjson.dumps(out), status_code=status, media_type="application/json",
                        headers={"X-Request-Id": request_id, "Cache-Control": "no-store"})

    def _file(self, sub: str) -> Response:
        name = PAGES.get(sub) or (sub.removeprefix("connect/") if sub.startswith("connect/")
                                  else None)
        kind = "text/html; charset=utf-8" if name in PAGES.values() else FILES.get(name)
        if kind is None:
            raise ServiceError("NOT_FOUND", f"no page {sub}")
        return Response((STATIC / name).read_bytes(), media_type=kind,
                        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache",
                                 "X-Content-Type-Options": "nosniff"})

    # -- the application's settings: the dashboard's job, done over the API ----------------
    def settings_of(self, env: str) -> dict:
        return self.s.store.get_meta(f"connect:{env}", None) or {
            "plan": "active", "wallet": WALLET, "agreement": env == SANDBOX}

    def settings(self, env: str, body: dict) -> dict:
        rules = {"plan": partial(one_of, options=PLANS), "wallet": partial(_kobo, lo=0),
                 "agreement": boolean}
        conf = self.settings_of(env) | {k: rules[k](k, v) for k, v in body.items()}
        self.s.store.set_meta(f"connect:{env}", conf)
        key, page = self.s.keys.public(env), f"{self.s.public_base}{BASES[env]}connect"
        return {**conf, "env": env, "public_key": key, "connect_url": f"{page}?key={key}",
                "demo_url": f"{page}/demo?key={key}"}

    # -- the steps ---------------------------------------------------------------------------
    def open_session(self, env: str, body: dict) -> dict:
        _fields(body, "key products account_type customer returning payment_amount", "key")
        if self.s.keys.env_of_public(_text("key", body["key"], 100)) != env:
            raise WidgetError(1006, "The key is not this environment's public key")
        conf = self.settings_of(env)
        if not conf["agreement"]:
            raise WidgetError(1026)
        if conf["plan"] != "active":
            raise WidgetError({"none": 1004, "expired": 1007}[conf["plan"]])
        products = self._products(body.get("products"))
        if (account_type := body.get("account_type")) not in (None, "personal", "business"):
            raise invalid("account_type", "must be personal or business")
        if (amount := body.get("payment_amount")) is not None:
            _kobo("payment_amount", amount, 1)
            products = list(dict.fromkeys([*products, "payment"]))
        if (customer := body.get("customer")) is not None:
            customer = _text("customer", customer, 64, ID_RE)
            if self.s._customer(env, customer) is None:
                raise invalid("customer", "does not exist in this environment")
        returning = boolean("returning", body.get("returning", False))
        sid = secrets.token_hex(16)
        sess = {"env": env, "touched": self.s.clock.now(), "products": products,
                "account_type": account_type, "customer": customer, "payment": amount,
                "step": "bank"}
        data = {"session": sid, "env": env, "products": products, "idle_timeout_s": IDLE_S,
                "banks": [self._bank_view(b) for b in self.s.banks_of(env)],
                "hint": HINT, "returning": None}
        active = [r for r in self.s.store.find("records", env, "customer", customer)
                  if r[INTERNAL]["state"] == "active"] if returning and customer else []
        if active:  # known: no bank choice, no login, the accounts the record already has
            rec = self.s._record(env, active[-1]["_id"])
            offers = [[a["name"], a["type"], a["nuban"]] for a in (
                self.s.store.get("accounts", env, x) for x in rec[INTERNAL]["accounts"])]
            sess.update(step="accounts", record=rec["_id"], offers=offers)
            data["returning"] = {"customer": self._customer_view(env, customer),
                                 "bank": self._bank_view(self.s.bank_by_id[rec["bank"]]),
                                 "accounts": self._offer_view(sess["offers"])}
        # sessions idle for a day of the sandbox clock are forgotten: memory stays bounded
        for old in [k for k, v in self.sessions.items() if sess["touched"] - v["touched"] > 86400]:
            del self.sessions[old]
        self.sessions[sid] = sess
        return data

    def login(self, env: str, body: dict) -> dict:
        _fields(body, "session bank login_type account_type credentials",
                "session bank login_type credentials")
        sess = self._session(env, body, "bank")
        bank = self.s.bank_by_id.get(body["bank"]) if isinstance(body["bank"], str) else None
        if bank is None:
            raise ServiceError("INVALID_BANK", "bank does not exist")
        status = self.s.bank_status(env).get(bank["_id"], "healthy")
        if status == "not_responding":
            raise WidgetError(1008, f"{bank['name']} is not responding")
        if BANK_STATUS[status]:
            raise ServiceError(BANK_STATUS[status], f"{bank['name']} cannot be chosen: {status}")
        if (login_type := body["login_type"]) not in bank["login_types"]:
            raise invalid(bank["name"], f"supports login_type {', '.join(bank['login_types'])} "
                                        "only")
        account_type = body.get("account_type") or sess["account_type"] or "personal"
        if account_type not in bank["account_types"] or (
                sess["account_type"] and account_type != sess["account_type"]):
            allowed = [sess["account_type"]] if sess["account_type"] else bank["account_types"]
            raise invalid("account_type", f"must be {' or '.join(allowed)} here")
        who = self._check_credentials(login_type, body["credentials"])
        known = sess["customer"] or (who if self.s._customer(env, who) else None) or \
            self.s.store.get_meta(f"connect_login:{env}:{login_type}:{who.lower()}")
        if known and any(r[INTERNAL]["state"] == "locked" and r["bank"] == bank["_id"]
                         and r["login_type"] == login_type  # the spec's advice
                         for r in self.s.store.find("records", env, "customer", known)):
            raise ServiceError("TOO_MANY_VERIFICATION_ATTEMPTS", f"this login at {bank['name']} "
                               "is locked after failed micro-deposit checks: link another bank")
        name = (self.s._customer(env, known)["name"] if known else
                datagen.person(self.s.seed, datagen.object_id("login", env, who))["name"])
        ids = [datagen.object_id("offer", env, login_type, who, bank["_id"], k)
               for k in range(OFFERED)]  # each offer's number is the account's, masked
        offers = [[*datagen.account_name_type(self.s.seed, i, name, account_type),
                   datagen.nuban(self.s.seed, i)] for i in ids]
        sess.update(bank=bank["_id"], login_type=login_type, account_type=account_type,
                    login=f"{login_type}:{who.lower()}", known=known, name=name, offers=offers)
        if not bank["mfa"]:
            return self._to_accounts(sess)
        sess["step"] = "mfa"
        prompt = (SECURITY_QUESTION if bank["mfa"] == "security_question"
                  else "Enter the six-digit token from your bank's token device")
        return {"step": "mfa", "mfa": {"type": bank["mfa"], "prompt": prompt}}

    def mfa(self, env: str, body: dict) -> dict:
        _fields(body, "session answer", "session answer")
        sess = self._session(env, body, "mfa")
        answer = _text("answer", body["answer"])
        if self.s.bank_by_id[sess["bank"]]["mfa"] == "token":
            if not re.fullmatch(r"\d{6}", answer) or answer == "000000":
                raise WidgetError(1010)
        elif answer == "error_1011":
            raise WidgetError(1011)
        return self._to_accounts(sess)

    def _to_accounts(self, sess: dict) -> dict:
        sess["step"] = "accounts"
        return {"step": "accounts", "accounts": self._offer_view(sess["offers"])}

    def finish(self, env: str, body: dict) -> dict:
        _fields(body, "session accounts consent", "session accounts consent")
        sess = self._session(env, body, "accounts")
        if body["consent"] is not True:
            raise invalid("consent", "must be true: the user has to agree to share the data")
        chosen = body["accounts"]
        if (not isinstance(chosen, list) or not chosen
                or not all(isinstance(i, int) and not isinstance(i, bool)
                           and 0 <= i < len(sess["offers"]) for i in chosen)
                or len(set(chosen)) != len(chosen)):
            raise invalid("accounts", f"must list distinct account indexes from 0 to "
                                      f"{len(sess['offers']) - 1}")
        if sess["payment"] and sess["login_type"] == "account_number":
            raise ServiceError("INVALID_FIELD", "a direct debit needs a login the bank verifies "
                                                "at once, not an account number")
        rec = (self.s._record(env, sess["record"]) if sess.get("record")
               else sess["known"] and self._same_login(env, sess))
        if rec:  # known, or linked before with the same login: its accounts, never a copy
            ids = rec[INTERNAL]["accounts"]
            out = self._payload(env, rec, [ids[i] for i in sorted(chosen) if i < len(ids)]
                                if sess.get("record") else ids, returning=True)
        else:
            rec, out = self._create(env, sess, sorted(chosen))
        if rec["verified"]:
            self.sessions.pop(body["session"], None)
        else:  # an account number: the page goes on to the micro-deposits
            sess.update(step="verify", record=rec["_id"])
        if sess["payment"]:
            payment = self.s._pay(env, rec, sess["payment"], None, self.s.clock.now())
            out["payment"] = {k: payment[k] for k in ("_id", "amount", "status")}
            if payment["status"] != "success":
                raise WidgetError(1013, f"The account is linked as record {rec['_id']}; the "
                                        f"debit of {sess['payment']} kobo failed")
        return out

    def verify(self, env: str, body: dict) -> dict:
        """The two micro-deposits of the record an account-number login just linked, checked
        by records/verify's own rule: three wrong pairs answer INCORRECT_DEPOSIT_AMOUNTS (with
        `attempts_left`), the next attempt TOO_MANY_VERIFICATION_ATTEMPTS and the record is
        locked for good; the session then goes back to choosing a bank."""
        _fields(body, "session amounts", "session amounts")
        sess = self._session(env, body, "verify")
        amounts = body["amounts"]
        if (not isinstance(amounts, list) or len(amounts) != 2
                or not all(isinstance(a, str) and NAIRA_RE.fullmatch(a.strip())
                           for a in amounts)):
            raise invalid("amounts", "must be the two deposits in naira as typed, such as 0.01 "
                                     "(digits, at most two decimals)")
        try:
            self.s.verify(env, {"record": sess["record"],
                                "amounts": [float(a) for a in amounts]})
        except ServiceError as err:
            if err.code == "INCORRECT_DEPOSIT_AMOUNTS":
                failures = self.s._record(env, sess["record"])[INTERNAL]["verify_failures"]
                err.extra["attempts_left"] = max(0, MAX_VERIFY_FAILURES - failures)
            elif err.code == "TOO_MANY_VERIFICATION_ATTEMPTS":  # the spec: use another bank
                sess.update(step="bank", record=None)
            else:  # VERIFICATION_EXPIRED: nothing left to confirm
                self.sessions.pop(body["session"], None)
            raise
        self.sessions.pop(body["session"], None)
        return {"record": sess["record"], "verified": True}

    def _create(self, env: str, sess: dict, chosen: list[int]) -> tuple[dict, dict]:
        """A new record by the control's path; its callbacks go out before this returns."""
        conf = self.settings_of(env)
        price = PRODUCT_PRICE * sum(1 for p in sess["products"] if p != "auth")
        if conf["wallet"] < price:
            raise WidgetError(1005, f"This connection costs {price} kobo, the wallet holds "
                                    f"{conf['wallet']}")
        spec = self.s._customer_spec(env, 0, {
            **{k: sess[k] for k in ("bank", "login_type", "account_type", "products", "name")},
            "accounts": len(chosen)})
        spec.update(customer=sess["known"], offers=[sess["offers"][i] for i in chosen])
        with self.s.store.transaction():
            made = self.s._create_customer(env, spec)
            self.s.store.set_meta(f"connect_login:{env}:{sess['login']}", made["customer"])
            conf["wallet"] -= price
            self.s.store.set_meta(f"connect:{env}", conf)
        # at once rather than on the next loop turn, so a direct debit follows its AUTH
        self.s._complete_connection(env, made["record"])
        rec = self.s._record(env, made["record"])
        return rec, self._payload(env, rec, made["accounts"], returning=False,
                                  public_token=made["public_token"])

    # -- helpers -----------------------------------------------------------------------------
    def _session(self, env: str, body: dict, step: str) -> dict:
        sid = body["session"]
        sess = self.sessions.get(sid) if isinstance(sid, str) else None
        if sess is None or sess["env"] != env:
            raise invalid("session", "does not exist or has finished")
        now = self.s.clock.now()
        if now - sess["touched"] > IDLE_S:
            del self.sessions[sid]
            raise WidgetError(1012)
        if sess["step"] != step:
            raise ServiceError("INVALID_FIELD", f"this session is at its {sess['step']} step, "
                                                f"not {step}")
        sess["touched"] = now
        return sess

    @staticmethod
    def _products(value) -> list[str]:
        if value is None:
            return list(datagen.PRODUCTS)
        if isinstance(value, str):
            value = [p.strip() for p in value.split(",") if p.strip()]
        if not isinstance(value, list) or not value or not all(isinstance(p, str) for p in value):
            raise invalid("products", "must be a list of product names")
        return known_products(["auth", *value])  # auth always: it makes the record

    @staticmethod
    def _check_credentials(login_type: str, creds) -> str:
        """The user's login name if the bank accepts `creds`, else the widget error."""
        fields = {"bank": ("username", "password"), "mobile": ("username", "pin"),
                  "bvn": ("bvn",), "account_number": ("account_number",)}[login_type]
        if not isinstance(creds, dict):
            raise invalid("credentials", "must be an object")
        check_fields(creds, fields, sorted(fields))
        if login_type == "bvn":
            bvn = _digits("credentials.bvn", creds["bvn"], 11)
            if not bvn.startswith("22"):
                raise WidgetError(1009, "No customer with this BVN at the bank")
            return bvn
        if login_type == "account_number":
            nuban = _digits("credentials.account_number", creds["account_number"], 10)
            if nuban == "0000000000":
                raise WidgetError(1009, "The bank holds no such account")
            return nuban
        user = _text("credentials.username", creds["username"], 64, NAME_RE)
        if login_type == "mobile":
            if _text("credentials.pin", creds["pin"], 6) != GOOD_PIN:
                raise WidgetError(1000)
            return user
        password = _text("credentials.password", creds["password"])
        if password in ("error_1002", "error_1003"):
            raise WidgetError(int(password[6:]))
        if password != GOOD_PASSWORD:
            raise WidgetError(1000)
        return user

    def _same_login(self, env: str, sess: dict) -> dict | None:
        same = next((r for r in self.s.store.find("records", env, "customer", sess["known"])
                     if r[INTERNAL]["state"] in ("active", "unverified")
                     and r["bank"] == sess["bank"] and r["login_type"] == sess["login_type"]), None)
        return same and self.s._record(env, same["_id"])

    @staticmethod
    def _offer_view(offers: list) -> list[dict]:
        return [{"index": k, "name": o[0], "type": o[1],
                 "nuban": f"******{o[2][-4:]}" if len(o) > 2 else None}
                for k, o in enumerate(offers)]

    @staticmethod
    def _bank_view(b: dict) -> dict:
        return {k: b.get(k) for k in ("_id", "name", "slug", "code", "colors", "status",
                                      "login_types", "account_types", "mfa")}

    def _customer_view(self, env: str, customer: str) -> dict:
        cust = self.s._customer(env, customer)
        return {"_id": cust["_id"], "name": cust["name"]}

    def _payload(self, env: str, rec: dict, account_ids: list[str], *, returning: bool,
                 public_token: str | None = None) -> dict:
        """What onSuccess receives (docs/interface.md, "The connect page")."""
        bank = self.s.bank_by_id[rec["bank"]]
        accounts = [self.s.store.get("accounts", env, a) for a in account_ids]
        methods = [m for m, (product, *_rest) in METHODS.items()
                   if product in rec["products"] and not m.startswith("PERIODIC")]
        return {"type": "success", "status": True, "env": env, "record": rec["_id"],
                "public_token": public_token or self.s._token(env, "public", rec["_id"]),
                "customer": self._customer_view(env, rec["customer"]),
                "bank": {"_id": bank["_id"], "name": bank["name"], "slug": bank["slug"]},
                "login_type": rec["login_type"], "account_type": rec["account_type"],
                "verified": rec["verified"], "returning": returning, "products": rec["products"],
                "accounts": [{k: a[k] for k in ("_id", "nuban", "name", "type", "currency")}
                             for a in accounts],
                "callbacks": {m: self.s._callback_url(rec, m) for m in methods}, "payment": None}
