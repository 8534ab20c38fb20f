"""The stack's Kafka: one KRaft node (the default), or a cluster of several, each node a broker and a
controller in one process (`stack up --kafka-brokers 3`, EOSBATCH_KAFKA_BROKERS=3).

Node 1 is the single node's folder (`kafka/`) and port, so settings made for one node keep working; node i
takes the base port + 3·(i-1) (its client port, its controller +1, its SASL listener +2) and the folder
`kafka-i/`. Every node is a voter of the controller quorum. With three nodes the topics we create (with the
broker's default replication factor) and the internal topics (consumer offsets, transaction state) have
three replicas and `min.insync.replicas` 2: one node can be lost without losing a write or stopping one.

What the faults of tests/chaos/test_cluster.py and `stack status` need is here too: which node leads a
partition and which coordinates a transactional id, read from the cluster.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from eosbatch.stack import processes
from eosbatch.stack.exceptions import StackError, StackNotReady
from eosbatch.stack.kafka import KafkaBroker, new_cluster_id, wait_transactions

PORT_STEP = 3  # a node's client port, its controller's (+1) and its SASL listener's (+2)
MAX_REPLICAS = 3
_SHAPE = "nodes"  # in node 1's folder: how many nodes the storage was formatted for


def replication(brokers: int) -> dict[str, str]:
    """The settings a cluster of `brokers` nodes adds to the single node's: replication factor min(n, 3) for
    the internal topics and for topics created with the broker's default, and min.insync.replicas one less
    (2 of 3), for the transaction state log too. None for one node: its settings stay exactly as they are."""
    if brokers == 1:
        return {}
    factor = min(brokers, MAX_REPLICAS)
    in_sync = str(max(1, factor - 1))
    return {"offsets.topic.replication.factor": str(factor), "transaction.state.log.replication.factor": str(factor),
            "transaction.state.log.min.isr": in_sync, "default.replication.factor": str(factor),
            "min.insync.replicas": in_sync}


def formatted_nodes(home: Path, folder: str = "kafka") -> int | None:
    """How many nodes the Kafka storage under `home` was formatted for; None when it never was."""
    first = home / folder
    try:
        return int((first / _SHAPE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return 1 if (first / "data" / "meta.properties").exists() else None


class KafkaCluster:
    """`brokers` nodes from `port` on, their folders under `home`; `overrides`: broker settings over the
    template's for every node (tests lower the timeouts with them)."""

    def __init__(self, home: Path, port: int, brokers: int = 1, overrides: Mapping[str, str] | None = None,
                 folder: str = "kafka") -> None:
        if brokers < 1:
            raise StackError(f"kafka: a cluster needs at least one broker, not {brokers}")
        self.home, self.folder, self.brokers = home, folder, brokers
        ports = [port + PORT_STEP * index for index in range(brokers)]
        voters = ",".join(f"{index}@127.0.0.1:{p + 1}" for index, p in enumerate(ports, 1)) if brokers > 1 else ""
        settings = {**replication(brokers), **(overrides or {})}
        self.nodes = [KafkaBroker(home, p, node_id=index, folder=folder if index == 1 else f"{folder}-{index}",
                                  voters=voters, overrides=settings) for index, p in enumerate(ports, 1)]

    def node(self, node_id: int) -> KafkaBroker:
        if not 1 <= node_id <= self.brokers:
            raise StackError(f"kafka: no node {node_id}; this cluster has nodes 1 to {self.brokers}")
        return self.nodes[node_id - 1]

    @property
    def bootstrap(self) -> str:
        """Every node's client address: what EOSBATCH_KAFKA_BOOTSTRAP exports."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(node.sasl_bootstrap for node in self.nodes)

    @property
    def log(self) -> Path:
        return self.nodes[0].log

    def pid(self) -> int | None:
        """Node 1's pid (the single node's); pids() has every node's."""
        return self.nodes[0].pid()

    def pids(self) -> dict[int, int | None]:
        return {node.node_id: node.pid() for node in self.nodes}

    def install(self, cache: Path) -> Path:
        return self.nodes[0].install(cache)

    def check_shape(self) -> int | None:
        """StackError when the storage was formatted for another number of nodes; else that number (None: never
        formatted)."""
        found = formatted_nodes(self.home, self.folder)
        if found is not None and found != self.brokers:
            folders = ", ".join(str(self.home / (self.folder if i == 1 else f"{self.folder}-{i}"))
                                for i in range(1, max(found, self.brokers) + 1))
            raise StackError(f"kafka: the storage in {self.home / self.folder} was formatted for {found} node(s), "
                             f"not {self.brokers}: ask for {found} (--kafka-brokers, EOSBATCH_KAFKA_BROKERS), or "
                             f"`eosbatch stack down` and delete {folders} (its topics go with it)")
        return found

    def start(self, jars: Path) -> None:
        """Start the stopped nodes, formatting every node's storage with one cluster id the first time."""
        found = self.check_shape()
        cluster_id = "" if found is not None else new_cluster_id()
        for node in self.nodes:
            node.start(jars, cluster_id)
        if found is None and self.brokers > 1:
            (self.nodes[0].home / _SHAPE).write_text(f"{self.brokers}\n")

    def start_node(self, node_id: int, jars: Path) -> None:
        node = self.node(node_id)
        if not node.formatted():
            raise StackError(f"kafka: node {node_id} was never started; `eosbatch stack up` starts the cluster")
        node.start(jars)

    def stop_node(self, node_id: int) -> bool:
        return self.node(node_id).stop()

    def stop(self) -> bool:
        """Stop every node, all at once: one after another, the last ones would wait for a controller quorum
        that is gone (until SIGKILL); True when one was running."""
        if self.brokers == 1:
            return self.nodes[0].stop()
        with ThreadPoolExecutor(self.brokers) as pool:
            return any(list(pool.map(KafkaBroker.stop, self.nodes)))

    def wait_ready(self, timeout: float = 120.0) -> None:
        """One node: as the single node always was. Several: every node registered with the controllers and a
        transactional producer can init_transactions() against the whole bootstrap list."""
        if self.brokers == 1:
            self.nodes[0].wait_ready(timeout)
            return
        deadline = time.monotonic() + timeout
        self.wait_registered(self.pids(), deadline - time.monotonic())
        wait_transactions(self.bootstrap, deadline, self._check_alive)

    def _check_alive(self, node_ids: Iterable[int] | None = None) -> None:
        for node_id in node_ids or range(1, self.brokers + 1):
            node = self.node(node_id)
            if node.pid() is None:
                raise StackError(f"kafka: node {node_id} is not running; see {node.log}:\n{processes.tail(node.log)}")

    def registered(self) -> set[int]:
        """The nodes the cluster's metadata has as live brokers (a stopped or fenced one is missing)."""
        from confluent_kafka import KafkaException

        try:
            found = _admin(self.bootstrap).describe_cluster(request_timeout=5).result(timeout=10)
        except (KafkaException, TimeoutError):
            return set()
        return {node.id for node in found.nodes}

    def wait_registered(self, node_ids: Iterable[int], timeout: float = 90.0) -> None:
        wanted = set(node_ids)
        deadline = time.monotonic() + timeout
        while not wanted <= (found := self.registered()):
            self._check_alive(wanted)
            if time.monotonic() > deadline:
                raise StackNotReady(f"kafka: node(s) {sorted(wanted - found)} not registered after {timeout:.0f}s; "
                                    f"see {self.nodes[0].home.parent}/{self.folder}*/kafka.log")
            time.sleep(0.2)

    def wait_in_sync(self, timeout: float = 90.0) -> None:
        """Until no partition of any topic (the internal ones too) lacks a replica in its in-sync set: what a
        rolling restart waits for before it stops the next node."""
        deadline = time.monotonic() + timeout
        while behind := under_replicated(self.bootstrap):
            if time.monotonic() > deadline:
                raise StackNotReady(f"kafka: {len(behind)} partition(s) still under-replicated after "
                                    f"{timeout:.0f}s, e.g. {behind[:3]}")
            time.sleep(0.2)


def under_replicated(bootstrap: str) -> list[tuple[str, int]]:
    """(topic, partition) of every partition whose in-sync replicas are fewer than its replicas."""
    from confluent_kafka import KafkaException

    try:
        metadata = _admin(bootstrap).list_topics(timeout=10)
    except KafkaException:
        return [("(no metadata: no node answered)", -1)]
    return sorted((name, p.id) for name, topic in metadata.topics.items() for p in topic.partitions.values()
                  if len(p.isrs) < len(p.replicas))


def partition_leaders(bootstrap: str, topics: Iterable[str]) -> dict[tuple[str, int], int | None]:
    """The node leading each partition of `topics`, as the cluster's metadata says now (a Metadata request,
    which any node answers: describe_topics would wait for the node named as controller, which may be the one
    just lost); None for a partition without a leader. A topic that does not exist is left out."""
    from confluent_kafka import KafkaException

    names = set(topics)
    if not names:
        return {}
    try:
        metadata = _admin(bootstrap).list_topics(timeout=10)
    except KafkaException as exc:
        raise StackError(f"kafka: no metadata from {bootstrap}: {exc.args[0].str()}") from None
    return {(name, p.id): (p.leader if p.leader >= 0 else None) for name, topic in metadata.topics.items()
            if name in names and topic.error is None for p in topic.partitions.values()}


def transaction_coordinator(bootstrap: str, transactional_id: str) -> int | None:
    """The node coordinating `transactional_id` now, as the cluster answers a client's FindCoordinator (the
    leader of the id's partition of the transaction state log), asked of the first node of `bootstrap` that
    answers within a second or two (a paused node does not); None while no node answers or none coordinates
    it (COORDINATOR_NOT_AVAILABLE: the partition has no leader, or the log does not exist yet)."""
    return _coordinator(bootstrap, transactional_id, TRANSACTION_KEY)


def group_coordinator(bootstrap: str, group: str) -> int | None:
    """The node coordinating consumer group `group` (where a transaction's marker offsets are committed): the
    leader of the group's partition of __consumer_offsets, as transaction_coordinator asks it."""
    return _coordinator(bootstrap, group, GROUP_KEY)


def _coordinator(bootstrap: str, key: str, key_type: int) -> int | None:
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            return find_coordinator(host, int(port), key, key_type)
        except OSError:
            continue
    return None


_FIND_COORDINATOR, _VERSION = 10, 1  # FindCoordinator v1: Kafka 0.11 to 4.x
GROUP_KEY, TRANSACTION_KEY = 0, 1


def find_coordinator(host: str, port: int, key: str, key_type: int = TRANSACTION_KEY,
                     timeout: float = 2.0) -> int | None:
    """One FindCoordinator request (v1: a plain key, no tagged fields) to the node at host:port for a
    transactional id or (GROUP_KEY) a consumer group; the node id it names, or None with an error code
    (COORDINATOR_NOT_AVAILABLE). OSError when it does not answer in `timeout` seconds. confluent-kafka's
    AdminClient has no call for it (nor DescribeTransactions)."""
    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack(">h", len(raw)) + raw

    request = (struct.pack(">hhi", _FIND_COORDINATOR, _VERSION, 1) + string("eosbatch-stack")
               + string(key) + struct.pack(">b", key_type))
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.sendall(struct.pack(">i", len(request)) + request)
        answer = _read(connection, struct.unpack(">i", _read(connection, 4))[0])
    # correlation id, throttle time, error code, error message (nullable string), node id, host, port
    error = struct.unpack(">h", answer[8:10])[0]
    length = struct.unpack(">h", answer[10:12])[0]
    node_id = struct.unpack(">i", answer[12 + max(0, length):16 + max(0, length)])[0]
    return None if error else node_id


def _read(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the node closed the connection")
        data += chunk
    return data


_admins: dict[str, object] = {}


def _admin(bootstrap: str):  # type: ignore[no-untyped-def]
    """An admin client per bootstrap list, kept: status and the tests ask often, and it reconnects by itself."""
    from confluent_kafka.admin import AdminClient

    from eosbatch.stack.kafka import _silent

    if bootstrap not in _admins:
        settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 0, "logger": _silent}
        _admins[bootstrap] = AdminClient(settings)
    return _admins[bootstrap]
