"""Page ranges of /transactions/get, which let one big record be fetched side by side."""

from __future__ import annotations

import pyarrow as pa
import pytest

from resources.client import Client


@pytest.fixture(scope="module")
def record(shared_sandbox):
    with shared_sandbox.api() as api:
        made = api.post("sandbox/customers/create",
                        json={"customers": [{"accounts": 2, "months": 2, "volume": 20}]})
        assert made.status_code == 200, made.text
        return made.json()["data"]["customers"][0]["record"]


def test_ranges_join_to_the_whole(shared_sandbox, record):
    with Client(base_url=shared_sandbox.url, secret_key=shared_sandbox.sandbox_key,
                          environment="sandbox") as client:
        whole = client.transactions(record)
        assert client.transaction_total(record) == whole.num_rows > 1000
        head = client.transactions(record, first_page=1, last_page=10)
        tail = client.transactions(record, first_page=11)
        assert head.num_rows == 1000
        assert pa.concat_tables([head, tail]).equals(whole)
        one = client.transactions(record, first_page=3, last_page=3)
        assert one.equals(whole.slice(200, 100))
