"""The three-node Kafka cluster the broker faults run on, and what they do to it: find who leads a partition or
coordinates a transactional id, SIGKILL a node, SIGSTOP and SIGCONT it, restart it, restart them all in turn.

The cluster is the stack's own (eosbatch.stack.kafka_cluster.KafkaCluster), started by `start_cluster` in its own
folder under EOSBATCH_HOME on its own ports (EOSBATCH_TEST_CLUSTER_PORT, default 19192: nodes on 19192, 19195
and 19198, each with its controller on +1 and SASL listener on +2), with broker timeouts lowered (FAST) so that
a lost node is fenced and its leaderships move within seconds. PostgreSQL and the Spark Connect server stay the
normal stack's. Every wait is bounded and names what it waited for.

Used by tests/chaos/test_cluster.py; the names below are kept stable for other tests (a soak) to import.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from eosbatch import stack
from eosbatch.stack.exceptions import StackError
from eosbatch.stack.kafka_cluster import KafkaCluster, group_coordinator, partition_leaders, transaction_coordinator
from eosbatch.stack.processes import alive
from tests.chaos.control import state, wait_until

PORT = "EOSBATCH_TEST_CLUSTER_PORT"  # node 1's port; node i on PORT + 3(i-1)
DEFAULT_PORT = 19192
FOLDER = "test-kafka-cluster"  # under EOSBATCH_HOME

# Broker settings that make a fault resolve in seconds instead of the production defaults' tens of seconds.
FAST = {
    "broker.session.timeout.ms": "3000",  # a node silent this long is fenced: its leaderships move (default 9 s)
    "broker.heartbeat.interval.ms": "500",  # (default 2 s)
    "replica.lag.time.max.ms": "3000",  # a follower this far behind leaves the in-sync set (default 30 s)
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",  # (default 10 s)
    "group.initial.rebalance.delay.ms": "0",
}
WAIT = 90.0  # seconds: a node's start, fencing, catching up


class Restarted(NamedTuple):
    node: int
    old_pid: int
    new_pid: int


class BrokerCluster:
    """Control of a running KafkaCluster's nodes (node ids 1..n) from a test."""

    def __init__(self, kafka: KafkaCluster, jars: Path) -> None:
        self.kafka = kafka
        self.jars = jars

    @property
    def bootstrap(self) -> str:
        """Every node's address, as EOSBATCH_KAFKA_BOOTSTRAP lists them."""
        return self.kafka.bootstrap

    @property
    def node_ids(self) -> list[int]:
        return [node.node_id for node in self.kafka.nodes]

    def port(self, node: int) -> int:
        return self.kafka.node(node).port

    def pid(self, node: int) -> int | None:
        return self.kafka.node(node).pid()

    def _live_bootstrap(self, excluding: int | None = None) -> str:
        """The nodes that can answer now (running, not paused, not `excluding`): a paused node would hold a
        metadata request until it resumes."""
        live = [node.bootstrap for node in self.kafka.nodes if node.node_id != excluding
                and (pid := node.pid()) is not None and state(pid) not in ("T", None)]
        return ",".join(live) or self.bootstrap

    def leader_of(self, topic: str, partition: int, excluding: int | None = None) -> int | None:
        """The node leading `topic`'s `partition` now, as the cluster's metadata says (asked of the running,
        unpaused nodes, and not of `excluding`: a node that just came back may still believe it leads)."""
        return partition_leaders(self._live_bootstrap(excluding), [topic]).get((topic, partition))

    def coordinator_of(self, transactional_id: str, excluding: int | None = None) -> int | None:
        """The node coordinating `transactional_id` now: the cluster's answer to FindCoordinator."""
        return transaction_coordinator(self._live_bootstrap(excluding), transactional_id)

    def group_coordinator_of(self, group: str, excluding: int | None = None) -> int | None:
        """The node coordinating consumer group `group` now (a lane's marker group commits there)."""
        return group_coordinator(self._live_bootstrap(excluding), group)

    def wait_leader_moved(self, topic: str, partition: int, away_from: int) -> int:
        """Until a node other than `away_from` leads the partition (the controller fenced it); that node."""
        return wait_until(lambda: _moved(lambda: self.leader_of(topic, partition, excluding=away_from), away_from),
                          WAIT, f"{topic}-{partition}'s leadership to leave node {away_from}", interval=0.2)

    def wait_coordinator_moved(self, transactional_id: str, away_from: int) -> int:
        """Until a node other than `away_from` coordinates `transactional_id`; that node."""
        return wait_until(lambda: _moved(lambda: self.coordinator_of(transactional_id, excluding=away_from),
                                         away_from),
                          WAIT, f"the coordinator of {transactional_id} to leave node {away_from}", interval=0.2)

    def kill(self, node: int) -> int:
        """SIGKILL the node (no controlled shutdown, no flush: its leaderships move only once the controller
        fences it); its pid. It stays down until start(node) or restore()."""
        pid = self.pid(node)
        assert pid is not None, f"kafka node {node} is not running"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not alive(pid), 30, f"kafka node {node} (pid {pid}) to die")
        return pid

    def pause(self, node: int) -> int:
        """SIGSTOP the node, as a long GC pause or a frozen VM: its sockets stay open, it answers nothing and
        sends no heartbeat; its pid."""
        pid = self.pid(node)
        assert pid is not None, f"kafka node {node} is not running"
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: state(pid) == "T", 30, f"kafka node {node} (pid {pid}) to stop")
        return pid

    def resume(self, node: int) -> None:
        """SIGCONT a paused node: it carries on from where it was, believing what it believed then."""
        pid = self.pid(node)
        assert pid is not None, f"kafka node {node} is not running"
        os.kill(pid, signal.SIGCONT)
        wait_until(lambda: state(pid) != "T", 30, f"kafka node {node} (pid {pid}) to resume")

    def start(self, node: int) -> int:
        """Start a stopped (or killed) node; return once it is registered and every partition is fully in
        sync again; its pid."""
        self.kafka.start_node(node, self.jars)
        self.kafka.wait_registered([node], WAIT)
        self.kafka.wait_in_sync(WAIT)
        pid = self.pid(node)
        assert pid is not None
        return pid

    def restart(self, node: int) -> Restarted:
        """A controlled restart (SIGTERM: the node hands its leaderships over first), then start(node)."""
        old = self.pid(node)
        assert old is not None, f"kafka node {node} is not running"
        self.kafka.stop_node(node)
        return Restarted(node, old, self.start(node))

    def rolling_restart(self) -> list[Restarted]:
        """Restart every node in turn, each only once the previous one is back in sync (as an operator's
        rolling upgrade does), so that two of three replicas stay in sync throughout."""
        self.kafka.wait_in_sync(WAIT)
        return [self.restart(node) for node in self.node_ids]

    def restore(self) -> None:
        """Whatever a test did, leave every node running, unpaused, registered and in sync."""
        self.unpause_all()
        for node in self.kafka.nodes:
            if node.pid() is None:
                node.start(self.jars)
        self.kafka.wait_registered(self.node_ids, WAIT)
        self.kafka.wait_in_sync(WAIT)

    def stop(self) -> None:
        """Stop every node (a paused one is resumed first, so that SIGTERM can stop it)."""
        self.unpause_all()
        self.kafka.stop()

    def kill_all(self) -> None:
        """SIGKILL every node (the session's end: nothing in the cluster is kept for later)."""
        for node in self.kafka.nodes:
            if node.pid() is not None:
                self.kill(node.node_id)

    def unpause_all(self) -> None:
        for node in self.kafka.nodes:
            pid = node.pid()
            if pid is not None and state(pid) == "T":
                os.kill(pid, signal.SIGCONT)


def _moved(read: Callable[[], int | None], away_from: int) -> int | None:
    """The node `read` names when it is another than `away_from`; None meanwhile (no answer counts as none)."""
    try:
        found = read()
    except StackError:
        return None
    return found if found not in (None, away_from) else None


def start_cluster(home: Path | None = None, port: int | None = None) -> BrokerCluster:
    """Start (formatting it the first time) the three-node test cluster under EOSBATCH_HOME/FOLDER, node 1 on
    `port` (default: EOSBATCH_TEST_CLUSTER_PORT, else 19192), with the FAST settings; once every node is
    registered and transactions work."""
    root = (home or stack.home()) / FOLDER
    port = port or int(os.environ.get(PORT, DEFAULT_PORT))
    kafka = KafkaCluster(root, port, brokers=3, overrides=FAST)
    jars = kafka.install(stack.home() / "cache")
    started = time.monotonic()
    kafka.start(jars)
    kafka.wait_ready(timeout=180)
    cluster = BrokerCluster(kafka, jars)
    cluster.started_in = time.monotonic() - started  # type: ignore[attr-defined]
    return cluster


def unread_bytes(client_pid: int, server_port: int) -> int:
    """Bytes that process `client_pid` sent to the local server on `server_port` and that the server has not
    read yet (its sockets' receive queues, from /proc/net/tcp): how a test sees that a request reached a
    paused broker."""
    inodes = set()
    for fd in Path(f"/proc/{client_pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows += Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
    client_ports, server_side = set(), []
    for row in rows:
        fields = row.split()
        local_port, remote_port = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
        received = int(fields[4].split(":")[1], 16)
        if fields[9] in inodes:
            client_ports.add(local_port)
        if local_port == server_port:
            server_side.append((remote_port, received))
    return sum(received for remote, received in server_side if remote in client_ports)
