"""The one Definitions object: assets, jobs, sensors and the resources they share."""

from __future__ import annotations

import dagster as dg

from assets.accounts import accounts
from assets.warehouse import Warehouse, warehouse
from resources.client import ConnectionClient
from resources.lake import Lake

from .config import Settings
from .jobs import accounts_job, warehouse_job
from .sensors import inbox_sensor

settings = Settings.from_env()

defs = dg.Definitions(
    assets=[accounts, warehouse],
    jobs=[accounts_job, warehouse_job],
    sensors=[inbox_sensor],
    resources={
        "client": ConnectionClient(
            base_url=settings.api_url,
            environment=settings.environment,
            secret_key=dg.EnvVar("LEDGERLAKE_SECRET_KEY"),
        ),
        "lake": Lake(root=str(settings.lake)),
        "warehouse_db": Warehouse(path=str(settings.warehouse)),
    },
)
