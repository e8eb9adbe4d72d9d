"""moto's S3 server as a real process on loopback, checking signatures, for the tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.postgres import free_port

BUCKET = "lake-bucket"


@dataclass(frozen=True)
class S3:
    """moto's S3 on loopback, with an IAM user whose key is the only one it accepts."""

    endpoint: str  # host:port
    key_id: str
    secret: str

    def root(self, bucket: str = BUCKET, prefix: str = "lake", endpoint: str | None = None
             ) -> str:
        return (f"s3://{bucket}/{prefix}?endpoint_override={endpoint or self.endpoint}"
                "&scheme=http&region=us-east-1")

    def env(self, **changes: str) -> dict[str, str]:
        """The process environment of a reader of the lake: the AWS variables, changed, and
        the session's personal-data key (an s3:// lake needs it from the environment)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "LEDGERLAKE_")) or k == "LEDGERLAKE_PII_KEY"}
        env.update(AWS_ACCESS_KEY_ID=self.key_id, AWS_SECRET_ACCESS_KEY=self.secret,
                   AWS_DEFAULT_REGION="us-east-1")
        env.update(changes)
        return env


@contextmanager
def moto_s3(folder: Path) -> Iterator[S3]:
    """moto's server checking signatures: its first three requests (unsigned) make the IAM user,
    its S3 policy and its key; from then on a request needs that key and its secret. The AWS
    variables of this process are the user's for the module."""
    import boto3

    port = free_port()
    log = open(folder / "moto.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H",
                             "127.0.0.1", "-p", str(port)], stdout=log, stderr=log,
                            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        iam = boto3.client("iam", endpoint_url=f"http://127.0.0.1:{port}",
                           region_name="us-east-1", aws_access_key_id="bootstrap",
                           aws_secret_access_key="bootstrap")
        iam.create_user(UserName="ledgerlake")
        iam.put_user_policy(UserName="ledgerlake", PolicyName="lake", PolicyDocument=json.dumps(
            {"Version": "2012-10-17",
             "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="ledgerlake")["AccessKey"]
        s3 = S3(f"127.0.0.1:{port}", key["AccessKeyId"], key["SecretAccessKey"])
        with pytest.MonkeyPatch.context() as mp:
            for var in [v for v in os.environ if v.startswith("AWS_")]:
                mp.delenv(var)
            for var, value in s3.env().items():
                if var.startswith("AWS_"):
                    mp.setenv(var, value)
            pafs.S3FileSystem(access_key=s3.key_id, secret_key=s3.secret,
                              endpoint_override=s3.endpoint, scheme="http",
                              region="us-east-1", allow_bucket_creation=True).create_dir(BUCKET)
            yield s3
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
