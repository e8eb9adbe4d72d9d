"""Where ledgerlake keeps its data and which service it talks to, from the environment.

Every path defaults under LEDGERLAKE_HOME (default `./data`, made absolute at load), so
the demo, the Dagster UI and `ledgerlake sql` run from the repository root share one lake.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENVIRONMENTS = ("sandbox", "production")


@dataclass(frozen=True)
class Settings:
    home: Path
    lake: Path
    warehouse: Path
    inbox: Path
    api_url: str
    environment: str

    @classmethod
    def from_env(cls, environ: os._Environ | dict | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = Path(env.get("LEDGERLAKE_HOME", "data")).resolve()
        environment = env.get("LEDGERLAKE_ENVIRONMENT", "sandbox")
        if environment not in ENVIRONMENTS:
            raise ValueError(f"LEDGERLAKE_ENVIRONMENT must be one of {ENVIRONMENTS}, "
                             f"not {environment!r}")
        return cls(
            home=home,
            lake=Path(env.get("LEDGERLAKE_LAKE", home / "lake")).resolve(),
            warehouse=Path(env.get("LEDGERLAKE_WAREHOUSE", home / "warehouse.duckdb")).resolve(),
            inbox=Path(env.get("LEDGERLAKE_INBOX", home / "inbox.sqlite3")).resolve(),
            api_url=env.get("LEDGERLAKE_API_URL", "http://127.0.0.1:8765"),
            environment=environment,
        )
