"""Secret keys per environment: who may call which base path."""

from __future__ import annotations

import hmac
import secrets

from .errors import ServiceError

PRODUCTION = "production"
SANDBOX = "production-sandbox"
SHORT = {PRODUCTION: "production", SANDBOX: "sandbox"}  # in tokens, operation ids, faults' env
BASES = {SANDBOX: "/sandbox/v2/", PRODUCTION: "/v2/"}  # the longer prefix first


class Keys:
    def __init__(self, production_key: str | None, sandbox_key: str | None) -> None:
        self.by_env = {PRODUCTION: production_key or "sk_live_" + secrets.token_hex(16),
                       SANDBOX: sandbox_key or "sk_test_" + secrets.token_hex(16)}

    def __repr__(self) -> str:  # keys never show up in a repr
        return "Keys(<redacted>)"

    def public(self, env: str) -> str:
        """The environment's public key, the connect page's `key`: derived from the secret key,
        so nothing more is stored, and it reveals nothing of it."""
        prefix = "pk_live_" if env == PRODUCTION else "pk_test_"
        mac = hmac.new(self.by_env[env].encode(), b"connect page public key", "sha256")
        return prefix + mac.hexdigest()[:32]

    def env_of_public(self, key: str) -> str | None:
        return next((env for env in (PRODUCTION, SANDBOX)
                     if hmac.compare_digest(key.encode(), self.public(env).encode())), None)

    def check(self, env: str, header: str | None) -> None:
        """Raise the spec's error unless `header` carries this environment's key."""
        scheme, _, key = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ServiceError("INVALID_API_KEYS", "missing or malformed Authorization header")
        key = key.strip().encode()
        if hmac.compare_digest(key, self.by_env[env].encode()):
            return
        other = PRODUCTION if env == SANDBOX else SANDBOX
        if hmac.compare_digest(key, self.by_env[other].encode()):
            raise ServiceError("UNAUTHORIZED_ENVIRONMENT",
                               f"this secret key belongs to {other}, not {env}")
        raise ServiceError("INVALID_API_KEYS", "client token and secret key invalid")
