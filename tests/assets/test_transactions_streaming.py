"""A record too big to hold lands piece by piece and means what it means landed whole: the
same rows in the same file schema, the same verdicts, a break in a later piece holding back
the whole record, and a rerun replacing exactly the record's window. Against a real sandbox;
the size that makes a record big (`stream_rows`) is lowered to these records' and the page
to ten lines, so that a record of a thousand lines comes in many pieces.

Memory is bench/huge_record.py's business: no test measures it.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from assets import transactions as tx
from assets.checks import NotInPostingOrder, RunningBalance, chain_breaks
from resources.client import Client
from resources.lake import Lake
from resources.privacy import Keys
from resources.tables import lake_schema
from resources.wire import MONEY
from tests.assets.test_transactions_landing import land_records
from tests.conftest import Sandbox, start_sandbox

CHECK = tx.RUNNING_BALANCE.name
PIECE = 150  # lines a piece: a record of ~1,000 lines comes in six or more
control = Sandbox.control


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    sandbox = start_sandbox(tmp_path_factory.mktemp("streaming") / "sandbox", "--freeze-clock")
    try:
        yield sandbox
    finally:
        sandbox.server.stop()


@pytest.fixture
def staging(tmp_path, monkeypatch) -> Path:
    """Where this test's staged rows go (the system's temporary folder, as in production)."""
    where = tmp_path / "staging"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def client(box, page_size: int = 10) -> Client:
    return Client(base_url=box.url, secret_key=box.sandbox_key, environment="sandbox",
                  page_size=page_size)


def create(box, **spec) -> str:
    return box.customer(**spec)["record"]


def lake_rows(lake: Lake, record: str) -> list[dict]:
    """The record's rows as the lake holds them, by id; a sealed narration as what it seals
    (each seal has a nonce of its own)."""
    table = lake.read("transactions", record).sort_by("transaction_id")
    keys = Keys.from_env()
    out = []
    for row in table.to_pylist():
        if row["narration_sealed"] is not None:
            row["narration_sealed"] = keys.open(row["narration_sealed"], row["customer_id"])
        out.append(row)
    return out


def assert_files_declared(lake: Lake) -> None:
    """Every live data file of the transactions table is in the table's declared schema."""
    declared = lake_schema("transactions")
    for uri in lake.files("transactions"):
        fs, path = pafs.FileSystem.from_uri(uri)
        with fs.open_input_file(path) as f:
            assert pq.read_schema(f).equals(declared), path


def assert_truth(box, lake: Lake, record: str) -> None:
    """The lake holds exactly the lines a full pull returns now (the sandbox's own count
    and sums, per account)."""
    want = control(box, "records/ledger", record=record)
    table = lake.read("transactions", record)
    ids = table["transaction_id"].to_pylist()
    assert len(ids) == len(set(ids)) == want["lines"]
    for account in want["accounts"]:
        mine = table.filter(pc.equal(table["account_id"], account["account"]))
        assert int(pc.sum(mine["amount"]).as_py() * 100) == account["net_kobo"]


def test_a_record_landed_piece_by_piece_is_the_record_landed_whole(box, tmp_path, staging):
    """Pending, reversed and back-dated lines and all: landed in pieces (from a run of
    several records, and as the sensor's lone record, its pages read by two threads) it is
    the same rows, files and verdict as landed whole."""
    rid = create(box, accounts=2, months=2, volume=8, seed=301)
    other = create(box, accounts=1, months=1, volume=1, seed=302)  # small: held, as always
    lakes = {name: Lake(root=str(tmp_path / name)) for name in ("whole", "run", "lone")}
    with client(box) as c:
        [whole] = land_records(c, lakes["whole"], [rid])
        run = land_records(c, lakes["run"], [other, rid], stream_rows=PIECE)
        [lone] = land_records(c, lakes["lone"], [rid], split=True, stream_rows=PIECE)
    assert whole.published and whole.problems == {CHECK: []}
    assert whole.row_count > 6 * PIECE  # many pieces
    for x in (run[1], lone):
        assert (x.record_id, x.published, x.problems, x.row_count, x.fetched_rows, x.pull,
                x.error) == (rid, True, {CHECK: []}, whole.row_count, whole.fetched_rows,
                             tx.FULL, None)
        assert x.rows == {}
    assert run[0].published and run[0].lake_version == run[1].lake_version  # one commit
    expected = lake_rows(lakes["whole"], rid)
    for name in ("run", "lone"):
        assert lake_rows(lakes[name], rid) == expected, name
        assert lakes[name].read("transactions", rid).schema.equals(
            lakes["whole"].read("transactions", rid).schema)
        assert_files_declared(lakes[name])
    assert_truth(box, lakes["run"], rid)
    assert_truth(box, lakes["run"], other)
    assert not list(staging.iterdir())  # the staged rows are gone once committed


def test_a_break_in_a_later_piece_holds_back_the_whole_record(box, tmp_path, staging):
    """A line near the end of the history served with a wrong running balance: the pieces
    before it were staged, never published; the record keeps the rows it had, and says why
    as the whole landing does."""
    rid = create(box, accounts=1, months=3, volume=10, seed=311, settlement=False)
    lake, whole_lake = Lake(root=str(tmp_path / "pieces")), Lake(root=str(tmp_path / "whole"))
    with client(box) as c:
        [first] = land_records(c, lake, [rid], stream_rows=PIECE)
        before, version = lake_rows(lake, rid), lake.version("transactions")
        lines = first.row_count
        bad = control(box, "records/corrupt", record=rid, line=lines - 20)
        [held] = land_records(c, lake, [rid], full={rid}, stream_rows=PIECE)
        [whole] = land_records(c, whole_lake, [rid])
    assert first.published and lines > 5 * PIECE
    assert whole.published is False and whole.problems[CHECK]
    assert whole.problems[CHECK][0]["transaction_id"] == bad["transaction"]
    assert (held.published, held.outcome, held.problems, held.row_count, held.pull) == (
        False, "held", whole.problems, lines, tx.FULL)
    assert (held.lake_table, held.lake_version, held.rows) == (None, None, {})
    assert lake.version("transactions") == version  # nothing committed
    assert lake_rows(lake, rid) == before  # the last good rows stay in view
    assert whole_lake.read("transactions", rid) is None
    assert not list(staging.iterdir())  # the pieces staged are dropped


def test_a_rerun_replaces_exactly_the_records_window(box, tmp_path, staging):
    """A window pull of a record the lake holds too many rows of to read: the rows from the
    window on are the source's, a line the source re-dated into the window loses its old
    copy from before it, every other row stays as it was, and the record and a small one
    beside it are committed together; the same as the window landed whole."""
    big = create(box, accounts=2, months=2, volume=8, seed=321)
    small = create(box, accounts=1, months=1, volume=1, seed=322)
    lakes = {name: Lake(root=str(tmp_path / name)) for name in ("pieces", "whole")}
    with client(box) as c:
        for name, lake in lakes.items():
            land_records(c, lake, [big, small], stream_rows=PIECE if name == "pieces"
                         else tx.STREAM_ROWS)
        start = tx.pull_from(lakes["whole"].read("transactions", big))
        # the lake's copy of a line in the window dated back before it, as if the source
        # had re-dated it since the last pull
        table = lakes["whole"].read("transactions", big, tx.SCHEMA)
        late = table.filter(pc.greater_equal(table["trans_date"], tx.window_start(start)))
        moved = late.sort_by("trans_date")["transaction_id"][0].as_py()  # not the last date
        moved_to = tx.window_start(start - dt.timedelta(days=9))
        redated = pc.if_else(pc.equal(table["transaction_id"], moved), moved_to,
                             table["trans_date"])
        table = table.set_column(table.schema.get_field_index("trans_date"), "trans_date",
                                 redated.cast(tx.SCHEMA.field("trans_date").type))
        for lake in lakes.values():
            lake.write("transactions", big, table, tx.SCHEMA)
        kept = {r["transaction_id"]: r for r in lake_rows(lakes["pieces"], big)
                if r["trans_date"] < moved_to.as_py()}
        landed = {name: land_records(c, lake, [big, small], stream_rows=PIECE
                                     if name == "pieces" else tx.STREAM_ROWS)
                  for name, lake in lakes.items()}
    mine, theirs = landed["pieces"], landed["whole"]
    assert mine[0].pull == theirs[0].pull == f"window from {start}"
    for x, y in zip(mine, theirs, strict=True):
        assert x.published and x.problems == {CHECK: []}
        assert (x.pull, x.row_count, x.fetched_rows) == (y.pull, y.row_count, y.fetched_rows)
    assert mine[0].lake_version == mine[1].lake_version  # the two in one commit
    rows = lake_rows(lakes["pieces"], big)
    assert rows == lake_rows(lakes["whole"], big)
    assert [r["transaction_id"] for r in rows].count(moved) == 1
    by_id = {r["transaction_id"]: r for r in rows}
    assert by_id[moved]["trans_date"] >= tx.window_start(start).as_py()  # the source's copy
    assert {i: by_id[i] for i in kept} == kept  # before the window: untouched
    assert_files_declared(lakes["pieces"])
    for rid in (big, small):
        assert_truth(box, lakes["pieces"], rid)
    assert not list(staging.iterdir())


def test_a_refresh_after_days_lands_as_the_whole_landing_does(box, tmp_path, staging):
    """Three weeks on: lines posted since, pending ones gone, some posted back-dated before
    the window (its chain then breaks: the record is pulled whole, piece by piece). Whatever
    the refresh had to do, done piece by piece it did what the whole landing did."""
    rid = create(box, accounts=2, months=2, volume=8, seed=331)
    lakes = {name: Lake(root=str(tmp_path / name)) for name in ("pieces", "whole")}
    # pieces of 600: more than the window's lines (~16 a day), fewer than the record's
    rows = {"pieces": 4 * PIECE, "whole": tx.STREAM_ROWS}
    with client(box) as c:
        for name, lake in lakes.items():
            land_records(c, lake, [rid], stream_rows=rows[name])
        control(box, "clock/advance", seconds=21 * 86400)
        [mine], [theirs] = (land_records(c, lakes[name], [rid], stream_rows=rows[name])
                            for name in ("pieces", "whole"))
    assert mine.published and theirs.published and mine.row_count > 2 * rows["pieces"]
    assert mine.pull.startswith(("window from", f"{tx.FULL} (the window pull from")), mine.pull
    assert (mine.pull, mine.row_count, mine.fetched_rows, mine.problems) == (
        theirs.pull, theirs.row_count, theirs.fetched_rows, theirs.problems)
    assert lake_rows(lakes["pieces"], rid) == lake_rows(lakes["whole"], rid)
    assert_truth(box, lakes["pieces"], rid)
    assert_files_declared(lakes["pieces"])
    assert not list(staging.iterdir())


def lines_of(*rows) -> pa.Table:
    """(id, account, value day, posting day or None, amount, balance or None) as lines."""
    ts = pa.timestamp("ms", tz="UTC")

    def day(d):
        return None if d is None else dt.datetime(2026, 3, 1, tzinfo=dt.UTC) + dt.timedelta(
            days=d)

    def naira(values):
        return pa.array([None if v is None else Decimal(v) for v in values], MONEY)

    return pa.table({
        "transaction_id": [r[0] for r in rows], "account_id": [r[1] for r in rows],
        "trans_date": pa.array([day(r[2]) for r in rows], ts),
        "cleared_date": pa.array([day(r[3]) for r in rows], ts),
        "amount": naira(r[4] for r in rows), "balance": naira(r[5] for r in rows)})


def test_the_running_balance_fed_in_pieces_is_the_rule_on_the_whole():
    """Back-dated lines (posted days after their value date) and pending ones, a break in
    each account (a's at a line posted back-dated): fed by value date, a piece at a time,
    the rule names the same breaks and ends on the same balances as over the whole record."""
    rows = [("a01", "a", 0, 0, 10, 10), ("b01", "b", 0, 0, 5, 5), ("a02", "a", 1, 6, -3, 9),
            ("a03", "a", 2, 2, 2, 12), ("p01", "a", 3, None, 7, None),
            ("b02", "b", 4, 4, 1, 6), ("a04", "a", 5, 5, 1, 13), ("b03", "b", 7, 7, 1, 99),
            ("a05", "a", 8, 8, 4, 13), ("b04", "b", 9, 9, 1, 100), ("a06", "a", 9, 40, 1, 14)]
    table = lines_of(*rows)
    want = chain_breaks("r", table)
    assert [(p["account"], p["transaction_id"]) for p in want] == [("a", "a02"),
                                                                  ("b", "b03")]
    for size in (1, 2, 3, 5):
        for leeway in (dt.timedelta(0), dt.timedelta(days=2)):
            rule = RunningBalance("r", leeway=leeway)
            for at in range(0, table.num_rows, size):
                rule.feed(table.slice(at, size))
            rule.finish()
            assert rule.breaks == want, (size, leeway)
            assert rule.running == {"a": 1400, "b": 10000}
    # a line posted long before its value date, after lines it precedes were checked
    early = lines_of(("a01", "a", 0, 0, 1, 1), ("a02", "a", 20, 20, 1, 2),
                     ("a00", "a", 30, 0, 1, 3))
    rule = RunningBalance("r", leeway=dt.timedelta(days=1))
    rule.feed(early.slice(0, 2))
    with pytest.raises(NotInPostingOrder, match="record r: a line of account a"):
        rule.feed(early.slice(2))


def test_a_line_sent_twice_is_one_line_near_and_refused_pieces_apart():
    """Where a page boundary moved as the data changed, the line at it comes twice in a
    row: the later copy is kept. The same line pieces apart cannot be undone once the first
    copy is staged: the record is landed whole instead (NotStreamable)."""
    def batch(*ids) -> pa.RecordBatch:
        return pa.record_batch({"transaction_id": list(ids), "n": list(range(len(ids)))})

    near = [batch("a", "b", "c", "d"), batch("d", "e", "f", "g"), batch("h")]
    got = list(tx.pieces(near, rows=3, tail=1))  # d ends a piece: held back for the next
    assert [p["transaction_id"].to_pylist() for p in got] == [["a", "b", "c"],
                                                              ["d", "e", "f"], ["g", "h"]]
    assert got[1]["n"].to_pylist() == [0, 1, 2]  # d's later copy
    seen = tx.Seen()
    for piece in got:
        seen.add("r", piece["transaction_id"])
    far = list(tx.pieces([batch("a", "b", "c", "d", "e"), batch("f", "a")], rows=4, tail=1))
    seen = tx.Seen()
    seen.add("r", far[0]["transaction_id"])
    with pytest.raises(tx.NotStreamable, match="line a came twice"):
        seen.add("r", far[1]["transaction_id"])
