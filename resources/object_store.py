"""How the lake's files are reached where they live: a local folder or `s3://bucket/prefix`.

One root (`s3://bucket/prefix?endpoint_override=host:port&scheme=http&region=...`) gives
delta-rs its storage options, pyarrow its filesystem and DuckDB (through pyarrow's S3 client,
not its httpfs extension, which it would download) the same store and credentials. These come
from the AWS environment variables at each call, never from a URI, a message or a repr.
"""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, urlsplit

import pyarrow.fs as pafs

from .config import S3_OPTIONS  # the query keys an s3:// root may hold

_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL")
CHECK_TIMEOUT_S = 5.0  # the access check's connect and request timeouts: an answer, or a cause

# pyarrow's S3 errors read "... AWS Error <CODE> during <Operation> operation: ..."
_AWS_ERROR = re.compile(r"AWS Error ([A-Z_]+) during (\w+)")
_DENIED = {"ACCESS_DENIED", "SIGNATURE_DOES_NOT_MATCH", "INVALID_ACCESS_KEY_ID",
           "INVALID_CLIENT_TOKEN_ID", "EXPIRED_TOKEN", "MISSING_AUTHENTICATION_TOKEN",
           "UNRECOGNIZED_CLIENT"}
_UNREACHABLE = {"NETWORK_CONNECTION", "REQUEST_TIMEOUT", "SERVICE_UNAVAILABLE",
                "ENDPOINT_RESOLUTION_FAILURE"}


# how the store's failures read, through pyarrow's client, delta-rs's or a DuckDB query
_FAILED = re.compile(r"AWS Error \w+ during \w+ operation.*|Generic S3 error.*|S3 error:.*")


def failure_of(message: str) -> str | None:
    """The store's own words for its failure in `message` (a DuckDB error can hold a whole
    Python traceback), on one line; None when the store is not what failed."""
    found = _FAILED.findall(message)
    return found[-1].strip() if found else None


class LakeUnreachable(OSError):
    """The lake's store did not answer, or refused these credentials; the message says which,
    in one line, without any secret."""


def shown(uri: str) -> str:
    """The URI as messages show it: without its query."""
    return uri.split("?", 1)[0]


def where(uri: str) -> tuple[str, dict | None]:
    """delta-rs's location and storage options: S3 settings from the URI's query and the AWS
    environment (credentials only from there)."""
    if "://" not in uri:
        return os.path.abspath(uri), None
    parts = urlsplit(uri)
    if parts.scheme != "s3":
        raise ValueError(f"unsupported lake location {shown(uri)}: a path or s3:// only")
    query = dict(parse_qsl(parts.query))
    if unknown := sorted(set(query) - S3_OPTIONS):
        raise ValueError(f"unknown options in the s3 URI: {unknown} (credentials come from "
                         "the AWS environment variables)")
    options = {k: os.environ[k] for k in _ENV if os.environ.get(k)}
    if region := os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"):
        options["AWS_REGION"] = region
    if endpoint := query.get("endpoint_override"):
        if "://" not in endpoint:
            endpoint = f"{query.get('scheme', 'https')}://{endpoint}"
        options["AWS_ENDPOINT_URL"] = endpoint
    if "region" in query:
        options["AWS_REGION"] = query["region"]
    if options.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    return f"s3://{parts.netloc}{parts.path}", options


def filesystem(uri: str, timeout_s: float | None = None) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for `uri` and its path in it (s3: built from the options delta-rs
    is given). With `timeout_s`, each connection and request gives up after that long and
    is not retried (the access check: a cause now, not after the SDK's retries)."""
    location, options = where(uri)
    if "://" not in location:
        return pafs.LocalFileSystem(), location.rstrip("/")
    options = options or {}
    endpoint = urlsplit(options.get("AWS_ENDPOINT_URL", ""))
    limits = {} if timeout_s is None else {
        "connect_timeout": timeout_s, "request_timeout": timeout_s,
        "retry_strategy": pafs.AwsDefaultS3RetryStrategy(max_attempts=1)}
    store = pafs.S3FileSystem(
        access_key=options.get("AWS_ACCESS_KEY_ID"),
        secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
        session_token=options.get("AWS_SESSION_TOKEN"),
        region=options.get("AWS_REGION", "us-east-1"),
        endpoint_override=endpoint.netloc or None, scheme=endpoint.scheme or "https", **limits)
    return store, location.removeprefix("s3://").rstrip("/")


def check(uri: str, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Raise LakeUnreachable unless an s3:// lake's store answers a listing of its prefix with
    these credentials and its bucket exists (two small requests; a local lake: nothing to
    do, its folders are made on first write)."""
    if "://" not in uri:
        return
    store, base = filesystem(uri, timeout_s=timeout_s)
    bucket = base.split("/", 1)[0]
    endpoint = _endpoint_shown(where(uri)[1] or {})
    try:
        # a listing proves the credentials (HeadBucket only answers 403, whatever is wrong)
        store.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        missing = store.get_file_info(bucket).type == pafs.FileType.NotFound
    except OSError as exc:
        raise LakeUnreachable(_cause(str(exc), endpoint, timeout_s)) from None
    if missing:
        raise LakeUnreachable(f"the bucket {bucket!r} does not exist at {endpoint} "
                              "(ledgerlake does not create buckets)")


def _endpoint_shown(options: Mapping[str, str]) -> str:
    url = urlsplit(options.get("AWS_ENDPOINT_URL", ""))
    return f"{url.scheme}://{url.netloc.rpartition('@')[2]}" if url.netloc else "AWS S3"


def _cause(error: str, endpoint: str, timeout_s: float) -> str:
    """One line for an S3 error: what went wrong and what to check, never the request's
    details (ids, signatures)."""
    match = _AWS_ERROR.search(error)
    code = match.group(1) if match else ""
    if code in _DENIED:
        return (f"{endpoint} refused the credentials ({code}): check AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) and the key's S3 permissions")
    if code in _UNREACHABLE or "curlCode" in error:
        why = "timed out" if "curlCode: 28" in error else "could not connect"
        return (f"{endpoint} did not answer ({why}, {timeout_s:g} s allowed): check the "
                "endpoint (the lake URI's endpoint_override, AWS_ENDPOINT_URL) and the network")
    if code == "NO_SUCH_BUCKET":
        return f"the bucket does not exist at {endpoint} (ledgerlake does not create buckets)"
    detail = error.split(" (Request ID", 1)[0]
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):  # never echoed, but never shown
        if secret := os.environ.get(var):
            detail = detail.replace(secret, "***")
    return f"{endpoint} answered {code or 'an error'}: {detail}"


def absent(uri: str, files: Iterable[str]) -> list[str]:
    """Which of a table's data files (absolute, as `resources.delta.files` names them) are
    no longer in the store: one listing of the table, not a request per file."""
    if not (files := list(files)):
        return []
    store, base = filesystem(uri)
    if isinstance(store, pafs.LocalFileSystem):
        return [f for f in files if not os.path.exists(f.removeprefix("file://"))]
    present = {i.path for i in store.get_file_info(
        pafs.FileSelector(base, recursive=True, allow_not_found=True))}
    return [f for f in files if f.removeprefix("s3://") not in present]


def connect(database: str = ":memory:", lake_root: str | None = None, *,
            read_only: bool = False, config: Mapping[str, str] | None = None):
    """A DuckDB connection that reads the lake's files: with an s3:// `lake_root`, `s3://`
    paths (the warehouse's views name them) go through pyarrow's S3 client, with the lake's
    endpoint and the AWS environment's credentials. Every connection that opens the
    warehouse is made here: the registration is the connection's, not the file's."""
    import duckdb

    con = duckdb.connect(database, read_only=read_only, config=dict(config or {}))
    if lake_root is not None and lake_root.startswith("s3://"):
        try:
            # its protocol is pyarrow's type name, "s3": DuckDB hands it every s3:// path
            con.register_filesystem(duckdb_filesystem(lake_root))
        except BaseException:
            con.close()
            raise
    return con


def duckdb_filesystem(lake_root: str):
    """The fsspec filesystem DuckDB reads an s3:// lake's files through: pyarrow's S3 client,
    each file read as `LakeFile` reads it, a file removed under a query (an erasure's purge)
    said as FileNotFoundError."""
    from fsspec.implementations.arrow import ArrowFSWrapper

    class LakeFiles(ArrowFSWrapper):
        def modified(self, path):
            # fsspec gives None for a file that is gone, and DuckDB then fails with
            # "'NoneType' object has no attribute 'timestamp'", which names no file
            if (when := super().modified(path)) is None:
                raise FileNotFoundError(f"No such file: {path} (removed from the lake)")
            return when

        def _open(self, path, mode="rb", block_size=None, seekable=True, **kwargs):
            if mode != "rb" or not seekable:
                return super()._open(path, mode, block_size, seekable, **kwargs)
            return LakeFile(self.fs.open_input_file(path), path)

    store, _ = filesystem(lake_root)
    return LakeFiles(store, skip_instance_cache=True)


class LakeFile(io.RawIOBase):
    """A lake file as DuckDB reads it through fsspec: positioned per thread, each read whole.

    DuckDB reads at a place in two calls, a seek and then a read, and its threads share a
    file's handle: with one position, a thread read where another had just sought (queries
    failed with "invalid TType" or "ZSTD Decompression failure", 5 in 30 over a file of many
    row groups), and nothing says a wrong place cannot parse. A read that comes back short
    before the end of the file is finished, or fails: DuckDB would use the bytes it lacks."""

    def __init__(self, stream, path: str) -> None:
        super().__init__()
        self.stream, self.path, self.size = stream, path, stream.size()
        self._at = threading.local()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return getattr(self._at, "position", 0)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self.tell(), io.SEEK_END: self.size}[whence]
        self._at.position = start + offset
        return self._at.position

    def read(self, size: int | None = -1) -> bytes:
        at = self.tell()
        left = max(self.size - at, 0)
        wanted = left if size is None or size < 0 else min(size, left)
        parts, got = [], 0
        while got < wanted:
            part = self.stream.read_at(wanted - got, at + got)
            if not part:
                raise OSError(f"S3 error: the store's answer to a read of {self.path} ended "
                              f"after {got} of {wanted} bytes at {at}; ask again")
            parts.append(part)
            got += len(part)
        self._at.position = at + got
        return b"".join(parts)

    def close(self) -> None:
        self.stream.close()
        super().close()
