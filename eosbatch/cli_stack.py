"""How `eosbatch stack` prints the Kafka cluster: its nodes, and which node leads each partition of the
registered pipelines' topics and coordinates each lane's transactional id; `stack broker stop|start N`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from eosbatch import commands


def broker(args: argparse.Namespace) -> None:
    commands.stack_broker(args.broker_action, args.node, log=lambda line: print(line, file=sys.stderr))


def print_kafka_nodes(info: commands.StackInfo) -> None:
    """Nothing for the one-node stack (its `kafka:` line says it all); each node and the roles otherwise."""
    if len(info.kafka_nodes) < 2:
        return
    for node in info.kafka_nodes:
        print(f"  node {node.node_id}: {node.bootstrap} pid={node.pid or 'stopped'}")
    if not any(node.pid for node in info.kafka_nodes):
        return
    for found in commands.stack_kafka_roles(info.kafka_bootstrap):
        print(f"  pipeline {found.pipeline}:")
        topics: dict[str, list[str]] = {}
        for (topic, partition), leader in sorted(found.leaders.items()):
            topics.setdefault(topic, []).append(f"{partition}->{leader or 'none'}")
        for topic, leaders in topics.items():
            print(f"    leaders of {topic} (partition->node): {' '.join(leaders)}")
        for lane, (tid, node_id) in found.coordinators.items():
            print(f"    {lane} lane: transactional id {tid} coordinated by node {node_id or 'unknown'}")


def kafka_json(info: commands.StackInfo) -> dict[str, Any]:
    """The nodes and, with several, the roles, for `stack status --json`'s kafka object."""
    shown: dict[str, Any] = {"nodes": [node._asdict() for node in info.kafka_nodes]}
    if len(info.kafka_nodes) > 1 and any(node.pid for node in info.kafka_nodes):
        shown["pipelines"] = [
            {"pipeline": found.pipeline,
             "leaders": [{"topic": t, "partition": p, "node": n} for (t, p), n in sorted(found.leaders.items())],
             "coordinators": [{"lane": lane, "transactional_id": tid, "node": n}
                              for lane, (tid, n) in found.coordinators.items()]}
            for found in commands.stack_kafka_roles(info.kafka_bootstrap)]
    return shown
