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

    @classmethod
    def from_env(cls, environ: os._Environ | dict | None = None) -> Settings:
        """The settings, checked: a value ledgerlake cannot use raises ConfigError."""
        env = os.environ if environ is None else environ
        home = home_from_env(env)
        if (environment := env.get("LEDGERLAKE_ENVIRONMENT", "sandbox")) not in ENVIRONMENTS:
            raise ConfigError(f"LEDGERLAKE_ENVIRONMENT must be one of {ENVIRONMENTS}, "
                              f"not {environment!r}")
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
            timezone=check_zone(env.get("LEDGERLAKE_TIMEZONE", "Africa/Lagos")),
            forget_on_disconnect=_flag("LEDGERLAKE_FORGET_ON_DISCONNECT",
                                       env.get("LEDGERLAKE_FORGET_ON_DISCONNECT", "false")),
        )

    @property
    def warehouse_path(self) -> Path:
        """The warehouse file (always local: the setting takes no object store)."""
        return _local("LEDGERLAKE_WAREHOUSE", self.warehouse)
