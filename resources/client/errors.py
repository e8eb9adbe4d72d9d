"""Errors of the connection service, one class per `error_type`, as the client raises them.

Every error carries what the service said (`error_type`, `error_code`, `error_message`,
`display_message`, `http_code`, `request_id`) and nothing of the request: no headers, no key.
"""

from __future__ import annotations


class ServiceError(Exception):
    """An answer of the service that is not a success, or no usable answer at all."""

    def __init__(self, message: str, *, error_type: str | None = None,
                 error_code: str | None = None, http_code: int | None = None,
                 request_id: str | None = None, display_message: str | None = None,
                 method: str | None = None, path: str | None = None,
                 retry_after: float | None = None, account_id: str | None = None,
                 attempts: int = 1) -> None:
        self.error_message = message
        self.error_type = error_type
        self.error_code = error_code
        self.http_code = http_code
        self.request_id = request_id
        self.display_message = display_message
        self.method = method
        self.path = path
        self.retry_after = retry_after
        self.account_id = account_id
        self.attempts = attempts
        super().__init__(self._text())

    def _text(self) -> str:
        what = self.error_code or (f"HTTP {self.http_code}" if self.http_code else "no answer")
        where = f" on {self.method} {self.path}" if self.path else ""
        status = f"http {self.http_code}" if self.http_code else "no http status"
        tries = f", after {self.attempts} attempts" if self.attempts > 1 else ""
        return (f"{what}: {self.error_message}{where} "
                f"({status}, request {self.request_id or 'unknown'}{tries})")

    def after(self, attempts: int, note: str | None = None) -> ServiceError:
        """The same error, its text telling how many tries it took (and why they stopped)."""
        self.attempts = attempts
        if note:
            self.error_message = f"{self.error_message}; {note}"
        self.args = (self._text(),)
        return self

    def __reduce__(self):  # picklable with its fields (Dagster ships errors across processes)
        return (_rebuild, (type(self), self.error_message, {
            k: getattr(self, k) for k in ("error_type", "error_code", "http_code", "request_id",
                                          "display_message", "method", "path", "retry_after",
                                          "account_id", "attempts")}))


def _rebuild(cls, message, fields):
    return cls(message, **fields)


class Unauthorized(ServiceError):
    """401: the secret key is missing, malformed or unknown to the service."""


class InvalidRequest(ServiceError):
    """INVALID_REQUEST: the request is malformed (missing, unknown or bad fields; no endpoint)."""


class InvalidInput(ServiceError):
    """INVALID_INPUT: well formed, but a key, token, account or bank is wrong."""


class RateLimitExceeded(ServiceError):
    """RATE_LIMIT_EXCEEDED (429); `retry_after` holds the service's wait in seconds, if given."""


class ApiError(ServiceError):
    """API_ERROR (500): a failure inside the service, or PLANNED_MAINTENANCE."""


class RecordError(ServiceError):
    """RECORD_ERROR: the record's state forbids this (login required, product not ready...)."""


class AuthError(ServiceError):
    """AUTH_ERROR: /auth/get on a record not verified; `account_id` names the account."""


class BankError(ServiceError):
    """BANK_ERROR: the bank is down, not responding (worth a retry) or unsupported."""


class TransportError(ServiceError):
    """No usable answer: a timeout, or a connection refused or dropped mid-answer."""

    transient = unsent = False  # for the retry policy: may a new try answer; did it never leave


class MalformedResponse(ServiceError):
    """A 2xx answer whose body is not the success envelope the interface promises."""


class DamagedAnswer(MalformedResponse):
    """A 2xx answer whose body does not even parse as JSON: most likely cut short on the way
    (a proxy, a stream dropped behind a matching Content-Length), so a call that is safe to
    repeat is tried again, as after a dropped connection."""


BY_TYPE: dict[str, type[ServiceError]] = {
    "INVALID_REQUEST": InvalidRequest,
    "INVALID_INPUT": InvalidInput,
    "RATE_LIMIT_EXCEEDED": RateLimitExceeded,
    "API_ERROR": ApiError,
    "RECORD_ERROR": RecordError,
    "AUTH_ERROR": AuthError,
    "BANK_ERROR": BankError,
}


def from_response(status: int, body: object, request_id: str | None, *,
                  method: str | None = None, path: str | None = None,
                  retry_after: float | None = None) -> ServiceError:
    """The exception for an error answer; unknown or non-JSON bodies still say what happened."""
    where = {"method": method, "path": path, "retry_after": retry_after}
    if not isinstance(body, dict) or not (body.get("error_type") or body.get("error_code")):
        cls = (Unauthorized if status == 401 else RateLimitExceeded if status == 429
               else ApiError if status >= 500 else ServiceError)
        return cls(f"the service answered {status} without a JSON error body",
                   http_code=status, request_id=request_id, **where)
    error_type = str(body.get("error_type") or "")
    cls = Unauthorized if status == 401 else BY_TYPE.get(error_type)
    message = str(body.get("error_message") or "no message")
    if cls is None:
        cls = ApiError if status >= 500 else ServiceError
        message = f"unknown error_type {error_type!r}: {message}"
    display = body.get("display_message")
    account = body.get("account_id")
    return cls(message, error_type=error_type or None,
               error_code=_str_or_none(body.get("error_code")), http_code=status,
               request_id=_str_or_none(body.get("request_id")) or request_id,
               display_message=display if isinstance(display, str) else None,
               account_id=account if isinstance(account, str) else None, **where)


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
