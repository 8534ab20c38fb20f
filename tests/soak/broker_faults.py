"""The soak's broker faults on the stack's three-node Kafka (`stack up --kafka-brokers 3`), through
tests/chaos/cluster.BrokerCluster (issue 37, items 2 and 3). Each asserts that it hit the intended role at that
moment (the node it strikes leads the output partition, or coordinates the lane's transactional id, as the cluster
answers from outside) and is confirmed by the cluster's answer afterwards: the leadership or the coordinator moved
to another node, the node's pid changed, the paused node was stopped (state T) and runs again.

A strike aims at a batch being published: it waits (bounded) until one of the pipeline's batches is committed in
the ledger and not yet published (its Kafka transaction is open or about to be), and says in its evidence whether
it found one."""

from __future__ import annotations

import time

from eosbatch import stack
from eosbatch.ledger import store
from tests.chaos.cluster import BrokerCluster
from tests.chaos.control import state, wait_until
from tests.scenario import Scenario
from tests.soak.faults import NotNow, World, started

PAUSE_SECONDS = 20.0  # a paused node outlasts the brokers' session timeout (9 s: it is fenced, its roles move)
# and the runner's request timeout (the soak sets socket.timeout.ms to REQUEST_TIMEOUT_MS)
REQUEST_TIMEOUT_MS = 10_000
AIM_SECONDS = 20.0


def stack_cluster() -> BrokerCluster:
    """The stack's own Kafka (EOSBATCH_KAFKA_PORT, its nodes' folders under EOSBATCH_HOME) as a BrokerCluster."""
    kafka = stack.kafka_of()
    return BrokerCluster(kafka, kafka.install(stack.home() / "cache"))


def publishing(scenario: Scenario) -> int | None:
    """The id of a batch of the pipeline that is committed and not yet published, if any."""
    with store.transaction(scenario.settings) as cur:
        cur.execute("SELECT max(id) FROM eosbatch.batches WHERE pipeline = %s AND state = 'committed'",
                    (scenario.pipeline,))
        row = cur.fetchone()
    return row[0] if row else None


def aim(world: World) -> str:
    """Wait (at most AIM_SECONDS) for a batch being published; how the strike landed, for the evidence."""
    deadline = time.monotonic() + AIM_SECONDS
    while time.monotonic() < deadline:
        batch = publishing(world.scenario)
        if batch is not None:
            return f"while batch {batch} was committed, not published"
        time.sleep(0.05)
    return "with no batch being published"


def restart_node(cluster: BrokerCluster, node: int) -> int:
    """Start a killed node again (its port retried if a client took it meanwhile); its new pid."""
    started(lambda: cluster.start(node), f"kafka node {node}", cluster.port(node))
    pid = cluster.pid(node)
    assert pid is not None
    return pid


class LeaderKill:
    name = "output_leader_sigkill"
    weight = 1.0
    confirmation = "the node was the partition's leader before; another node leads it after; a new pid"

    def inject(self, world: World) -> str:
        cluster, topic = world.cluster, world.scenario.output
        partition = world.rng.randrange(3)
        landed = aim(world)
        leader = cluster.leader_of(topic, partition)
        if leader is None:
            raise NotNow(f"{topic}-{partition} has no leader")
        old = cluster.kill(leader)
        moved = cluster.wait_leader_moved(topic, partition, leader)
        new = restart_node(cluster, leader)
        return (f"node {leader} (pid {old}) led {topic}-{partition}, SIGKILLed {landed}; node {moved} leads it; "
                f"node {leader} back as pid {new}")


class CoordinatorKill:
    name = "txn_coordinator_sigkill"
    weight = 1.0
    confirmation = "the node coordinated the lane's transactional id before; another node after; a new pid"

    def inject(self, world: World) -> str:
        cluster, tid = world.cluster, f"eosbatch.{world.scenario.pipeline}"
        landed = aim(world)
        coordinator = cluster.coordinator_of(tid)
        if coordinator is None:
            raise NotNow(f"no coordinator for {tid}")
        old = cluster.kill(coordinator)
        moved = cluster.wait_coordinator_moved(tid, coordinator)
        new = restart_node(cluster, coordinator)
        return (f"node {coordinator} (pid {old}) coordinated {tid}, SIGKILLed {landed}; node {moved} coordinates "
                f"it; node {coordinator} back as pid {new}")


class Pause:
    """SIGSTOP a node for PAUSE_SECONDS, then SIGCONT: it comes back believing it still holds its roles."""

    name = ""
    weight = 1.0
    confirmation = ""

    def target(self, world: World) -> tuple[int | None, str]:
        raise NotImplementedError

    def moved(self, world: World, node: int) -> int:
        raise NotImplementedError

    def inject(self, world: World) -> str:
        cluster = world.cluster
        landed = aim(world)
        node, role = self.target(world)
        if node is None:
            raise NotNow(f"nobody holds {role}")
        pid = cluster.pause(node)
        paused_at = time.monotonic()
        try:
            moved = self.moved(world, node)
            time.sleep(max(0.0, PAUSE_SECONDS - (time.monotonic() - paused_at)))  # the pause's own length
        finally:
            cluster.resume(node)
        held = time.monotonic() - paused_at
        wait_until(lambda: state(pid) not in ("T", None), 30, f"node {node} to run again")
        cluster.kafka.wait_in_sync(180)
        return (f"node {node} (pid {pid}) held {role}, SIGSTOPped {landed} for {held:.0f}s; node {moved} took "
                f"it over meanwhile; resumed, same pid, in sync again")


class LeaderPause(Pause):
    name = "output_leader_sigstop"
    confirmation = "the node led the partition; state T while another node took the leadership; running again"

    def target(self, world: World) -> tuple[int | None, str]:
        self.partition = world.rng.randrange(3)
        return world.cluster.leader_of(world.scenario.output, self.partition), \
            f"the leadership of {world.scenario.output}-{self.partition}"

    def moved(self, world: World, node: int) -> int:
        return world.cluster.wait_leader_moved(world.scenario.output, self.partition, node)


class CoordinatorPause(Pause):
    """Item 3's ambiguous commit: the coordinator stops answering while the runner's EndTxn may be in flight."""

    name = "txn_coordinator_sigstop"
    confirmation = "the node coordinated the transactional id; state T while another took over; running again"

    def target(self, world: World) -> tuple[int | None, str]:
        tid = f"eosbatch.{world.scenario.pipeline}"
        return world.cluster.coordinator_of(tid), f"the coordination of {tid}"

    def moved(self, world: World, node: int) -> int:
        return world.cluster.wait_coordinator_moved(f"eosbatch.{world.scenario.pipeline}", node)


class RollingRestart:
    name = "rolling_restart"
    weight = 0.25  # a minute or two of three JVM starts
    confirmation = "every node restarted in turn (a new pid each), the cluster in sync before the next"

    def inject(self, world: World) -> str:
        done = world.cluster.rolling_restart()
        assert len(done) == len(world.cluster.node_ids) and all(r.old_pid != r.new_pid for r in done), done
        return "; ".join(f"node {r.node} pid {r.old_pid} -> {r.new_pid}" for r in done)


def kinds() -> list:  # type: ignore[type-arg]
    return [LeaderKill(), CoordinatorKill(), LeaderPause(), CoordinatorPause(), RollingRestart()]
