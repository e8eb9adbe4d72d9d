"""The one Definitions object: assets, jobs, sensors and the resources they share."""

from __future__ import annotations

import warnings
from pathlib import Path

import dagster as dg

from assets.accounts import accounts
from assets.balances import balances
from assets.batch import Batch
from assets.identity import identity
from assets.income import income
from assets.maintenance import lake_maintenance, lake_maintenance_job, nightly_lake_maintenance
from assets.payments import payments
from assets.publish import FETCH_RETRY
from assets.record_status import record_status
from assets.transactions import transactions
from assets.warehouse import Warehouse, warehouse
from resources.client.resource import ConnectionClient
from resources.config import ConfigError, Settings, check_lake, keep_files_private, local_path
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.privacy import KeyUnusable, check_key

from .alerts import alerts
from .freshness import freshness_checks, freshness_job, hourly_freshness
from .jobs import forget_job, ingest_job, refresh_job, replay_job, warehouse_job
from .lost import lost_fetches
from .schedules import daily_refresh, hourly_replay
from .sensors import inbox_sensor, warehouse_follows_lake

keep_files_private()  # the code server's runs and sensors write the lake and the inbox
settings = Settings.from_env()
# an s3:// lake that refuses us fails the load, with the cause, so the daemon launches no run
# against it and the UI shows why; each run's process loads this too, and checks again
check_lake(settings.lake)
# a personal-data key that cannot be used fails the load too, before a run lands identity
try:
    check_key(local_lake=local_path(settings.lake) is not None)
except KeyUnusable as exc:
    raise ConfigError(str(exc)) from None
# the products' retry policy was made when their modules were imported, before these settings
# were read: it takes its first wait now, before any step runs (assets/publish.py, FetchRetry)
FETCH_RETRY.set_first_wait(settings.tuning.retry_delay_s)

# code references are beta in Dagster 1.13; used on purpose: said here once, not per asset
warnings.filterwarnings("ignore", category=dg.BetaWarning,
                        message=r"(Function|Class) `\w*([Cc]ode_?[Rr]eference|FilePathMapping)")


def code_references(assets: list, settings: Settings) -> list:
    """Each asset's file and line, shown in the UI ("View source"); linked to the repository's
    web view when LEDGERLAKE_CODE_URL names it (a GitHub or GitLab URL; branch from
    LEDGERLAKE_CODE_BRANCH, default main). Nothing here touches the network."""
    assets = dg.with_source_code_references(assets)
    if not settings.code_url:
        return assets
    return dg.link_code_references_to_git(
        assets, git_url=settings.code_url, git_branch=settings.code_branch,
        file_path_mapping=dg.AnchorBasedFilePathMapping(
            local_file_anchor=Path(__file__).resolve().parents[1],
            file_anchor_path_in_repository=""))


defs = dg.Definitions(
    assets=code_references([accounts, balances, transactions, income, identity, payments,
                            record_status, warehouse, lake_maintenance], settings),
    asset_checks=freshness_checks,
    jobs=[ingest_job, refresh_job, replay_job, warehouse_job, lake_maintenance_job,
          freshness_job, forget_job],
    sensors=[inbox_sensor(settings.forget_on_disconnect), lost_fetches, warehouse_follows_lake,
             alerts(settings.alerting)],
    schedules=[daily_refresh, hourly_replay, nightly_lake_maintenance(settings.tuning.timezone),
               hourly_freshness],
    # steps fetch a record's product (I/O, a few MB): a process per step would cost seconds of
    # imports each; runs execute in parallel instead (dagster.yaml, max_concurrent_runs)
    executor=dg.in_process_executor,
    resources={
        "client": ConnectionClient(
            base_url=settings.api_url,
            environment=settings.environment,
            secret_key=dg.EnvVar("LEDGERLAKE_SECRET_KEY"),
        ),
        "lake": Lake(root=str(local_path(settings.lake) or settings.lake)),
        # LEDGERLAKE_INBOX read when opened: no database URL in the UI
        "inbox": InboxResource(),
        # each run's records, given in its config, required (assets/batch.py)
        "batch": Batch.configure_at_launch(),
        "warehouse_db": Warehouse(path=str(settings.warehouse_path),
                                  timezone=settings.timezone),
        # how runs pace themselves: charts, reconciling, the lake's upkeep (resources/config.py)
        "tuning": settings.tuning,
        # No secret is handed in here: the service's key reaches the client through
        # dagster.EnvVar (resolved in the run, never shown as config), and the personal-data
        # key (resources/privacy.py, Keys.from_env) and the AWS credentials
        # (resources/object_store.py) are read where they are used, so that none is ever in
        # Dagster's config, metadata or the resources' reprs.
    },
)
