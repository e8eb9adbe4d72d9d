"""`ledgerlake sql`: queries against the published warehouse, read-only (docs/cli.md).

One query prints a table, or csv, json or jsonl to standard output, or writes any of these or
parquet to a file (written aside and renamed); decimals keep their exact digits, never through
a float, and timestamps are ISO 8601. Without a query, statements ending with `;` are read
from stdin, each result printed; `.quit` or end of input stops.

Analysts' SQL reads the lake and the warehouse, and nothing else (docs/privacy.md): every
connection opened for them is `open_warehouse`'s, guarded by DuckDB itself, and `run` lets
only queries through. The tool, not the SQL, writes an --output file.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, TextIO

import duckdb
import pyarrow as pa

from .devstack import missing_warehouse

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
TO_STDOUT = ("csv", "json", "jsonl")  # parquet is binary: it needs --output
COPY_OPTIONS = {"csv": "format csv, header true", "json": "format json, array true",
                "jsonl": "format json", "parquet": "format parquet, compression zstd"}
PROMPT, MORE = "ledgerlake> ", "       ...> "
# a view over s3:// read without the lake's filesystem (LEDGERLAKE_LAKE not the lake it was
# built over) would make DuckDB fetch httpfs from the internet: an error here instead
NO_DOWNLOADS = {"autoinstall_known_extensions": "false"}
# what an analyst's connection starts with (these can only be set before it opens): no
# extension fetched or loaded on its own, no secret stored on disk, no variable of this
# process read as a table
GUARDED = {**NO_DOWNLOADS, "autoload_known_extensions": "false",
           "allow_community_extensions": "false", "allow_persistent_secrets": "false",
           "python_enable_replacements": "false"}
READS_ONLY = "ledgerlake sql only reads the lake and the warehouse"


class QueryError(Exception):
    """A query the warehouse refused; the message says why."""


def parse_as_of(text: str) -> datetime | dict[str, int]:
    """`--as-of`: an ISO 8601 time with its zone, or `table=version` pairs."""
    if "=" in text:
        versions = {}
        for pair in text.split(","):
            table, _, number = pair.strip().partition("=")
            if not number.isdigit():
                raise ValueError(f"--as-of {text!r}: {pair.strip()!r} is not table=version "
                                 "(a version is a whole number from 0)")
            versions[table.strip()] = int(number)
        return versions
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--as-of {text!r} is neither a time (ISO 8601, e.g. "
                         "2026-11-23T09:00Z) nor table=version pairs") from None
    if when.tzinfo is None:
        raise ValueError(f"--as-of {text!r} has no time zone: add one (Z for UTC, or +01:00)")
    return when


def as_of_warehouse(lake_root: str, target: Path, timezone: str, as_of: str) -> Path:
    """A warehouse at `target` whose views read the lake as it stood at `as_of` (time travel:
    each table's snapshot of then, back as far as the lake's retention)."""
    from assets.warehouse import build

    when = parse_as_of(as_of)
    if isinstance(when, datetime) and when > datetime.now(UTC):
        raise ValueError(f"--as-of {as_of!r} is in the future")
    build(lake_root, target, timezone, as_of=when)
    return target


def open_warehouse(path: Path, lake_root: str | None = None) -> duckdb.DuckDBPyConnection:
    """The published file, read-only, for analysts: its views read the lake at `lake_root`
    (an s3:// lake's files through the filesystem resources.object_store registers), and
    DuckDB refuses its SQL every other file, any extension, and a change of these guards.

    ValueError when the personal-data key file lies where SQL could read it."""
    from resources.object_store import connect

    if not path.is_file():
        raise FileNotFoundError(missing_warehouse(path))
    folders = lake_folders(lake_root)
    con = connect(str(path), lake_root, read_only=True, config=GUARDED)
    try:
        con.execute("set TimeZone = 'UTC'")  # the lake's and the service's time; SET to change
        # DuckDB's guards, in this order: once external access is off, allowed_directories is
        # all a query may read or write besides the warehouse (DuckDB adds the file and its
        # spill folder), and no extension loads; the lock then refuses SET, RESET and PRAGMA
        # of every setting but TimeZone, these guards included
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in folders)
        con.execute(f"set allowed_directories = [{listed}]")
        con.execute("set allowed_configs = ['TimeZone']")
        con.execute("set enable_external_access = false")
        con.execute("set lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def lake_folders(lake_root: str | None) -> list[str]:
    """What analysts' SQL may read: each lake table's folder, spelt as the views name its
    files (a local lake's real path, an s3:// lake's without its query), never the lake's
    root nor the data home around it, which hold the key file and the inbox."""
    from resources.object_store import where
    from resources.privacy import key_file
    from resources.tables import TABLES

    if lake_root is None:
        return []
    base = where(lake_root)[0]
    if "://" not in base:
        base = os.path.realpath(base)  # views name the resolved path (resources.lake)
    folders = [f"{base.rstrip('/')}/{table}/" for table in TABLES]
    key = os.path.realpath(key_file())
    if inside := [f for f in folders if key.startswith(f)]:
        raise ValueError(f"the personal-data key file {key} is inside the lake's folder "
                         f"{inside[0]}, which SQL reads: move it out (LEDGERLAKE_PII_KEY_FILE)")
    return folders


def run(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyRelation | None:
    """Run an analyst's `query` (one or more statements): each a query, or none runs."""
    check_query(query)
    try:
        return con.sql(query)
    except duckdb.Error as exc:
        raise QueryError(_why(exc)) from None


# -- statements that are not queries ---------------------------------------------------------
# DuckDB's guards refuse every file outside the lake's folders, but inside them COPY, EXPORT
# and ATTACH would write (a Delta commit in a table's _delta_log empties the table): what is
# not a query is refused here, by DuckDB's own parser, before anything runs.

# a statement's text starts at its first word (DuckDB drops the comments before it); a
# comment inside the few words read here makes the statement refused, never allowed
# SET or RESET of TimeZone, the one setting the lock leaves (allowed_configs)
_TIMEZONE = re.compile(r"\s*(?:set|reset)\s+(?:(?:session|local|global)\s+)?\"?timezone\"?"
                       r"\s*(?:=|to\b|;|$)", re.IGNORECASE)
_EXPLAIN = re.compile(r"\s*explain\s+(?:analy[sz]e\s+)?", re.IGNORECASE)
_TYPE = duckdb.StatementType
_CHANGES = {_TYPE.CREATE, _TYPE.CREATE_FUNC, _TYPE.INSERT, _TYPE.UPDATE, _TYPE.DELETE,
            _TYPE.DROP, _TYPE.ALTER, _TYPE.MERGE_INTO, _TYPE.VACUUM, _TYPE.ANALYZE}
_DOES = {  # what a statement of each first word would do, as its refusal says
    "COPY": "COPY reads or writes files",
    "EXPORT": "EXPORT DATABASE writes files",
    "IMPORT": "IMPORT DATABASE reads files",
    "ATTACH": "ATTACH opens another database",
    "DETACH": "DETACH closes a database",
    "INSTALL": "INSTALL adds an extension",
    "FORCE": "FORCE INSTALL adds an extension",
    "LOAD": "LOAD runs an extension",
    "SET": "SET changes a setting (only SET TimeZone may)",
    "RESET": "RESET changes a setting (only RESET TimeZone may)",
    "PRAGMA": "PRAGMA runs a command or changes a setting",
    "CALL": "CALL runs a procedure (`select * from f()` reads a table function)",
    "USE": "USE changes the database",
    "EXPLAIN": "EXPLAIN of a statement that is not a query",
}


def check_query(query: str) -> None:
    """QueryError, one line naming what was refused, unless every statement of `query` only
    reads: a query (SELECT, WITH, FROM, VALUES, TABLE, DESCRIBE, SHOW, SUMMARIZE: DuckDB
    parses each as a SELECT, and a PIVOT), EXPLAIN [ANALYZE] of one, or SET/RESET TimeZone."""
    try:
        parsed = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(_why(exc)) from None
    for statement in parsed:
        if why := _refusal(statement):
            raise QueryError(f"refused: {why}; {READS_ONLY}")


def _refusal(statement) -> str | None:
    """Why `statement` (one of duckdb.extract_statements) is refused; None for a query."""
    text = statement.query
    verb = (re.findall(r"[A-Za-z]+", text) or ["?"])[0].upper()
    if statement.type == _TYPE.SELECT or (statement.type == _TYPE.MULTI and
                                          verb in ("PIVOT", "UNPIVOT")):
        return None
    if statement.type == _TYPE.SET and _TIMEZONE.match(text):
        return None
    if statement.type == _TYPE.EXPLAIN and (explain := _EXPLAIN.match(text)):
        try:
            inner = duckdb.extract_statements(text[explain.end():])
        except duckdb.Error:
            inner = []
        if [s.type for s in inner] == [_TYPE.SELECT]:
            return None
    if verb in _DOES:
        return _DOES[verb]
    if statement.type in _CHANGES:
        return (f"{verb} changes the database, and the warehouse is read-only (views over "
                "the lake, rebuilt by their assets)")
    return f"{verb} is not a query"


# DuckDB's words when a guard refuses what a query reached (a file, a setting, an extension)
_OUTSIDE = re.compile(r'Cannot access (?:file|directory) "(.*)" - file system operations '
                      r"are disabled by configuration")
_LOCKED = re.compile(r'Cannot change configuration option "+([^"]+)"+ - the configuration '
                     r"has been locked")


def _why(exc: duckdb.Error) -> str:
    from resources.object_store import failure_of

    text = str(exc)
    if failed := failure_of(text):  # DuckDB's error holds the Python traceback of it
        return f"the lake's store failed under the query: {failed}; ask again"
    if outside := _OUTSIDE.search(text):
        path = outside.group(1).split("?", 1)[0]
        hint = (" (if the warehouse's views read the lake on S3: set LEDGERLAKE_LAKE to the "
                "s3:// lake it was built over)" if path.startswith("s3://") else
                " (if a view reads it: set LEDGERLAKE_LAKE to the lake the warehouse was "
                "built over)" if path.endswith(".parquet") else "")
        return f"refused: reading {path}; {READS_ONLY}{hint}"
    if locked := _LOCKED.search(text):
        return f"refused: changing the setting {locked.group(1)}; {READS_ONLY}"
    if "Loading external extensions is disabled" in text:
        return f"refused: loading an extension; {READS_ONLY}"
    text = text.replace("\nDid you mean", " Did you mean")  # a name it does not know: one line
    if "read-only" in text:
        return (f"the warehouse is read-only; it holds views over the lake and is rebuilt by "
                f"its view assets ({text})")
    if "httpfs" in text:  # a setting or function of an extension ledgerlake never loads
        return (f"{text.splitlines()[0]} (ledgerlake loads no extension: it reads an s3:// "
                "lake through pyarrow, whose credentials DuckDB never holds)")
    return text


def show(rel: duckdb.DuckDBPyRelation | None, max_rows: int, out: TextIO) -> None:
    if rel is None:  # a statement without a result (SET, PRAGMA ...)
        return
    width = shutil.get_terminal_size((200, 40)).columns
    buf = io.StringIO()
    try:
        with redirect_stdout(buf):  # DuckDB prints the table itself
            rel.show(max_rows=max_rows, max_width=max(width, 80))
    except duckdb.Error as exc:
        raise QueryError(_why(exc)) from None
    text = buf.getvalue()
    out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


def _result(rel: duckdb.DuckDBPyRelation | None) -> pa.Table:
    if rel is None:
        raise QueryError("the statement returned no result to write")
    try:
        return rel.to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(_why(exc)) from None


def _projection(result: pa.Table, fmt: str) -> str:
    """The select list COPY writes: in text formats, timestamps as ISO 8601 strings."""
    if fmt == "parquet":
        return "*"
    iso = []
    for field in result.schema:
        if pa.types.is_timestamp(field.type):
            col = '"' + field.name.replace('"', '""') + '"'
            # DuckDB prints `2025-01-30 12:00:00+00`; ISO 8601 (and RFC 3339) wants the `T`
            # and an offset of hours and minutes
            iso.append(f"regexp_replace(replace({col}::varchar, ' ', 'T'), "
                       f"'([+-][0-9][0-9])$', '\\1:00') as {col}")
    return f"* replace ({', '.join(iso)})" if iso else "*"


def _copy(con: duckdb.DuckDBPyConnection, result: pa.Table, fmt: str, path: Path) -> None:
    """Write `result` to `path` through a DuckDB of its own, in the session's time zone: the
    tool writes the file the user named, the analyst's connection (`con`) writes nothing."""
    quoted = "'" + str(path).replace("'", "''") + "'"
    (zone,) = con.execute("select current_setting('TimeZone')").fetchone()
    with duckdb.connect(config=NO_DOWNLOADS) as writer:
        writer.execute("set TimeZone = $1", [zone])
        writer.register("ledgerlake_result", result)
        writer.execute(f"copy (select {_projection(result, fmt)} from ledgerlake_result) "
                       f"to {quoted} ({COPY_OPTIONS[fmt]})")


def written_aside(output: Path, write: Callable[[Path], object],
                  error: type[Exception]) -> Path:
    """`write(path)` to a file beside `output`, then renamed over it: the file is whole or
    absent. `error` is raised when `output` has no folder."""
    output = output.resolve()
    if not output.parent.is_dir():
        raise error(f"cannot write {output}: no folder {output.parent}")
    tmp = output.with_name(f".{output.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    return output


def write(con: duckdb.DuckDBPyConnection, rel: duckdb.DuckDBPyRelation | None, fmt: str,
          output: Path) -> int:
    """Write the result to `output` atomically; return the number of rows."""
    result = _result(rel)
    try:
        written_aside(output, lambda tmp: _copy(con, result, fmt, tmp), QueryError)
    except duckdb.Error as exc:
        raise QueryError(f"cannot write {output.resolve()}: {_why(exc)}") from None
    return result.num_rows


def emit(con: duckdb.DuckDBPyConnection, rel: duckdb.DuckDBPyRelation | None, fmt: str,
         out: BinaryIO) -> int:
    """Print the result to `out` in a text format, as `write` would write it; return its rows.

    A reader that stops early (`| head`) is not an error: the rest is dropped quietly.
    """
    result = _result(rel)
    with tempfile.TemporaryDirectory(prefix="ledgerlake-sql-") as folder:
        path = Path(folder) / f"result.{fmt}"
        try:
            _copy(con, result, fmt, path)
        except duckdb.Error as exc:
            raise QueryError(_why(exc)) from None
        try:
            with path.open("rb") as src:
                shutil.copyfileobj(src, out)
            out.flush()
        except BrokenPipeError:
            # the reader left; point stdout at nothing so the exit flush does not fail too
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
            os.close(devnull)
    return result.num_rows


def format_of(fmt: str | None, output: Path | None) -> str:
    """The output format: as given, else from the output's suffix, else a table."""
    if fmt is None:
        if output is None:
            return "table"
        if (fmt := output.suffix.lstrip(".").lower()) not in FORMATS[1:]:
            raise QueryError(f"cannot tell the format of {output} from its suffix; pass "
                             f"--format {'|'.join(FORMATS[1:])}")
    if fmt not in FORMATS:
        raise QueryError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt not in ("table", *TO_STDOUT) and output is None:
        raise QueryError(f"--format {fmt} writes a file: pass --output FILE")
    if fmt == "table" and output is not None:
        raise QueryError("--output needs --format csv, json, jsonl or parquet")
    return fmt


def statements(lines: TextIO, prompt: bool, out: TextIO):
    """Statements from `lines`, each ending with `;` at the end of a line; `.quit` stops."""
    buf: list[str] = []
    while True:
        if prompt:
            out.write(MORE if buf else PROMPT)
            out.flush()
        if not (line := lines.readline()):
            break
        text = line.strip()
        if not buf and text in (".quit", ".exit", "\\q"):
            break
        if not buf and not text:
            continue
        buf.append(line.rstrip("\n"))
        if text.endswith(";"):
            yield "\n".join(buf)
            buf = []
    if "".join(buf).strip():
        yield "\n".join(buf)  # the last statement may omit its `;`


def interactive(con: duckdb.DuckDBPyConnection, max_rows: int, lines: TextIO = sys.stdin,
                out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run each statement read from `lines`; return 1 if any failed, else 0."""
    if prompt := lines.isatty():
        out.write("ledgerlake sql: end each statement with `;`, `.quit` to leave.\n")
    failed = False
    for stmt in statements(lines, prompt, out):
        try:
            show(run(con, stmt), max_rows, out)
        except QueryError as exc:
            failed = True
            err.write(f"ledgerlake: {exc}\n")
            err.flush()
    if prompt:
        out.write("\n")
    return 1 if failed else 0
