"""Which `ledgerlake dev` is running over a data folder: it leaves a file there while it runs
(STACK_FILE: its pid and UI), so the commands an analyst types beside it (`ledgerlake sql`,
`report`) can say "the views are being built, wait" instead of advice meant for a folder
nobody fills."""

from __future__ import annotations

import json
import os
from pathlib import Path

STACK_FILE = ".ledgerlake-dev"


def announce(home: Path, ui: str) -> Path:
    """Leave the file of this process's dev stack in `home`; the stack removes it as it
    stops (a killed one's is taken for stale: its pid is gone)."""
    path = home / STACK_FILE
    path.write_text(json.dumps({"pid": os.getpid(), "ui": ui}))
    return path


def running(home: Path) -> dict | None:
    """The dev stack running over `home` (`pid`, `ui`), or None: no STACK_FILE, or the
    one a stack killed before it could remove it."""
    try:
        stack = json.loads((home / STACK_FILE).read_text())
        pid, ui = int(stack["pid"]), str(stack["ui"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, someone else's
        pass
    return {"pid": pid, "ui": ui}


def missing_warehouse(path: Path) -> str:
    """What to say when the warehouse file at `path` is not there, for where it is said."""
    if stack := running(path.parent):
        return (f"no warehouse at {path} yet: `ledgerlake dev` (pid {stack['pid']}) is building "
                f"its views, which takes a minute or two after it starts; wait and ask again "
                f"(its runs: {stack['ui']}/runs)")
    return (f"no warehouse at {path} (run `make demo`, or `ledgerlake dev` and wait for its "
            "views, or materialize them: warehouse_job)")
