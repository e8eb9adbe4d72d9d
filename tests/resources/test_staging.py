"""Rows staged on local disk read back whole, in order, as often as a commit is tried, and
leave nothing behind once discarded."""

from __future__ import annotations

import tempfile
from decimal import Decimal

import pyarrow as pa
import pytest

from resources.columns import MONEY
from resources.staging import Staged

SCHEMA = pa.schema([("id", pa.string()), ("amount", MONEY)])


def rows(*ids: str) -> pa.Table:
    return pa.table({"amount": pa.array([Decimal("1.05")] * len(ids), MONEY),
                     "id": pa.array(ids, pa.large_string())})  # other order, another type


def test_staged_rows_read_back_in_order_again_and_again(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    staged = Staged(SCHEMA)
    staged.add(rows("a", "b"))
    staged.add(rows())
    staged.add(rows("c"))
    assert staged.rows == 3 and len(list(tmp_path.iterdir())) == 1
    for _ in range(2):  # a commit lost to another writer reads them again
        back = pa.Table.from_batches(list(staged.batches()), schema=SCHEMA)
        assert back.schema.equals(SCHEMA)
        assert back["id"].to_pylist() == ["a", "b", "c"]
        assert back["amount"].to_pylist() == [Decimal("1.05")] * 3  # exact, as staged
    with pytest.raises(ValueError, match="added before they are read"):
        staged.add(rows("d"))
    staged.discard()
    staged.discard()  # twice is fine
    assert list(tmp_path.iterdir()) == []
