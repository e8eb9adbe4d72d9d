"""The receiver's `/metrics`, scraped over real HTTP from a real receiver process and read
with prometheus_client's own parser: its counts are the callbacks this test sent."""

from __future__ import annotations

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from pipeline.receiver import METHODS
from pipeline.status import PRODUCTS
from resources.inbox.callbacks import RECONNECT, STATUS_EVENTS

HTTP = httpx.Client(timeout=30)


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample: (name, sorted labels) -> value."""
    resp = HTTP.get(url + "/metrics")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(resp.text) for s in family.samples}


def post(receiver, body=None, *, raw: bytes | None = None, token: str | None = None):
    return HTTP.post(receiver.callback_url, content=raw if raw is not None else
                     orjson.dumps(body), headers={
                         "Authorization": f"Bearer {receiver.token if token is None else token}",
                         "Content-Type": "application/json"})


def callbacks(samples, method: str, answer: str) -> float:
    return samples.get(("ledgerlake_receiver_callbacks_total",
                        (("answer", answer), ("method", method))), 0.0)


def test_the_counts_are_the_callbacks_sent(receiver, make):
    record = make.record_id()
    sent = [make.callback(record, "ACCOUNTS", "ACCOUNTS_SUCCESS"),
            make.callback(record, "TRANSACTIONS", "PRODUCT_IS_READY"),
            make.callback(record, "TRANSACTIONS", "PRODUCT_IS_READY")]
    for body in sent:
        assert post(receiver, body).status_code == 200
    assert post(receiver, sent[0]).json()["duplicate"] is True  # a redelivery
    assert post(receiver, make.callback(record, "MADE_UP", "X")).status_code == 200
    assert post(receiver, raw=b"{not json").status_code == 400
    assert post(receiver, raw=b"[]").status_code == 400
    assert post(receiver, sent[1], token="wrong").status_code == 401
    assert post(receiver, raw=b"x" * (2 << 20)).status_code == 413

    samples = scrape(receiver.url)
    assert callbacks(samples, "ACCOUNTS", "stored") == 1
    assert callbacks(samples, "TRANSACTIONS", "stored") == 2
    assert callbacks(samples, "ACCOUNTS", "duplicate") == 1
    assert callbacks(samples, "other", "stored") == 1  # no series per made-up method
    assert callbacks(samples, "none", "not_an_event") == 2
    assert callbacks(samples, "none", "unauthorized") == 1
    assert callbacks(samples, "none", "too_large") == 1
    assert samples[("ledgerlake_receiver_dead_letters_total", ())] == 2
    assert samples[("ledgerlake_receiver_inbox_errors_total", ())] == 0
    # every stored or duplicate callback went through a commit, in groups of one or more
    committed = samples[("ledgerlake_receiver_commit_group_size_sum", ())]
    assert committed == 5
    commits = samples[("ledgerlake_receiver_commit_seconds_count", ())]
    assert 1 <= commits <= 5
    assert samples[("ledgerlake_receiver_commit_group_size_count", ())] == commits
    assert samples[("ledgerlake_receiver_callbacks_in_flight", ())] == 0
    # no label holds a record id, a token or a body
    text = HTTP.get(receiver.url + "/metrics").text
    assert record not in text and receiver.token not in text and "not json" not in text


def test_the_methods_a_label_names_are_the_specs():
    spec = {m for methods in PRODUCTS.values() for m in methods} | set(STATUS_EVENTS) \
        | {RECONNECT[0]}
    assert METHODS == spec
