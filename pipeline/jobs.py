"""Jobs: one per product asset (partitioned by record), the daily refresh, the warehouse."""

from dagster import AssetSelection, define_asset_job, job

from .replay import replay_missing_callbacks

accounts_job = define_asset_job("accounts_job", selection=["accounts"])
balances_job = define_asset_job("balances_job", selection=["balances"])
transactions_job = define_asset_job("transactions_job", selection=["transactions"])
income_job = define_asset_job("income_job", selection=["income"])
identity_job = define_asset_job("identity_job", selection=["identity"])
payments_job = define_asset_job("payments_job", selection=["payments"])
# the schedule's daily refresh: balances and transactions of every connected record
refresh_job = define_asset_job("refresh_job", selection=["balances", "transactions"])
warehouse_job = define_asset_job("warehouse_job", selection=["record_status", "warehouse"])

PRODUCT_JOBS = [accounts_job, balances_job, transactions_job, income_job, identity_job,
                payments_job]

# the inbox sensor's runs: the product assets of one record, chosen per run request
ingest_job = define_asset_job("ingest_job", selection=AssetSelection.groups("products"))


@job(description="Ask the service to re-send callbacks that never arrived (pipeline/replay.py)")
def replay_job():
    replay_missing_callbacks()
