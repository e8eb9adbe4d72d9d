"""Which `ledgerlake dev` is running over a data folder: it leaves a note there while it runs
(its pid and UI), so the commands an analyst types beside it (`ledgerlake sql`, `report`) can
say "the views are being built, wait" instead of advice meant for a folder nobody fills."""

from __future__ import annotations

import json
import os
from pathlib import Path

NOTE = ".ledgerlake-dev"


def announce(home: Path, ui: str) -> Path:
    """Leave the note of this process's dev stack in `home`; the stack removes it as it
    stops (a killed one's is taken for stale: its pid is gone)."""
    note = home / NOTE
    note.write_text(json.dumps({"pid": os.getpid(), "ui": ui}))
    return note


def running(home: Path) -> dict | None:
    """The note of the dev stack running over `home` (`pid`, `ui`), or None: no note, or the
    one a stack killed before it could remove it."""
    try:
        note = json.loads((home / NOTE).read_text())
        pid, ui = int(note["pid"]), str(note["ui"])
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
