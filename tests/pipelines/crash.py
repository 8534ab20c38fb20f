"""Pipelines for the crash tests; EOSBATCH_TEST_SUFFIX gives each test its own topics, tables and ledger rows."""

import os

from tests.pipelines.factory import make, make_events

SUFFIX = os.environ.get("EOSBATCH_TEST_SUFFIX", "default")
BATCH = int(os.environ.get("EOSBATCH_TEST_BATCH", "1500"))
START = os.environ.get("EOSBATCH_TEST_START", "earliest")  # "latest": a pipeline started at the end

totals, latest = make(SUFFIX, BATCH, START)
events = make_events(SUFFIX, BATCH, START)  # None (not a pipeline) for the previous release
