"""`ledgerlake sql`: queries against the published warehouse, read-only (docs/cli.md).

One query prints a table, or csv, json or jsonl to standard output, or writes any of these or
parquet to a file (written aside and renamed); decimals keep their exact digits, never through
a float, and timestamps are ISO 8601. Without a query, statements ending with `;` are read
from stdin, each result printed; `.quit` or end of input stops.
"""

from __future__ import annotations

import io
import os
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

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
TO_STDOUT = ("csv", "json", "jsonl")  # parquet is binary: it needs --output
COPY_OPTIONS = {"csv": "format csv, header true", "json": "format json, array true",
                "jsonl": "format json", "parquet": "format parquet, compression zstd"}
PROMPT, MORE = "ledgerlake> ", "       ...> "
# a view over s3:// read without the lake's filesystem (LEDGERLAKE_LAKE not the lake it was
# built over) would make DuckDB fetch httpfs from the internet: an error here instead
NO_DOWNLOADS = {"autoinstall_known_extensions": "false"}


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
    """The published file, read-only; its views read the lake at `lake_root` (an s3:// lake's
    files through the filesystem resources.object_store registers)."""
    from resources.object_store import connect

    if not path.is_file():
        raise FileNotFoundError(f"no warehouse at {path} (run `make demo`, or materialize the "
                                "warehouse's views: warehouse_job)")
    con = connect(str(path), lake_root, read_only=True, config=NO_DOWNLOADS)
    con.execute("set TimeZone = 'UTC'")  # the lake's and the service's time; SET to change
    return con


def run(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyRelation | None:
    try:
        return con.sql(query)
    except duckdb.Error as exc:
        raise QueryError(_why(exc)) from None


def _why(exc: duckdb.Error) -> str:
    text = str(exc)
    if "read-only" in text:
        return (f"the warehouse is read-only; it holds views over the lake and is rebuilt by "
                f"its view assets ({text})")
    if "httpfs" in text:
        return ("the warehouse's views read the lake on S3: set LEDGERLAKE_LAKE to the s3:// "
                "lake it was built over (ledgerlake reads it through pyarrow, without DuckDB's "
                "httpfs extension)")
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
    quoted = "'" + str(path).replace("'", "''") + "'"
    con.register("ledgerlake_result", result)
    try:
        con.execute(f"copy (select {_projection(result, fmt)} from ledgerlake_result) "
                    f"to {quoted} ({COPY_OPTIONS[fmt]})")
    finally:
        con.unregister("ledgerlake_result")


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
        raise QueryError(f"cannot write {output.resolve()}: {exc}") from None
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
            raise QueryError(str(exc)) from None
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
