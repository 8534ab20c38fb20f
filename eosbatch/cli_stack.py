"""`eosbatch stack`: up, down, env, status (text or --json; with a Kafka cluster, its nodes and which node leads
each partition of the registered pipelines' topics and coordinates each lane's transactional id) and
`stack broker stop|start N`."""

from __future__ import annotations

import argparse
import json
import shlex
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


def stack(args: argparse.Namespace) -> None:
    if args.action == "up":
        # Progress on stderr: stdout carries only the exports, for `eval "$(eosbatch stack up)"`.
        info = commands.stack_up(log=_to_stderr, spark_cluster=args.spark_cluster,
                                  schema_registry=args.schema_registry, postgres_replica=args.postgres_replica,
                                  kafka_brokers=args.kafka_brokers, warm_up_records=args.warm_up)
        for key, value in info.env().items():
            print(f"export {key}={shlex.quote(value)}")
    elif args.action == "down":
        commands.stack_down()
    elif args.action == "broker":
        broker(args)
    elif args.action == "env":
        replica = None if args.postgres_replica is None else True
        for key, value in commands.stack_env(args.spark_cluster, args.schema_registry, replica).items():
            print(f"export {key}={shlex.quote(value)}")
    elif args.json:
        _print_json(stack_json(commands.stack_status(args.spark_cluster, args.schema_registry,
                                                      None if args.postgres_replica is None else True)))
    else:
        info = commands.stack_status(args.spark_cluster, args.schema_registry,
                                     None if args.postgres_replica is None else True)
        print(f"home:     {info.home}")
        print(f"kafka:    {info.kafka_bootstrap} pid={info.kafka_pid or 'stopped'} "
              f"version={info.versions['kafka']}")
        print_kafka_nodes(info)
        print(f"postgres: {info.database_url} pid={info.postgres_pid or 'stopped'} "
              f"version={info.versions['postgres']}")
        if info.postgres_roles:
            print(f"          {', '.join(f'127.0.0.1:{port} {role}' for port, role in info.postgres_roles)} "
                  f"({info.postgres_replica_mode or '?'} replication)")
        print(f"spark:    {info.spark_remote} pid={info.spark_connect_pid or 'stopped'} "
              f"supervisor={info.spark_connect_supervisor_pid or 'none'} "
              f"(Spark Connect, pyspark {info.versions['pyspark']})")
        if info.spark_cluster is not None:
            print_spark_cluster(info)
        if info.schema_registry_url:
            print(f"registry: {info.schema_registry_url} pid={info.schema_registry_pid or 'stopped'} "
                  f"(Apicurio Registry {info.versions['schema-registry']}, Confluent-compatible API)")


def stack_json(info: commands.StackInfo) -> dict:  # type: ignore[type-arg]
    cluster = info.spark_cluster
    return {"home": str(info.home),
            "kafka": {"bootstrap": info.kafka_bootstrap, "pid": info.kafka_pid, "version": info.versions["kafka"],
                      **kafka_json(info)},
            "postgres": {"url": info.database_url, "pid": info.postgres_pid, "version": info.versions["postgres"],
                         "replica_pid": info.postgres_replica_pid, "replication": info.postgres_replica_mode or None,
                         "roles": {str(port): role for port, role in info.postgres_roles}},
            "spark": {"remote": info.spark_remote, "pid": info.spark_connect_pid,
                      "supervisor_pid": info.spark_connect_supervisor_pid, "pyspark": info.versions["pyspark"]},
            "spark_cluster": None if cluster is None else {
                "master_url": cluster.master_url, "master_pid": cluster.master_pid, "web_ui": cluster.web_ui,
                "worker_pids": list(cluster.worker_pids), "alive_workers": cluster.alive_workers,
                "connect_remote": info.spark_cluster_remote, "connect_pid": info.spark_cluster_connect_pid},
            "schema_registry": None if not info.schema_registry_url else {
                "url": info.schema_registry_url, "pid": info.schema_registry_pid,
                "version": info.versions["schema-registry"]}}


def print_spark_cluster(info: commands.StackInfo) -> None:
    cluster = info.spark_cluster
    assert cluster is not None
    alive = "no answer" if cluster.alive_workers is None else f"{cluster.alive_workers}/{len(cluster.worker_pids)}"
    print(f"cluster:  {cluster.master_url} pid={cluster.master_pid or 'stopped'} ui={cluster.web_ui} "
          f"workers alive={alive}")
    for i, pid in enumerate(cluster.worker_pids, start=1):
        print(f"  worker-{i}: pid={pid or 'stopped'}")
    print(f"  connect:  {info.spark_cluster_remote} pid={info.spark_cluster_connect_pid or 'stopped'} "
          f"(Spark Connect, master {cluster.master_url})")


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _print_json(document: object) -> None:
    print(json.dumps(document, indent=2))
