"""Jobs: one per product asset (partitioned by record) and the warehouse refresh."""

from dagster import define_asset_job

accounts_job = define_asset_job("accounts_job", selection=["accounts"])
warehouse_job = define_asset_job("warehouse_job", selection=["warehouse"])
