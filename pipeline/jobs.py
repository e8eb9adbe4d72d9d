"""Jobs: the sensor's ingest runs, the daily refresh, the warehouse, the replay, the forget."""

from dagster import AssetSelection, define_asset_job, job

from assets.derived import DERIVED

from .forget import forget_disconnected
from .freshness import freshness_checks
from .replay import replay_missing_callbacks

# the freshness checks judge all records hourly (pipeline/freshness.py): a run over a batch
# leaves them out, or it would record them skipped over their last verdict (so a Definitions
# that holds these jobs holds the freshness checks too)
FRESHNESS = AssetSelection.checks(*freshness_checks)

# the inbox sensor's runs: the product assets of a batch of records, chosen per request
MANUAL = (" Launched by hand, it lands the records its config names by number "
          "(resources: batch: config: records: [1, 2]; `ledgerlake status` lists them); "
          "with none named it fails at once, saying so.")
ingest_job = define_asset_job(
    "ingest_job", selection=AssetSelection.groups("products") - FRESHNESS,
    description="The product assets of a batch of records, as the inbox sensor starts it for "
                "their callbacks." + MANUAL)
# the schedule's daily refresh: balances and transactions of every connected record
refresh_job = define_asset_job(
    "refresh_job", selection=AssetSelection.assets("balances", "transactions") - FRESHNESS,
    description="Balances and transactions of a batch of records: the daily_refresh schedule "
                "starts one run per 1000 connected records (to refresh them all now, launch "
                "its tick from the schedule's page: Preview tick result, Launch all)." + MANUAL)
# record statuses, the lake tables derived for the views, and the views over the lake (also
# kept up by automation: pipeline/sensors.py)
warehouse_job = define_asset_job("warehouse_job", selection=AssetSelection.assets(
    "record_status", *DERIVED) | AssetSelection.key_prefixes("warehouse"))


@job(description="Ask the service to re-send callbacks that never arrived (pipeline/replay.py)")
def replay_job():
    replay_missing_callbacks()


@job(description="Erase disconnected records' data from the lake and the warehouse, when "
                 "LEDGERLAKE_FORGET_ON_DISCONNECT is true (pipeline/forget.py)")
def forget_job():
    forget_disconnected()
