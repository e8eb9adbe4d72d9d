"""Faults the sandbox cannot make, over a real socket: resets, stalls, bad bodies, 429s, 503s."""

from __future__ import annotations

import logging
import pickle
import re

import orjson
import pytest
from faults import KEY, answer, error, page, reset_mid_body, stall, success

from resources.client.errors import (
    ApiError,
    BankError,
    DamagedAnswer,
    InvalidRequest,
    MalformedResponse,
    RateLimitExceeded,
    RecordError,
    ServiceError,
    TransportError,
    Unauthorized,
)

RECORD = "a" * 24
ACCOUNT = {"_id": "b" * 24, "nuban": "0123456789"}


def accounts_page(**kw):
    return success({"accounts": [ACCOUNT], "pagination": {
        "page": 1, "hasNextPage": False, "nextPage": None}}, **kw)


def waits(caplog) -> list[float]:
    return [float(m.group(1)) for r in caplog.records
            if (m := re.search(r"in (\d+\.\d+)s \(attempt", r.getMessage()))]


def test_reset_mid_body_is_retried_and_the_answer_used_once(faulty):
    faulty.script = [reset_mid_body(), accounts_page()]
    with faulty.client() as client:
        assert client.accounts(RECORD) == [ACCOUNT]
    assert len(faulty.seen) == 2
    assert all(s.json() == {"record": RECORD, "page": 1, "limit": 100} for s in faulty.seen)


def test_a_body_cut_short_by_a_clean_close_is_retried(faulty):
    faulty.script = [reset_mid_body(reset=False), accounts_page()]
    with faulty.client() as client:
        assert client.accounts(RECORD) == [ACCOUNT]
    assert len(faulty.seen) == 2


def test_resets_beyond_the_attempts_raise_a_transport_error(faulty):
    faulty.script = [reset_mid_body() for _ in range(3)]
    with faulty.client(max_attempts=3) as client, pytest.raises(TransportError) as info:
        client.accounts(RECORD)
    assert len(faulty.seen) == 3
    assert info.value.attempts == 3
    assert "after 3 attempts" in str(info.value) and "accounts/get" in str(info.value)


def test_a_2xx_cut_short_is_retried_and_the_answer_used_once(faulty):
    """A 200 whose body stops half way (a proxy's truncation) is no answer: tried again."""
    faulty.script = [answer(200, b'{"status": "success", "data": {'), accounts_page()]
    with faulty.client() as client:
        assert client.accounts(RECORD) == [ACCOUNT]
    assert len(faulty.seen) == 2


def test_bodies_cut_short_beyond_the_attempts_name_status_and_request_id(faulty):
    faulty.script = [answer(200, b'{"status": "success", "data": {', request_id="feed" * 6)
                     for _ in range(3)]
    with faulty.client(max_attempts=3) as client, pytest.raises(DamagedAnswer) as info:
        client.accounts(RECORD)
    assert len(faulty.seen) == 3
    err = info.value
    assert isinstance(err, MalformedResponse)
    assert (err.http_code, err.request_id, err.attempts) == (200, "feed" * 6, 3)
    assert "not JSON" in str(err) and "feed" * 6 in str(err)


def test_json_that_is_not_the_envelope_fails_at_once(faulty):
    faulty.script = [answer(200, b'{"status": "failure"}')]
    with faulty.client() as client, pytest.raises(MalformedResponse) as info:
        client.accounts(RECORD)
    assert len(faulty.seen) == 1 and not isinstance(info.value, DamagedAnswer)


def test_a_call_that_changes_state_is_not_retried_after_a_2xx_cut_short(faulty):
    faulty.script = [answer(200, b'{"status": "succ')]
    with faulty.client() as client, pytest.raises(DamagedAnswer):
        client.remove_record(RECORD)
    assert len(faulty.seen) == 1  # carried out: another try could remove it twice


def test_503_without_body_is_retried_then_succeeds(faulty):
    faulty.script = [answer(503), answer(503), accounts_page()]
    with faulty.client() as client:
        assert client.accounts(RECORD) == [ACCOUNT]
    assert len(faulty.seen) == 3


def test_503_without_body_beyond_the_budget_names_status_and_request_id(faulty):
    faulty.script = [answer(503, request_id="0" * 24), answer(503, request_id="1" * 24)]
    with faulty.client(max_attempts=2) as client, pytest.raises(ApiError) as info:
        client.accounts(RECORD)
    err = info.value
    assert (err.http_code, err.request_id, err.error_code) == (503, "1" * 24, None)
    assert "503" in str(err) and "1" * 24 in str(err)


def test_a_stalled_answer_times_out_and_is_retried(faulty):
    faulty.script = [stall(faulty), accounts_page()]
    with faulty.client(read_timeout_s=0.3) as client:
        assert client.accounts(RECORD) == [ACCOUNT]
    assert len(faulty.seen) == 2


def test_stalls_beyond_the_attempts_raise_a_timeout(faulty):
    faulty.script = [stall(faulty), stall(faulty)]
    with faulty.client(read_timeout_s=0.2, max_attempts=2) as client, \
            pytest.raises(TransportError) as info:
        client.accounts(RECORD)
    assert "ReadTimeout" in str(info.value)


def test_a_refused_connection_is_retried_then_raised(faulty):
    url = faulty.url
    faulty.stop()  # nothing listens on the port any more
    with faulty.client(base_url=url, max_attempts=2) as client, \
            pytest.raises(TransportError) as info:
        client.banks()
    assert "ConnectError" in str(info.value) and info.value.attempts == 2


def test_429_waits_for_retry_after(faulty, caplog):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    faulty.script = [error(429, "RATE_LIMIT_EXCEEDED", "ACCOUNTS_LIMIT",
                           headers={"Retry-After": "1"}), accounts_page()]
    with faulty.client() as client:
        assert client.accounts(RECORD) == [ACCOUNT]
    assert waits(caplog) == [1.0]


@pytest.mark.parametrize("retry_after", [None, "0"])
def test_429_without_retry_after_backs_off_with_jitter(faulty, caplog, retry_after):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    headers = {"Retry-After": retry_after} if retry_after else {}
    faulty.script = [error(429, "RATE_LIMIT_EXCEEDED", "RATE_LIMIT", headers=headers)
                     for _ in range(3)] + [accounts_page()]
    with faulty.client(backoff_base_s=0.02, backoff_max_s=1.0) as client:
        assert client.accounts(RECORD) == [ACCOUNT]
    got = waits(caplog)
    assert len(got) == 3
    for attempt, wait in enumerate(got):  # each within [ceiling/2, ceiling], ceiling doubling
        ceiling = 0.02 * 2 ** attempt
        assert ceiling / 2 - 0.005 <= wait <= ceiling + 0.005


def test_a_retry_after_beyond_the_budget_raises_at_once(faulty):
    faulty.script = [error(429, "RATE_LIMIT_EXCEEDED", "TRANSACTIONS_LIMIT",
                           headers={"Retry-After": "120"})]
    with faulty.client(retry_budget_s=5) as client, pytest.raises(RateLimitExceeded) as info:
        list(client.transaction_pages(RECORD))
    assert len(faulty.seen) == 1
    assert info.value.retry_after == 120 and info.value.error_code == "TRANSACTIONS_LIMIT"
    assert "retry budget" in str(info.value)


def test_bank_not_responding_is_retried_other_bank_errors_are_not(faulty):
    faulty.script = [error(400, "BANK_ERROR", "BANK_NOT_RESPONDING"), accounts_page(),
                     error(400, "BANK_ERROR", "BANK_DOWN")]
    with faulty.client() as client:
        assert client.accounts(RECORD) == [ACCOUNT]
        with pytest.raises(BankError) as info:
            client.accounts(RECORD)
    assert info.value.error_code == "BANK_DOWN"
    assert len(faulty.seen) == 3


def test_planned_maintenance_is_retried_within_the_budget_then_raised(faulty):
    faulty.script = [error(500, "API_ERROR", "PLANNED_MAINTENANCE") for _ in range(3)]
    with faulty.client(max_attempts=3) as client, pytest.raises(ApiError) as info:
        client.record(RECORD)
    assert len(faulty.seen) == 3
    assert info.value.error_code == "PLANNED_MAINTENANCE"
    assert "PLANNED_MAINTENANCE" in str(info.value) and "after 3 attempts" in str(info.value)


def test_record_errors_and_invalid_fields_are_not_retried(faulty):
    faulty.script = [error(400, "RECORD_ERROR", "PRODUCT_NOT_READY"),
                     error(400, "INVALID_REQUEST", "INVALID_FIELD", "from must be YYYY-MM-DD")]
    with faulty.client() as client:
        with pytest.raises(RecordError):
            client.income(RECORD)
        with pytest.raises(InvalidRequest) as info:
            client.transactions(RECORD)
    assert len(faulty.seen) == 2
    assert "INVALID_FIELD: from must be YYYY-MM-DD" in str(info.value)


def test_a_call_that_changes_state_is_not_retried_once_it_may_have_been_sent(faulty):
    faulty.script = [reset_mid_body(), error(500, "API_ERROR", "INTERNAL_SERVER_ERROR"),
                     error(500, "API_ERROR", "PLANNED_MAINTENANCE"), success({})]
    with faulty.client() as client:
        with pytest.raises(TransportError):
            client.remove_record(RECORD)
        with pytest.raises(ApiError):
            client.remove_record(RECORD)
        assert client.remove_record(RECORD) == {}  # maintenance: not done, so retried
    assert len(faulty.seen) == 4


def test_unknown_error_types_and_bodies_still_say_status_and_request_id(faulty):
    faulty.script = [error(418, "TEAPOT_ERROR", "SHORT_AND_STOUT"),
                     answer(400, b"<html>bad gateway</html>", request_id="c" * 24),
                     answer(401, b"", request_id="d" * 24)]
    with faulty.client() as client:
        with pytest.raises(ServiceError) as unknown:
            client.banks()
        with pytest.raises(ServiceError) as html:
            client.banks()
        with pytest.raises(Unauthorized) as bare:
            client.banks()
    assert type(unknown.value) is ServiceError
    assert "TEAPOT_ERROR" in str(unknown.value) and "http 418" in str(unknown.value)
    assert type(html.value) is ServiceError
    assert html.value.http_code == 400 and "c" * 24 in str(html.value)
    assert bare.value.http_code == 401 and "d" * 24 in str(bare.value)


def test_pages_are_lazy_and_a_retried_page_is_yielded_once(faulty):
    faulty.script = [page(1, 3), reset_mid_body(), answer(503), page(2, 3), page(3, 3)]
    with faulty.client(page_size=2) as client:
        pages = client.pages("accounts/get", {"record": RECORD}, "accounts")
        assert faulty.seen == []  # nothing is fetched before it is asked for
        first = next(pages)
        assert len(faulty.seen) == 1
        rest = list(pages)
    got = [[item["page"] for item in p] for p in [first, *rest]]
    assert got == [[1, 1], [2, 2], [3, 3]]
    assert [s.json()["page"] for s in faulty.seen] == [1, 2, 2, 2, 3]
    assert {s.json()["limit"] for s in faulty.seen} == {2}


def test_a_next_page_that_does_not_advance_is_refused(faulty):
    bad = success({"accounts": [ACCOUNT], "pagination": {
        "page": 1, "hasNextPage": True, "nextPage": 1}})
    faulty.script = [bad]
    with faulty.client() as client, pytest.raises(MalformedResponse) as info:
        client.accounts(RECORD)
    assert "nextPage is 1" in str(info.value)


def test_trigger_callbacks_sends_at_most_100_records_per_call(faulty):
    said = {"status": "success", "messgae": "Webhook trigger initiated", "data": {}}
    faulty.script = [answer(200, orjson.dumps(said)) for _ in range(3)]
    records = [f"{i:024x}" for i in range(250)]
    with faulty.client() as client:
        assert client.trigger_callbacks(records) == ["Webhook trigger initiated"] * 3
    sent = [s.json()["records"] for s in faulty.seen]
    assert [len(r) for r in sent] == [100, 100, 50]
    assert [r for batch in sent for r in batch] == records


def test_a_failed_trigger_batch_says_how_many_went_out(faulty):
    said = {"status": "success", "messgae": "Webhook trigger initiated", "data": {}}
    faulty.script = [answer(200, orjson.dumps(said)),
                     error(400, "INVALID_REQUEST", "INVALID_FIELD", "records[3] is not a record")]
    with faulty.client() as client, pytest.raises(InvalidRequest) as info:
        client.trigger_callbacks([f"{i:024x}" for i in range(150)])
    assert "100 of 150 records were triggered" in str(info.value)


def test_bad_arguments_fail_before_any_request(faulty):
    with faulty.client() as client:
        for call in (lambda: client.accounts("../../etc/passwd"),
                     lambda: client.accounts(RECORD, customer=RECORD),
                     lambda: client.accounts(),
                     lambda: client.transactions(RECORD, from_date="2024-13-01"),
                     lambda: client.transactions(RECORD, from_date="2024-02-01",
                                                 to_date="2024-01-01"),
                     lambda: client.callback_status(RECORD, "transactions; drop"),
                     lambda: client.trigger_callbacks([]),
                     lambda: client.set_webhook("ftp://example.invalid/")):
            with pytest.raises(ValueError):
                call()
    assert faulty.seen == []


@pytest.mark.parametrize(("setting", "complaint"), [
    ({"base_url": "ftp://127.0.0.1:1"}, "base_url"),
    ({"environment": "staging"}, "environment"),
    ({"secret_key": "sk_test_with a space"}, "secret_key"),
    ({"page_size": 101}, "page_size"),
])
def test_bad_settings_fail_before_any_request_without_showing_the_key(faulty, setting,
                                                                       complaint):
    with pytest.raises(ValueError) as info:
        faulty.client(**setting)
    assert complaint in str(info.value) and "with a space" not in str(info.value)
    assert faulty.seen == []


def test_requests_carry_the_key_and_json_content_type(faulty):
    faulty.script = [accounts_page(), success({"banks": []})]
    with faulty.client() as client:
        client.accounts(RECORD)
        client.banks()
    post, get = faulty.seen
    assert post.headers["authorization"] == f"Bearer {KEY}"
    assert post.headers["content-type"] == "application/json"
    assert (post.method, post.path) == ("POST", "/sandbox/v2/accounts/get")
    assert (get.method, get.path) == ("GET", "/sandbox/v2/banks/list")


def test_errors_survive_a_pickle_with_their_fields(faulty):
    faulty.script = [error(400, "AUTH_ERROR", "PRODUCT_NOT_READY", account_id="e" * 24)]
    with faulty.client() as client, pytest.raises(ServiceError) as info:
        client.auth(RECORD)
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is type(info.value) and str(again) == str(info.value)
    assert (again.error_code, again.http_code, again.request_id, again.account_id) == (
        "PRODUCT_NOT_READY", 400, info.value.request_id, "e" * 24)
