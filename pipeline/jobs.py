"""Jobs: the sensor's ingest runs, the daily refresh, the warehouse, the replay."""

from dagster import AssetSelection, define_asset_job, job

from .forget import forget_disconnected
from .replay import replay_missing_callbacks

# the inbox sensor's runs: the product assets of one record (or a batch), chosen per request
ingest_job = define_asset_job("ingest_job", selection=AssetSelection.groups("products"))
# the schedule's daily refresh: balances and transactions of every connected record
refresh_job = define_asset_job("refresh_job", selection=["balances", "transactions"])
# record statuses and the views over the lake (also kept up by automation: pipeline/sensors.py)
warehouse_job = define_asset_job("warehouse_job", selection=["record_status", "warehouse"])


@job(description="Ask the service to re-send callbacks that never arrived (pipeline/replay.py)")
def replay_job():
    replay_missing_callbacks()


@job(description="Erase disconnected records' data from the lake and the warehouse, when "
                 "LEDGERLAKE_FORGET_ON_DISCONNECT is true (pipeline/forget.py)")
def forget_job():
    forget_disconnected()
