"""Running ledgerlake on one machine: its servers as child processes, the sensor in process.

`make demo`, `ledgerlake dev` and the end-to-end tests share these, so what the tests prove
is what the demo does.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from dagster import DagsterInstance, Definitions, RunsFilter, build_sensor_context

CURSOR_KEY = "ledgerlake/local_inbox_cursor"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
START_TIMEOUT_S = 60.0  # a server's wait for its READY line


def stop_process(proc: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """SIGTERM, and SIGKILL if it has not exited within `timeout_s`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Server:
    """A `ledgerlake <kind>` server in a child process, on a free loopback port."""

    def __init__(self, *args: str, env: dict | None = None, log_path: Path | None = None) -> None:
        self.args = args
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.lines: list[str] = []

    def start(self) -> Server:
        stderr = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        cmd = [sys.executable, "-m", "pipeline.cli", *self.args]
        if "--port" not in self.args:
            cmd += ["--port", "0"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                     env=self.env, stdin=subprocess.DEVNULL)
        if stderr is not subprocess.DEVNULL:
            stderr.close()
        lines: queue.Queue = queue.Queue()

        def pump() -> None:  # keep reading so the child never blocks on a full pipe
            for line in self.proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.url:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise RuntimeError(f"{self.args[0]} did not start within "
                                   f"{START_TIMEOUT_S:.0f}s") from None
            if line is None:
                code = self.proc.wait()
                raise RuntimeError(f"{self.args[0]} exited with {code} before it was ready"
                                   + (f"; see {self.log_path}" if self.log_path else ""))
            self.lines.append(line)
            if line.startswith("READY "):
                self.url = line.split(" ", 1)[1]
        return self

    def stop(self) -> None:
        if self.proc:
            stop_process(self.proc)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def one_box_pools(instance: DagsterInstance) -> None:
    """Give the service's pool as many slots as runs may run at once, unless it was set by hand.

    dagster.yaml cannot name a pool's limit, only `default_limit` (1: what the one-writer pools
    need), which would let one fetching step run at a time across all runs. On one box the
    upstream's pace is the client's business (429s wait for Retry-After), so the pool should
    never hold a step back here; a limit set with `dagster instance concurrency set` is kept.
    """
    from assets.publish import SERVICE_POOL

    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return  # an ephemeral instance: no pools at all
    limits = {p.name: p for p in storage.get_pool_limits()}
    if SERVICE_POOL not in limits or limits[SERVICE_POOL].from_default:
        runs = instance.get_concurrency_config().run_queue_config.max_concurrent_runs
        storage.set_concurrency_slots(SERVICE_POOL, runs if runs > 0 else 100)  # -1: no cap


def cursor(instance: DagsterInstance) -> str | None:
    """Where the in-process sensor stopped reading the inbox."""
    return instance.run_storage.get_cursor_values({CURSOR_KEY}).get(CURSOR_KEY)


def drain(defs: Definitions, instance: DagsterInstance, **kw) -> list[str]:
    """Tick until the sensor has read everything in the inbox; returns every run id."""
    run_ids: list[str] = []
    while True:
        before = cursor(instance)
        run_ids += tick(defs, instance, **kw)
        if cursor(instance) == before:
            return run_ids


def tick(defs: Definitions, instance: DagsterInstance, run_config: dict | None = None) -> list[str]:
    """Evaluate the inbox sensor once and run what it asks for, here and now. Returns run ids.

    The cursor is kept in the instance, and a run key already used is not run again, as the
    daemon would do it.
    """
    sensor_def = defs.resolve_sensor_def("inbox_sensor")
    inbox = {"inbox": defs.resources["inbox"]} if "inbox" in (defs.resources or {}) else {}
    with build_sensor_context(instance=instance, cursor=cursor(instance),
                              definitions=defs, resources=inbox) as ctx:
        result = sensor_def(ctx)
    if result is None or not hasattr(result, "run_requests"):
        return []
    for event in getattr(result, "asset_events", None) or []:  # failure callbacks
        instance.report_runless_asset_event(event)
    run_ids = []
    for rr in result.run_requests or []:
        if rr.run_key and instance.get_run_records(
                RunsFilter(tags={"dagster/run_key": rr.run_key}), limit=1):
            continue
        out = defs.resolve_job_def(rr.job_name).execute_in_process(
            instance=instance, asset_selection=rr.asset_selection,
            tags={**rr.tags, "dagster/run_key": rr.run_key},
            run_config={**(run_config or QUIET), **rr.run_config}, raise_on_error=False)
        run_ids.append(out.run_id)
    if result.cursor is not None:
        instance.run_storage.set_cursor_values({CURSOR_KEY: result.cursor})
    return run_ids
