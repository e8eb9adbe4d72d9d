"""The chaos suite's fault-injecting S3 proxy (tests/s3_faults.py) in front of moto's real server:
what it passes on arrives signed and whole, and each fault does to a request what it says,
seen by a real S3 client (boto3, without retries) and checked in the store behind it."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import botocore.config
import botocore.exceptions
import pyarrow as pa
import pytest

from resources.lake import Lake
from tests.s3 import BUCKET, S3, moto_s3
from tests.s3_faults import Rule, S3Faults


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3]:
    with moto_s3(tmp_path_factory.mktemp("moto")) as store:
        yield store


@pytest.fixture
def proxy(s3) -> Iterator[S3Faults]:
    with S3Faults(s3.endpoint, seed=7) as p:
        yield p


def client(s3: S3, endpoint: str, read_timeout: float = 60):
    return boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1",
                        aws_access_key_id=s3.key_id, aws_secret_access_key=s3.secret,
                        config=botocore.config.Config(
                            retries={"total_max_attempts": 1, "mode": "standard"},
                            read_timeout=read_timeout, connect_timeout=10))


def stored(s3: S3, key: str) -> bytes | None:
    """The object as the store holds it, asked directly (not through the proxy)."""
    try:
        return client(s3, s3.endpoint).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except botocore.exceptions.ClientError as exc:
        assert exc.response["Error"]["Code"] == "NoSuchKey"
        return None


def test_passes_requests_through_signed_and_whole(s3, proxy):
    c = client(s3, proxy.endpoint)
    body = bytes(range(256)) * 4000  # ~1 MB
    c.put_object(Bucket=BUCKET, Key="through/a.bin", Body=body)
    assert c.get_object(Bucket=BUCKET, Key="through/a.bin")["Body"].read() == body
    assert c.head_object(Bucket=BUCKET, Key="through/a.bin")["ContentLength"] == len(body)
    listed = c.list_objects_v2(Bucket=BUCKET, Prefix="through/")
    assert [o["Key"] for o in listed["Contents"]] == ["through/a.bin"]
    c.delete_object(Bucket=BUCKET, Key="through/a.bin")
    assert stored(s3, "through/a.bin") is None
    assert {op: proxy.seen[op] for op in ("PUT", "GET", "HEAD", "LIST", "DELETE")} == \
        {"PUT": 1, "GET": 1, "HEAD": 1, "LIST": 1, "DELETE": 1}
    assert proxy.report() == {}


def test_a_delta_table_on_s3_is_written_and_read_through_it(s3, proxy):
    """delta-rs (object_store) and pyarrow (the AWS SDK) both talk through it: a commit is a
    conditional put, and the proxy passes its If-None-Match on."""
    lake = Lake(root=s3.root(prefix="through-delta", endpoint=proxy.endpoint))
    lake.write("t", "rec1", pa.table({"a": ["x", "y"]}))
    assert lake.write("t", "rec2", pa.table({"a": ["z"]})) == 2
    assert sorted(lake.read("t")["a"].to_pylist()) == ["x", "y", "z"]
    assert proxy.seen["PUT"] >= 4 and proxy.seen["LIST"] >= 1


@pytest.mark.parametrize(("kind", "code"), [("500", "InternalError"), ("503", "SlowDown")])
def test_errors_are_answered_without_forwarding(s3, proxy, kind, code):
    proxy.set_rules([{"kind": kind, "op": "PUT"}])
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        client(s3, proxy.endpoint).put_object(Bucket=BUCKET, Key=f"err/{kind}", Body=b"x")
    assert raised.value.response["Error"]["Code"] == code
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == int(kind)
    assert stored(s3, f"err/{kind}") is None  # never reached the store
    assert proxy.report() == {f"PUT {kind}": 1}


def test_a_dropped_answer_leaves_the_put_landed(s3, proxy):
    """The store took the object; its answer is cut mid-way and the connection reset: the
    client cannot tell (the ambiguous put that a retry must not double)."""
    proxy.set_rules([{"kind": "drop", "op": "PUT", "key": r"drop/"}])
    with pytest.raises((botocore.exceptions.ConnectionError,
                        botocore.exceptions.HTTPClientError)):
        client(s3, proxy.endpoint).put_object(Bucket=BUCKET, Key="drop/a", Body=b"landed")
    assert stored(s3, "drop/a") == b"landed"


def test_a_dropped_get_is_cut_mid_body(s3, proxy):
    c = client(s3, proxy.endpoint)
    c.put_object(Bucket=BUCKET, Key="drop/get", Body=b"y" * 100_000)
    proxy.set_rules([{"kind": "drop", "op": "GET"}])
    with pytest.raises((botocore.exceptions.ConnectionError,
                        botocore.exceptions.HTTPClientError,
                        botocore.exceptions.ResponseStreamingError)):
        c.get_object(Bucket=BUCKET, Key="drop/get")["Body"].read()


def test_a_timeout_answers_nothing_after_forwarding(s3, proxy):
    """The client gives up first (its read timeout is shorter than the fault's hold); the
    store has the object all the same."""
    proxy.set_rules([{"kind": "timeout", "op": "PUT", "seconds": 30}])
    with pytest.raises(botocore.exceptions.ReadTimeoutError):
        client(s3, proxy.endpoint, read_timeout=1).put_object(Bucket=BUCKET, Key="slow/t",
                                                              Body=b"t")
    assert stored(s3, "slow/t") == b"t"


def test_a_slow_answer_is_whole(s3, proxy):
    c = client(s3, proxy.endpoint)
    c.put_object(Bucket=BUCKET, Key="slow/s", Body=b"s" * 5000)
    proxy.set_rules([{"kind": "slow", "op": ("GET", "LIST"), "seconds": 0.5}])
    assert c.get_object(Bucket=BUCKET, Key="slow/s")["Body"].read() == b"s" * 5000
    assert [o["Key"] for o in c.list_objects_v2(Bucket=BUCKET, Prefix="slow/s")["Contents"]] \
        == ["slow/s"]
    assert proxy.report() == {"GET slow": 1, "LIST slow": 1}


def test_a_held_request_names_its_sender_and_waits_for_release(s3, proxy):
    """The caller learns the sender's port (its process is found through /proc/net/tcp) and
    decides: dropped, the object never lands; forwarded, it does."""
    import threading

    proxy.set_rules([{"kind": "hold", "op": "PUT", "key": r"held/"}])
    errors: list[BaseException] = []

    def put(key: str) -> None:
        try:
            client(s3, proxy.endpoint).put_object(Bucket=BUCKET, Key=key, Body=b"h")
        except BaseException as exc:
            errors.append(exc)

    first = threading.Thread(target=put, args=("held/dropped",))
    first.start()
    held = proxy.wait_held(30)
    assert held is not None and held.op == "PUT" and held.key == "held/dropped"
    assert held.client_port > 0
    assert stored(s3, "held/dropped") is None
    proxy.release(held, forward=False)
    first.join(30)
    assert len(errors) == 1 and stored(s3, "held/dropped") is None

    second = threading.Thread(target=put, args=("held/forwarded",))
    second.start()
    held = proxy.wait_held(30)
    assert held is not None and held.key == "held/forwarded"
    proxy.release(held, forward=True)
    second.join(30)
    assert len(errors) == 1 and stored(s3, "held/forwarded") == b"h"


def test_rules_filter_by_operation_key_count_and_window(s3, proxy):
    c = client(s3, proxy.endpoint)
    c.put_object(Bucket=BUCKET, Key="f/keep", Body=b"k")
    proxy.set_rules([{"kind": "500", "op": "GET", "key": r"/hit$", "count": 2},
                     {"kind": "503", "op": "HEAD", "for_s": 0}])  # a window already over
    c.put_object(Bucket=BUCKET, Key="f/hit", Body=b"h")  # a PUT: not matched
    assert c.get_object(Bucket=BUCKET, Key="f/keep")["Body"].read() == b"k"  # other key
    assert c.head_object(Bucket=BUCKET, Key="f/keep")["ContentLength"] == 1  # window over
    for _ in range(2):
        with pytest.raises(botocore.exceptions.ClientError):
            c.get_object(Bucket=BUCKET, Key="f/hit")
    assert c.get_object(Bucket=BUCKET, Key="f/hit")["Body"].read() == b"h"  # count spent
    assert proxy.report() == {"GET 500": 2}


def test_shares_are_drawn_from_the_seed(s3):
    """The same seed and the same requests: the same requests fail."""
    def failures(seed: int) -> list[int]:
        with S3Faults(s3.endpoint, seed=seed) as p:
            p.set_rules([{"kind": "503", "op": "HEAD", "share": 0.5}])
            c = client(s3, p.endpoint)
            c.put_object(Bucket=BUCKET, Key="share/x", Body=b"x")
            out = []
            for i in range(20):
                try:
                    c.head_object(Bucket=BUCKET, Key="share/x")
                except botocore.exceptions.ClientError:
                    out.append(i)
            return out

    first = failures(3)
    assert first == failures(3) and 0 < len(first) < 20
    assert failures(4) != first


def test_refuses_unknown_kinds_and_operations():
    with pytest.raises(ValueError, match="unknown fault kind"):
        Rule(kind="explode")
    with pytest.raises(ValueError, match="unknown operation"):
        Rule(kind="500", op="PATCH")
    with pytest.raises(ValueError, match="share"):
        Rule(kind="500", share=2)


@pytest.mark.slow  # its fault holds the answer 20 s
def test_a_commit_whose_answer_is_lost_is_not_made_twice(s3, proxy):
    """A commit is a conditional put of `_delta_log/N.json`. When the store took it but its
    answer never came (a timeout, then the connection closed), the writer's client puts it
    again, the store answers 412 (it exists), and the writer takes it for a concurrent
    writer's commit: it commits the same actions again as a later version. If a compaction
    removed the file meanwhile, that second commit adds it back, and its rows are read twice.

    This is what the chaos suite's S3 faults can do to an appended table (landings, checks,
    balance_history). Each write carries a Delta `txn` action of its own id
    (resources/delta.py, `_Once`): the second try conflicts with the first instead, and the
    writer finds its id in the log and answers that version.
    """
    import threading
    import time

    from resources import delta

    through = s3.root(prefix="lost-answer", endpoint=proxy.endpoint)
    direct = s3.root(prefix="lost-answer")
    lake = Lake(root=through)
    for record in ("rec1", "rec2"):
        lake.append("t", {record: pa.table({"a": [f"{record}-x", f"{record}-y"]})})
    landed = lake.version("t")
    proxy.set_rules([{"kind": "timeout", "op": "PUT", "key": r"_delta_log/\d+\.json$",
                      "count": 1, "seconds": 20}])
    done: list = []
    writer = threading.Thread(target=lambda: done.append(
        lake.append("t", {"rec3": pa.table({"a": ["rec3-x", "rec3-y"]})})))
    writer.start()
    committed = f"lost-answer/t/_delta_log/{landed + 1:020d}.json"
    deadline = time.monotonic() + 60
    while stored(s3, committed) is None:  # the store took the commit; its writer waits
        assert time.monotonic() < deadline, "the commit never reached the store"
        time.sleep(0.1)
    delta.compact(Lake(root=direct).table_uri("t"))  # another process, meanwhile
    writer.join(120)
    assert done, "the writer never returned"
    rows = sorted(Lake(root=direct).read("t")["a"].to_pylist())
    assert rows == ["rec1-x", "rec1-y", "rec2-x", "rec2-y", "rec3-x", "rec3-y"]
