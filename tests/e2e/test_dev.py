"""`ledgerlake dev` as a user runs it in the background: two stacks side by side (their own
data homes and UI ports, free ports for the rest), each stopped whole by SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import demo_env
from tests.postgres import free_port


def tree(pid: int) -> set[int]:
    """`pid` and every process below it."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists()
            and "zombie" not in Path(f"/proc/{p}/status").read_text().lower()}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_dev_stacks_run_side_by_side_and_stop_on_sigterm(tmp_path):
    stacks = []
    for name in ("a", "b"):
        port, log = free_port(), tmp_path / f"{name}.log"
        # a shell's background job: SIGINT ignored, as `&` leaves it
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "dev", "--port", str(port),
             "--customers", "1"], env=demo_env(tmp_path / name), cwd=tmp_path,
            stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        stacks.append((port, log, proc))
    try:
        for port, log, proc in stacks:
            deadline = time.monotonic() + 300
            while True:
                assert proc.poll() is None, log.read_text()
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=5).is_success:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(1)
        for name, (_, log, proc) in zip(("a", "b"), stacks, strict=True):
            # the log says where its data is; its note tells `ledgerlake sql` it is running
            assert f"data       {tmp_path / name}" in log.read_text()
            note = tmp_path / name / ".ledgerlake-dev"
            assert json.loads(note.read_text())["pid"] == proc.pid
            pids = tree(proc.pid)
            assert len(pids) > 3, pids  # itself, sandbox, receiver, dagster dev and its own
            proc.send_signal(signal.SIGTERM)
            # a bound against a hang, not a speed: dagster dev's own shutdown takes its
            # processes' grace, over 10 s on a loaded machine (make test-all beside chaos)
            proc.wait(timeout=60)
            deadline = time.monotonic() + 10
            while alive(pids) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert alive(pids) == set(), log.read_text()[-2000:]
            assert not note.exists()
            text = log.read_text()
            # no Python warning (BetaWarning, dev_command's), no migration INFO lines
            assert "Warning" not in text and "alembic" not in text, text
    finally:
        for _, _, proc in stacks:
            if proc.poll() is None:
                proc.kill()
