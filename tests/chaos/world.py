"""The chaos suite's world (tests/chaos/run.py): every process it runs, and how it finds, kills and
restarts them.

One sandbox serves both of the service's environments. Each environment has its own
deployment of the pipeline, as a customer would run one per secret key:

- `production` (/v2/, the live key): the production profile. Dagster's instance on Postgres
  (deploy/dagster.yaml: queued runs, each launched in its own process, run monitoring and run
  retries), the inbox on Postgres behind two receivers that the sandbox's webhook goes round,
  the lake on S3 (moto's server, tests/s3.py) reached through a fault-injecting proxy
  (tests/s3_faults.py), and LEDGERLAKE_FORGET_ON_DISCONNECT=true (a USER_DISCONNECT erases
  the record);
- `sandbox` (/sandbox/v2/, the test key): the embedded default (the top-level dagster.yaml,
  SQLite instance and inbox, one receiver), with its runs also launched in their own processes
  by the daemon.

Each has its own lake (a folder, or a prefix of the bucket) and warehouse file. The suite
itself reads the S3 lake straight from moto, past the proxy (`Deployment.store_root`): its
checks see the store, not the faults. Every process a deployment starts carries
`LEDGERLAKE_CHAOS=<run>-<deployment>` in its environment, inherited by the daemon's code server
and the runs it launches: that mark (read from /proc) is how runs are found to be killed, and
how the world ends exactly the processes it started, never another user's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MARK = "LEDGERLAKE_CHAOS"


# -- processes, from /proc -------------------------------------------------------------------

@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    cmd: str
    kind: str  # daemon, code_server, run, worker, receiver, other


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone, or not ours
        return b""


def processes(mark: str) -> list[Proc]:
    """The live processes whose environment carries `MARK=mark`, each with its kind: the
    daemon, its code server, the runs the code server launched (spawned processes) and their
    forked workers."""
    needle = f"{MARK}={mark}".encode()
    found: dict[int, tuple[int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        if needle not in _read(f"/proc/{entry.name}/environ").split(b"\0"):
            continue
        stat = _read(f"/proc/{entry.name}/stat").decode(errors="replace")
        if not stat or stat[stat.rfind(")") + 2:][:1] in ("Z", "X"):
            continue  # a zombie is dead already
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        cmd = _read(f"/proc/{entry.name}/cmdline").replace(b"\0", b" ").decode(errors="replace")
        found[int(entry.name)] = (ppid, cmd)

    def kind(pid: int) -> str:
        ppid, cmd = found[pid]
        if "dagster-daemon" in cmd:
            return "daemon"
        if " api grpc" in cmd or "code-server" in cmd:
            return "code_server"
        if "pipeline.cli receiver" in cmd:
            return "receiver"
        if "spawn_main" in cmd and "resource_tracker" not in cmd:
            parent = found.get(ppid, (0, ""))[1]
            return "run" if (" api grpc" in parent or "code-server" in parent) else "worker"
        return "other"

    return [Proc(pid, found[pid][0], found[pid][1], kind(pid)) for pid in found]


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in os.scandir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(fd.path)
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


def talking_to(pids: list[int], port: int) -> list[int]:
    """Those of `pids` with an established TCP connection to 127.0.0.1:`port`."""
    inodes = set()
    for line in _read("/proc/net/tcp").decode().splitlines()[1:]:
        cols = line.split()
        remote, state, inode = cols[2], cols[3], cols[9]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            inodes.add(inode)
    return [p for p in pids if _socket_inodes(p) & inodes]


def sending_from(pids: list[int], local_port: int, remote_port: int) -> list[int]:
    """Those of `pids` that own the TCP connection from 127.0.0.1:`local_port` to
    127.0.0.1:`remote_port` (a request the S3 proxy holds names its sender's port)."""
    inodes = set()
    for line in _read("/proc/net/tcp").decode().splitlines()[1:]:
        cols = line.split()
        local, remote, inode = cols[1], cols[2], cols[9]
        if int(local.split(":")[1], 16) == local_port and \
                int(remote.split(":")[1], 16) == remote_port:
            inodes.add(inode)
    return [p for p in pids if _socket_inodes(p) & inodes] if inodes else []


def holding(pids: list[int], path: Path) -> list[int]:
    """Those of `pids` that have `path` open."""
    target = str(path)
    out = []
    for pid in pids:
        try:
            fds = list(os.scandir(f"/proc/{pid}/fd"))
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd.path) == target:
                    out.append(pid)
                    break
            except OSError:
                continue
    return out


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# -- file creation, as it happens (inotify) ----------------------------------------------------

IN_CREATE, IN_MOVED_TO = 0x100, 0x80
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


class Watch:
    """inotify on some folders: the names created in them, as they are created. Polling would
    miss a data file that lives for milliseconds before its commit."""

    def __init__(self, folders: list[Path]) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.folders: dict[int, Path] = {}
        for folder in folders:
            self.add(folder)

    def add(self, folder: Path) -> None:
        """Watch one more folder (again: no change)."""
        if folder in self.folders.values():
            return
        wd = _libc.inotify_add_watch(self.fd, str(folder).encode(), IN_CREATE | IN_MOVED_TO)
        if wd >= 0:
            self.folders[wd] = folder

    def created(self, timeout_s: float) -> list[Path]:
        """Paths created since the last call, waiting at most `timeout_s` for the first."""
        import select

        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if not ready:
            return []
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        out, at = [], 0
        while at < len(data):
            wd, _mask, _cookie, size = struct.unpack_from("iIII", data, at)
            name = data[at + 16: at + 16 + size].rstrip(b"\0").decode()
            at += 16 + size
            if wd in self.folders and name:
                out.append(self.folders[wd] / name)
        return out

    def close(self) -> None:
        os.close(self.fd)


# -- a deployment of the pipeline --------------------------------------------------------------

def chaos_instance_yaml(source: Path) -> str:
    """The shipped instance file, with one change: two runs at a time per deployment (two
    deployments share this machine's two cores; at four each, eight runs' processes thrash)."""
    text = source.read_text()
    assert "max_concurrent_runs: 4" in text
    return text.replace("max_concurrent_runs: 4", "max_concurrent_runs: 2")


@dataclass
class Deployment:
    """One environment's pipeline: receivers, daemon (with its code server and runs), inbox,
    Dagster instance, lake and warehouse under `home`."""

    name: str            # the service environment it reads: production or sandbox
    profile: str         # postgres or embedded
    home: Path
    mark: str
    settings: dict[str, str]   # LEDGERLAKE_* and DAGSTER_* of its processes
    receiver_count: int
    secrets: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    receivers: list = field(default_factory=list)   # pipeline.local.Server or None when down
    daemon: subprocess.Popen | None = None
    direct_root: str | None = None  # an S3 lake as the suite reads it: moto, not the proxy

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, **self.settings, MARK: self.mark}

    @property
    def lake_root(self) -> str:
        """The lake as the deployment's processes reach it (an S3 lake: through the proxy)."""
        return self.settings["LEDGERLAKE_LAKE"]

    @property
    def store_root(self) -> str:
        """The lake as the suite's checks read it (an S3 lake: straight from the store)."""
        return self.direct_root or self.lake_root

    @property
    def on_s3(self) -> bool:
        return self.lake_root.startswith("s3://")

    @property
    def lake(self) -> Path:
        """A local lake's folder."""
        assert not self.on_s3, f"{self.name}'s lake is on S3"
        return Path(self.lake_root)

    def store(self):
        """The lake, read by the suite (resources.lake.Lake over `store_root`)."""
        from resources.lake import Lake

        return Lake(root=self.store_root)

    @property
    def warehouse(self) -> Path:
        return Path(self.settings["LEDGERLAKE_WAREHOUSE"])

    @property
    def inbox(self) -> str:
        return self.settings["LEDGERLAKE_INBOX"]

    @property
    def dagster_home(self) -> Path:
        return Path(self.settings["DAGSTER_HOME"])

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def callback_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}/callbacks/" for p in self.ports]

    # -- receivers
    def start_receiver(self, i: int) -> None:
        from pipeline.local import Server

        args = ["receiver"] + (["--port", str(self.ports[i])] if i < len(self.ports) else [])
        server = Server(*args, env=self.env, log_path=self.logs / f"receiver-{i}.log").start()
        if i >= len(self.ports):
            self.ports.append(int(server.url.rsplit(":", 1)[1]))
            self.receivers.append(server)
        else:
            self.receivers[i] = server

    def kill_receiver(self, i: int) -> bool:
        server = self.receivers[i]
        if server is None or server.proc.poll() is not None:
            return False
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
        self.receivers[i] = None
        return True

    def receivers_up(self) -> bool:
        for port in self.ports:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code != 200:
                    return False
            except httpx.HTTPError:
                return False
        return True

    # -- the daemon (and with it its code server, which launches the runs)
    def start_daemon(self) -> None:
        log = open(self.logs / "daemon.log", "ab")  # noqa: SIM115
        self.daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")],
            cwd=self.home, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        log.close()

    def kill_daemon(self) -> bool:
        if self.daemon is None or self.daemon.poll() is not None:
            return False
        self.daemon.send_signal(signal.SIGKILL)
        self.daemon.wait()
        self.daemon = None
        return True

    def processes(self, kind: str | None = None) -> list[Proc]:
        return [p for p in processes(self.mark) if kind is None or p.kind == kind]

    @contextmanager
    def instance(self) -> Iterator:
        """Its Dagster instance, read from this process."""
        from dagster import DagsterInstance

        saved = {k: os.environ.get(k) for k in self.settings if k.startswith("DAGSTER_PG")}
        os.environ.update({k: v for k, v in self.settings.items() if k.startswith("DAGSTER_PG")})
        try:
            with DagsterInstance.from_config(str(self.dagster_home)) as instance:
                yield instance
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def cli(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        """A `ledgerlake` command with this deployment's settings."""
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=self.home,
                              env=self.env, capture_output=True, text=True, timeout=timeout_s)

    def stop(self) -> None:
        from pipeline.local import stop_process

        if self.daemon is not None:
            stop_process(self.daemon, timeout_s=20)
        for server in self.receivers:
            if server is not None:
                server.stop()
        # the code servers and runs the daemon left: ours by their mark
        deadline = time.monotonic() + 20
        while (left := self.processes()) and time.monotonic() < deadline:
            signal_all([p.pid for p in left], signal.SIGTERM)
            time.sleep(1)
        signal_all([p.pid for p in self.processes()], signal.SIGKILL)


class World:
    """Postgres, moto's S3 behind the fault proxy, the sandbox (clock frozen: it moves only
    when the suite advances it) and the two deployments, started; `close` ends every process
    it started."""

    def __init__(self, work: Path, *, say=print, seed: int = 0) -> None:
        from tests.conftest import start_sandbox
        from tests.postgres import INSTALL, PostgresServer, find_bin, pg_env
        from tests.s3 import moto_s3
        from tests.s3_faults import S3Faults

        self.work, self.say = work, say
        self.mark = secrets.token_hex(6)
        folder = find_bin()
        if folder is None:
            raise SystemExit(f"chaos: {INSTALL}")
        self.postgres = PostgresServer(folder).start()
        self.postgres_down = False
        self.deployments: dict[str, Deployment] = {}
        self.stack = ExitStack()
        try:
            (work / "moto").mkdir(parents=True, exist_ok=True)
            self.s3 = self.stack.enter_context(moto_s3(work / "moto"))
            self.s3_faults = self.stack.enter_context(S3Faults(self.s3.endpoint, seed=seed))
            # the service's own state (its keys, its webhook tokens) beside the deployments'
            # homes, not in the one named after its environment
            self.sandbox = start_sandbox(work / "service", "--freeze-clock")
            # the harness's own calls (links, removals, payments) wait long: a service busy
            # redelivering an outage's callbacks answered a removal after 30 s, and a change
            # the harness does not know it made breaks its ground truth
            self.api = {"sandbox": self.sandbox.api("sandbox", timeout=300),
                        "production": self.sandbox.api("production", timeout=300)}
            common = {"LEDGERLAKE_API_URL": self.sandbox.url, "LEDGERLAKE_RETRY_DELAY_S": "0.5",
                      "LEDGERLAKE_TIMEZONE": "Africa/Lagos", "PYTHONUNBUFFERED": "1"}
            prod_inbox = self.postgres.create_database("inbox")
            prod_dagster = self.postgres.create_database("dagster")
            aws = {k: v for k, v in self.s3.env().items() if k.startswith("AWS_")}
            self._add("production", "postgres", 2, {
                **common, **pg_env(prod_dagster), "LEDGERLAKE_INBOX": prod_inbox,
                "LEDGERLAKE_SECRET_KEY": self.sandbox.production_key,
                "LEDGERLAKE_LAKE": self.s3.root(prefix="production",
                                                endpoint=self.s3_faults.endpoint),
                "LEDGERLAKE_FORGET_ON_DISCONNECT": "true", **aws},
                [self.postgres.password, self.sandbox.production_key, self.s3.secret],
                direct_root=self.s3.root(prefix="production"))
            self._add("sandbox", "embedded", 1, {
                **common, "LEDGERLAKE_SECRET_KEY": self.sandbox.sandbox_key},
                [self.sandbox.sandbox_key])
        except BaseException:
            self.close()
            raise

    def _add(self, name: str, profile: str, receivers: int, settings: dict[str, str],
             shown: list[str], direct_root: str | None = None) -> None:
        from pipeline.local import one_box_pools

        home = self.work / name
        token = secrets.token_hex(16)
        settings = {"LEDGERLAKE_HOME": str(home), "LEDGERLAKE_LAKE": str(home / "lake"),
                    "LEDGERLAKE_WAREHOUSE": str(home / "warehouse.duckdb"),
                    "LEDGERLAKE_INBOX": str(home / "inbox.sqlite3"),
                    "LEDGERLAKE_ENVIRONMENT": name, "LEDGERLAKE_RECEIVER_TOKEN": token,
                    "DAGSTER_HOME": str(home / "dagster"), **settings}
        dep = Deployment(name, profile, home, f"{self.mark}-{name}", settings, receivers,
                         secrets=[token, *shown], direct_root=direct_root)
        dep.logs.mkdir(parents=True)
        dep.dagster_home.mkdir(parents=True)
        source = ROOT / ("deploy/dagster.yaml" if profile == "postgres" else "dagster.yaml")
        (dep.dagster_home / "dagster.yaml").write_text(chaos_instance_yaml(source))
        self.deployments[name] = dep
        with dep.instance() as instance:
            one_box_pools(instance)  # the service's pool: a slot per run that may run at once
        for i in range(receivers):
            dep.start_receiver(i)
        self.api[name].post("settings/webhook", json={
            "url": dep.callback_urls if receivers > 1 else dep.callback_urls[0],
            "token": token}).raise_for_status()
        dep.start_daemon()

    @property
    def secrets(self) -> list[str]:
        return [s for d in self.deployments.values() for s in d.secrets]

    def close(self) -> None:
        for dep in self.deployments.values():
            try:
                dep.stop()
            except Exception as exc:  # keep closing the rest
                self.say(f"stopping {dep.name}: {exc}")
        for api in getattr(self, "api", {}).values():
            api.close()
        if getattr(self, "sandbox", None) is not None:
            self.sandbox.server.stop()
        self.stack.close()
        self.postgres.remove()

    # -- Postgres, stopped hard and started again
    def stop_postgres(self) -> None:
        """Stop the cluster at once (`pg_ctl -m immediate`: no clean shutdown, as a crash)."""
        self.postgres.stop("immediate")
        self.postgres_down = True

    def start_postgres(self) -> None:
        self.postgres.resume()
        self.postgres_down = False

    def pending_tries(self) -> list[float]:
        """When each delivery still pending is next tried, in the sandbox clock's seconds."""
        return [n for (n,) in self._deliveries(
            "select next_attempt from deliveries where state = 'pending'")]

    def _deliveries(self, sql: str) -> list[tuple]:
        """Rows of the sandbox's webhook queue (its own file, opened read-only)."""
        import sqlite3

        path = self.sandbox.data_dir / "webhooks.sqlite3"
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()

    def delivery_log(self) -> list[tuple]:
        """The sandbox's webhook deliveries (its own queue, read-only): (env, record, method,
        state, each attempt's result)."""
        import orjson

        rows = self._deliveries("select env, record, method, state, attempts from deliveries")
        return [(e, r, m, s, orjson.loads(a)) for e, r, m, s, a in rows]


def tidy(work: Path) -> None:
    """Remove a finished run's folder (the pytest run keeps its own tmp_path)."""
    shutil.rmtree(work, ignore_errors=True)
