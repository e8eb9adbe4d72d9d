"""The service's error bodies, as the spec's Errors section and INTERFACE.md describe them, and
the checks of request fields that answer with them."""

from __future__ import annotations

import orjson

RECORD_ERRORS = (
    "INVALID_CREDENTIALS", "INVALID_MFA", "INVALID_SEND_METHOD", "INVALID_UPDATED_USERNAME",
    "RECORD_LOCKED", "RECORD_LOGIN_REQUIRED", "RECORD_NO_ERROR", "RECORD_NOT_SUPPORTED",
    "RECORD_NO_VERIFICATION", "INCORRECT_DEPOSIT_AMOUNTS", "TOO_MANY_VERIFICATION_ATTEMPTS",
    "USER_SETUP_REQUIRED", "MFA_NOT_SUPPORTED", "NO_ACCOUNTS", "NO_AUTH_ACCOUNTS",
    "NO_INVESTMENT_ACCOUNTS", "NO_LIABILITY_ACCOUNTS", "PRODUCT_NOT_READY",
    "PRODUCTS_NOT_SUPPORTED",
)
BANK_ERRORS = ("BANK_DOWN", "BANK_NOT_RESPONDING", "BANK_NOT_AVAILABLE", "BANK_NO_LONGER_SUPPORTED")
# what a connection can fail with (a customer's password error_<CODE> picks one)
CONNECTION_ERRORS = {*RECORD_ERRORS, *BANK_ERRORS, "INTERNAL_SERVER_ERROR"}
RATE_LIMITS = ("ACCOUNTS_LIMIT", "ADDITION_LIMIT", "AUTH_LIMIT", "IDENTITY_LIMIT",
               "INCOME_LIMIT", "RECORD_GET_LIMIT", "RATE_LIMIT", "TRANSACTIONS_LIMIT")

# error_code -> (error_type, http_code)
CODES: dict[str, tuple[str, int]] = {
    **dict.fromkeys(("MISSING_FIELDS", "UNKNOWN_FIELDS", "INVALID_FIELD", "INVALID_BODY",
                     "INVALID_HEADERS", "SANDBOX_ONLY"), ("INVALID_REQUEST", 400)),
    "NOT_FOUND": ("INVALID_REQUEST", 404),
    "INVALID_API_KEYS": ("INVALID_INPUT", 401),
    **dict.fromkeys(("UNAUTHORIZED_ENVIRONMENT", "INVALID_TOKEN", "INVALID_PUBLIC_TOKEN",
                     "INVALID_PRODUCT", "INVALID_ACCOUNT_ID", "INVALID_BANK"),
                    ("INVALID_INPUT", 400)),
    **dict.fromkeys(("INTERNAL_SERVER_ERROR", "PLANNED_MAINTENANCE"), ("API_ERROR", 500)),
    "VERIFICATION_EXPIRED": ("AUTH_ERROR", 400),
    **{code: ("RECORD_ERROR", 400) for code in RECORD_ERRORS},
    **{code: ("BANK_ERROR", 400) for code in BANK_ERRORS},
    **{code: ("RATE_LIMIT_EXCEEDED", 429) for code in RATE_LIMITS},
}

# what a user can do about it; null for errors unrelated to user action, as the spec says
DISPLAY = {
    "INVALID_CREDENTIALS": "The credentials you entered were incorrect. Please try again.",
    "INVALID_MFA": "The answer you entered was incorrect. Please try again.",
    "RECORD_LOCKED": "Your account is locked. Please contact your bank.",
    "RECORD_LOGIN_REQUIRED": "Your login details changed. Please log in again.",
    "USER_SETUP_REQUIRED": "Please log in to your bank and complete its setup first.",
    "TOO_MANY_VERIFICATION_ATTEMPTS": "Too many attempts. Please use another bank.",
    "INCORRECT_DEPOSIT_AMOUNTS": "The amounts you entered do not match. Please try again.",
    "BANK_DOWN": "Your bank is unavailable right now. Please try again later.",
    "BANK_NOT_RESPONDING": "Your bank is not responding. Please try again.",
    "BANK_NOT_AVAILABLE": "Your bank is not available right now.",
    "BANK_NO_LONGER_SUPPORTED": "Your bank is no longer supported.",
}


class ServiceError(Exception):
    """Raised anywhere in a handler; the app turns it into the spec's error body."""

    def __init__(self, code: str, message: str, *, error_type: str | None = None,
                 http_code: int | None = None, extra: dict | None = None,
                 headers: dict | None = None) -> None:
        super().__init__(message)
        known_type, known_http = CODES.get(code, (None, None))
        self.code, self.message = code, message
        self.error_type = error_type or known_type or "API_ERROR"
        self.http_code = http_code or known_http or 500
        # the spec: null for the request and input families
        self.display_message = (None if self.error_type in ("INVALID_REQUEST", "INVALID_INPUT")
                                else DISPLAY.get(code))
        self.extra, self.headers = extra or {}, headers or {}

    def body(self, request_id: str) -> dict:
        return {"error_type": self.error_type, "error_code": self.code,
                "error_message": self.message, "display_message": self.display_message,
                "http_code": self.http_code, "request_id": request_id, **self.extra}


# -- the checks of request fields, each answering INVALID_FIELD with the rule broken ---------

def invalid(name: str, rule: str) -> ServiceError:
    return ServiceError("INVALID_FIELD", f"{name} {rule}")


def integer(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(name, f"must be an integer from {lo} to {hi}")
    return value


def boolean(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise invalid(name, "must be a boolean")
    return value


def one_of(name: str, value, options):
    if value not in options:
        raise invalid(name, f"must be one of {', '.join(options)}")
    return value


def check_fields(body: dict, allowed, required) -> None:
    """UNKNOWN_FIELDS, then MISSING_FIELDS; each of `required` is a name or "a|b" (either)."""
    if unknown := sorted(set(body) - set(allowed)):
        raise ServiceError("UNKNOWN_FIELDS", f"unknown fields: {', '.join(unknown)}")
    if missing := [group.replace("|", " or ") for group in required
                   if all(body.get(f) is None for f in group.split("|"))]:
        raise ServiceError("MISSING_FIELDS", f"missing fields: {', '.join(missing)}")


async def json_body(request, max_bytes: int | None = None) -> dict:
    """A POST's JSON object, or INVALID_HEADERS / INVALID_BODY."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise ServiceError("INVALID_HEADERS", "Content-Type must be application/json")
    raw = await request.body()
    if max_bytes is not None and len(raw) > max_bytes:
        raise ServiceError("INVALID_BODY", f"body is larger than {max_bytes // 1024} kB")
    try:
        body = orjson.loads(raw)
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        raise ServiceError("INVALID_BODY", "body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ServiceError("INVALID_BODY", "body must be a JSON object")
    return body
