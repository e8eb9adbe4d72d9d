"""The API client as a Dagster resource: its settings in the run's config (the key only as an
environment variable's name), a `Client` made for each run and closed after it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field

from .sdk import Client


class ConnectionClient(ConfigurableResource):
    """The service's API for a run: a step takes the `Client` it yields as
    `client: ResourceParam[Client]`."""

    base_url: str = Field(description="Scheme, host and port of the service, without the /v2/.")
    secret_key: str = Field(repr=False, exclude=True, description=(
        "The environment's secret key. Pass dagster.EnvVar(...) so that Dagster stores only the "
        "variable's name."))
    environment: str = Field(default="sandbox", description="sandbox or production.")
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    max_attempts: int = Field(default=6, description=(
        "Tries per request, the first included; a 429 spends retry_budget_s, not a try."))
    retry_budget_s: float = Field(default=60.0, description=(
        "Wall time one request may spend waiting between tries; a longer Retry-After raises."))
    backoff_base_s: float = 0.25
    backoff_max_s: float = 8.0
    page_size: int = Field(default=100, description="`limit` of paged calls, 1 to 100.")

    def client(self) -> Client:
        return Client(**self.model_dump(), secret_key=self.secret_key)

    @contextlib.contextmanager
    def yield_for_execution(self, context: InitResourceContext) -> Iterator[Client]:
        # a bad setting fails the run here, at resource init, before any asset
        with self.client() as client:
            yield client
