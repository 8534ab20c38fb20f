"""A bounded number of staging writers (EOSBATCH_STAGING_WRITERS): a batch over many partitions opens at most
that many PostgreSQL connections at once, and stays exactly-once."""

from __future__ import annotations

import pytest

from eosbatch.ledger import store
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_one_staging_writer_for_a_batch_over_three_partitions(settings, unique) -> None:
    scenario = Scenario(settings, unique, "latest", batch=100_000)  # 3 partitions, one batch
    scenario.env_overrides = {"EOSBATCH_STAGING_WRITERS": "1"}
    done = scenario.run()
    assert done.returncode == 0, done.stderr[-3000:]
    [(batch_id, _, state)] = scenario.batches()
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
    assert state == "published" and len(batch.ranges) == 3
    assert len(batch.writer_counts("sink") or {}) == 1  # one task staged the whole batch
    scenario.assert_exactly_once()

    scenario.env_overrides = {"EOSBATCH_STAGING_WRITERS": "0"}
    refused = scenario.run()
    assert refused.returncode == 2 and "EOSBATCH_STAGING_WRITERS" in refused.stderr


def test_a_batch_of_many_more_partitions_than_cores_is_staged_by_fewer_tasks(settings, unique) -> None:
    """Unbounded by EOSBATCH_STAGING_WRITERS, a batch over 12 partitions on a 2-core engine is coalesced to
    one staging task per core (eosbatch.spark.tasks), its malformed records' dead letters too, exactly once."""
    scenario = Scenario(settings, unique, "latest", batch=100_000, partitions=12)  # one batch
    done = scenario.run()
    assert done.returncode == 0, done.stderr[-3000:]
    [(batch_id, _, state)] = scenario.batches()
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
    assert state == "published" and len(batch.ranges) == 12
    assert 1 <= len(batch.writer_counts("sink") or {}) < 12
    assert 1 <= len(batch.writer_counts("dead_letters") or {}) < 12
    scenario.assert_exactly_once()
