"""`Client.transactions`: pages read by Arrow in groups, asked for ahead of parsing.

Over a real socket with scripted answers, so that a history can shrink or grow between two
pages, a page can be pretty-printed or wrong, and the order of requests can be checked.
"""

from __future__ import annotations

import orjson
import pytest
from faults import answer, reset_mid_body, success

from resources.client.errors import MalformedResponse
from resources.wire import transactions_batch

RECORD = "a" * 24


def line(n: int, i: int, **over) -> dict:
    """One transaction in the interface's shape; `over` replaces members."""
    stamp = f"2026-10-{1 + n % 28:02d}T06:04:{i % 60:02d}.000Z"
    return {"_id": f"{n:02d}{i:022x}", "account": "b" * 24, "customer": "c" * 24,
            "bank": "d" * 24, "trans_date": stamp, "cleared_date": stamp,
            "debit": None, "credit": 12.5 + i, "balance": 100.0 + i, "currency": "NGN",
            "notes": {"desc": f"line {n}.{i}", "topics": ["transfer"]}, "ref": f"r{n}{i}",
            "branch": "HQ", "code": "TRF", "env": "sandbox", "created_at": stamp,
            "last_updated": stamp, **over}


def tx_page(n: int, of: int, size: int = 2, rows: list[dict] | None = None,
            indent: bool = False, **pagination) -> object:
    """Page `n` of `of`; `pagination` overrides its members (a history that changed)."""
    rows = [line(n, i) for i in range(size)] if rows is None else rows
    data = {"pagination": {"totalDocs": of * size, "limit": size, "page": n, "totalPages": of,
                           "hasNextPage": n < of, "nextPage": n + 1 if n < of else None,
                           **pagination},
            "transaction": rows}
    if not indent:
        return success(data)
    return answer(200, orjson.dumps({"status": "success", "message": "ok", "data": data},
                                    option=orjson.OPT_INDENT_2))


def asked(faulty) -> list[int]:
    return [s.json()["page"] for s in faulty.seen]


def ids(table) -> list[str]:
    return table["transaction_id"].to_pylist()


def test_after_the_first_page_the_rest_are_asked_for_ahead_and_arrive_once(faulty):
    faulty.script = [tx_page(1, 5), reset_mid_body(), *[tx_page(n, 5) for n in range(2, 6)]]
    with faulty.client(page_size=2) as client:
        table = client.transactions(RECORD)
    assert asked(faulty) == [1, 2, 2, 3, 4, 5]  # page 2 retried once, kept once
    assert ids(table) == [line(n, i)["_id"] for n in range(1, 6) for i in range(2)]
    expected = transactions_batch([line(n, i) for n in range(1, 6) for i in range(2)])
    assert table.combine_chunks().to_batches()[0].equals(expected)  # same as orjson's path


def test_a_history_that_shrank_drops_the_pages_asked_for_beyond_its_end(faulty):
    # page 1 promised 4 pages; page 2 says it is now the last; 3 and 4 were already asked for
    faulty.script = [tx_page(1, 4), tx_page(2, 4, hasNextPage=False, nextPage=None),
                     tx_page(3, 4, rows=[line(9, 9)]), tx_page(4, 4, rows=[line(9, 8)])]
    with faulty.client(page_size=2) as client:
        table = client.transactions(RECORD)
    assert asked(faulty) == [1, 2, 3, 4]
    assert ids(table) == [line(n, i)["_id"] for n in (1, 2) for i in range(2)]


def test_a_history_that_grew_is_followed_to_its_new_end(faulty):
    faulty.script = [tx_page(1, 2), tx_page(2, 2, hasNextPage=True, nextPage=3, totalPages=3),
                     tx_page(3, 3)]
    with faulty.client(page_size=2) as client:
        table = client.transactions(RECORD)
    assert asked(faulty) == [1, 2, 3]
    assert table.num_rows == 6


def test_a_page_range_stops_at_its_last_page(faulty):
    faulty.script = [tx_page(2, 9), tx_page(3, 9), tx_page(4, 9)]
    with faulty.client(page_size=2) as client:
        table = client.transactions(RECORD, first_page=2, last_page=4)
    assert asked(faulty) == [2, 3, 4]
    assert ids(table) == [line(n, i)["_id"] for n in (2, 3, 4) for i in range(2)]


def test_pretty_printed_pages_read_the_same(faulty):
    faulty.script = [tx_page(1, 3), tx_page(2, 3, indent=True), tx_page(3, 3, indent=True)]
    with faulty.client(page_size=2) as client:
        table = client.transactions(RECORD)
    assert ids(table) == [line(n, i)["_id"] for n in (1, 2, 3) for i in range(2)]
    assert table["narration"].to_pylist()[-1] == "line 3.1"


@pytest.mark.parametrize("bad, message", [
    ({"debit": "twelve"}, "does not have the interface's shape"),
    ({"trans_date": "2026-10-01"}, "not ISO 8601 UTC"),
    ({"_id": None}, "has no _id"),
])
def test_a_bad_line_in_a_group_raises_what_orjsons_path_raises(faulty, bad, message):
    rows = [line(2, 0), line(2, 1, **bad)]
    faulty.script = [tx_page(1, 3), tx_page(2, 3, rows=rows), tx_page(3, 3)]
    with faulty.client(page_size=2) as client, pytest.raises(ValueError, match=message):
        client.transactions(RECORD)
    with pytest.raises(ValueError, match=message):
        transactions_batch(rows)


def test_a_page_not_asked_for_or_not_json_is_refused_with_its_request_id(faulty):
    faulty.script = [tx_page(1, 3), tx_page(3, 3), tx_page(3, 3)]
    with faulty.client(page_size=2) as client, pytest.raises(MalformedResponse,
                                                             match="asked for page 2, got 3"):
        client.transactions(RECORD)
    faulty.seen.clear()
    # not JSON: asked for again (a body cut short), here with no try left
    faulty.script = [tx_page(1, 3), answer(200, b"<html>", request_id="e" * 24), tx_page(3, 3)]
    with (faulty.client(page_size=2, max_attempts=1) as client,
          pytest.raises(MalformedResponse) as info):
        client.transactions(RECORD)
    assert info.value.request_id == "e" * 24 and "not JSON" in str(info.value)
