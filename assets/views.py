"""The warehouse's views, as their SQL files in `sql/` say, one file per view named after it.

In the SQL, `{lake:TABLE}` stands for the lake table (read_parquet over its snapshot's data
files; by name, `union_by_name`, only where their schemas differ); when the lake has no file
of it yet, an empty relation with the table's columns and types stands in, so every view
exists over any lake with the same typed columns (`{lake:TABLE?}` means the same). A
`-- needs: view, ...` line names views the file reads; a view is created after them.
`{timezone}` is the customers' zone.
"""

import graphlib
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from resources.tables import columns

SQL_DIR = Path(__file__).parent / "sql"
_LAKE_REF = re.compile(r"\{lake:([a-z][a-z0-9_]*)(\??)\}")
_NEEDS = re.compile(r"^--\s*needs:\s*(.+)$", re.MULTILINE)
DEFAULT_TIMEZONE = "Africa/Lagos"

def check_timezone(con: duckdb.DuckDBPyConnection, zone: str) -> str:
    """A time zone DuckDB knows (its ICU database), or a ValueError naming it."""
    if not isinstance(zone, str) or not con.execute(
            "select count(*) from pg_timezone_names() where name = ?", [zone]).fetchone()[0]:
        raise ValueError(f"time zone {zone!r} is not one DuckDB knows (an IANA name such as "
                         f"Africa/Lagos or UTC)")
    return zone


@dataclass(frozen=True)
class View:
    name: str
    sql: str
    tables: frozenset[str]      # lake tables it must have
    optional: frozenset[str]    # lake tables it reads if present
    needs: tuple[str, ...]      # views it reads
    comment: str = ""           # its description: the first paragraph heading the file

    @classmethod
    def load(cls, path: Path) -> "View":
        sql = path.read_text()
        refs = _LAKE_REF.findall(sql)
        needs = tuple(v.strip() for m in _NEEDS.findall(sql) for v in m.split(",") if v.strip())
        return cls(path.stem, sql, frozenset(t for t, q in refs if not q),
                   frozenset(t for t, q in refs if q), needs, heading(sql, path.stem))


def heading(sql: str, name: str) -> str:
    """The first paragraph of the comment a view's file opens with, less `name: ` (a `-- needs:`
    line ends a paragraph, as an empty one does)."""
    comment = itertools.takewhile(lambda line: line.startswith("--"), sql.splitlines())
    texts = ["" if _NEEDS.match(line) else line[2:].strip() for line in comment]
    para = itertools.takewhile(bool, itertools.dropwhile(lambda text: not text, texts))
    return " ".join(para).removeprefix(f"{name}:").strip()


def load_views(sql_dir: Path | None = None) -> list[View]:
    """The views in dependency order (each after the views it needs)."""
    views = {p.stem: View.load(p) for p in sorted((sql_dir or SQL_DIR).glob("*.sql"))}
    for view in views.values():
        for name in view.needs:
            if name not in views:
                raise ValueError(f"view {view.name!r} needs {name!r}, which has no {name}.sql")
    graph = graphlib.TopologicalSorter({name: view.needs for name, view in views.items()})
    try:
        return [views[name] for name in graph.static_order()]
    except graphlib.CycleError as exc:  # its second argument: the views of the cycle, in turn
        raise ValueError(f"views need each other in a cycle: {' -> '.join(exc.args[1])}") \
            from None


def quote(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def listed(files: Iterable[str]) -> str:
    """The files as a DuckDB list of paths (a local lake's `file://` dropped)."""
    return "[" + ", ".join(quote(f.removeprefix("file://")) for f in files) + "]"


def duckdb_type(t: pa.DataType) -> str:
    """The DuckDB type a Parquet column of Arrow type `t` reads as."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "varchar"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return duckdb_type(t.value_type) + "[]"
    simple = {pa.bool_(): "boolean", pa.int32(): "integer", pa.int64(): "bigint",
              pa.binary(): "blob", pa.float64(): "double", pa.date32(): "date"}
    if t in simple:
        return simple[t]
    raise ValueError(f"no DuckDB type known for the lake's Arrow type {t}")


def stand_in(table: str) -> str:
    """An empty relation with the lake table's columns, for a table not in the lake yet."""
    cols = ", ".join(f'null::{duckdb_type(c.type)} as "{name}"'
                     for name, c in columns(table).items())
    return f"(select {cols} limit 0)"


def render(view: View, sources: dict[str, str], timezone: str = DEFAULT_TIMEZONE) -> str:
    """The view's SQL, each lake table read through its relation in `sources`, or stood in
    for when it has none."""
    def sub(m: re.Match) -> str:
        return sources.get(m[1]) or stand_in(m[1])

    return _LAKE_REF.sub(sub, view.sql).replace("{timezone}", quote(timezone))
