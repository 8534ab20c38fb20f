"""A batch whose ranges hold only an aborted transaction's records (read_committed sees none of them)."""

from __future__ import annotations

import pytest

from eosbatch import config
from tests.scenario import Scenario


@pytest.mark.spark
@pytest.mark.slow
def test_a_batch_of_only_aborted_records_is_published_empty_and_the_lane_moves_on(settings, unique, kafka_reader):
    """900 records in batches of 300: the last 100 are an aborted transaction, so the last batch's ranges hold no
    committed record. Spark then reports no observed counts; the batch must still be counted (0 records), committed
    and published, and the next run must find nothing left to do."""
    scenario = Scenario(settings, unique, "totals", records=900, batch=300)
    scenario.env_overrides[config.KAFKA_READER] = kafka_reader
    for _ in range(2):
        done = scenario.run()
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert scenario.batches(), "nothing was planned"
    scenario.assert_exactly_once()
