"""The chaos suite's final checks fail when the lake breaks as they say they would: broken on
purpose here, once each, on a real lake (a folder, and moto's S3 as the production profile
keeps it). A check that never fails proves nothing."""

from __future__ import annotations

import subprocess

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from resources import delta
from resources.lake import Lake
from resources.tables import lake_schema
from tests.chaos.checks import file_schemas, lake_leftovers
from tests.chaos.world import ROOT
from tests.resources.test_lake_files import rows
from tests.s3 import BUCKET, moto_s3

TABLE = "balance_periodic"  # kept by record, erasable: any such table would do


def filled(lake: Lake) -> None:
    """Two commits, each a file holding several records' rows (an erasure rewrites it)."""
    declared = lake_schema(TABLE)
    for first in (0, 3):
        lake.append_rows(TABLE, pa.concat_tables(
            rows(declared, 4, start=4 * n, record=f"rec{n}") for n in range(first, first + 3)),
            declared)


def test_an_erasure_that_rewrites_files_in_other_types_fails_the_schema_check(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    filled(lake)
    lake.erase(TABLE, ["rec1"])  # as ledgerlake erases: the declared types kept
    read, wrong = file_schemas(lake.root)
    assert read > 0 and wrong == []
    # broken on purpose: the erasure done by delta-rs's own DELETE, which rewrites the
    # files it touches in DataFusion's types (string_view)
    DeltaTable(lake.table_uri(TABLE)).delete(delta._predicate(["rec2"], {}))
    read, wrong = file_schemas(lake.root)
    assert wrong and all(w.startswith(f"{TABLE}/") and "string_view" in w for w in wrong)


@pytest.fixture
def s3(tmp_path):
    with moto_s3(tmp_path) as store:
        fs = pafs.S3FileSystem(endpoint_override=store.endpoint, scheme="http",
                               region="us-east-1", allow_bucket_creation=True)
        fs.create_dir(BUCKET)
        yield store, fs


def test_a_commit_half_written_on_s3_fails_the_leftovers_check(s3, monkeypatch, tmp_path):
    store, fs = s3
    monkeypatch.chdir(tmp_path)
    lake = Lake(root=store.root())
    filled(lake)
    problems, _left = lake_leftovers(lake.root)
    assert problems == []
    # broken on purpose: the last commit's data file never reached the store (its put lost,
    # the log's put taken), as a writer that ignored a failed put would leave it
    uri = lake.table_uri(TABLE)
    [latest] = set(delta.files(uri)) - set(delta.files(uri, delta.version(uri) - 1))
    fs.delete_file(latest.split("://", 1)[1].split("?", 1)[0])
    problems, _left = lake_leftovers(lake.root)
    name = latest.rsplit("/", 1)[-1]
    assert any(p.startswith(f"{TABLE}: its latest version names {name}") for p in problems)
    assert any("a commit half written" in p and name in p for p in problems)


def test_merged_seeds_say_whether_the_code_they_ran_is_the_code_as_it_stands():
    """A seed run earlier counts for today's code only if nothing it ran has changed since."""
    from tests.chaos.run import changed_since

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert changed_since([{"seed": 1, "commit": head}, {"seed": 2}]) == []
    assert changed_since([{"seed": 1, "commit": head},
                          {"seed": 2, "commit": "0000000 with uncommitted changes"}]) \
        == ["unknown (0000000)"]


def test_a_slow_answer_is_a_figure_and_a_hung_question_a_problem():
    import random

    from tests.chaos.readers import Answer, Readers

    readers = Readers({}, dict, print, random.Random(0))
    row = {"accounts": 2, "mismatched": 0, "which": []}
    readers.answers = [Answer("production", "as_of", 0.0, rows=[row], seconds=s)
                       for s in (4.0, 420.0, 9.0)]
    problems, figures = readers.check({}, {})
    assert problems == []  # slow is not wrong
    assert figures["seconds"] == {"as_of": {"median": 9.0, "max": 420.0}}
    readers.answers.append(Answer("production", "lake", 0.0, error="no answer in 1800 s",
                                  kind="hung", seconds=1800.0))
    problems, figures = readers.check({}, {})
    assert len(problems) == 1 and "no answer in 1800 s" in problems[0]
    assert figures["errors"] == {"hung": 1}


def test_a_connection_event_the_service_dropped_is_expected_unheard(tmp_path):
    """A disconnect whose every try met a receiver down or answering 5xx never reached
    ledgerlake: the record is expected kept, not erased. One refused with a 4xx, one a replay
    delivered after all, one still being tried, and a record forgotten by hand are expected as
    before. The queue is the sandbox's own file, written by its own Deliveries, read as the
    harness reads it."""
    from types import SimpleNamespace

    from sandbox.webhooks import Deliveries
    from tests.chaos.run import Chaos, Rec
    from tests.chaos.world import World

    down, busy = {"error": "could not connect"}, {"status": 503}
    queue = Deliveries(tmp_path / "webhooks.sqlite3")

    def sent(env, record, method, tries, state):
        i = queue.add(env, record, method, "http://127.0.0.1:9/hook", {"webhook_code": method},
                      0.0)
        queue.finish(i, first_attempt=0.0, last_attempt=1.0, state=state, next_attempt=None,
                     url="http://127.0.0.1:9/hook",
                     attempts=[{"attempt": n, "at": "t", **t} for n, t in enumerate(tries)])

    sent("production", "gone", "USER_DISCONNECT", [down, busy] * 36, "dropped")
    sent("production", "refused", "USER_DISCONNECT", [down, {"status": 400}], "dropped")
    sent("production", "replayed", "USER_DISCONNECT", [down], "dropped")
    sent("production", "replayed", "USER_DISCONNECT", [{"status": 200}], "acknowledged")
    sent("production", "forgot", "USER_DISCONNECT", [down], "dropped")
    sent("sandbox", "moved", "USER_REAUTH", [busy], "dropped")
    sent("production", "kept", "TRANSACTIONS", [down], "dropped")
    sent("production", "waiting", "USER_DISCONNECT", [down], "pending")  # tried again yet

    chaos = Chaos(0, ROOT, 0, 0, 0)
    chaos.say = lambda line: None
    chaos.world = World.__new__(World)  # the harness's reader, over that file
    chaos.world.sandbox = SimpleNamespace(data_dir=tmp_path)
    for record in ("gone", "refused", "replayed"):
        chaos.records[record] = Rec("production", "c", state="erased", erased_by="disconnect")
    chaos.records["forgot"] = Rec("production", "c", state="erased", erased_by="forget")
    chaos.records["moved"] = Rec("sandbox", "c", state="reauth")
    for record in ("kept", "waiting"):
        chaos.records[record] = Rec("production", "c", state="erased", erased_by="disconnect")
    chaos.unheard_moves()
    assert chaos.unheard == {"gone", "moved"}
    assert set(chaos.erased()) == {"refused", "replayed", "forgot", "kept", "waiting"}
    assert chaos.records["moved"].state == "unheard"
