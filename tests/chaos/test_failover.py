"""PostgreSQL failover (issue 37, item 4) on the embedded stack's streaming replica, Connect engine only.

- Synchronous replica: the runner is frozen right after the COMMIT of its batch (the primary's COMMIT returned
  only once the replica had flushed it); the primary stops immediately, the replica is promoted, and `eosbatch
  run`, through the multi-host URL (target_session_attrs=read-write), finds the batch committed on the new
  primary and finishes it: exactly once.
- Asynchronous replica that missed the last commits: detached from the primary, it misses a batch that commits
  and publishes; the primary stops immediately, the replica is promoted. The ledger is now behind the output:
  `eosbatch run` stops, terminal, naming the lost range; `eosbatch adopt-published` takes it back without
  producing it again; the run goes on: exactly once.

Each test puts the stack back as it was (the primary on its own port, a synchronous replica; none if there was
none before)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from eosbatch.cli import EXIT_TERMINAL
from eosbatch.ledger import store
from tests.chaos.control import Services, end_exactly_once, wait_for_lease_expiry
from tests.chaos.failover import Failover
from tests.scenario import Scenario

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

RECORDS = 1200  # one batch of ~1,220 offsets over 3 partitions
BATCH = 1500
# A killed runner's lease is taken over at once when its pid is gone; on a busy machine the pid may already be
# another process's, and then the lease must expire: kept short.
SHORT_LEASE = {"EOSBATCH_LEASE_SECONDS": "4"}


@pytest.fixture
def failover(settings, engine) -> Iterator[Failover]:
    if engine != "connect":
        pytest.skip("failover tests the ledger's database, not the engine: the Connect engine only")
    if not Services().embedded(settings.database_url, settings.kafka_bootstrap):
        reason = "failover tests stop and promote the embedded stack's PostgreSQL; the settings name other servers"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    found = Failover()
    try:
        yield found
    finally:
        found.restore()


def _ranges(settings, batch_id: int) -> list[str]:
    with store.transaction(settings) as cur:
        return [f"{r.topic}:{r.partition} [{r.start}, {r.end})" for r in store.get_batch(cur, batch_id).ranges]


def test_sync_replica_promoted_mid_commit_then_the_run_goes_on_exactly_once(settings, unique, runners, failover):
    failover.ensure_replica("sync")
    through_both = settings._replace(database_url=failover.url)
    scenario = Scenario(through_both, unique, "totals", records=RECORDS, batch=BATCH)
    scenario.env_overrides.update(SHORT_LEASE)
    runner = runners.start(scenario, fault="commit.after_commit:stop")
    runner.stopped_at("commit.after_commit")
    gone = failover.stop_primary_immediately()
    failover.promote_replica()
    runner.kill()
    assert runner.fired_points() == ["commit.after_commit"]
    assert failover.current_primary().port == failover.replica.port and gone not in (failover.primary.pid(),)
    [(batch_id, _, state)] = scenario.batches()  # read from the promoted replica, through the multi-host URL
    assert state == "committed", "the synchronous replica lost the COMMIT the primary had acknowledged"
    wait_for_lease_expiry(through_both, scenario.pipeline, 30, "the killed runner")
    done = scenario.run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert scenario.states() == ["published"]
    end_exactly_once(scenario)


def test_async_replica_that_missed_a_published_batch_stops_the_run_until_adopted(settings, unique, failover):
    failover.ensure_replica("async")
    through_both = settings._replace(database_url=failover.url)
    scenario = Scenario(through_both, unique, "totals", records=RECORDS, batch=BATCH)
    scenario.env_overrides.update(SHORT_LEASE)
    first = scenario.run()
    assert first.returncode == 0, first.stderr[-3000:]
    failover.caught_up()
    failover.detach_replica()  # from here the primary commits without the replica
    scenario.produce(300)
    second = scenario.run()
    assert second.returncode == 0, second.stderr[-3000:]
    (_, _, kept), (lost_id, _, lost_state) = scenario.batches()
    assert (kept, lost_state) == ("published", "published")
    lost = _ranges(through_both, lost_id)
    failover.stop_primary_immediately()
    failover.promote_replica()
    assert [state for _, _, state in scenario.batches()] == ["published"], "the replica did not miss the batch"

    stopped = scenario.run()
    assert stopped.returncode == EXIT_TERMINAL, stopped.stderr[-3000:]
    named = re.findall(r"\S+:\d+ \[\d+, \d+\)", stopped.stderr)
    assert "the ledger is behind the output" in stopped.stderr and sorted(named) == sorted(lost), \
        (lost, stopped.stderr[-3000:])
    assert f"eosbatch adopt-published {scenario.pipeline}" in stopped.stderr
    assert [state for _, _, state in scenario.batches()] == ["published"], "the stopped run planned a batch"
    audit = scenario.cli("verify", scenario.pipeline, "--no-recompute")  # verify checks the invariant too
    assert audit.returncode == 1 and "ledger not behind the output" in audit.stdout + audit.stderr, \
        audit.stdout[-3000:] + audit.stderr[-2000:]

    refused = scenario.cli("adopt-published", scenario.pipeline)  # no terminal, no --yes: asks, so refuses
    assert refused.returncode != 0 and "--yes" in refused.stderr, refused.stderr[-2000:]
    adopted = scenario.cli("adopt-published", scenario.pipeline, "--yes")
    assert adopted.returncode == 0, adopted.stderr[-3000:]
    assert [state for _, _, state in scenario.batches()] == ["published", "published"]

    after = scenario.run()  # the pipeline goes on: its plan finds the ledger level with the output
    assert after.returncode == 0 and "0 batches" in after.stdout, after.stdout[-2000:] + after.stderr[-3000:]
    end_exactly_once(scenario)
