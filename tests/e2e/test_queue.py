"""The run queue of the shipped dagster.yaml against a real daemon: a run dequeued while its
code location cannot load waits in the queue and runs once the location is back. Dagster's
default fails it at once, and its run retry, made while the location is still down, is never
tried again: a chaos seed lost a batch's products so when Postgres restarted under the code
server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus

from pipeline.cli import demo
from pipeline.local import stop_process

FLAKY = Path(__file__).with_name("flaky_location.py")
BIN = Path(sys.executable).parent


def engine_events(instance: DagsterInstance, run_id: str) -> list[str]:
    return [e.message or "" for e in instance.all_logs(
        run_id, of_type=DagsterEventType.ENGINE_EVENT)]


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the deadline below bounds it; a loaded box needed over 300 s
def test_a_run_dequeued_while_its_code_location_is_down_runs_once_it_is_back(tmp_path):
    home = tmp_path / "home"
    dagster_home = demo.dagster_home(home)  # the shipped dagster.yaml, as `ledgerlake dev`
    down = tmp_path / "location-down"
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(f"load_from:\n  - python_file:\n      relative_path: {FLAKY}\n"
                         "      location_name: flaky\n")
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home),
           "LEDGERLAKE_TEST_LOCATION_DOWN": str(down)}
    launched = subprocess.run([str(BIN / "dagster"), "job", "launch", "-w", str(workspace),
                               "-j", "queued_job"], env=env, capture_output=True, text=True,
                              cwd=home)
    assert launched.returncode == 0, launched.stderr[-2000:]
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        (run,) = instance.get_runs()
        assert run.status == DagsterRunStatus.QUEUED  # no daemon yet: nothing dequeues it

        down.touch()  # the daemon's code server cannot load the location
        log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
                                  cwd=home, env=env, stdout=log, stderr=log)
        try:
            # a bound for a hang, not a target: the queue waits 60 s between tries, the daemon
            # reloads its workspace every 60 s, and a loaded machine's code server can take
            # another 60 s to answer (a run beside three chaos seeds needed over 4 min)
            deadline = time.monotonic() + 900
            while not any("re-submitting the run into the queue" in m
                          for m in engine_events(instance, run.run_id)):
                # queued, or starting while a try is under way; never failed
                status = instance.get_run_by_id(run.run_id).status
                assert status in (DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING), (
                    status, engine_events(instance, run.run_id))
                assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-3000:]
                time.sleep(1)
            down.unlink()  # the location is back: the daemon's next workspace reload sees it
            while (status := instance.get_run_by_id(run.run_id).status) not in (
                    DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE):
                assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-3000:]
                time.sleep(1)
            assert status == DagsterRunStatus.SUCCESS, engine_events(instance, run.run_id)
            assert instance.get_runs() == [instance.get_run_by_id(run.run_id)]  # no retry run
        finally:
            stop_process(daemon)
            log.close()
