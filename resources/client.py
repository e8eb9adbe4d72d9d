"""The connection service's API client: one keep-alive httpx client, pages as they arrive."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
from dagster import ConfigurableResource
from pydantic import PrivateAttr

from .errors import from_response

BASE_PATHS = {"production": "/v2/", "sandbox": "/sandbox/v2/"}


class ConnectionClient(ConfigurableResource):
    """Calls `/v2/` (production) or `/sandbox/v2/` (sandbox) with the environment's secret key."""

    base_url: str
    secret_key: str
    environment: str = "sandbox"
    timeout_s: float = 30.0

    _http: httpx.Client | None = PrivateAttr(default=None)

    def __repr__(self) -> str:
        return (f"ConnectionClient(base_url={self.base_url!r}, "
                f"environment={self.environment!r}, secret_key=<redacted>)")

    __str__ = __repr__

    def _client(self) -> httpx.Client:
        if self._http is None:
            if self.environment not in BASE_PATHS:
                raise ValueError(f"environment must be one of {sorted(BASE_PATHS)}, "
                                 f"not {self.environment!r}")
            self._http = httpx.Client(
                base_url=self.base_url.rstrip("/") + BASE_PATHS[self.environment],
                timeout=self.timeout_s,
                headers={"Authorization": f"Bearer {self.secret_key}",
                         "Content-Type": "application/json"},
            )
        return self._http

    def post(self, path: str, body: dict[str, Any]) -> dict:
        resp = self._client().post(path, content=orjson.dumps(body))
        try:
            payload = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            payload = None
        if resp.status_code >= 400 or not isinstance(payload, dict):
            raise from_response(resp.status_code, payload, resp.headers.get("x-request-id"))
        return payload["data"]

    def pages(self, path: str, body: dict[str, Any], key: str,
              limit: int = 100) -> Iterator[list[dict]]:
        """Yield each page's items, following `hasNextPage`/`nextPage` lazily."""
        page = 1
        while page is not None:
            data = self.post(path, {**body, "page": page, "limit": limit})
            yield data[key]
            pagination = data["pagination"]
            page = pagination["nextPage"] if pagination["hasNextPage"] else None

    def accounts(self, record: str) -> list[dict]:
        return [a for page in self.pages("accounts/get", {"record": record}, "accounts")
                for a in page]
