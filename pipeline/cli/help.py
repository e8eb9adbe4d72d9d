"""What `ledgerlake COMMAND --help` says beyond the options: each command's description and
epilog, and the formatter that keeps their paragraphs. `pipeline.cli.build_parser` applies them;
docs/cli.md is generated from the parser (`make docs`), so this text is the CLI reference's prose.

Text is plain paragraphs separated by blank lines; a paragraph whose lines are indented four
spaces is a block of example commands, printed as written (in docs/cli.md, a code block).
"""

from __future__ import annotations

import argparse
import textwrap

SUMMARY = """
Every command reads its settings from the environment (docs/operations.md, "Settings"). A bad
argument or setting ends with one line on stderr and exit code 2; a failure of the work itself
(a query, a run) with exit code 1. LEDGERLAKE_LOG_LEVEL (default INFO) sets how much is logged.
"""

# command -> its description, for the commands whose add_parser call gives none
DESCRIPTIONS = {
    "sandbox": """
        Serve the connection-service sandbox, with deterministic synthetic data: production
        under /v2/ and production-sandbox under /sandbox/v2/, from one process. Once it
        listens it prints `READY http://HOST:PORT` and the base URLs, and the keys it generated
        when none were given.
    """,
    "receiver": """
        Receive the service's callbacks. Each is stored durably in the inbox before the answer
        200, once (a redelivery is the same event); callbacks arriving together share one
        commit.
    """,
    "replay": """
        Ask the service to send again the callbacks it never delivered: of connected records
        heard from over --after-minutes ago and still missing one of --expect, or of the
        records --records names (POST /callback/trigger, at most 100 records a call). The
        Dagster job replay_job does the same on a schedule.
    """,
    "demo": """
        What `make demo` runs: start the sandbox and the receiver on free loopback ports,
        create customers, wait for their callbacks, run the sensor and the assets in this
        process, publish the warehouse, print a summary row per record from the views, and stop
        what it started.
    """,
    "dev": """
        Start the sandbox (port 8765) and the receiver (port 8766, the sandbox's webhook
        pointed at it), create a few customers, then run `dagster dev` on the same data with
        the sensors on: watch the runs in the UI, create more customers, or link a bank on the
        connect page whose URL it prints. Ctrl-C stops everything.
    """,
}

EPILOGS = {
    "sandbox": """
        Customers are created with POST /sandbox/v2/sandbox/customers/create, and their
        callbacks go to the URL set with POST /sandbox/v2/settings/webhook. A callback that is
        not acknowledged is sent again every hour of the sandbox clock for 72 hours;
        POST /sandbox/v2/sandbox/clock/advance {"seconds": N} moves that clock (and the daily
        periodic products).

        It also serves the connect page, where a user picks a bank, logs in and consents:
        POST settings/connect with the secret key answers its connect_url and demo_url. Every
        control, error and test credential: docs/interface.md.

            ledgerlake sandbox --port 8765 --data-dir data/sandbox --sandbox-key sk_test_...
    """,
    "receiver": """
        Answers: 200 stored (or already stored), 400 not an event (kept in the inbox's dead
        letters), 401 a wrong or missing token, 413 a body over 1 MiB, 503 when the inbox
        cannot be written (the service then delivers again). GET /health needs no token: 200
        while the receiver can store callbacks and its inbox answers a read, else 503, naming
        no path and no error (those go to the log). It logs a line per commit;
        LEDGERLAKE_LOG_LEVEL=DEBUG adds one per callback.

        On a SQLite inbox run one receiver; on a postgresql:// inbox, as many as you like
        behind a load balancer (docs/operations.md).

            ledgerlake receiver --port 8766 --inbox data/inbox.sqlite3 --token "$TOKEN"
    """,
    "replay": """
        It reads LEDGERLAKE_INBOX, LEDGERLAKE_API_URL and LEDGERLAKE_SECRET_KEY (not needed
        with --dry-run). A record linked while every receiver was down for longer than the
        service redelivers (72 hours) left no trace in the inbox: --records names it (the
        application has its id from the connect page's onSuccess).

            ledgerlake replay --after-minutes 60 --dry-run
            ledgerlake replay --records REC1,REC2
    """,
    "sql": """
        The warehouse is $LEDGERLAKE_WAREHOUSE, else $LEDGERLAKE_HOME/warehouse.duckdb. Times
        print in UTC, the lake's zone (`set TimeZone = 'Africa/Lagos';` changes it for a
        session). At the prompt a statement may span lines, and a failed one is reported
        without ending the session, so a script can be piped in.

        Formats: csv with a header row, json as one array of objects, jsonl as one object a
        line, parquet only to --output; with --output and no --format the file's suffix
        chooses. Printed csv, json and jsonl carry only the data, and a reader that stops early
        (| head) ends it quietly. Money keeps its exact digits: 1234.50 in csv, and in JSON a
        number with the decimal's own digits, never through a float (read it with
        json.loads(text, parse_float=decimal.Decimal)). Timestamps are ISO 8601 in UTC, dates
        2025-01-30.

        A missing warehouse, SQL that does not parse or bind, and any attempt to write
        (create, insert, drop ...) end with one line on stderr and change nothing: exit 2 for
        bad arguments or a missing warehouse, 1 for a failed query. The views and their
        columns: docs/lake.md, docs/columns.md.

            ledgerlake sql "select count(*) from accounts"
            ledgerlake sql "select * from balances" --format json | jq '.[0]'
            ledgerlake sql "select * from transactions" --output transactions.parquet
            printf 'select * from records;\\n' | ledgerlake sql
    """,
    "report": """
        The checks' latest results come from the Dagster instance (DAGSTER_HOME, else
        $LEDGERLAKE_HOME/dagster; without one the page says they are unknown). A record id that
        is not one, a record the warehouse does not hold, a missing warehouse or an output not
        ending in .html end with one line on stderr (exit 2) and write nothing.
    """,
    "status": """
        It reads the inbox, where each landing leaves its record's state: one record, or
        every record that needs action, is one indexed read however many records there are.
        A product never heard of shows `-`. A record named is told in full: each product's
        last landing (when, the run, the rows, the pull, the checks it failed and why), and
        its callbacks. The whole history is in the lake's `landings` and `checks` tables
        (`ledgerlake sql "select * from landings where record_id = 'REC'"`).

            ledgerlake status REC
            ledgerlake status --failed --json
    """,
    "rerun": """
        A named record runs every product it has, or --products; --failed runs every failed or
        held product. Records that want the same products share a run. It needs
        LEDGERLAKE_SECRET_KEY, reads the inbox as `status` does and records its runs in the
        Dagster instance (DAGSTER_HOME, else $LEDGERLAKE_HOME/dagster, where `demo` and `dev`
        keep it), and exits 1 if a run failed.

            ledgerlake rerun --failed
            ledgerlake rerun REC --products transactions --full-history
    """,
    "forget": """
        A record still connected is refused (exit 2) unless --even-connected: the service's
        next callback would land its data again; remove it at the service first
        (/record/remove). With LEDGERLAKE_FORGET_ON_DISCONNECT=true a record is forgotten when
        the service disconnects it. Why and how: docs/privacy.md.
    """,
    "reveal": """
        Identity's BVN, NIN, birth date, phones, emails and addresses are masked in the lake
        and the views; the raw values are sealed with that key (docs/privacy.md).
    """,
    "demo": """
        Its data stays in --home (lake/, warehouse.duckdb, inbox.sqlite3, dagster/, logs/),
        whatever LEDGERLAKE_LAKE, LEDGERLAKE_WAREHOUSE and LEDGERLAKE_INBOX say, so
        `ledgerlake sql` queries it afterwards. It refuses a folder holding data it did not
        make.
    """,
}


def text(block: str) -> str:
    return textwrap.dedent(block).strip("\n")


class Paragraphs(argparse.HelpFormatter):
    """Fills each paragraph of a description or epilog on its own, and prints example
    blocks as written (argparse's default runs every paragraph into one)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for block in text.split("\n\n"):
            if block.startswith("    "):
                out.append(textwrap.indent(block, indent))
            else:
                out.append(textwrap.fill(" ".join(block.split()), width,
                                         initial_indent=indent, subsequent_indent=indent))
        return "\n\n".join(out)


def explain(parser: argparse.ArgumentParser, commands: argparse._SubParsersAction) -> None:
    """Gives the parser and each command their prose and the formatter that keeps it."""
    parser.epilog = text(SUMMARY)
    parser.formatter_class = Paragraphs
    for name, command in commands.choices.items():
        command.formatter_class = Paragraphs
        if name in DESCRIPTIONS:
            command.description = text(DESCRIPTIONS[name])
        if name in EPILOGS:
            command.epilog = text(EPILOGS[name])
