"""The stack's Kafka as nodes: how many (`--kafka-brokers`, EOSBATCH_KAFKA_BROKERS), one node stopped or started
on its own, and who leads what."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

from eosbatch import config
from eosbatch.stack import places
from eosbatch.stack.kafka_cluster import KafkaCluster, formatted_nodes, partition_leaders, transaction_coordinator

KAFKA_BROKERS = "EOSBATCH_KAFKA_BROKERS"  # how many Kafka nodes `up` starts (default 1)


class KafkaNode(NamedTuple):
    node_id: int
    bootstrap: str
    pid: int | None


class KafkaRoles(NamedTuple):
    """Who does what in the Kafka cluster now: the node leading each partition, the node coordinating each
    transactional id (None: no leader, or not known yet)."""
    leaders: dict[tuple[str, int], int | None]
    coordinators: dict[str, int | None]


def kafka_brokers(root: Path | None = None, wanted: int | None = None) -> int:
    """How many Kafka nodes: `wanted`, else EOSBATCH_KAFKA_BROKERS, else as many as the storage was
    formatted for, else 1."""
    if wanted is not None:
        found = wanted
    elif os.environ.get(KAFKA_BROKERS, "").strip():
        raw = os.environ[KAFKA_BROKERS].strip()
        if not raw.isdigit():
            raise config.ConfigError(KAFKA_BROKERS, f"must be a number of brokers (1 or 3), got {raw!r}")
        found = int(raw)
    else:
        found = formatted_nodes(root or places.home()) or 1
    if not 1 <= found <= 9:
        raise config.ConfigError(KAFKA_BROKERS, f"must be between 1 and 9 (3 for a replicated cluster), got {found}")
    return found


def kafka_of(root: Path | None = None, brokers: int | None = None) -> KafkaCluster:
    """The stack's Kafka (kafka_brokers() nodes when `brokers` is None), node 1 on EOSBATCH_KAFKA_PORT."""
    root = root or places.home()
    return KafkaCluster(root, places.port("EOSBATCH_KAFKA_PORT", 19092), kafka_brokers(root, brokers))


def broker_stop(node_id: int, log=print) -> bool:  # type: ignore[no-untyped-def]
    """Stop one node of the stack's Kafka (SIGTERM: a controlled shutdown); True when it was running."""
    stopped = kafka_of().stop_node(node_id)
    log(f"kafka: node {node_id} {'stopped' if stopped else 'was not running'}")
    return stopped


def broker_start(node_id: int, log=print) -> None:  # type: ignore[no-untyped-def]
    """Start one stopped node of the stack's Kafka; return once it is registered again and no partition
    lacks an in-sync replica (its followers caught up)."""
    root = places.home()
    cluster = kafka_of(root)
    started = time.monotonic()
    cluster.start_node(node_id, cluster.install(root / "cache"))
    cluster.wait_registered([node_id])
    cluster.wait_in_sync()
    log(f"kafka: node {node_id} running on {cluster.node(node_id).bootstrap}, in sync "
        f"({time.monotonic() - started:.1f}s)")


def kafka_roles(topics: list[str], transactional_ids: list[str], bootstrap: str | None = None) -> KafkaRoles:
    """The node leading each partition of `topics` and coordinating each of `transactional_ids`, on the
    stack's Kafka (or the one at `bootstrap`)."""
    where = bootstrap or kafka_of().bootstrap
    return KafkaRoles(partition_leaders(where, topics),
                      {tid: transaction_coordinator(where, tid) for tid in transactional_ids})
