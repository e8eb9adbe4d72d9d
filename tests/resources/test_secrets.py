"""The secret key never shows: not in errors of any family, logs, reprs, dumps or Dagster runs."""

from __future__ import annotations

import logging
import pickle
import traceback

import dagster as dg
import pytest
from faults import KEY, answer, error, reset_mid_body, stall
from sandboxes import client_for

from resources.client import Client
from resources.client.errors import (
    ApiError,
    AuthError,
    BankError,
    InvalidInput,
    InvalidRequest,
    MalformedResponse,
    RateLimitExceeded,
    RecordError,
    ServiceError,
    TransportError,
    Unauthorized,
)
from resources.client.resource import ConnectionClient

WRONG_KEY = "sk_test_wrongwrongwrongwrong1234"


def secrets_of(box) -> list[str]:
    keys = [box.sandbox_key, box.production_key, WRONG_KEY, KEY]
    return keys + [k.split("_")[-1] for k in keys]  # the random part alone, too


def shown(err: BaseException) -> list[str]:
    """Everything an error offers a log, a traceback, Dagster or a pickle."""
    return [str(err), repr(err), "".join(traceback.format_exception(err)),
            repr(vars(err)), pickle.dumps(err).decode("latin-1"),
            repr(err.__cause__), repr(err.__context__)]


def provoke(box, faulty) -> list[ServiceError]:
    raised: list[ServiceError] = []

    def catch(cls, call):
        with pytest.raises(cls) as info:
            call()
        raised.append(info.value)

    with client_for(box, secret_key=WRONG_KEY) as wrong:
        catch(Unauthorized, wrong.banks)
    with client_for(box, secret_key=box.production_key) as crossed:
        catch(InvalidInput, crossed.banks)
    with client_for(box) as real:
        catch(InvalidRequest, lambda: real.accounts("0" * 24))
    faulty.script = [
        error(429, "RATE_LIMIT_EXCEEDED", "RATE_LIMIT", headers={"Retry-After": "999"}),
        error(500, "API_ERROR", "INTERNAL_SERVER_ERROR"),
        error(400, "RECORD_ERROR", "RECORD_LOGIN_REQUIRED"),
        error(400, "AUTH_ERROR", "PRODUCT_NOT_READY", account_id="e" * 24),
        error(400, "BANK_ERROR", "BANK_DOWN"),
        reset_mid_body(), stall(faulty),
        answer(200, b"not json"),
        answer(401, b""),
        error(400, "NEW_ERROR", "NEW_CODE"),
    ]
    with faulty.client(max_attempts=1, read_timeout_s=0.2) as fake:
        for cls in (RateLimitExceeded, ApiError, RecordError, AuthError, BankError,
                    TransportError, TransportError, MalformedResponse, Unauthorized,
                    ServiceError):
            catch(cls, lambda: fake.accounts("f" * 24))
    return raised


def test_no_error_family_and_no_log_line_shows_a_key(shared_sandbox, faulty, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    raised = provoke(shared_sandbox, faulty)
    assert len({type(e) for e in raised}) == 11
    # httpx errors hold the request, headers and all: none is chained or kept as context
    assert all(e.__cause__ is None and e.__context__ is None for e in raised)
    logs = caplog.text + "".join(repr(r.args) for r in caplog.records)
    assert "HTTP Request: POST" in logs  # httpx did log, so the scan below means something
    for secret in secrets_of(shared_sandbox):
        assert secret not in logs
        for err in raised:
            assert not any(secret in text for text in shown(err)), (type(err), secret)


def test_the_resource_shows_no_key(shared_sandbox):
    client = client_for(shared_sandbox)
    resource = ConnectionClient(base_url=shared_sandbox.url,
                                secret_key=shared_sandbox.sandbox_key)
    for text in (repr(client), str(client), str(vars(client)), repr(resource),
                 str(resource.model_dump()), resource.model_dump_json(),
                 repr(client._client().headers)):
        assert shared_sandbox.sandbox_key not in text
    client.close()


def test_a_dagster_run_records_no_key(shared_sandbox, monkeypatch):
    monkeypatch.setenv("LEDGERLAKE_TEST_KEY", shared_sandbox.sandbox_key)
    monkeypatch.setenv("LEDGERLAKE_WRONG_KEY", WRONG_KEY)

    @dg.asset
    def banks(context, client: dg.ResourceParam[Client]):
        context.log.info("client %r", client)
        found = client.banks()
        return dg.MaterializeResult(metadata={"client": repr(client), "banks": len(found)})

    with dg.DagsterInstance.ephemeral() as instance:
        results = [dg.materialize([banks], instance=instance, raise_on_error=False, resources={
            "client": ConnectionClient(base_url=shared_sandbox.url,
                                       secret_key=dg.EnvVar(var))})
            for var in ("LEDGERLAKE_TEST_KEY", "LEDGERLAKE_WRONG_KEY")]
        assert [r.success for r in results] == [True, False]
        recorded = "".join(dg.serialize_value(record) for r in results
                           for record in instance.all_logs(r.run_id))
        recorded += "".join(dg.serialize_value(instance.get_run_by_id(r.run_id))
                            for r in results)
    assert "INVALID_API_KEYS" in recorded  # the failure was recorded, with its error
    for secret in secrets_of(shared_sandbox):
        assert secret not in recorded


def test_a_bad_key_fails_the_run_at_resource_init_without_showing_it(monkeypatch):
    bad = "sk_test_has a space_" + "9" * 16
    monkeypatch.setenv("LEDGERLAKE_BAD_KEY", bad)

    @dg.asset
    def never(client: dg.ResourceParam[Client]):
        raise AssertionError("the asset must not run with a bad client")

    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([never], instance=instance, raise_on_error=False, resources={
            "client": ConnectionClient(base_url="http://127.0.0.1:9",
                                       secret_key=dg.EnvVar("LEDGERLAKE_BAD_KEY"))})
        recorded = "".join(dg.serialize_value(r) for r in instance.all_logs(result.run_id))
    assert not result.success
    assert "secret_key must be 1 to 512 visible ASCII characters" in recorded
    assert "the asset must not run" not in recorded
    assert bad not in recorded and "9" * 16 not in recorded
