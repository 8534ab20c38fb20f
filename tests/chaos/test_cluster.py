"""Broker faults on a three-node Kafka cluster (issue 37, item 2), on the Spark Connect engine only.

One cluster for the whole session (tests/chaos/cluster.py: replication factor 3, min.insync.replicas 2, for the
transaction state log too, broker timeouts lowered so that a fault resolves in seconds); PostgreSQL and the
Spark Connect server are the normal stack's. Each fault first reads from the cluster which node holds the role
it aims at (an output partition's leader, the lane's transaction coordinator) and asserts it hit that node at
that moment; each ends with the independent count (input vs sink vs read_committed output vs dead letters) and
`eosbatch verify`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from eosbatch import config
from eosbatch.kafka.read_back import read_topic
from tests.chaos.cluster import BrokerCluster, start_cluster, unread_bytes
from tests.chaos.control import Runner, end_exactly_once, wait_until
from tests.scenario import Scenario

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.spark, pytest.mark.slow,
              pytest.mark.parametrize("engine", ["connect"], indirect=True)]  # Kafka's faults: one engine is enough

RECORDS = 600  # ~610 offsets over 3 partitions: one batch of BATCH
BATCH = 1500
# The client's request timeout for the paused-leader case (librdkafka's socket.timeout.ms bounds a produce
# request's wait on the client; the default 60 s would make the test a minute longer).
REQUEST_TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def cluster(settings) -> Iterator[BrokerCluster]:
    """The three-node cluster, started once for this module (tests/chaos/cluster.py) and killed after it (three
    JVMs the rest of the suite has no use for)."""
    started = start_cluster()
    try:
        yield started
    finally:
        started.kill_all()  # its data is the tests' only; a graceful stop of the last nodes costs ~30 s


@pytest.fixture
def on_cluster(settings, cluster) -> Iterator[config.Settings]:
    """The settings with the cluster's bootstrap list; every node running and in sync after the test."""
    try:
        yield settings._replace(kafka_bootstrap=cluster.bootstrap)
    finally:
        cluster.restore()


def scenario_on(settings: config.Settings, unique: str, records: int = RECORDS, batch: int = BATCH) -> Scenario:
    """A Scenario whose topics (RF 3) and runs are on the cluster: the runner's producer, its marker reads and
    the Spark reader all get the whole bootstrap list."""
    scenario = Scenario(settings, unique, "totals", records=records, batch=batch)
    scenario.env_overrides[config.KAFKA_BOOTSTRAP] = settings.kafka_bootstrap
    return scenario


def lane_transactional_id(scenario: Scenario) -> str:
    return f"eosbatch.{scenario.pipeline}"  # the regular lane's (eosbatch.steps.shared.lane_transactional_id)


def finished_or_retried(scenario: Scenario, runner: Runner) -> int:
    """The runner's exit code, 0 or 3. After a node was lost, the run goes on to the end (exit 0), or an admin
    request (describe_topics, which librdkafka sends to the node the cluster names as controller: in KRaft any
    live broker, possibly the one just lost) waits out its 30 s and fails the run as transient (exit 3,
    KafkaUnavailable): then `eosbatch run` again, as Airflow retries a task, settles the batch."""
    exit_code = runner.wait()
    assert exit_code in (0, 3), runner.tail()
    if exit_code == 3:
        assert "KafkaUnavailable" in runner.stderr, runner.tail()
        again = scenario.run()
        assert again.returncode == 0, again.stderr[-3000:]
    return exit_code


def _replicas(settings: config.Settings, topic: str) -> set[int]:
    from eosbatch.kafka.offsets import admin

    metadata = admin(settings).list_topics(topic, timeout=20)
    return {len(p.replicas) for p in metadata.topics[topic].partitions.values()}


def test_leader_of_an_output_partition_killed_mid_transaction(on_cluster, cluster, unique, runners):
    """The runner is frozen inside the batch's Kafka transaction, its records produced and acknowledged by all
    in-sync replicas; the leader of the output partition holding most of them is SIGKILLed; the runner goes on
    (marker offsets, commit) against the new leader and coordinator. Nothing lost, nothing twice."""
    scenario = scenario_on(on_cluster, unique)
    assert _replicas(on_cluster, scenario.output) == {3} and _replicas(on_cluster, scenario.input) == {3}
    runner = runners.start(scenario, fault="publish.mid_produce:stop")
    frozen = runner.stopped_at("publish.mid_produce")
    held: dict[int, int] = {}
    for record in read_topic(on_cluster, scenario.output, "read_uncommitted"):
        held[record.partition] = held.get(record.partition, 0) + 1
    assert held, "no record of the open transaction in the output topic"
    partition = max(held, key=held.__getitem__)
    leader = cluster.leader_of(scenario.output, partition)  # read right before the kill
    assert leader is not None
    cluster.kill(leader)
    moved = cluster.wait_leader_moved(scenario.output, partition, away_from=leader)
    runner.resume(frozen)
    finished_or_retried(scenario, runner)
    assert runner.fired_points() == ["publish.mid_produce"] and moved != leader
    assert scenario.states() == ["published"]
    cluster.start(leader)
    end_exactly_once(scenario)


def test_transaction_coordinator_killed_during_commit_transaction(on_cluster, cluster, unique, runners):
    """The runner is frozen right before commit_transaction (marker offsets sent); the lane's transaction
    coordinator is paused, the runner resumed, and once its EndTxn request sits unread at the coordinator, the
    coordinator is SIGKILLed: the commit's outcome is decided by the node that takes over its partition of the
    transaction state log (from the PrepareCommit it replicated, or the EndTxn retried to it)."""
    scenario = scenario_on(on_cluster, unique)
    runner = runners.start(scenario, fault="publish.before_end_txn:stop")
    frozen = runner.stopped_at("publish.before_end_txn")
    tid = lane_transactional_id(scenario)
    coordinator = cluster.coordinator_of(tid)  # read right before the fault
    assert coordinator is not None
    cluster.pause(coordinator)
    runner.resume(frozen)
    wait_until(lambda: unread_bytes(runner.pid, cluster.port(coordinator)) > 0, 30,
               f"the runner's EndTxn to reach the paused coordinator, node {coordinator}")
    assert scenario.states() == ["committed"]  # the commit cannot have finished: its coordinator is paused
    cluster.kill(coordinator)
    moved = cluster.wait_coordinator_moved(tid, away_from=coordinator)
    finished_or_retried(scenario, runner)  # the commit goes on at the new coordinator
    assert runner.fired_points() == ["publish.before_end_txn"] and moved != coordinator
    assert scenario.states() == ["published"]
    cluster.start(coordinator)
    end_exactly_once(scenario)


def test_leader_paused_longer_than_the_request_timeout(on_cluster, cluster, unique, runners):
    """Two batches; the runner is frozen after the second's PostgreSQL commit, its producer (kept from the
    first batch) still believing what the cluster said then. The leader of an output partition (a node that
    coordinates neither the lane's transactions nor its marker group, so that only the produce goes there) is
    SIGSTOPped and the runner resumed: its requests reach the paused node (seen as bytes it has not read) and
    wait there longer than the client's request timeout (socket.timeout.ms) while the controller fences the node
    and moves its leaderships. Then the node is SIGCONTed and comes back believing it leads, the stale requests
    still in its socket. The producer's retry (same producer id and sequence) went to the new leader: published
    once."""
    scenario = scenario_on(on_cluster, unique, batch=350)
    scenario.env_overrides[config.KAFKA_CONFIG] = json.dumps({"socket.timeout.ms": REQUEST_TIMEOUT_MS})
    runner = runners.start(scenario, fault="commit.after_commit@2:stop")
    frozen = runner.stopped_at("commit.after_commit")
    assert scenario.states() == ["published", "committed"]
    busy = {cluster.coordinator_of(lane_transactional_id(scenario)), cluster.group_coordinator_of(
        lane_transactional_id(scenario))}  # the marker group has the transactional id's name
    leaders = {p: cluster.leader_of(scenario.output, p) for p in range(3)}  # read right before the pause
    partition, leader = next((p, node) for p, node in leaders.items() if node not in busy)
    cluster.pause(leader)
    paused_at = time.monotonic()
    runner.resume(frozen)
    wait_until(lambda: unread_bytes(runner.pid, cluster.port(leader)) > 0, 60,
               f"the runner's requests to reach the paused leader, node {leader}")
    moved = cluster.wait_leader_moved(scenario.output, partition, away_from=leader)
    wait_until(lambda: time.monotonic() - paused_at > REQUEST_TIMEOUT_MS / 1000 + 1, 30,
               "the paused leader to outlast the client's request timeout", interval=0.2)
    cluster.resume(leader)
    finished_or_retried(scenario, runner)  # its produce is retried to the new leader
    assert moved != leader and scenario.states() == ["published", "published"]
    end_exactly_once(scenario)


def test_rolling_restart_while_batches_run(on_cluster, cluster, unique, runners):
    """Every node is restarted in turn (a controlled shutdown, a start, in sync again before the next) while
    runners keep planning, processing, committing and publishing small batches. A run that fails meanwhile
    (a transient error, exit 3: an admin request that waited for a node going down) is run again, as Airflow
    retries a task."""
    scenario = scenario_on(on_cluster, unique, records=RECORDS, batch=100)  # ~7 batches: as many as a restart lasts
    restarted: list = []
    failure: list[BaseException] = []

    def restart_all() -> None:
        try:
            restarted.extend(cluster.rolling_restart())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failure.append(exc)

    runner = runners.start(scenario)
    wait_until(lambda: "published" in scenario.states() or runner.process.poll() is not None, 300,
               "the first batch to be published")
    published_before = scenario.states().count("published")
    restart = threading.Thread(target=restart_all, name="rolling-restart")
    restart.start()
    exits = []
    deadline = time.monotonic() + 400
    while restart.is_alive() or runner.process.poll() is None:
        assert time.monotonic() < deadline, f"runs still going after 400 s: {exits}, {runner.tail()}"
        if runner.process.poll() is not None:
            exits.append(runner.process.returncode)
            if exits[-1] == 0:  # caught up before the restart was over
                break
            runner = runners.start(scenario)
        time.sleep(0.2)
    restart.join(timeout=300)
    published_during = scenario.states().count("published") - published_before
    if runner.process.poll() is None or runner.process.returncode != 0:
        exits.append(runner.wait())
    if exits[-1] != 0:
        exits.append(scenario.run().returncode)
    assert not failure, failure
    assert [r.node for r in restarted] == cluster.node_ids and all(r.old_pid != r.new_pid for r in restarted)
    assert published_during > 0, "no batch was published during the rolling restart"
    assert set(exits) <= {0, 3} and exits[-1] == 0, (exits, runner.tail())
    end_exactly_once(scenario)
