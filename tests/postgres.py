"""A private PostgreSQL server for the tests: `initdb` and `pg_ctl` from the machine's
PostgreSQL binaries, a cluster in a temporary folder, on a free loopback port.

As root (CI here), initdb refuses to run, so the cluster belongs to the `postgres` system user
(the Debian packages make it) and its commands run as that user through `runuser`. Where no
binaries are found, `require_bin` fails the test with one line saying how to install them (a
test that cannot run fails; it never skips).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import pytest

INSTALL = ("PostgreSQL's server binaries (initdb, pg_ctl) were not found: install them "
           "(Debian: apt-get install -y postgresql-15) or set LEDGERLAKE_PG_BIN to their folder")


def find_bin() -> Path | None:
    """The folder holding initdb and pg_ctl, or None."""
    candidates = [os.environ.get("LEDGERLAKE_PG_BIN")]
    candidates += sorted((str(p) for p in Path("/usr/lib/postgresql").glob("*/bin")),
                         reverse=True) if Path("/usr/lib/postgresql").is_dir() else []
    found = shutil.which("initdb")
    if found:
        candidates.append(str(Path(found).parent))
    for folder in filter(None, candidates):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_bin() -> Path:
    """The folder holding initdb and pg_ctl; the calling test fails without them."""
    folder = find_bin()
    if folder is None:
        pytest.fail(INSTALL, pytrace=False)
    return folder


@dataclass
class PostgresServer:
    """One cluster; `url(db)` names a database of it with the superuser's password."""

    bin: Path
    root: Path | None = None  # by default a new folder of the system's temporary folder
    port: int = 0
    password: str = ""

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:  # initdb and the server refuse root
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if check and done.returncode:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def start(self) -> PostgresServer:
        # not under pytest's basetemp: its folders are root's alone, and the server is not root
        self.root = self.root or Path(tempfile.mkdtemp(prefix="ledgerlake-pg-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.password = self.password or secrets.token_hex(12)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--pwfile", str(pwfile),
                  "-A", "scram-sha-256", "--no-sync", "-E", "UTF8", "--locale", "C")
        pwfile.unlink()
        return self.resume()

    def resume(self) -> PostgresServer:
        """Start (again) the cluster already made, on the same port."""
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
                " -c max_connections=200 -c fsync=on")
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"),
                  "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def remove(self) -> None:
        """Stop the server and delete its folder."""
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/{db}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; its URL."""
        name = f"{prefix}_{secrets.token_hex(6)}"
        con = psycopg2.connect(self.url())
        try:
            con.autocommit = True
            con.cursor().execute(f'create database "{name}"')
        finally:
            con.close()
        return self.url(name)


def pg_env(url: str) -> dict[str, str]:
    """deploy/dagster.yaml's variables for a postgresql:// URL."""
    parts = urlsplit(url)
    return {"DAGSTER_PG_HOST": parts.hostname, "DAGSTER_PG_PORT": str(parts.port),
            "DAGSTER_PG_USER": parts.username, "DAGSTER_PG_PASSWORD": parts.password,
            "DAGSTER_PG_DB": parts.path.lstrip("/")}
