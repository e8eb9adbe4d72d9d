"""The code location loads: the one Definitions object, and `dg check defs` on the project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

REPO = Path(__file__).resolve().parents[1]


def test_definitions_validate():
    from pipeline.definitions import defs

    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"accounts", "warehouse/daily_balances", "warehouse/records"} <= keys
    assert defs.resolve_sensor_def("inbox_sensor").default_status == dg.DefaultSensorStatus.RUNNING


def test_runs_are_over_batches_of_records_not_partitions(monkeypatch):
    """The unit of orchestration is a run over a batch of records (assets/batch.py): no asset
    is partitioned, and each product asset takes its records from the run's `batch`."""
    from assets.batch import Batch, batch_config
    from pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    assert [n.key.to_user_string() for n in graph.asset_nodes if n.partitions_def] == []
    products = ["accounts", "balances", "transactions", "income", "identity", "payments"]
    assert [p for p in products
            if "batch" not in defs.resolve_assets_def(p).required_resource_keys] == []
    # given per run, required: the Launchpad's default config (no records) is refused
    monkeypatch.setenv("LEDGERLAKE_SECRET_KEY", "sk_test_config_only")  # the client's config
    assert defs.resources["batch"].resource_cls is Batch
    for job in ("ingest_job", "refresh_job"):
        with pytest.raises(dg.DagsterInvalidConfigError, match='"resources"'):
            dg.validate_run_config(defs.resolve_job_def(job), {})
        dg.validate_run_config(defs.resolve_job_def(job), batch_config([1]))


def test_dg_check_defs(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "LEDGERLAKE_HOME": str(tmp_path)}
    env.pop("LEDGERLAKE_SECRET_KEY", None)  # the key is resolved at run time, not at load
    dg_bin = Path(sys.executable).with_name("dg")
    out = subprocess.run([str(dg_bin), "check", "defs"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All definitions loaded successfully" in out.stdout + out.stderr


def test_duckdb_pool_limited_to_one():
    import yaml

    conf = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert conf["concurrency"]["pools"]["default_limit"] == 1
    from pipeline.definitions import defs

    pools = {n.key.to_user_string(): n.pools for n in defs.resolve_asset_graph().asset_nodes}
    assert pools["warehouse/daily_balances"] == {"duckdb"}
    assert pools["daily_balances"] == {"duckdb"}  # the derived tables: one refresh at a time
    assert pools["lake_maintenance"] == {"lake_maintenance"}  # one pass at a time
    # every asset that calls the service shares its pool (its limit is set per instance:
    # pipeline/local.py one_box_pools, docs/operations.md); no other asset is in a pool
    products = {"accounts", "balances", "transactions", "income", "identity", "payments"}
    assert all(pools[k] == {"connection_service"} for k in products)
    from assets.derived import DERIVED

    derived = set(DERIVED)  # built by the warehouse's asset
    assert {"daily_balances", "monthly_cashflow", "latest_balances"} <= derived
    assert all(pools[k] == {"duckdb"} for k in derived)
    assert all(not p for k, p in pools.items() if not k.startswith("warehouse/")
               and k not in {"lake_maintenance", *products, *derived})


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../../etc/localtime"])
def test_a_time_zone_that_is_not_one_is_refused_at_load(zone):
    from resources.config import ConfigError, Settings

    with pytest.raises(ConfigError, match="LEDGERLAKE_TIMEZONE"):
        Settings.from_env({"LEDGERLAKE_TIMEZONE": zone})
    assert Settings.from_env({}).timezone == "Africa/Lagos"


def test_the_settings_read_at_load_reach_the_assets_and_the_retries(tmp_path):
    """Tuning is read once, when the code location loads, and handed on: to the assets as the
    `tuning` resource, and to the products' retry policy as its first wait (a fresh process:
    the definitions read the settings at import)."""
    code = ("import json; from pipeline.definitions import defs; "
            "t = defs.resources['tuning']; "
            "needs = [a for a in ('balances', 'transactions', 'lake_maintenance') "
            "         if 'tuning' in defs.resolve_assets_def(a).required_resource_keys]; "
            "p = defs.resolve_assets_def('transactions').op.retry_policy; "
            "print(json.dumps([t.chart_records, t.reconcile_days, t.retention_hours, needs, "
            "                  p.max_retries, [p.calculate_delay(2) for _ in range(100)]]))")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DAGSTER_HOME": str(tmp_path),
           "LEDGERLAKE_HOME": str(tmp_path), "LEDGERLAKE_CHART_RECORDS": "0",
           "LEDGERLAKE_RECONCILE_DAYS": "3", "LEDGERLAKE_LAKE_RETENTION_HOURS": "24",
           "LEDGERLAKE_RETRY_DELAY_S": "7"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    charts, every, hours, needs, retries, waits = json.loads(out.stdout.splitlines()[-1])
    assert (charts, every, hours, retries) == (0, 3, 24, 3)
    assert needs == ["balances", "transactions", "lake_maintenance"]
    # the second try waits 3 first waits, ± one: 14 to 28 s from 7 s (the default's 60 to 120)
    assert all(14 <= w <= 28 for w in waits) and max(waits) - min(waits) > 1
