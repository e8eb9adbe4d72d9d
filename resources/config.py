"""Where ledgerlake keeps its data and which service it talks to, from the environment.

Every location defaults under LEDGERLAKE_HOME (default `./data`, made absolute at load), so
the demo, the Dagster UI and `ledgerlake sql` run from the repository root share one lake.
A location is a plain path (made absolute) or a URI of a scheme the project writes today, kept
as given: the lake a path, `file://` or `s3://`; the inbox a path, `file://` (SQLite) or a
Postgres URL; the warehouse and the home a path or `file://`. Anything else, and an `s3://`
lake that does not answer (`check_lake`), is a ConfigError naming the variable, at load.
"""

from __future__ import annotations

import os
import re
import zoneinfo
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit
from urllib.request import url2pathname

ENVIRONMENTS = ("sandbox", "production")

# `scheme:` of two letters or more: one letter is a Windows drive, not a URI
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
# object stores pyarrow and DuckDB know, which the project may learn to write
_LATER = {"gs", "gcs", "az", "abfs", "abfss", "adl", "hdfs", "r2"}
# S3's bucket naming rules (no port, no upper case, 3 to 63 characters)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# the query options the lake honours (resources/object_store.py hands them to delta-rs and
# pyarrow alike); credentials are not among them. pyarrow's URI parser takes more, which the
# lake's writes would refuse: refused here, at load, instead
S3_OPTIONS = frozenset({"region", "scheme", "endpoint_override"})

LOCAL = ("file",)
LAKE = ("file", "s3")
DATABASE = ("postgresql", "postgres")


PRIVATE = 0o077  # the umask: directories ledgerlake makes are 0700, its files 0600


def keep_files_private() -> None:
    """Make what this process creates its user's alone: the data home, the inbox, the lake,
    the warehouse, the key, logs. A process-wide umask, since SQLite, DuckDB, delta-rs and
    pyarrow each create files of their own; every entry point calls it (the command line,
    the Dagster code location, and so each run it launches)."""
    os.umask(PRIVATE)


class ConfigError(ValueError):
    """A setting ledgerlake cannot use; the message names the variable and what it takes."""


def _shown(value: str) -> str:
    """The value as an error may repeat it: no user:password@ and no query values, which
    are where a URI could carry a secret."""
    match = _SCHEME.match(value)
    if not match or not value[match.end():].startswith("//"):
        return value
    parts = urlsplit(value)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}" + ("?..." if parts.query else "")


def location(var: str, value: str, schemes: tuple[str, ...]) -> str:
    """`value` checked as a location `var` may hold: a plain path made absolute, or a URI of
    one of `schemes` kept as given. Raises ConfigError otherwise."""
    forms = ["a local path", *(f"{s}://" for s in schemes)]
    accepted = ", ".join(forms[:-1]) + " or " + forms[-1]

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{var}={_shown(value)}: {why}; use {accepted}")

    if not value.strip():
        raise ConfigError(f"{var} is set but empty; unset it for the default, or use "
                          f"{accepted}")
    if value != value.strip():
        raise refuse("it starts or ends with white space")
    if not (match := _SCHEME.match(value)):
        return str(Path(value).resolve())
    scheme = match.group(1).lower()
    if not value[match.end():].startswith("//"):
        raise refuse(f"'{scheme}:' without '//' is neither a URI nor a plain path "
                     "(write ./ before a relative path that holds a colon)")
    if scheme not in schemes:
        yet = " yet" if scheme in _LATER or scheme == "s3" else ""
        raise refuse(f"the {scheme}:// scheme is not supported{yet}")
    parts = urlsplit(value)
    if "@" in parts.netloc:
        raise refuse("credentials do not belong in the URI (the AWS_* environment variables "
                     "hold them)")
    if parts.fragment:
        raise refuse("a URI here has no #fragment")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise refuse(f"file:// names a file on this machine, not on {parts.netloc!r}")
        if not parts.path.startswith("/") or parts.query:
            raise refuse("a file:// URI is file:///absolute/path, without a query")
    elif scheme == "s3":
        if not parts.netloc:
            raise refuse("s3:// needs a bucket: s3://bucket/prefix")
        if not _BUCKET.fullmatch(parts.netloc):
            raise refuse(f"{parts.netloc!r} is not an S3 bucket name (3 to 63 characters: "
                         "a-z, 0-9, '.', '-')")
        try:
            keys = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True,
                                            strict_parsing=True)] if parts.query else []
        except ValueError:
            raise refuse("its query is not key=value&...") from None
        if unknown := sorted(set(keys) - S3_OPTIONS):
            raise refuse(f"unknown S3 option {unknown[0]!r} (options: "
                         f"{', '.join(sorted(S3_OPTIONS))})")
    return scheme + value[match.end(1):]


def local_path(value: str) -> Path | None:
    """The local path of a checked location (a plain path or `file://`), or None when it
    is in object storage."""
    if not (match := _SCHEME.match(value)):
        return Path(value)
    return Path(url2pathname(urlsplit(value).path)) if match.group(1).lower() == "file" else None


def check_lake(lake: str) -> None:
    """A ConfigError, one line naming LEDGERLAKE_LAKE and the cause, unless an s3:// lake's
    store answers with the AWS environment's credentials (a local lake: nothing to check)."""
    if local_path(lake) is not None:
        return
    from resources.object_store import LakeUnreachable, check

    try:
        check(lake)
    except (LakeUnreachable, ValueError) as exc:
        raise ConfigError(f"LEDGERLAKE_LAKE={_shown(lake)}: the lake cannot be reached: "
                          f"{exc}") from None


def _local(var: str, value: str) -> Path:
    """A location that can only be local, as a Path."""
    return local_path(location(var, value, LOCAL))


class DatabaseURL(str):
    """A database URL: whole where it connects, without its password where it is shown."""

    def __repr__(self) -> str:
        return repr(_shown(self))


def _inbox(value: str) -> Path | DatabaseURL:
    """LEDGERLAKE_INBOX: a SQLite file (a path or file://), or a Postgres URL kept as given,
    with its credentials (or without them: libpq reads PGPASSWORD and ~/.pgpass)."""
    var = "LEDGERLAKE_INBOX"
    match = _SCHEME.match(value)
    if not (match and match.group(1).lower() in DATABASE and value[match.end():].startswith("//")):
        checked = location(var, value, LOCAL + DATABASE)  # refuses anything else, in its words
        return _local(var, checked)
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 (read for its check)
    except ValueError:
        raise ConfigError(f"{var}={_shown(value)}: its port is not a number from 0 to "
                          "65535") from None
    if parts.fragment or value != value.strip():
        raise ConfigError(f"{var}={_shown(value)}: a Postgres URL is "
                          "postgresql://user:password@host:port/database, without #fragment "
                          "or white space")
    return DatabaseURL(value)


def inbox_from_env(environ: os._Environ | dict | None = None) -> Path | DatabaseURL:
    """LEDGERLAKE_INBOX (default $LEDGERLAKE_HOME/inbox.sqlite3), checked."""
    env = os.environ if environ is None else environ
    return _inbox(env.get("LEDGERLAKE_INBOX", str(home_from_env(env) / "inbox.sqlite3")))


def check_zone(value: str) -> str:
    """An IANA time zone name (what the warehouse buckets days and months in)."""
    try:
        zoneinfo.ZoneInfo(value)  # refuses empty names and paths ("../..") itself
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ConfigError(f"LEDGERLAKE_TIMEZONE={value!r:.60} is not a time zone: use an IANA "
                          "name such as Africa/Lagos or UTC") from None
    return value


def _flag(var: str, value: str) -> bool:
    """true/false (also 1/0, yes/no, on/off, any case)."""
    words = {"true": True, "1": True, "yes": True, "on": True,
             "false": False, "0": False, "no": False, "off": False}
    if value.strip().lower() not in words:
        raise ConfigError(f"{var}={value!r:.40} is not true or false")
    return words[value.strip().lower()]


def _number(var: str, value: str, lo: float, hi: float, kind: type = float) -> float:
    """A number from `lo` to `hi` (an int when `kind` is int)."""
    try:
        number = kind(value.strip())
    except ValueError:
        number = None
    if number is None or number != number or not lo <= number <= hi:
        what = "a number" if kind is float else "an integer"
        raise ConfigError(f"{var}={value!r:.40} is not {what} from {lo:g} to {hi:g}")
    return number


class SecretURL(str):
    """A URL whose path or query is a credential (a Slack incoming webhook's is): whole where
    it is called, only its scheme and host where it is shown."""

    def __repr__(self) -> str:
        return repr(self.shown)

    @property
    def shown(self) -> str:
        parts = urlsplit(self)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/..."


def _http_url(var: str, value: str | None, *, secret: bool = False) -> str | None:
    """An http(s) URL, or None when unset or empty."""
    if value is None or not value.strip():
        return None
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        shown = f"{parts.scheme}://..." if secret else repr(value)[:60]
        raise ConfigError(f"{var}={shown} is not an http:// or https:// URL")
    return SecretURL(value.strip()) if secret else value.strip().rstrip("/")


ALERT_FORMATS = ("slack", "json")


@dataclass(frozen=True)
class Alerting:
    """Where alerts go and when they fire (pipeline/alerts.py; docs/operations.md, "Alerts
    and metrics")."""
    url: SecretURL | None = None  # LEDGERLAKE_ALERT_URL: none, alerts only in the sensor's log
    format: str = "slack"  # slack: {"text"}; json: the text and the incident's fields
    quiet_minutes: float = 1500.0  # no callback this long while records are connected
    backlog_minutes: float = 15.0  # the oldest callback the sensor has not read
    max_per_hour: int = 20  # messages sent in any hour; the rest wait their turn
    receiver_url: str | None = None  # whose /health the sensor checks (none: not checked)
    dagster_url: str = "http://127.0.0.1:3000"  # the UI, for the links in alerts

    @classmethod
    def from_env(cls, env) -> Alerting:
        if (fmt := env.get("LEDGERLAKE_ALERT_FORMAT", "slack").strip().lower()) \
                not in ALERT_FORMATS:
            raise ConfigError(f"LEDGERLAKE_ALERT_FORMAT must be one of {ALERT_FORMATS}, "
                              f"not {fmt!r:.40}")
        return cls(
            url=_http_url("LEDGERLAKE_ALERT_URL", env.get("LEDGERLAKE_ALERT_URL"),
                          secret=True),
            format=fmt,
            quiet_minutes=_number("LEDGERLAKE_ALERT_QUIET_MINUTES",
                                  env.get("LEDGERLAKE_ALERT_QUIET_MINUTES", "1500"), 1, 1e6),
            backlog_minutes=_number("LEDGERLAKE_ALERT_BACKLOG_MINUTES",
                                    env.get("LEDGERLAKE_ALERT_BACKLOG_MINUTES", "15"), 1, 1e6),
            max_per_hour=int(_number("LEDGERLAKE_ALERT_MAX_PER_HOUR",
                                     env.get("LEDGERLAKE_ALERT_MAX_PER_HOUR", "20"), 1, 3600,
                                     int)),
            receiver_url=_http_url("LEDGERLAKE_RECEIVER_URL", env.get("LEDGERLAKE_RECEIVER_URL")),
            dagster_url=_http_url("LEDGERLAKE_DAGSTER_URL", env.get("LEDGERLAKE_DAGSTER_URL"))
            or cls.dagster_url,
        )


_WHOLE = re.compile(r"[0-9]{1,9}")


def _whole(env, var: str, default: int, lo: int, hi: int) -> int:
    """A whole number from `lo` to `hi` (digits only: no sign, space or unit), or the default
    when unset."""
    if (raw := env.get(var)) is None:
        return default
    if not _WHOLE.fullmatch(raw) or not lo <= int(raw) <= hi:
        raise ConfigError(f"{var} must be a whole number from {lo} to {hi}, not {raw!r:.40} "
                          f"(unset it for the default, {default})")
    return int(raw)


@dataclass(frozen=True)
class Tuning:
    """How the pipeline paces itself (docs/operations.md, "Settings"). Read once, with the
    other settings, when pipeline/definitions.py loads (each run's process loads it too), and
    handed on from there: to the assets as the `tuning` resource, to the nightly schedule as
    its clock, and to the products' retry policy as its first wait (assets/publish.py,
    FetchRetry). A test hands in the Tuning it wants."""
    retry_delay_s: float = 30.0  # the engine's first wait before a failed step tries again
    reconcile_days: int = 7  # each record pulled whole once every so many days (0: never)
    chart_records: int = 5  # a run draws charts when it lands at most this many (0: never)
    retention_hours: int = 168  # how long the lake keeps files a newer version superseded
    # the size compaction writes files up to: a record's refresh rewrites the whole file that
    # holds it, and the daily refresh refreshes every record, so files stay as small as a
    # streamed write's (docs/lake.md)
    target_mb: int = 32
    cluster_max_mb: int = 4096  # the largest table compaction re-sorts whole (0: none)
    timezone: str = "Africa/Lagos"  # the customers' days, and the nightly maintenance's clock

    @classmethod
    def from_env(cls, environ: os._Environ | dict | None = None) -> Tuning:
        env = os.environ if environ is None else environ
        return cls(
            retry_delay_s=_number("LEDGERLAKE_RETRY_DELAY_S",
                                  env.get("LEDGERLAKE_RETRY_DELAY_S", "30"), 0, 3600),
            reconcile_days=_whole(env, "LEDGERLAKE_RECONCILE_DAYS", 7, 0, 366),
            chart_records=_whole(env, "LEDGERLAKE_CHART_RECORDS", 5, 0, 100),
            retention_hours=_whole(env, "LEDGERLAKE_LAKE_RETENTION_HOURS", 168, 1, 87600),
            target_mb=_whole(env, "LEDGERLAKE_LAKE_TARGET_MB", 32, 1, 4096),
            cluster_max_mb=_whole(env, "LEDGERLAKE_LAKE_CLUSTER_MAX_MB", 4096, 0, 2**20),
            timezone=check_zone(env.get("LEDGERLAKE_TIMEZONE", cls.timezone)))


def home_from_env(environ: os._Environ | dict | None = None) -> Path:
    """LEDGERLAKE_HOME (default `./data`), checked and absolute."""
    env = os.environ if environ is None else environ
    return _local("LEDGERLAKE_HOME", env.get("LEDGERLAKE_HOME", "data"))


@dataclass(frozen=True)
class Settings:
    home: Path
    lake: str            # an absolute path, file:// or s3://, as given (local_path() splits)
    warehouse: str       # an absolute path or file://: DuckDB writes it locally
    inbox: Path | DatabaseURL  # a SQLite file, or a Postgres database
    api_url: str
    environment: str
    timezone: str = "Africa/Lagos"  # the customers' days and months in the views
    forget_on_disconnect: bool = False  # erase a record's data at USER_DISCONNECT
    alerting: Alerting = Alerting()  # the LEDGERLAKE_ALERT_* settings
    tuning: Tuning = Tuning()  # retries, reconciling, charts, the lake's upkeep
    code_url: str | None = None  # the repository's web view, for the UI's source links
    code_branch: str = "main"

    @classmethod
    def from_env(cls, environ: os._Environ | dict | None = None) -> Settings:
        """The settings, checked: a value ledgerlake cannot use raises ConfigError."""
        env = os.environ if environ is None else environ
        home = home_from_env(env)
        if (environment := env.get("LEDGERLAKE_ENVIRONMENT", "sandbox")) not in ENVIRONMENTS:
            raise ConfigError(f"LEDGERLAKE_ENVIRONMENT must be one of {ENVIRONMENTS}, "
                              f"not {environment!r}")
        tuning = Tuning.from_env(env)
        return cls(
            home=home,
            lake=location("LEDGERLAKE_LAKE", env.get("LEDGERLAKE_LAKE", str(home / "lake")),
                          LAKE),
            warehouse=location("LEDGERLAKE_WAREHOUSE",
                               env.get("LEDGERLAKE_WAREHOUSE", str(home / "warehouse.duckdb")),
                               LOCAL),
            inbox=inbox_from_env(env),
            api_url=env.get("LEDGERLAKE_API_URL", "http://127.0.0.1:8765"),
            environment=environment,
            timezone=tuning.timezone,
            forget_on_disconnect=_flag("LEDGERLAKE_FORGET_ON_DISCONNECT",
                                       env.get("LEDGERLAKE_FORGET_ON_DISCONNECT", "false")),
            alerting=Alerting.from_env(env),
            tuning=tuning,
            code_url=_web_url("LEDGERLAKE_CODE_URL", env.get("LEDGERLAKE_CODE_URL") or None),
            code_branch=env.get("LEDGERLAKE_CODE_BRANCH") or "main",
        )

    @property
    def warehouse_path(self) -> Path:
        """The warehouse file (always local: the setting takes no object store)."""
        return _local("LEDGERLAKE_WAREHOUSE", self.warehouse)


def _web_url(name: str, value: str | None) -> str | None:
    """An http(s) URL with a host, or None when unset."""
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{name}={value!r} is not a web URL (https://host/owner/repo)")
    return value
