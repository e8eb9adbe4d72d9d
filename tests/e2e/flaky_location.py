"""A code location that cannot load while the file LEDGERLAKE_TEST_LOCATION_DOWN names exists
(tests/e2e/test_queue.py): what a code server sees while Postgres restarts under it."""

import os
from pathlib import Path

import dagster as dg

if Path(os.environ["LEDGERLAKE_TEST_LOCATION_DOWN"]).exists():
    raise RuntimeError("this code location is down: the test's flag file exists")


@dg.op
def step() -> None:
    """Nothing: the run only has to start."""


@dg.job
def queued_job() -> None:
    step()


defs = dg.Definitions(jobs=[queued_job])
