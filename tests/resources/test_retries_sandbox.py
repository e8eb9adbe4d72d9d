"""Retries against the real sandbox: rate limits, maintenance and banks that stop answering."""

from __future__ import annotations

import logging
import threading

import pytest
from sandboxes import client_for, make_customers, sandbox_with

from resources.client.errors import ApiError, BankError, RateLimitExceeded


def retries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ledgerlake.client"]


def later(seconds: float, fn) -> threading.Timer:
    timer = threading.Timer(seconds, fn)
    timer.start()
    return timer


def test_429_waits_for_the_sandboxes_retry_after(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    with sandbox_with(tmp_path, "--rate-limit", "2") as box, client_for(box) as client:
        (one,) = make_customers(client, {"months": 1})
        caplog.clear()
        answers = [client.accounts(one["record"]) for _ in range(5)]  # a bucket holds 2
        assert all(a == answers[0] for a in answers)
        said = retries(caplog)
        assert said and all("ACCOUNTS_LIMIT" in m and " in 1.00s " in m for m in said)

        with client_for(box, retry_budget_s=0.5) as hasty, \
                pytest.raises(RateLimitExceeded) as info:
            for _ in range(50):  # far more than the bucket refills meanwhile
                hasty.accounts(one["record"])
    err = info.value
    assert (err.http_code, err.error_code, err.retry_after, err.attempts) == (
        429, "ACCOUNTS_LIMIT", 1.0, 1)
    assert "retry budget" in str(err)


def test_planned_maintenance_is_retried_within_the_budget(sandbox, caplog):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    with client_for(sandbox) as control:
        control.post("sandbox/maintenance", {"on": True})
        with client_for(sandbox, max_attempts=3, backoff_base_s=0.01) as short, \
                pytest.raises(ApiError) as info:
            short.banks()
        assert (info.value.error_code, info.value.http_code, info.value.attempts) == (
            "PLANNED_MAINTENANCE", 500, 3)

        caplog.clear()
        timer = later(0.3, lambda: control.post("sandbox/maintenance", {"on": False}))
        with client_for(sandbox, max_attempts=1000, backoff_base_s=0.05,
                        backoff_max_s=0.2) as patient:
            assert patient.banks()
        timer.join()
    assert any("PLANNED_MAINTENANCE" in m for m in retries(caplog))


def test_a_bank_not_responding_is_retried_a_bank_down_is_not(sandbox, caplog):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    with client_for(sandbox) as control:
        (one,) = make_customers(control, {"months": 1})
        bank = control.record(one["record"])["bank"]

        def status(value: str) -> None:
            control.post("sandbox/banks/status", {"bank": bank, "status": value})

        status("not_responding")
        with client_for(sandbox, max_attempts=3, backoff_base_s=0.01) as short:
            with pytest.raises(BankError) as slow:
                short.accounts(one["record"])
            status("down")
            with pytest.raises(BankError) as down:
                short.accounts(one["record"])
        assert (slow.value.error_code, slow.value.attempts) == ("BANK_NOT_RESPONDING", 3)
        assert (down.value.error_code, down.value.attempts) == ("BANK_DOWN", 1)

        status("not_responding")
        caplog.clear()
        timer = later(0.3, lambda: status("healthy"))
        with client_for(sandbox, max_attempts=1000, backoff_base_s=0.05,
                        backoff_max_s=0.2) as patient:
            assert [a["_id"] for a in patient.accounts(one["record"])] == one["accounts"]
        timer.join()
    assert any("BANK_NOT_RESPONDING" in m for m in retries(caplog))


def test_paging_through_429s_loses_and_doubles_nothing(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    with sandbox_with(tmp_path, "--rate-limit", "5") as box:
        with client_for(box) as client:
            (one,) = make_customers(client, {"months": 1, "volume": 5})
            whole = client.transactions(one["record"])
        caplog.clear()
        with client_for(box, page_size=20) as small:
            paged = small.transactions(one["record"])
    assert any("TRANSACTIONS_LIMIT" in m for m in retries(caplog))  # pages were refused
    assert whole.num_rows > 100
    assert paged.equals(whole)  # same rows, same order: no page lost or yielded twice


def test_truncated_page_is_retried(sandbox, caplog):
    """Found by the chaos suite (issue 16): the sandbox's `truncate` fault, a 200 carrying half
    its body, failed the run that got it. Each truncated answer is asked for again, and the
    pull holds every row once, whether the cut page came to Arrow's reader (transactions) or
    to orjson (the other reads)."""
    caplog.set_level(logging.WARNING, "ledgerlake.client")
    with client_for(sandbox) as control:
        (one,) = make_customers(control, {"months": 2, "volume": 5})
        record = one["record"]
        with client_for(sandbox, page_size=20) as clean:
            whole = clean.transactions(record)
            accounts = clean.accounts(record)
        assert whole.num_rows > 100  # several groups of pages
        control.post("sandbox/faults", {"seed": 16, "rules": [
            {"kind": "truncate", "paths": "transactions/get", "share": 0.3, "count": 4},
            {"kind": "truncate", "paths": "accounts/get", "count": 1}]})
        caplog.clear()
        with client_for(sandbox, page_size=20) as faulted:
            assert faulted.transactions(record).equals(whole)  # none lost, none doubled
            assert faulted.accounts(record) == accounts
        injected = control.get("sandbox/faults")["injected"]
    assert injected["truncate"] == 5
    said = retries(caplog)
    assert sum("a body that is not JSON" in m for m in said) == 5
