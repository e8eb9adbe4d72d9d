"""The lake: hive layout, explicit schemas, atomic replacement; local folders and S3."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.lake import Lake

SCHEMA = pa.schema([("id", pa.string()), ("amount", pa.float64()),
                    ("when", pa.timestamp("ms", tz="UTC"))])


def sample(n: int, amount=1.5) -> pa.Table:
    return pa.table({"id": [f"t{i}" for i in range(n)], "amount": [amount] * n,
                     "when": pa.array([None] * n, pa.timestamp("ms", tz="UTC"))}, schema=SCHEMA)


def test_local_roundtrip_keeps_types_and_layout(tmp_path):
    lake = Lake(root=str(tmp_path))
    nulls = pa.table({"id": ["a"], "amount": pa.array([None], pa.null()),
                      "when": pa.array([None], pa.null())})
    path = lake.write("things", "rec_1", nulls, schema=SCHEMA)
    assert path == str(tmp_path / "things" / "record_id=rec_1" / "part-0.parquet")
    back = lake.read("things", "rec_1")
    assert back.schema == SCHEMA  # an all-null column keeps its declared type
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    assert lake.partitions("things") == ["rec_1"]
    assert lake.read("things", "missing") is None
    assert lake.read("nothing_yet", "rec_1") is None


def test_replace_is_whole_and_leaves_no_temporary(tmp_path):
    lake = Lake(root=str(tmp_path))
    lake.write("things", "r", sample(10), schema=SCHEMA)
    lake.write("things", "r", sample(3, amount=2.0), schema=SCHEMA)
    back = lake.read("things", "r")
    assert back.num_rows == 3 and set(back["amount"].to_pylist()) == {2.0}
    assert os.listdir(tmp_path / "things" / "record_id=r") == ["part-0.parquet"]


def test_failed_write_keeps_the_old_partition(tmp_path):
    lake = Lake(root=str(tmp_path))
    lake.write("things", "r", sample(5), schema=SCHEMA)
    before = (tmp_path / "things" / "record_id=r" / "part-0.parquet").read_bytes()
    wrong = pa.table({"id": ["x"], "amount": ["not a number"], "when": [None]})
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)):
        lake.write("things", "r", wrong, schema=SCHEMA)
    assert (tmp_path / "things" / "record_id=r" / "part-0.parquet").read_bytes() == before
    assert os.listdir(tmp_path / "things" / "record_id=r") == ["part-0.parquet"]


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", "x" * 65, "rec 1", "ré", "..", "a\x00"])
def test_record_ids_that_cannot_be_folder_names_are_refused(tmp_path, bad):
    lake = Lake(root=str(tmp_path))
    with pytest.raises(ValueError, match="record id"):
        lake.write("things", bad, sample(1), schema=SCHEMA)
    assert not any(tmp_path.rglob("*.parquet"))


def test_table_names_are_checked(tmp_path):
    with pytest.raises(ValueError, match="table name"):
        Lake(root=str(tmp_path)).write("../up", "r", sample(1))


@pytest.fixture
def s3_endpoint(tmp_path, monkeypatch):
    """A real S3 API (moto's server) on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "moto.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H",
                             "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_s3_root(s3_endpoint):
    import pyarrow.fs as pafs

    query = f"?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", region="us-east-1",
                           allow_bucket_creation=True)
    fs.create_dir("lake-bucket")
    lake = Lake(root=f"s3://lake-bucket/prefix{query}")
    path = lake.write("things", "rec1", sample(4), schema=SCHEMA)
    assert path == "s3://lake-bucket/prefix/things/record_id=rec1/part-0.parquet"
    lake.write("things", "rec1", sample(2, amount=9.0), schema=SCHEMA)
    back = lake.read("things", "rec1")
    assert back.schema == SCHEMA and back["amount"].to_pylist() == [9.0, 9.0]
    assert lake.partitions("things") == ["rec1"]
    listed = fs.get_file_info(pafs.FileSelector("lake-bucket/prefix", recursive=True))
    assert [i.path for i in listed if i.type == pafs.FileType.File] == [path[len("s3://"):]]
