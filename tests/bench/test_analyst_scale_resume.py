"""bench/analyst_scale.py's lake, made in one go or stopped part-way and gone on with: the same
rows either way. A million records take hours to make, longer than one sitting."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from resources.delta import read
from resources.lake import Lake
from resources.tables import TABLES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # as its scripts run
import analyst_scale  # noqa: E402

RECORDS, PER_COMMIT = 300, 100  # three chunks
pytestmark = pytest.mark.slow  # `make test-all`: lakes of 160,000 lines, ~1 minute


class Stopped(Exception):
    pass


class Stopping:
    """A lake whose `stop(table, chunk)` may raise Stopped before a table's write."""

    def __init__(self, root, stop) -> None:
        self.lake, self.stop, self.chunks = Lake(root=str(root)), stop, {}

    def __getattr__(self, name: str):
        return getattr(self.lake, name)

    def _next(self, table: str) -> None:
        chunk = self.chunks[table] = self.chunks.get(table, -1) + 1
        if self.stop(table, chunk):
            raise Stopped(table)

    def replace_stream(self, table, *args, **kw):
        self._next(table)
        return self.lake.replace_stream(table, *args, **kw)

    def append_rows(self, table, *args, **kw):
        self._next(table)
        return self.lake.append_rows(table, *args, **kw)


def made(root, stop=lambda table, chunk: False) -> Stopping:
    """A lake of RECORDS records made in `root` (or stopped, by `stop`, part-way)."""
    lake = Stopping(root, stop)
    try:
        analyst_scale.generate(analyst_scale.Maker(RECORDS, 7, lake), lake, PER_COMMIT,
                               lambda text: None)
    except Stopped:
        pass
    return lake


def rows(lake: Stopping) -> dict[str, list]:
    """Every generated table's rows, the lake's own folder left out (landings name it)."""
    return {t: sorted(repr(r).replace(lake.root, "LAKE") for r in read(
        lake.table_uri(t)).to_pylist()) for t in (*analyst_scale.GENERATED, "records")}


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    lake = rows(made(tmp_path_factory.mktemp("whole")))
    assert len(lake["records"]) == RECORDS and set(lake) <= set(TABLES)
    return lake


@pytest.mark.parametrize("where", [("transactions", 1), ("checks", 1), ("landings", 2)])
def test_a_generation_stopped_part_way_goes_on_to_the_same_lake(tmp_path, whole, where):
    made(tmp_path, stop=lambda table, chunk: (table, chunk) == where)
    assert not (tmp_path / "records").exists()  # it did stop
    assert rows(made(tmp_path)) == whole  # gone on with, from each table's chunks
