"""Settings take paths and URIs as given, refuse what the project cannot write, and never fall
back to a local folder named after a URI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from resources.config import ConfigError, Settings, Tuning, local_path
from resources.lake import Lake
from tests.ground_truth import partitions
from tests.resources.test_lake import s3_endpoint  # noqa: F401  (a fixture: moto's S3)

REPO = Path(__file__).resolve().parents[2]


def test_defaults_are_absolute_paths_under_home(tmp_path):
    s = Settings.from_env({"LEDGERLAKE_HOME": str(tmp_path)})
    assert (s.home, s.lake, s.warehouse, s.inbox) == (
        tmp_path, str(tmp_path / "lake"), str(tmp_path / "warehouse.duckdb"),
        tmp_path / "inbox.sqlite3")
    assert local_path(s.lake) == tmp_path / "lake"
    assert s.warehouse_path == tmp_path / "warehouse.duckdb"


def test_accepted_forms_are_kept_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = Settings.from_env({"LEDGERLAKE_LAKE": "rel/lake",
                           "LEDGERLAKE_WAREHOUSE": f"file://{tmp_path}/w%20h.duckdb",
                           "LEDGERLAKE_INBOX": f"file://localhost{tmp_path}/in.sqlite3"})
    assert s.lake == str(tmp_path / "rel" / "lake")  # plain: made absolute
    assert s.warehouse == f"file://{tmp_path}/w%20h.duckdb"
    assert s.warehouse_path == tmp_path / "w h.duckdb"
    assert s.inbox == tmp_path / "in.sqlite3"

    uri = "s3://lake-bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http&region=eu-west-1"
    s = Settings.from_env({"LEDGERLAKE_LAKE": uri})
    assert s.lake == uri and local_path(s.lake) is None  # object storage: no local path
    assert not (tmp_path / "s3:").exists()


REFUSED = [
    ("LEDGERLAKE_LAKE", "gs://b/lake",
     "LEDGERLAKE_LAKE=gs://b/lake: the gs:// scheme is not supported yet; "
     "use a local path, file:// or s3://"),
    ("LEDGERLAKE_LAKE", "az://container/lake", "the az:// scheme is not supported yet"),
    ("LEDGERLAKE_LAKE", "https://example.com/lake", "the https:// scheme is not supported"),
    ("LEDGERLAKE_LAKE", "s3://", "s3:// needs a bucket"),
    ("LEDGERLAKE_LAKE", "s3:///lake", "s3:// needs a bucket"),
    ("LEDGERLAKE_LAKE", "s3:/bucket/lake", "'s3:' without '//'"),
    ("LEDGERLAKE_LAKE", "s3://Bucket_1/lake", "is not an S3 bucket name"),
    ("LEDGERLAKE_LAKE", "s3://bucket/lake?endpoint=x", "unknown S3 option 'endpoint'"),
    ("LEDGERLAKE_LAKE", "s3://bucket/lake?region", "its query is not key=value"),
    ("LEDGERLAKE_LAKE", "", "LEDGERLAKE_LAKE is set but empty"),
    ("LEDGERLAKE_LAKE", "  ", "LEDGERLAKE_LAKE is set but empty"),
    ("LEDGERLAKE_LAKE", "/srv/lake\n", "white space"),
    ("LEDGERLAKE_LAKE", "file://otherhost/lake", "not on 'otherhost'"),
    ("LEDGERLAKE_LAKE", "file://", "file:///absolute/path"),
    ("LEDGERLAKE_WAREHOUSE", "s3://bucket/warehouse.duckdb",
     "LEDGERLAKE_WAREHOUSE=s3://bucket/warehouse.duckdb: the s3:// scheme is not supported "
     "yet; use a local path or file://"),
    ("LEDGERLAKE_WAREHOUSE", "gs://b/w.duckdb", "use a local path or file://"),
    ("LEDGERLAKE_INBOX", "s3://bucket/inbox.sqlite3", "LEDGERLAKE_INBOX=s3://bucket"),
    ("LEDGERLAKE_HOME", "s3://bucket/home", "LEDGERLAKE_HOME=s3://bucket"),
    ("LEDGERLAKE_ENVIRONMENT", "staging", "LEDGERLAKE_ENVIRONMENT must be one of"),
    ("LEDGERLAKE_CODE_URL", "github.com/acme/ledgerlake", "is not a web URL"),
    ("LEDGERLAKE_CODE_URL", "file:///srv/ledgerlake", "is not a web URL"),
]


def test_the_ui_source_links_follow_the_code_url(tmp_path):
    from assets.accounts import accounts
    from pipeline.definitions import code_references

    settings = Settings.from_env({"LEDGERLAKE_HOME": str(tmp_path),
                                  "LEDGERLAKE_CODE_URL": "https://github.com/acme/ledgerlake",
                                  "LEDGERLAKE_CODE_BRANCH": "release"})
    (linked,) = code_references([accounts], settings)
    refs = linked.specs_by_key[accounts.key].metadata["dagster/code_references"]
    urls = [r.url for r in refs.code_references]
    assert urls and all(u.startswith("https://github.com/acme/ledgerlake/tree/release/assets/")
                        for u in urls), urls
    (local,) = code_references([accounts], Settings.from_env({"LEDGERLAKE_HOME": str(tmp_path)}))
    refs = local.specs_by_key[accounts.key].metadata["dagster/code_references"]
    assert all(r.file_path.endswith(".py") for r in refs.code_references)


@pytest.mark.parametrize(("var", "value", "message"), REFUSED)
def test_what_cannot_be_written_is_refused_at_load(var, value, message, tmp_path):
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"LEDGERLAKE_HOME": str(tmp_path), var: value})
    assert message in str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing made on the way


SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY"


@pytest.mark.parametrize("value", [
    f"s3://AKIAEXAMPLE:{SECRET}@bucket/lake",
    f"gs://user:{SECRET}@bucket/lake",
    f"s3://bucket/lake?secret_key={SECRET}",
    f"s3://bucket/lake?region=x&access_key={SECRET}",
])
def test_a_secret_in_a_uri_is_refused_and_never_repeated(value):
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"LEDGERLAKE_LAKE": value})
    assert SECRET not in str(info.value) and "AKIAEXAMPLE" not in str(info.value)
    assert "LEDGERLAKE_LAKE=" in str(info.value)


def cli(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERLAKE_")}
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd,
                          env={**base, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "env", "message"), [
    (["sql", "select 1"], {"LEDGERLAKE_WAREHOUSE": "gs://b/w.duckdb"},
     "ledgerlake: LEDGERLAKE_WAREHOUSE=gs://b/w.duckdb: the gs:// scheme is not supported yet; "
     "use a local path or file://"),
    (["replay", "--dry-run"], {"LEDGERLAKE_LAKE": f"s3://k:{SECRET}@bucket/lake"},
     "ledgerlake: LEDGERLAKE_LAKE=s3://bucket/lake: credentials do not belong in the URI"),
    (["sql", "select 1"], {"LEDGERLAKE_HOME": "s3://bucket/home"},
     "ledgerlake: LEDGERLAKE_HOME=s3://bucket/home: the s3:// scheme is not supported yet"),
])
def test_the_cli_prints_one_line_and_exits_2(tmp_path, args, env, message):
    out = cli(args, env, tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), out.stderr
    assert SECRET not in out.stderr + out.stdout
    assert list(tmp_path.iterdir()) == []  # no `gs:` or `s3:` folder, nothing else


def resources_of(env: dict, cwd: Path) -> dict:
    """The lake and warehouse the code location builds from `env` (a fresh process: the
    Definitions read the settings once, at import)."""
    code = ("import json; from pipeline.definitions import defs; "
            "r = defs.resources; "
            "print(json.dumps({'lake': r['lake'].root, 'warehouse': r['warehouse_db'].path}))")
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERLAKE_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd,
                         env={**base, "PYTHONPATH": str(REPO), **env},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_the_definitions_hand_local_paths_to_the_lake_and_warehouse(s3_endpoint,  # noqa: F811
                                                                     tmp_path):
    import pyarrow.fs as pafs

    got = resources_of({"LEDGERLAKE_HOME": str(tmp_path),
                        "LEDGERLAKE_LAKE": f"file://{tmp_path}/lake",
                        "LEDGERLAKE_WAREHOUSE": f"file://{tmp_path}/w.duckdb"}, tmp_path)
    # a local path, so the lake writes aside and renames, and the warehouse can read it
    assert got == {"lake": str(tmp_path / "lake"), "warehouse": str(tmp_path / "w.duckdb")}
    # an s3 lake must answer at load (tests/assets/test_warehouse_s3.py): moto's does
    pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", region="us-east-1",
                      allow_bucket_creation=True).create_dir("bucket")
    uri = f"s3://bucket/lake?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    got = resources_of({"LEDGERLAKE_HOME": str(tmp_path), "LEDGERLAKE_LAKE": uri,
                        # an s3:// lake takes its personal-data key from the environment
                        "LEDGERLAKE_PII_KEY": os.environ["LEDGERLAKE_PII_KEY"]}, tmp_path)
    assert got["lake"] == uri


def test_an_s3_lake_setting_writes_to_s3(s3_endpoint, monkeypatch, tmp_path):  # noqa: F811
    import pyarrow.fs as pafs

    monkeypatch.chdir(tmp_path)
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", region="us-east-1",
                           allow_bucket_creation=True)
    fs.create_dir("lake-bucket")
    settings = Settings.from_env({"LEDGERLAKE_LAKE": f"s3://lake-bucket/lake?endpoint_override="
                                                     f"{s3_endpoint}&scheme=http&region=us-east-1"})
    lake = Lake(root=str(local_path(settings.lake) or settings.lake))
    assert lake.write("things", "rec1", pa.table({"n": [1, 2, 3]})) == 1
    assert lake.shown("things") == "s3://lake-bucket/lake/things"
    keys = {i.path for i in fs.get_file_info(pafs.FileSelector("lake-bucket/lake",
                                                               recursive=True))
            if i.type == pafs.FileType.File}
    assert "lake-bucket/lake/things/_delta_log/00000000000000000001.json" in keys
    files = lake.files("things")
    assert files and {f.removeprefix("s3://") for f in files} <= keys  # the data on S3 too
    assert lake.read("things", "rec1")["n"].to_pylist() == [1, 2, 3]
    assert partitions(lake, "things") == ["rec1"]
    assert list(tmp_path.iterdir()) == [tmp_path / "moto.log"]  # nothing local but the log


def test_alert_settings_are_checked_and_the_webhook_never_shown_whole():
    secret = "T0/B0/abcdefsecret"
    s = Settings.from_env({"LEDGERLAKE_ALERT_URL": f"https://hooks.slack.com/services/{secret}",
                           "LEDGERLAKE_ALERT_FORMAT": "JSON",
                           "LEDGERLAKE_ALERT_QUIET_MINUTES": "90",
                           "LEDGERLAKE_RECEIVER_URL": "http://receiver:8766/"})
    a = s.alerting
    assert a.url == f"https://hooks.slack.com/services/{secret}"  # whole where it is called
    assert (a.format, a.quiet_minutes, a.receiver_url) == ("json", 90.0, "http://receiver:8766")
    assert secret not in repr(s) and secret not in str(a) and "hooks.slack.com" in repr(a)
    assert Settings.from_env({"LEDGERLAKE_ALERT_URL": ""}).alerting.url is None
    for var, value, message in [
            ("LEDGERLAKE_ALERT_URL", f"ftp://x/{secret}", "is not an http:// or https:// URL"),
            ("LEDGERLAKE_ALERT_FORMAT", "xml", "LEDGERLAKE_ALERT_FORMAT must be one of"),
            ("LEDGERLAKE_ALERT_QUIET_MINUTES", "0", "is not a number from 1 to"),
            ("LEDGERLAKE_ALERT_MAX_PER_HOUR", "2.5", "is not an integer from 1 to 3600"),
            ("LEDGERLAKE_RECEIVER_URL", "receiver:8766", "is not an http:// or https:// URL")]:
        with pytest.raises(ConfigError, match=message) as caught:
            Settings.from_env({var: value})
        assert secret not in str(caught.value)


@pytest.mark.parametrize(("var", "value", "field", "want"), [
    (None, None, "reconcile_days", 7), ("LEDGERLAKE_RECONCILE_DAYS", "0", "reconcile_days", 0),
    ("LEDGERLAKE_RECONCILE_DAYS", "366", "reconcile_days", 366),
    ("LEDGERLAKE_CHART_RECORDS", "0", "chart_records", 0),
    ("LEDGERLAKE_CHART_RECORDS", "100", "chart_records", 100),
    ("LEDGERLAKE_RETRY_DELAY_S", "0.1", "retry_delay_s", 0.1),
    ("LEDGERLAKE_LAKE_TARGET_MB", "4096", "target_mb", 4096),
    (None, None, "cluster_max_mb", 4096),
    ("LEDGERLAKE_LAKE_CLUSTER_MAX_MB", "0", "cluster_max_mb", 0),
    ("LEDGERLAKE_TIMEZONE", "UTC", "timezone", "UTC"),
])
def test_tuning_from_the_environment(var, value, field, want):
    env = {var: value} if var else {}
    assert getattr(Tuning.from_env(env), field) == want
    assert getattr(Settings.from_env({**env, "LEDGERLAKE_HOME": "/tmp/x"}).tuning, field) == want


@pytest.mark.parametrize(("var", "value", "said"), [
    *[("LEDGERLAKE_RECONCILE_DAYS", v, "a whole number from 0 to 366")
      for v in ["367", "-1", "7d", "", " 7"]],
    *[("LEDGERLAKE_CHART_RECORDS", v, "a whole number from 0 to 100")
      for v in ["-1", "101", "many"]],
    *[("LEDGERLAKE_LAKE_CLUSTER_MAX_MB", v, "a whole number from 0 to 1048576")
      for v in ["-1", "1048577", "4GB"]],
])
def test_tuning_refuses_by_name(var, value, said):
    with pytest.raises(ConfigError, match=f"^{var} must be {said}"):
        Tuning.from_env({var: value})


@pytest.mark.parametrize("value", ["-1", "3601", "nan", "soon"])
def test_a_bad_retry_delay_is_refused_by_name(value):
    with pytest.raises(ConfigError, match="^LEDGERLAKE_RETRY_DELAY_S=.* is not a number from "
                                          "0 to 3600"):
        Tuning.from_env({"LEDGERLAKE_RETRY_DELAY_S": value})
