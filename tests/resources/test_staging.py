"""Rows staged on local disk read back whole, in order, as often as a commit is tried, and
leave nothing behind once discarded."""

from __future__ import annotations

import tempfile
from decimal import Decimal

import pyarrow as pa
import pytest

from resources.staging import Staged
from resources.wire import MONEY

SCHEMA = pa.schema([("id", pa.string()), ("amount", MONEY)])


def rows(*ids: str) -> pa.Table:
    return pa.table({"amount": pa.array([Decimal("1.05")] * len(ids), MONEY),
                     "id": pa.array(ids, pa.large_string())})  # other order, another type


def test_staged_rows_read_back_in_order_again_and_again(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    staged = Staged(SCHEMA)
    staged.add(rows("a", "b"))
    staged.add(rows())
    staged.add(rows("c"))
    assert staged.rows == 3 and len(list(tmp_path.iterdir())) == 1
    for _ in range(2):  # a commit lost to another writer reads them again
        back = pa.Table.from_batches(list(staged.batches()), schema=SCHEMA)
        assert back.schema.equals(SCHEMA)
        assert back["id"].to_pylist() == ["a", "b", "c"]
        assert back["amount"].to_pylist() == [Decimal("1.05")] * 3  # exact, as staged
    with pytest.raises(ValueError, match="added before they are read"):
        staged.add(rows("d"))
    staged.discard()
    staged.discard()  # twice is fine
    assert list(tmp_path.iterdir()) == []


def test_a_killed_process_s_staged_file_is_swept_a_live_one_s_kept(tmp_path, monkeypatch):
    import os
    import signal
    import subprocess
    import sys

    import resources.staging as staging

    def stager() -> subprocess.Popen:  # a process that stages rows, then waits to be stopped
        script = ("import sys, tempfile, pyarrow as pa\n"
                  f"tempfile.tempdir = {str(tmp_path)!r}\n"
                  "from resources.staging import Staged\n"
                  "s = Staged(pa.schema([('id', pa.string())]))\n"
                  "s.add(pa.table({'id': ['a']}))\n"
                  "print(s.path, flush=True)\n"
                  "sys.stdin.read()\n")
        return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

    killed, live = stager(), stager()
    paths = [p.stdout.readline().strip() for p in (killed, live)]
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    for path in paths:  # older than a file just made and not yet locked
        os.utime(path, (1, 1))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    try:
        mine = Staged(SCHEMA)  # sweeps as it starts
        assert not os.path.exists(paths[0]) and os.path.exists(paths[1])
        assert staging.sweep() == 0  # its own and the live one's are locked
        mine.discard()
    finally:
        live.stdin.close()
        live.wait()
