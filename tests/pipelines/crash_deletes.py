"""The crash tests' pipeline with deletes (tests/chaos, Scenario kind "deletes"); as tests/pipelines/crash.py."""

import os

from tests.pipelines.factory import make_deletes

deletes = make_deletes(os.environ.get("EOSBATCH_TEST_SUFFIX", "default"), int(os.environ.get("EOSBATCH_TEST_BATCH",
                       "1500")), os.environ.get("EOSBATCH_TEST_START", "earliest"))
