"""The service's error bodies, as the spec's Errors section and INTERFACE.md describe them."""

from __future__ import annotations

# error_code -> (error_type, http_code)
CODES: dict[str, tuple[str, int]] = {
    "MISSING_FIELDS": ("INVALID_REQUEST", 400),
    "UNKNOWN_FIELDS": ("INVALID_REQUEST", 400),
    "INVALID_FIELD": ("INVALID_REQUEST", 400),
    "INVALID_BODY": ("INVALID_REQUEST", 400),
    "INVALID_HEADERS": ("INVALID_REQUEST", 400),
    "NOT_FOUND": ("INVALID_REQUEST", 404),
    "SANDBOX_ONLY": ("INVALID_REQUEST", 400),
    "INVALID_API_KEYS": ("INVALID_INPUT", 401),
    "UNAUTHORIZED_ENVIRONMENT": ("INVALID_INPUT", 400),
    "INVALID_TOKEN": ("INVALID_INPUT", 400),
    "INVALID_PUBLIC_TOKEN": ("INVALID_INPUT", 400),
    "INVALID_PRODUCT": ("INVALID_INPUT", 400),
    "INVALID_ACCOUNT_ID": ("INVALID_INPUT", 400),
    "INVALID_BANK": ("INVALID_INPUT", 400),
    "INTERNAL_SERVER_ERROR": ("API_ERROR", 500),
    "PLANNED_MAINTENANCE": ("API_ERROR", 500),
}


class ServiceError(Exception):
    """Raised anywhere in a handler; the app turns it into the spec's error body."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        error_type: str | None = None,
        http_code: int | None = None,
        display_message: str | None = None,
        extra: dict | None = None,
    ) -> None:
        super().__init__(message)
        known_type, known_http = CODES.get(code, (None, None))
        self.code = code
        self.message = message
        self.error_type = error_type or known_type or "API_ERROR"
        self.http_code = http_code or known_http or 500
        self.display_message = display_message
        self.extra = extra or {}

    def body(self, request_id: str) -> dict:
        return {
            "error_type": self.error_type,
            "error_code": self.code,
            "error_message": self.message,
            "display_message": self.display_message,
            "http_code": self.http_code,
            "request_id": request_id,
            **self.extra,
        }
