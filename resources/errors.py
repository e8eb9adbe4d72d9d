"""Errors of the connection service, one class per `error_type`, as the client raises them."""

from __future__ import annotations


class ServiceError(Exception):
    """An error answer of the service. Carries no secret: only what the body said."""

    def __init__(self, message: str, *, error_code: str | None = None,
                 http_code: int | None = None, request_id: str | None = None,
                 display_message: str | None = None) -> None:
        self.error_code = error_code
        self.http_code = http_code
        self.request_id = request_id
        self.display_message = display_message
        super().__init__(f"{error_code or 'HTTP ' + str(http_code)}: {message} "
                         f"(http {http_code}, request {request_id})")


class Unauthorized(ServiceError):
    """401: the secret key is missing or wrong."""


class InvalidRequest(ServiceError):
    pass


class InvalidInput(ServiceError):
    pass


class RateLimitExceeded(ServiceError):
    pass


class ApiError(ServiceError):
    pass


class RecordError(ServiceError):
    pass


class AuthError(ServiceError):
    pass


class BankError(ServiceError):
    pass


BY_TYPE: dict[str, type[ServiceError]] = {
    "INVALID_REQUEST": InvalidRequest,
    "INVALID_INPUT": InvalidInput,
    "RATE_LIMIT_EXCEEDED": RateLimitExceeded,
    "API_ERROR": ApiError,
    "RECORD_ERROR": RecordError,
    "AUTH_ERROR": AuthError,
    "BANK_ERROR": BankError,
}


def from_response(status: int, body: object, request_id: str | None) -> ServiceError:
    """The exception for an error answer; unknown or non-JSON bodies still say what happened."""
    if not isinstance(body, dict):
        cls = Unauthorized if status == 401 else ServiceError
        return cls("the service answered with a body that is not a JSON error object",
                   http_code=status, request_id=request_id)
    cls = Unauthorized if status == 401 else BY_TYPE.get(str(body.get("error_type")), ServiceError)
    return cls(str(body.get("error_message") or "no message"),
               error_code=body.get("error_code"), http_code=status,
               request_id=body.get("request_id") or request_id,
               display_message=body.get("display_message"))
