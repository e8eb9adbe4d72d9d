"""pytest plugin of `make mutation` (loaded with `-p mutation.order` in mutmut's copy): the
tests a mutant runs go in the order mutation/run.py lists their files, the cheap in-process
ones first, so a mutant is killed by the cheapest test that can kill it. Within a file,
pytest's order stays."""

from __future__ import annotations

import os


def pytest_collection_modifyitems(items) -> None:
    order = [f for f in os.environ.get("LEDGERLAKE_MUTATION_ORDER", "").split(",") if f]

    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return order.index(path) if path in order else len(order)

    items.sort(key=rank)  # stable: each file's tests keep their order
