"""The image's entrypoint: check what the process needs, then become its command (exec).

Where DAGSTER_PG_HOST is set (deploy/dagster.yaml reads it), a Postgres that does not answer
is said in one line naming the server without its password, exit 2, so the orchestrator shows
why the container did not start, rather than Dagster's page of traceback after half a minute
of retries. A receiver needs no Dagster instance; the Helm chart's pods bring their own.

    python deploy/entrypoint.py dagster-daemon run
"""

from __future__ import annotations

import os
import sys
import time
from urllib.parse import quote

PG_VARS = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD",
           "DAGSTER_PG_DB")


def shown_url(env: dict) -> str:
    """Where Dagster's Postgres is, as a message may show it: never the password."""
    return (f"postgresql://{quote(env.get('DAGSTER_PG_USER', ''))}@"
            f"{env.get('DAGSTER_PG_HOST', '')}:{env.get('DAGSTER_PG_PORT', '')}/"
            f"{env.get('DAGSTER_PG_DB', '')}")


def check_postgres(env: dict, tries: int = 3, pause_s: float = 2.0) -> str | None:
    """None when Dagster's Postgres answers (or is not configured here), else the one line
    to print."""
    if not env.get("DAGSTER_PG_HOST"):
        return None  # the chart's pods carry DAGSTER_PG_PASSWORD alone: its instance, not ours
    missing = [v for v in PG_VARS if not env.get(v) and v != "DAGSTER_PG_PASSWORD"]
    if missing:
        return (f"ledgerlake: Dagster's Postgres is half configured: set {', '.join(missing)} "
                "(deploy/dagster.yaml reads all of DAGSTER_PG_*)")
    import psycopg2

    password = env.get("DAGSTER_PG_PASSWORD", "")
    why = ""
    for attempt in range(tries):
        try:
            psycopg2.connect(host=env["DAGSTER_PG_HOST"], port=env["DAGSTER_PG_PORT"],
                             user=env["DAGSTER_PG_USER"], password=password,
                             dbname=env["DAGSTER_PG_DB"], connect_timeout=5).close()
            return None
        except psycopg2.Error as exc:
            # libpq's messages name host, port and user, not the password; scrubbed anyway
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            why = " ".join(lines[:2]) or type(exc).__name__
            if password:
                why = why.replace(password, "***")
        if attempt + 1 < tries:
            time.sleep(pause_s)
    return (f"ledgerlake: Dagster's Postgres at {shown_url(env)} is not reachable "
            f"({tries} tries): {why}")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: entrypoint.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    problem = check_postgres(dict(os.environ))
    if problem:
        print(problem, file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.umask(0o077)  # what the command creates is its user's alone (resources/config.py)
    os.execvp(argv[0], argv)  # the command takes this process's place (PID 1 in a container)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
