"""The crash tests' pipeline with an evolving sink (tests/chaos, Scenario kind "evolving"); as
tests/pipelines/crash_deletes.py."""

import os

from tests.pipelines.factory import make_evolving

evolving = make_evolving(os.environ.get("EOSBATCH_TEST_SUFFIX", "default"), int(os.environ.get(
    "EOSBATCH_TEST_BATCH", "1500")), os.environ.get("EOSBATCH_TEST_START", "earliest"))
