"""`ledgerlake`: the command line. Each subcommand is a thin door onto a module."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

from pipeline.serve import HEADER_S, MIN_RATE, serve


def _number(kind: type, lo: float, hi: float | None, what: str, *, above_lo: bool = False):
    """An argparse type: a `kind` number from `lo` (or above it) to `hi` (None: no upper
    bound), named in its errors."""
    def parse(value: str):
        try:
            n = kind(value)
        except ValueError:
            article = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{what} must be {article}, not {value!r}") from None
        if not (lo < n if above_lo else lo <= n) or (hi is not None and not n <= hi):
            low = f"more than {lo}" if above_lo else (f"from {lo}" if hi is not None
                                                      else f"at least {lo}")
            high = f" to {hi}" if hi is not None else ""
            raise argparse.ArgumentTypeError(f"{what} must be {low}{high}, not {value}")
        return n
    return parse


_port = _number(int, 0, 65535, "port")
_positive = _number(int, 1, None, "the number")
_count = _number(int, 0, None, "the number")
_rate = _number(float, 0, 1_000_000, "the rate")
_seconds = _number(float, 0, 3600, "seconds", above_lo=True)
_minutes = _number(float, 0, 7 * 24 * 60, "minutes")  # up to a week


def _loopback(value: str) -> str:
    if value not in ("127.0.0.1", "localhost", "::1") and not value.startswith("127."):
        raise argparse.ArgumentTypeError(
            f"host must be a loopback address (127.0.0.0/8 or ::1), not {value!r}")
    return "127.0.0.1" if value == "localhost" else value


def _address(value: str) -> str:
    """An IP address to listen on. The receiver may take every interface (0.0.0.0 in a
    container, behind its token and a TLS proxy); the sandbox, a test double, never does."""
    if value == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"host must be an IP address (127.0.0.1, 0.0.0.0, ::), not {value!r}") from None


def _fail(message, code: int = 2) -> int:
    """Say what went wrong in one line on stderr; the exit code (2: the caller's to fix)."""
    print(f"ledgerlake: {message}", file=sys.stderr)
    return code


def cmd_sandbox(args: argparse.Namespace) -> int:
    from sandbox.app import create_app
    from sandbox.auth import Keys

    given = {"production": args.production_key or os.environ.get("LEDGERLAKE_PRODUCTION_KEY"),
             "sandbox": args.sandbox_key or os.environ.get("LEDGERLAKE_SANDBOX_KEY")}
    keys = Keys(given["production"], given["sandbox"])
    app = create_app(Path(args.data_dir), keys, seed=args.seed,
                     webhook_timeout_s=args.webhook_timeout, rate_limit=args.rate_limit,
                     addition_limit=args.addition_limit, freeze_clock=args.freeze_clock)
    ready = ("sandbox ready: production {url}/v2/  sandbox {url}/sandbox/v2/  "
             f"data {Path(args.data_dir).resolve()}")
    for (env, key), secret in zip(given.items(), keys.by_env.values(), strict=True):
        if not key:  # keys we invented must be told, or nobody could call us
            ready += f"\ngenerated {env} key: {secret}"
    serve(app, args.host, args.port, ready)
    return 0


def _receiver_token(args: argparse.Namespace) -> str | None:
    """The webhook token: LEDGERLAKE_RECEIVER_TOKEN, or the first line of --token-file (a
    mounted secret), never a command-line value, which every user of the machine can see in
    the process list."""
    if args.token_file:
        try:
            return Path(args.token_file).read_text().strip() or None
        except OSError as exc:
            raise ValueError(f"--token-file {args.token_file}: {exc.strerror}") from None
    return os.environ.get("LEDGERLAKE_RECEIVER_TOKEN") or None


def cmd_receiver(args: argparse.Namespace) -> int:
    from pipeline.receiver import create_app
    from pipeline.serve import deadlines

    if args.token is not None:
        return _fail("--token shows the token in the process list: set "
                     "LEDGERLAKE_RECEIVER_TOKEN or use --token-file")
    try:
        token = _receiver_token(args)
    except ValueError as exc:
        return _fail(exc)
    if not token:
        return _fail(("the token file is empty" if args.token_file else
                      "the receiver needs LEDGERLAKE_RECEIVER_TOKEN or --token-file")
                     + " (the webhook token the service sends)")
    from resources.config import inbox_from_env
    from resources.inbox import InboxUnavailable

    try:  # the setting rather than the option keeps a password out of the process list
        app = create_app(args.inbox or inbox_from_env(), token, path=args.path,
                         auth_header=args.auth_header)
    except InboxUnavailable as exc:  # down: one line (a database's without its password)
        return _fail(exc, 1)
    serve(app, args.host, args.port,
          f"receiver ready: POST {{url}}{args.path}  inbox {app.state.inbox.shown}",
          protocol=deadlines(header_s=args.header_timeout, body_s=args.header_timeout,
                             min_rate=args.min_body_rate))
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from resources.config import Settings

    settings = Settings.from_env()
    # DAGSTER_HOME, else the one `ledgerlake demo` and `dev` use ($LEDGERLAKE_HOME/dagster)
    home = os.environ.get("DAGSTER_HOME") or str(settings.home / "dagster")
    if not Path(home).is_dir():
        return _fail("no Dagster instance: set DAGSTER_HOME, or run `ledgerlake demo` or "
                     "`ledgerlake dev` first")
    os.environ["DAGSTER_HOME"] = home
    from dagster import DagsterInstance

    from pipeline.metrics import create_app

    with DagsterInstance.get() as instance:
        serve(create_app(instance, settings), args.host, args.port,
              "metrics ready: GET {url}/metrics")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from resources.config import Settings
    from resources.inbox import NAME, RECORD_ID, InboxMissing, InboxUnavailable, open_inbox

    settings = Settings.from_env()
    expect = [m.strip() for m in args.expect.split(",") if m.strip()]
    if not expect or not all(map(NAME.fullmatch, expect)):
        return _fail(f"--expect takes methods such as ACCOUNTS,TRANSACTIONS, not "
                     f"{args.expect!r}")
    records = [r.strip() for r in (args.records or "").split(",") if r.strip()]
    if args.records is not None and not (records and all(map(RECORD_ID.fullmatch, records))):
        return _fail(f"--records takes record ids separated by commas, not "
                     f"{args.records!r:.80}")
    from pipeline.replay import replay, replay_named
    from resources.client import Client
    from resources.client.errors import ServiceError

    try:
        inbox = open_inbox(args.inbox or settings.inbox)
    except (InboxMissing, InboxUnavailable) as exc:
        return _fail(exc)
    client = None
    if not args.dry_run:
        if not (key := os.environ.get("LEDGERLAKE_SECRET_KEY")):
            inbox.close()
            return _fail("replay needs LEDGERLAKE_SECRET_KEY (or --dry-run)")
        client = Client(base_url=args.api_url or settings.api_url,
                        environment=settings.environment, secret_key=key)
    try:
        with inbox, client or contextlib.nullcontext():
            result = (replay_named(inbox, client, records, dry_run=args.dry_run, say=print)
                      if records else replay(inbox, client, after_s=args.after_minutes * 60,
                                           expect=expect, dry_run=args.dry_run, say=print))
    except ServiceError as exc:
        return _fail(f"the service refused the trigger: {exc}", 1)
    verb = "would trigger" if args.dry_run else "triggered"
    print(f"{len(result.overdue)} records {'named' if records else 'overdue'}; {verb} "
          f"{len(result.overdue) if args.dry_run else len(result.triggered)} "
          f"in {result.calls} calls")
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from resources.config import Settings, check_lake, local_path

    from . import sql

    settings = Settings.from_env()
    path = Path(args.warehouse) if args.warehouse else settings.warehouse_path
    lake = str(local_path(settings.lake) or settings.lake)  # the views read its files
    with contextlib.ExitStack() as stack:  # the connection closed, then the scratch folder
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="ledgerlake-as-of-"))
        try:
            fmt = sql.format_of(args.format, Path(args.output) if args.output else None)
            check_lake(lake)  # an s3:// lake that refuses us: one line, exit 2 (a ConfigError)
            if args.as_of is not None:  # the views over the lake as it stood then
                path = sql.as_of_warehouse(lake, Path(scratch) / "as-of.duckdb",
                                           settings.timezone, args.as_of)
            con = stack.enter_context(sql.open_warehouse(path.resolve(), lake))
        except (sql.QueryError, FileNotFoundError, ValueError, RuntimeError) as exc:
            return _fail(exc)
        if args.query is None:
            return sql.interactive(con, args.max_rows)
        try:
            rel = sql.run(con, args.query)
            if fmt == "table":
                sql.show(rel, args.max_rows, sys.stdout)
            elif args.output is None:
                sys.stdout.flush()
                sql.emit(con, rel, fmt, sys.stdout.buffer)
            else:
                rows = sql.write(con, rel, fmt, Path(args.output))
                print(f"wrote {rows} rows to {Path(args.output).resolve()}", file=sys.stderr)
        except sql.QueryError as exc:
            return _fail(exc, 1)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from resources.config import Settings, check_lake, local_path

    from . import report, sql

    settings = Settings.from_env()
    lake = str(local_path(settings.lake) or settings.lake)
    try:
        record = args.record
        if record.startswith("#"):  # a number, as Dagster names the record
            from pipeline.status import by_id

            with _inbox(settings) as inbox:
                record = by_id(inbox, [record])[0]
        record = report.check_record(record)
        output = Path(args.output or f"report-{record}.html")
        if output.suffix.lower() not in (".html", ".htm"):
            raise report.ReportError(f"--output {output} must end in .html")
        path = Path(args.warehouse) if args.warehouse else settings.warehouse_path
        check_lake(lake)
        con = sql.open_warehouse(path.resolve(), lake)
    except (report.ReportError, FileNotFoundError, ValueError) as exc:
        return _fail(exc)
    try:
        with con:
            found = report.gather(con, record)
    except report.ReportError as exc:
        return _fail(exc)
    except Exception as exc:  # duckdb: a view that does not answer (a lake file gone)
        return _fail(f"the warehouse did not answer: {exc}", 1)
    found.timezone = settings.timezone
    from resources.inbox import InboxMissing, InboxUnavailable, open_inbox

    try:  # the checks' verdicts; without an inbox the page says unknown
        with open_inbox(settings.inbox) as inbox:
            report.add_landings(found, inbox)
    except (InboxMissing, InboxUnavailable) as exc:
        _fail(f"{exc}; the checks are unknown")
    page = report.render(found)
    try:
        written = sql.written_aside(output, lambda tmp: tmp.write_text(page, encoding="utf-8"),
                                    report.ReportError)
    except (report.ReportError, OSError) as exc:
        return _fail(exc)
    print(f"wrote {written}", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    logging.getLogger().setLevel(logging.WARNING)  # the demo speaks for itself
    return run_demo(customers=args.customers, home=Path(args.home) if args.home else None)


def cmd_dev(args: argparse.Namespace) -> int:
    from .demo import run_dev

    logging.getLogger().setLevel(logging.WARNING)  # the instance's migrations are not news
    return run_dev(port=args.port, customers=args.customers, sandbox_port=args.sandbox_port,
                   receiver_port=args.receiver_port)


def _inbox(settings):
    from resources.inbox import InboxMissing, InboxUnavailable, open_inbox

    try:
        return open_inbox(settings.inbox)
    except (InboxMissing, InboxUnavailable) as exc:
        raise SystemExit(f"ledgerlake: {exc}") from None


def _products(value: str) -> list[str]:
    from pipeline.status import PRODUCTS

    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in PRODUCTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"products are {', '.join(PRODUCTS)}; not "
                                         f"{', '.join(unknown) or 'none'}")
    return names


def _record(value: str) -> str:
    from resources.inbox import RECORD_ID  # no Dagster to import for a bad argument

    if not RECORD_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(f"a record id matches ^[A-Za-z0-9_-]{{1,64}}$, "
                                         f"not {value!r:.70}")
    return value


def _record_or_number(value: str) -> str:
    """A record id, or `#N`: a record's number, as the Dagster UI names it."""
    is_number = value.startswith("#") and value[1:].isdigit() and len(value) < 20
    return value if is_number else _record(value)


def _statuses(settings, args: argparse.Namespace) -> list:
    """The rows `status` and `rerun` act on (only those needing action with --failed); a named
    record that is unknown ends the command (said on stderr, exit 2)."""
    from pipeline.status import LISTED, statuses

    with _inbox(settings) as inbox:
        try:
            return statuses(inbox, args.records or None, failed=args.failed,
                            limit=None if getattr(args, "all", True) else LISTED)
        except ValueError as exc:
            raise SystemExit(_fail(exc)) from None


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from pipeline.status import PRODUCTS, explain
    from resources.config import Settings

    rows = _statuses(Settings.from_env(), args)
    if args.json:
        print(json.dumps([r.as_json() for r in rows]))
        return 0
    head = ["record", "number", "connection", *PRODUCTS]
    table = [head] + [[r.record, f"#{r.number}", r.connection,
                       *(r.products.get(p, "-") for p in PRODUCTS)] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for r in rows if args.records else []:  # named: told in full
        print("\n".join(explain(r)))
    needing = sum(1 for r in rows if r.needs_action)
    print(f"{len(rows)} record{'' if len(rows) == 1 else 's'}; {needing} with a failed or "
          "held product"
          + ("  (ledgerlake rerun --failed)" if needing else ""), file=sys.stderr)
    return 0


def cmd_rerun(args: argparse.Namespace) -> int:
    from pipeline.local import QUIET
    from pipeline.status import rerun as run_again
    from resources.config import Settings

    if not args.records and not args.failed:
        return _fail("name the records to run again, or --failed")
    if not os.environ.get("LEDGERLAKE_SECRET_KEY"):
        return _fail("rerun fetches from the service: set LEDGERLAKE_SECRET_KEY")
    settings = Settings.from_env()
    if not (rows := _statuses(settings, args)):
        print("nothing to run again", file=sys.stderr)
        return 0
    by_assets: dict[tuple[str, ...], list[int]] = {}
    for row in rows:
        assets = args.products or (row.needs_action if args.failed else
                                   [p for p, s in row.products.items() if s != "-"])
        if not assets:
            print(f"record {row.record}: no product heard of yet; name --products",
                  file=sys.stderr)
            return 2
        by_assets.setdefault(tuple(assets), []).append(row.number)
    # DAGSTER_HOME, else the one `ledgerlake demo` and `dev` use ($LEDGERLAKE_HOME/dagster)
    home = os.environ.get("DAGSTER_HOME") or str(settings.home / "dagster")
    if not Path(home).is_dir():
        raise SystemExit("ledgerlake: no Dagster instance: set DAGSTER_HOME, or run "
                         "`ledgerlake demo` or `ledgerlake dev` first")
    os.environ["DAGSTER_HOME"] = home
    logging.getLogger().setLevel(logging.WARNING)  # the instance's migrations are not news
    from dagster import DagsterInstance

    from pipeline.definitions import defs

    failures = 0
    with DagsterInstance.get() as instance:
        for assets, records in by_assets.items():
            result = run_again(defs, instance, records, list(assets),
                               full_history=args.full_history, run_config=QUIET)
            failures += not result.success
            print(f"{len(records)} record(s): {', '.join(assets)}: "
                  f"{'landed' if result.success else 'failed'} (run {result.run_id})")
    return 1 if failures else 0


def _lake(settings):
    from resources.config import check_lake, local_path
    from resources.lake import Lake

    check_lake(settings.lake)
    return Lake(root=str(local_path(settings.lake) or settings.lake))


def cmd_forget(args: argparse.Namespace) -> int:
    from assets.warehouse import publish
    from pipeline.forget import TABLES, forget, records_for
    from resources.config import Settings
    from resources.inbox import CONNECTED, InboxMissing, InboxUnavailable, open_inbox

    settings = Settings.from_env()
    lake = _lake(settings)
    try:
        inbox = open_inbox(settings.inbox)
    except InboxMissing:
        inbox = None
    except InboxUnavailable as exc:
        return _fail(f"{exc}; cannot tell whether the records are still connected")
    with inbox or contextlib.nullcontext():
        records = [args.record] if args.record else records_for(lake, args.customer, inbox)
        connected = [r for r in records if inbox is not None and inbox.status(r) == CONNECTED]
        if connected and not args.even_connected:
            return _fail(f"{', '.join(connected)} still connected: the service's next "
                         "callback would land the data again. Remove the record at the "
                         "service (/record/remove) first, or pass --even-connected")
        who = f"record {args.record}" if args.record else f"customer {args.customer}"
        if not records:
            _fail(f"no record of {who} in the lake or the inbox; nothing to erase (recorded)")
        done = forget(lake, TABLES, record=args.record, customer=args.customer,
                      records=None if args.record else records, reason=args.reason,
                      rebuild=lambda: publish(lake.root, settings.warehouse_path,
                                              settings.timezone),
                      progress=lambda line: print(f"  {line}", file=sys.stderr), inbox=inbox)
    print(f"forgot {who}: {len(done.records)} record(s), {done.rows} rows deleted, "
          f"{done.files} files purged; erasure {done.erasure_id} in the lake's erasures table")
    return 0


def cmd_reveal(args: argparse.Namespace) -> int:
    import orjson

    from pipeline.reveal import opened
    from resources.config import Settings
    from resources.privacy import Keys, KeyUnusable

    lake = _lake(Settings.from_env())
    subject = "record" if args.record else "customer"
    try:
        keys = Keys.from_env(local_lake=lake.is_local)
        found = opened(lake, keys, subject, args.record or args.customer)
    except KeyUnusable as exc:
        return _fail(exc)
    if not found:
        return _fail(f"nothing sealed of {subject} {args.record or args.customer} in the "
                     "lake", 1)
    for item in found:
        sys.stdout.write(orjson.dumps(item).decode() + "\n")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from resources.privacy import KeyUnusable, new_key

    try:
        path = new_key()
    except KeyUnusable as exc:
        return _fail(exc)
    print(f"made a new personal-data key at {path} (mode 0600): keep a copy in your secret "
          "store; what it seals opens only with it")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledgerlake",
        description="Land open-banking data as validated Parquet and DuckDB views.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, run, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.set_defaults(func=run)
        return p

    p = command("sandbox", cmd_sandbox, "serve the connection-service sandbox")
    p.add_argument("--host", type=_loopback, default="127.0.0.1",
                   help="loopback address to listen on (default %(default)s)")
    p.add_argument("--port", type=_port, default=8765, help="0 picks a free port")
    p.add_argument("--data-dir", default="data/sandbox", help="state on disk (default %(default)s)")
    p.add_argument("--production-key", help="secret key of /v2/ (or LEDGERLAKE_PRODUCTION_KEY)")
    p.add_argument("--sandbox-key", help="secret key of /sandbox/v2/ (or LEDGERLAKE_SANDBOX_KEY)")
    p.add_argument("--seed", type=int, default=42, help="seed of the synthetic data")
    p.add_argument("--rate-limit", type=_rate, default=1000, metavar="N",
                   help="requests per second per key and endpoint (0.2: one every 5 s), "
                        "0 for none (default %(default)s)")
    p.add_argument("--addition-limit", type=_count, default=100_000, metavar="N",
                   help="records an environment may hold (ADDITION_LIMIT; default %(default)s)")
    p.add_argument("--webhook-timeout", type=_seconds, default=10.0, metavar="S",
                   help="seconds a receiver has to answer a callback (default %(default)s)")
    p.add_argument("--freeze-clock", action="store_true",
                   help="the sandbox clock stands at start and moves only by clock/advance, "
                        "so the data stays the same however long you read it (benchmarks)")

    p = command("receiver", cmd_receiver, "receive callbacks into the inbox")
    p.add_argument("--host", type=_address, default="127.0.0.1",
                   help="address to listen on (default %(default)s; 0.0.0.0 in a container)")
    p.add_argument("--port", type=_port, default=8766, help="0 picks a free port")
    p.add_argument("--inbox", help="SQLite inbox file, or a postgresql:// URL that several "
                                   "receivers share (default $LEDGERLAKE_INBOX, else "
                                   "$LEDGERLAKE_HOME/inbox.sqlite3)")
    p.add_argument("--token", help=argparse.SUPPRESS)  # refused: argv is public
    p.add_argument("--token-file", metavar="PATH",
                   help="file whose first line is the bearer token callbacks must carry "
                        "(default: the LEDGERLAKE_RECEIVER_TOKEN setting)")
    p.add_argument("--header-timeout", type=_seconds, default=HEADER_S, metavar="S",
                   help="seconds a connection has to send a request's headers, and its "
                        "body's first part (default %(default)g)")
    p.add_argument("--min-body-rate", type=_number(float, 1, None, "bytes a second"),
                   default=MIN_RATE, metavar="BYTES",
                   help="bytes a second a body must keep up after that, or the connection "
                        "is closed (default %(default)g)")
    p.add_argument("--path", default="/callbacks/", help="route (default %(default)s)")
    p.add_argument("--auth-header", help="also accept the token in this header, "
                                         "e.g. Service-Auth")

    p = command("metrics", cmd_metrics, "serve the pipeline's state as Prometheus metrics")
    p.add_argument("--host", type=_address, default="127.0.0.1",
                   help="address to listen on (default %(default)s; 0.0.0.0 in a container)")
    p.add_argument("--port", type=_port, default=9466, help="0 picks a free port")

    p = command("replay", cmd_replay, "re-trigger callbacks that never arrived")
    p.add_argument("--inbox", help="SQLite inbox file or postgresql:// URL "
                                   "(default $LEDGERLAKE_INBOX)")
    p.add_argument("--after-minutes", type=_minutes, default=60.0,
                   help="how long a record may miss a product (default %(default)s)")
    p.add_argument("--expect", default="ACCOUNTS,TRANSACTIONS",
                   help="methods every record should call back with (default %(default)s)")
    p.add_argument("--records", help="re-send these records' callbacks (ids separated by "
                                     "commas), whatever the inbox knows of them")
    p.add_argument("--dry-run", action="store_true", help="list the records, call nothing")
    p.add_argument("--api-url", help="the service (default $LEDGERLAKE_API_URL)")

    p = command("sql", cmd_sql, "query the warehouse (read-only)")
    p.add_argument("query", nargs="?", help="SQL; omit for the interactive prompt")
    p.add_argument("--warehouse", help="DuckDB file (default $LEDGERLAKE_HOME/warehouse.duckdb)")
    p.add_argument("--max-rows", type=_positive, default=40, help="rows a table shows")
    p.add_argument("--format", help="table (default), csv, json, jsonl or parquet; csv, json "
                                    "and jsonl print to stdout unless --output is given")
    p.add_argument("--output", metavar="FILE", help="write the result here (atomically); "
                                                    "parquet needs it")
    p.add_argument("--as-of", metavar="WHEN",
                   help="the views over the lake as it stood at a time (ISO 8601 with a zone, "
                        "e.g. 2026-11-23T09:00Z) or at table versions (transactions=12,"
                        "accounts=3; the others latest); time travel reaches back as far as "
                        "the lake's retention (docs/lake.md)")

    p = command("report", cmd_report, "one record on one self-contained HTML page")
    p.add_argument("record", help="the record: its id, or #N, its number in the Dagster UI")
    p.add_argument("--output", metavar="FILE",
                   help="where to write (default report-RECORD.html; written aside and "
                        "renamed)")
    p.add_argument("--warehouse", help="DuckDB file (default $LEDGERLAKE_HOME/warehouse.duckdb)")

    p = command("status", cmd_status, "each record's products: landed, held, failed, waiting")
    p.add_argument("records", nargs="*", type=_record_or_number,
                   help="only these records, by id or by number (#N, as the UI names them)")
    p.add_argument("--failed", action="store_true", help="only records with a failed or "
                                                         "held product")
    p.add_argument("--json", action="store_true", help="one JSON array on stdout")
    p.add_argument("--all", action="store_true",
                   help="every record, not only the first 1,000 (when none is named)")

    p = command("rerun", cmd_rerun, "run records' products again now, without a callback")
    p.add_argument("records", nargs="*", type=_record_or_number,
                   help="the records to run again, by id or by number (#N)")
    p.add_argument("--failed", action="store_true",
                   help="every record with a failed or held product (those products only)")
    p.add_argument("--products", type=_products,
                   help="comma-separated, e.g. transactions,balances (default: the failed "
                        "ones with --failed, else every product the record has)")
    p.add_argument("--full-history", action="store_true",
                   help="pull transactions whole, not from the last date seen")

    p = command("forget", cmd_forget, "erase a customer's or a record's data from the lake")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--customer", type=_record, help="the service's customer id")
    who.add_argument("--record", type=_record, help="one record")
    p.add_argument("--reason", default="request",
                   help="why, as the audit table keeps it (default %(default)s)")
    p.add_argument("--even-connected", action="store_true",
                   help="erase records that are still connected (their next callback lands "
                        "their data again)")

    p = command("reveal", cmd_reveal, "the raw BVN, NIN, birth date and contacts of a "
                                      "customer (needs the personal-data key)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--customer", type=_record, help="the service's customer id")
    who.add_argument("--record", type=_record, help="one record")

    p = command("keys", cmd_keys, "make the personal-data key of a local lake")
    p.add_argument("action", choices=["new"], help="new: make the key file")

    p = command("demo", cmd_demo, "run the pipeline end to end on a fresh sandbox")
    p.add_argument("--customers", type=_number(int, 1, 100, "customers"), default=3,
                   help="customers to create, 1 to 100 (default %(default)s)")
    p.add_argument("--home", help="data folder (default $LEDGERLAKE_HOME or ./data)")

    p = command("dev", cmd_dev, "sandbox, receiver and the Dagster UI on the same data")
    p.add_argument("--port", type=_port, default=3000, help="Dagster UI port")
    p.add_argument("--sandbox-port", type=_port, default=0, help="default: a free port")
    p.add_argument("--receiver-port", type=_port, default=0, help="default: a free port")
    p.add_argument("--customers", type=_number(int, 0, 100, "customers"), default=3,
                   help="customers to create at start (default %(default)s)")
    from .help import explain

    explain(parser, sub)  # each command's prose (pipeline/cli/help.md), also docs/cli.md's
    return parser


def main(argv: list[str] | None = None) -> int:
    from resources.config import ConfigError, keep_files_private

    keep_files_private()  # before anything is written, by this process or its children
    logging.basicConfig(level=os.environ.get("LEDGERLAKE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:  # a bad setting is the caller's to fix: one line, no traceback
        return _fail(exc)
    except Exception as exc:
        if not _failed_under(exc):
            raise
        # what failed, in one line; the traceback at LEDGERLAKE_LOG_LEVEL=DEBUG
        logging.getLogger("ledgerlake").debug("%s failed", args.command, exc_info=exc)
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # delta-rs colours its causes
        said = "; ".join(x.strip().lstrip("↳ ") for x in plain.splitlines() if x.strip())
        return _fail(f"{args.command} failed: {type(exc).__name__}: {said[:800]}", 1)


def _failed_under(exc: Exception) -> bool:
    """Whether the lake's store or the inbox failed under the command (a network, a restart),
    its writes kept losing to concurrent writers (runs committing to the same table), or
    other erasures kept cutting what it read (a rebuild's versions, files). Imported here, on
    failure: a command that needs none of them does not pay for them at start."""
    from deltalake.exceptions import DeltaError

    from assets.warehouse import LakeMoved
    from resources.delta import CommitConflict, HistoryGone
    from resources.inbox import InboxUnavailable

    return isinstance(exc, OSError | DeltaError | InboxUnavailable | CommitConflict
                      | HistoryGone | LakeMoved)
