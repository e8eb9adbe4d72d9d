"""How the transactions asset lands records, called directly against a real sandbox (no
Dagster run): `land_chunks` (each record fetched ahead, windowed, validated, audited and
published, in order, chunk by chunk, a failing one reported with its error; `land_records`
here, all at once), `land_one` (a window that does not reconcile is pulled whole; what still
does not is held back), and a big record fetched as page ranges at once (`fetch_split`).

Ground truth is the sandbox's own (`sandbox/records/ledger`), never the pipeline's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from assets import transactions as tx
from assets.publish import commit
from assets.schemas import ValidationFailed
from resources.client import Client
from resources.lake import Lake
from resources.wire import naira
from tests.bad_service import BadPages
from tests.conftest import Sandbox, start_sandbox
from tests.ground_truth import partitions

CHECK = tx.RUNNING_BALANCE.name
SAID = "%s: %d fetched (%s), %d in the record"


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """One sandbox for the module, its clock frozen: a record's lines stay as they are however
    long the tests read them (on a running clock a pending line may post mid-test)."""
    sandbox = start_sandbox(tmp_path_factory.mktemp("landing") / "sandbox", "--freeze-clock")
    try:
        yield sandbox
    finally:
        sandbox.server.stop()


control = Sandbox.control


def create(box, **spec) -> str:
    """A new record of the shared sandbox, once its transactions are ready."""
    return box.customer(**spec)["record"]


def client(box, **settings) -> Client:
    return Client(base_url=box.url, secret_key=box.sandbox_key, environment="sandbox",
                  **settings)


def land_records(client: Client, lake: Lake, ids: list[str], full=frozenset(), log=None,
                 split: bool = False, stream_rows: int = tx.STREAM_ROWS) -> list[tx.Landing]:
    """Every record's landing, in order, committed (`tx.land_chunks`, all at once)."""
    return [x for chunk in tx.land_chunks(client, lake, ids, full, log, split, stream_rows)
            for x in chunk]


def truth(box, record: str) -> dict:
    return control(box, "records/ledger", record=record)


def rows_of(lake: Lake, record: str) -> int:
    table = lake.read("transactions", record)
    return 0 if table is None else table.num_rows


def assert_lake_is_truth(box, lake: Lake, record: str) -> dict:
    """The lake holds exactly the record's lines a full pull returns now: ids and sums."""
    want = truth(box, record)
    table = lake.read("transactions", record)
    ids = table["transaction_id"].to_pylist()
    assert len(ids) == len(set(ids)) == want["lines"]
    for account in want["accounts"]:
        mine = table.filter(pc.equal(table["account_id"], account["account"]))
        got = "\n".join(sorted(mine["transaction_id"].to_pylist()))
        assert hashlib.sha256(got.encode()).hexdigest() == account["ids_sha256"]
        assert int(pc.sum(mine["amount"]).as_py() * 100) == account["net_kobo"]
    return want


def test_a_run_lands_each_record_in_order_with_its_own_pull_and_figures(box, tmp_path):
    """Five records (more than are fetched ahead), two already in the lake: one is pulled
    from its window, the other whole because the run says so; each is published with its
    own figures, and the run's log has one line per record."""
    ids = [create(box, accounts=2, months=1, volume=3, seed=40 + i) for i in range(5)]
    lake = Lake(root=str(tmp_path))
    with client(box) as c:
        before = land_records(c, lake, [ids[1], ids[3]])
        assert [(x.record_id, x.published) for x in before] == [(ids[1], True), (ids[3], True)]
        start = tx.pull_from(lake.read("transactions", ids[1]))
        in_window = c.transaction_total(ids[1], from_date=start)
        said: list[tuple] = []
        landings = land_records(c, lake, ids, full={ids[3]},
                                log=lambda *line: said.append(line))
    assert [x.record_id for x in landings] == ids
    logged = []
    for rid, x in zip(ids, landings, strict=True):
        want = assert_lake_is_truth(box, lake, rid)
        windowed = rid == ids[1]
        fetched = in_window if windowed else want["lines"]
        assert x.published is True and x.error is None and x.problems == {CHECK: []}
        assert x.outcome == "landed"
        assert x.pull == (f"window from {start}" if windowed else tx.FULL)
        assert x.fetched_rows == fetched
        assert x.row_count == want["lines"]
        assert x.lake_table == str(tmp_path / "transactions")
        assert x.lake_version == landings[0].lake_version  # one commit
        assert x.lake_version == lake.version("transactions") and x.rows == {}
        logged.append((SAID, rid, fetched, f"from {start}" if windowed else "full history",
                       want["lines"]))
    assert 0 < in_window < truth(box, ids[1])["lines"]  # a window, not the whole history
    assert said == logged


def test_a_failing_record_is_reported_with_its_error_and_the_others_land(box, tmp_path):
    """One record's fetch fails (a 500: worth retrying), another's audit cannot ask for its
    ledger balance (login required: not worth it); nothing of theirs is written, and the
    records before and after them land."""
    ids = [create(box, accounts=1, months=1, volume=2, seed=50 + i) for i in range(4)]
    control(box, "records/fail", record=ids[1], product="transactions", times=100)
    control(box, "records/fail", record=ids[2], product="balance", times=100,
            error_code="RECORD_LOGIN_REQUIRED")
    lake = Lake(root=str(tmp_path))
    with client(box, max_attempts=1) as c:
        landings = land_records(c, lake, ids)
    assert [(x.record_id, x.published) for x in landings] == [
        (ids[0], True), (ids[1], False), (ids[2], False), (ids[3], True)]
    fetch, audit = landings[1], landings[2]
    assert fetch.error.startswith("ApiError: INTERNAL_SERVER_ERROR: ")
    assert "on POST transactions/get" in fetch.error and fetch.retryable is True
    assert audit.error.startswith("RecordError: RECORD_LOGIN_REQUIRED: ")
    assert "on POST balance/get" in audit.error and audit.retryable is False
    for x in (fetch, audit):
        assert x.outcome == "failed" and x.row_count == 0
        assert (x.lake_table, x.lake_version, x.pull) == (None, None, None)
    assert rows_of(lake, ids[1]) == rows_of(lake, ids[2]) == 0
    for rid in (ids[0], ids[3]):
        assert_lake_is_truth(box, lake, rid)


def test_a_lone_record_whose_fetch_fails_is_reported_not_raised(box, tmp_path):
    """The sensor's runs carry one record, maybe fetched as page ranges at once: a failure
    there is the record's, reported like any other."""
    rid = create(box, accounts=1, months=1, volume=2, seed=58)
    control(box, "records/fail", record=rid, product="transactions", times=100)
    with client(box, max_attempts=1) as c:
        [landing] = land_records(c, Lake(root=str(tmp_path)), [rid], split=True)
    assert landing.published is False and landing.retryable is True
    assert landing.error.startswith("ApiError: INTERNAL_SERVER_ERROR: ")


def last_line(table: pa.Table, account: str) -> tuple[str, int]:
    """The id of the account's last posted line, and the running balance before it (kobo)."""
    mine = table.filter(pc.equal(table["account_id"], account)).sort_by(
        [("cleared_date", "ascending"), ("transaction_id", "ascending")])
    return mine["transaction_id"][-1].as_py(), int(mine["balance"][-2].as_py() * 100)


def test_a_record_short_of_its_last_line_is_held_or_pulled_whole(box, tmp_path):
    """Its chain holds but ends off the ledger: from a whole pull it is held back, nothing
    written; from a window it is pulled again whole, and that one is published."""
    rid = create(box, accounts=2, months=1, volume=3, seed=60, settlement=False)
    lake = Lake(root=str(tmp_path))
    with client(box) as c:
        whole = tx.apply_window(None, tx.fetch(c, rid, None), None)
        account = sorted(set(whole["account_id"].to_pylist()))[0]
        dropped, running = last_line(whole, account)
        short = whole.filter(pc.not_equal(whole["transaction_id"], dropped))
        held = tx.land_one(c, rid, short, None, 11)
        [held] = commit(lake, [held], {"transactions": tx.SCHEMA})
        assert rows_of(lake, rid) == 0  # nothing written
        start = dt.date(2026, 11, 1)
        mended = tx.land_one(c, rid, short, start, 11)
        [mended] = commit(lake, [mended], {"transactions": tx.SCHEMA})
    ledger = {a["account"]: a["ledger_balance_kobo"] for a in truth(box, rid)["accounts"]}
    assert held.record_id == rid and held.published is False and held.error is None
    assert held.problems == {CHECK: [
        {"record": rid, "account": account, "running_balance": naira(running),
         "ledger_balance": naira(ledger[account]),
         "problem": "last running balance differs from the ledger balance"}]}
    assert (held.outcome, held.fetched_rows, held.pull, held.row_count) == (
        "held", 11, tx.FULL, short.num_rows)
    assert (held.lake_table, held.lake_version) == (None, None) and held.rows == {}
    assert mended.record_id == rid and mended.published is True
    assert mended.problems == {CHECK: []}
    assert mended.pull == f"{tx.FULL} (the window pull from {start} did not reconcile)"
    assert mended.fetched_rows == 11 + whole.num_rows
    assert mended.row_count == whole.num_rows
    assert mended.lake_version == lake.version("transactions")
    assert_lake_is_truth(box, lake, rid)


def test_a_broken_chain_a_whole_pull_does_not_mend_is_held(box, tmp_path):
    rid = create(box, accounts=1, months=1, volume=3, seed=61, settlement=False)
    bad = control(box, "records/corrupt", record=rid)  # a line mid-history, served wrong
    lake = Lake(root=str(tmp_path))
    start = dt.date(2026, 11, 1)
    with client(box) as c:
        table = tx.apply_window(None, tx.fetch(c, rid, None), None)
        held = tx.land_one(c, rid, table, start, 5)
        [held] = commit(lake, [held], {"transactions": tx.SCHEMA})
    assert held.published is False and held.record_id == rid and held.outcome == "held"
    assert held.pull == f"{tx.FULL} (the window pull from {start} did not reconcile)"
    assert held.fetched_rows == 5 + table.num_rows
    first = held.problems[CHECK][0]
    assert first["record"] == rid and first["transaction_id"] == bad["transaction"]
    assert first["balance"] == f"{Decimal(str(bad['balance_served'])):.2f}"
    assert rows_of(lake, rid) == 0
    # a whole pull that breaks the rules is refused as a window's would be, naming the record
    service = BadPages()
    try:
        with Client(base_url=service.url, secret_key="sk_test_x") as c:
            with pytest.raises(ValidationFailed, match=f"^transactions of record {rid}: 1 row"):
                tx.land_one(c, rid, table, start, 5)
    finally:
        service.close()
    assert rows_of(lake, rid) == 0


def test_a_record_without_lines_publishes_no_rows(box, tmp_path):
    """A record whose accounts have no line yet: nothing to reconcile, no rows published."""
    rid = create(box, accounts=1, months=1, volume=1, seed=62, settlement=False)
    lake = Lake(root=str(tmp_path))
    with client(box) as c:
        x = tx.land_one(c, rid, tx.SCHEMA.empty_table(), None, 0)
        [x] = commit(lake, [x], {"transactions": tx.SCHEMA})
    assert x.published is True and x.problems == {CHECK: []}
    assert (x.outcome, x.fetched_rows, x.pull, x.row_count) == ("landed", 0, tx.FULL, 0)
    assert lake.read("transactions", rid).num_rows == 0
    assert x.lake_version == lake.version("transactions")  # a commit of no rows


def test_records_failing_validation_are_named_written_nowhere_and_not_retried(tmp_path):
    bad = BadPages()
    lake = Lake(root=str(tmp_path))
    try:
        with Client(base_url=bad.url, secret_key="sk_test_x") as c:
            landings = land_records(c, lake, ["rec1", "rec2"])
    finally:
        bad.close()
    assert [(x.record_id, x.published, x.retryable) for x in landings] == [
        ("rec1", False, False), ("rec2", False, False)]
    for x in landings:
        assert x.error.startswith(f"ValidationFailed: transactions of record {x.record_id}")
        assert "exactly one of debit and credit" in x.error
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_big_lone_record_is_fetched_as_page_ranges_at_once(box, monkeypatch):
    """The ranges join in the service's order: the same table as one pull, whole or from a
    window (the size that makes a record big is lowered to this one's)."""
    monkeypatch.setattr(tx, "SPLIT_ROWS", 20)
    rid = create(box, accounts=2, months=1, volume=3, seed=73)
    with client(box, page_size=9) as c:
        whole = tx.fetch(c, rid, None)
        assert whole.num_rows > 4 * 9
        unsealed = ["narration_sealed"]  # sealed anew each time (a fresh nonce)
        assert tx.fetch_split(c, rid, None).drop_columns(unsealed).equals(
            whole.drop_columns(unsealed))
        start = (pc.max(whole["trans_date"]).as_py() - dt.timedelta(days=10)).date()
        window = tx.fetch(c, rid, start)
        assert tx.SPLIT_ROWS <= window.num_rows < whole.num_rows
        assert tx.fetch_split(c, rid, start).drop_columns(unsealed).equals(
            window.drop_columns(unsealed))


def test_many_records_land_chunk_by_chunk(box, tmp_path, monkeypatch):
    """Each chunk is committed before it is handed back: its records are in the lake while
    the next chunk lands."""
    monkeypatch.setattr(tx, "CHUNK", 2)  # five records: three chunks
    ids = [create(box, accounts=1, months=1, volume=2, seed=80 + i) for i in range(5)]
    lake = Lake(root=str(tmp_path))
    with client(box) as c:
        land_records(c, lake, [ids[1], ids[3]])
        start = tx.pull_from(lake.read("transactions", ids[1]))
        chunks, in_lake = [], []
        for chunk in tx.land_chunks(c, lake, ids, full={ids[3]}):
            chunks.append(chunk)
            in_lake.append(sorted(set(partitions(lake, "transactions")) & set(ids)))
    assert [[x.record_id for x in chunk] for chunk in chunks] == [ids[:2], ids[2:4], ids[4:]]
    assert in_lake == [sorted(ids[:2] + [ids[3]]), sorted(ids[:4]), sorted(ids)]
    landings = [x for chunk in chunks for x in chunk]
    assert [(x.record_id, x.published) for x in landings] == [(r, True) for r in ids]
    assert [x.pull for x in landings] == [
        tx.FULL, f"window from {start}", tx.FULL, tx.FULL, tx.FULL]
    for rid in ids:
        assert_lake_is_truth(box, lake, rid)


def test_a_chunk_ends_sooner_once_it_holds_chunk_rows(box, tmp_path, monkeypatch):
    """Rows are held until their chunk commits: one that reaches CHUNK_ROWS commits early."""
    ids = [create(box, accounts=1, months=1, volume=2, seed=90 + i) for i in range(3)]
    monkeypatch.setattr(tx, "CHUNK_ROWS", 1)  # every record holds a row or more
    lake = Lake(root=str(tmp_path))
    with client(box) as c:
        chunks = [[(x.record_id, x.published) for x in chunk]
                  for chunk in tx.land_chunks(c, lake, ids)]
    assert chunks == [[(rid, True)] for rid in ids]
    for rid in ids:
        assert_lake_is_truth(box, lake, rid)
