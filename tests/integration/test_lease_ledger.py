"""Lane leases against the real ledger, no Spark: a busy lane is left alone (epoch untouched), an expired
or dead holder is taken over and fenced, a released lane is free at once, and `eosbatch run` says busy."""

from __future__ import annotations

import socket
import subprocess

import pytest

from eosbatch import KafkaSource, Pipeline, PostgresSink, config, registry, steps
from eosbatch import lease as leases
from eosbatch.cli import EXIT_TRANSIENT
from eosbatch.ledger import lanes, store
from eosbatch.ledger.exceptions import LaneBusy, LaneLost, StaleEpoch
from eosbatch.protocol.lease import airflow_owner, cli_owner
from examples.orders import generate
from tests.scenario import Scenario, context

pytestmark = pytest.mark.integration

A, B = airflow_owner("eosbatch__lease", "run_a"), "test:runner-b"  # a DAG run, and another kind of runner


def _pipeline(settings, unique: str) -> str:
    topic = f"lease_in_{unique}"
    generate.ensure_topics(settings, {topic: 2})
    generate.generate(settings, topic, records=100, partitions=2, abort_every=0)
    registry.register(Pipeline(name=f"lease_{unique}", source=KafkaSource(topics=[topic]), transform=lambda df: df,
                               sink=PostgresSink(table=f"lease_{unique}", key=["offset"])))
    return f"lease_{unique}"


def epoch(settings, name: str) -> int:
    with store.transaction(settings) as cur:
        return lanes.lock_pipeline(cur, name)


def lease_row(settings, name: str, lane: str = "regular"):
    with store.transaction(settings) as cur:
        return lanes.lane_leases(cur, name)[lane]


def expire(settings, name: str) -> None:
    """What the clock would do after EOSBATCH_LEASE_SECONDS without a renewal."""
    with store.transaction(settings) as cur:
        cur.execute("UPDATE eosbatch.lane_leases SET expires_at = clock_timestamp() - interval '1 second' "
                    "WHERE pipeline = %s", (name,))


def test_a_busy_lane_is_left_alone_then_taken_over_after_expiry_and_the_old_holder_is_fenced(settings, unique):
    name = _pipeline(settings, unique)
    planned = steps.plan(context(name), owner=A)
    assert planned is not None
    before = epoch(settings, name)
    with pytest.raises(LaneBusy) as busy:
        steps.plan(context(name), owner=B)
    assert A in str(busy.value) and "regular lane" in str(busy.value) and " s)" in str(busy.value)
    assert epoch(settings, name) == before  # no bump: A keeps working undisturbed
    with store.transaction(settings) as cur:
        assert store.get_batch(cur, planned.id).state == "planned"
    leases.renew(config.load(), name, "regular", A)  # A is still the holder

    expire(settings, name)  # A froze past its lease
    taker = steps.recover(context(name), owner=B)
    assert taker == before + 1
    (held, takeovers) = lease_row(settings, name)
    assert held.owner == B and takeovers == 1
    with store.transaction(settings) as cur:
        assert store.get_batch(cur, planned.id).state == "aborted"  # B's recovery aborted A's batch
    with pytest.raises(LaneLost) as lost:  # A wakes up: its renewal says who took the lane
        leases.renew(config.load(), name, "regular", A)
    assert B in str(lost.value) and isinstance(lost.value, StaleEpoch)
    with pytest.raises(StaleEpoch):
        steps.commit(context(name), planned.id)
    with pytest.raises(LaneBusy):  # and A cannot take the lane back while B holds it
        steps.recover(context(name), owner=A)


def test_the_holder_plans_again_without_a_takeover_and_a_released_lane_is_free_at_once(settings, unique):
    name = _pipeline(settings, unique)
    first = steps.plan(context(name), owner=A)
    again = steps.plan(context(name), owner=A)  # the holder's next plan (a retry, the next batch): renew, no takeover
    assert first is not None and again is not None and again.ranges == first.ranges
    assert lease_row(settings, name)[1] == 0
    leases.release(config.load(), name, "regular", B)  # not B's: nothing happens
    assert lease_row(settings, name)[0].owner == A
    leases.release(config.load(), name, "regular", A)
    assert lease_row(settings, name)[0].owner is None
    assert steps.plan(context(name), owner=B) is not None  # no wait for an expiry
    assert lease_row(settings, name)[1] == 0  # taken, not taken over


def test_a_cli_holder_whose_process_is_gone_is_taken_over_before_its_expiry(settings, unique):
    name = _pipeline(settings, unique)
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = cli_owner(socket.gethostname(), dead.pid, "gone")
    epoch = steps.recover(context(name), owner=gone)
    assert steps.recover(context(name), owner=B) == epoch + 1  # the dead CLI never renews nor releases: no wait for it
    assert lease_row(settings, name)[0].owner == B and lease_row(settings, name)[1] == 1
    leases.release(config.load(), name, "regular", B)
    steps.recover(context(name), owner=cli_owner(socket.gethostname(), 1, "init"))  # pid 1 lives: wait for the expiry
    with pytest.raises(LaneBusy):
        steps.recover(context(name), owner=B)


def test_a_new_run_of_the_same_dag_takes_over_from_an_earlier_run_at_once(settings, unique):
    name = _pipeline(settings, unique)
    steps.plan(context(name), owner=A)  # run_a fails where nothing releases the lease (say, publish for good)
    with pytest.raises(LaneBusy):  # another runner waits for its expiry
        steps.recover(context(name), owner=B)
    later = airflow_owner("eosbatch__lease", "run_c")  # max_active_runs=1: run_a has ended
    steps.plan(context(name), owner=later)
    assert lease_row(settings, name)[0].owner == later and lease_row(settings, name)[1] == 1


def test_eosbatch_run_on_a_busy_lane_exits_transient_with_one_line(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=50)
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, scenario.pipeline)
        leases.acquire(cur, config.load(), scenario.pipeline, "regular", A)
    busy = scenario.run()
    assert busy.returncode == EXIT_TRANSIENT, busy.stderr[-2000:]
    lines = busy.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eosbatch: LaneBusy: ") and A in lines[0], lines
    assert scenario.batches() == []
    assert epoch(settings, scenario.pipeline) == 0
