"""The connection service's API: `sdk.Client`, a plain httpx SDK with its errors
(`errors`), and `resource.ConnectionClient`, the thin Dagster resource that makes one for a
run. Nothing here but the resource imports Dagster."""

from .sdk import Client

__all__ = ["Client"]
