"""The embedded local stack: a real Kafka broker (or a cluster of three: `--kafka-brokers 3`,
EOSBATCH_KAFKA_BROKERS=3, eosbatch.stack.kafka_cluster), a real PostgreSQL cluster, a Spark Connect server (the
long-lived engine) and the Spark Kafka connector jars; on request (`--spark-cluster`, EOSBATCH_SPARK_CLUSTER=1)
also a Spark standalone cluster (a master and two workers) with a second Connect server whose master it is, and
(`--schema-registry`, EOSBATCH_SCHEMA_REGISTRY=1) a Confluent-compatible Schema Registry (Apicurio Registry),
and (`--postgres-replica`, EOSBATCH_POSTGRES_REPLICA=sync|async) a streaming replica of PostgreSQL on the next
port, the exported URL then naming both servers (eosbatch.stack.replica).

All state lives under one folder (`EOSBATCH_HOME`, default `.eosbatch/` in the checkout).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

from eosbatch import config
from eosbatch.stack import maven, replica
from eosbatch.stack.exceptions import StackError
from eosbatch.stack.kafka_cluster import KafkaCluster
from eosbatch.stack.kafka_nodes import (
    KAFKA_BROKERS,
    KafkaNode,
    KafkaRoles,
    broker_start,
    broker_stop,
    kafka_brokers,
    kafka_of,
    kafka_roles,
)
from eosbatch.stack.places import flag as _flag
from eosbatch.stack.places import home
from eosbatch.stack.places import port as _port
from eosbatch.stack.postgres import PostgresCluster, find_bindir
from eosbatch.stack.replica_pair import (
    POSTGRES_REPLICA,
    no_waiting_for_a_stopped_replica,
    postgres_servers,
    replica_down,
    replica_up,
    replica_wanted,
)
from eosbatch.stack.schema_registry import APICURIO_REGISTRY_VERSION, SchemaRegistryServer
from eosbatch.stack.spark_cluster import ClusterStatus, SparkCluster
from eosbatch.stack.spark_connect import SparkConnectServer
from eosbatch.stack.versions import KAFKA_VERSION, PYSPARK_VERSION, SPARK_AVRO, SPARK_KAFKA_CONNECTOR

__all__ = ["StackError", "StackInfo", "up", "down", "status", "env", "home", "connector_jars", "cluster_up",
           "cluster_down", "cluster_wanted", "postgres_servers", "replica_wanted", "replica_up", "replica_down",
           "kafka_of", "kafka_brokers", "broker_stop", "broker_start", "kafka_roles", "KafkaNode", "KafkaRoles",
           "KAFKA_BROKERS", "POSTGRES_REPLICA"]

SPARK_CLUSTER = "EOSBATCH_SPARK_CLUSTER"  # 1: `up` also starts the cluster, and the exports point at it
SCHEMA_REGISTRY = "EOSBATCH_SCHEMA_REGISTRY"  # 1: `up` also starts the schema registry, and exports its URL
SCHEMA_REGISTRY_URL = "EOSBATCH_SCHEMA_REGISTRY_URL"  # the export: its Confluent-compatible API's base URL


class StackInfo(NamedTuple):
    home: Path
    database_url: str
    kafka_bootstrap: str
    kafka_pid: int | None
    postgres_pid: int | None
    versions: dict[str, str]
    spark_remote: str = ""
    spark_connect_pid: int | None = None
    spark_jars: tuple[str, ...] = ()
    spark_cluster: ClusterStatus | None = None  # None: not wanted and nothing of it running
    spark_cluster_remote: str = ""  # the Connect server whose master is the cluster
    spark_cluster_connect_pid: int | None = None
    on_cluster: bool = False  # the exports send batches to the cluster's Connect server
    spark_connect_supervisor_pid: int | None = None  # what restarts the Connect server when it dies
    schema_registry_url: str = ""  # "": not wanted and not running
    schema_registry_pid: int | None = None
    postgres_replica_pid: int | None = None
    postgres_roles: tuple[tuple[int, str], ...] = ()  # (port, primary|replica|stopped), with a replica only
    postgres_replica_mode: str = ""  # sync or async (the primary's synchronous_standby_names), with a replica
    kafka_nodes: tuple[KafkaNode, ...] = ()  # every node of the Kafka cluster (one on the default stack)

    def env(self) -> dict[str, str]:
        remote = self.spark_cluster_remote if self.on_cluster else self.spark_remote
        exports = {config.DATABASE_URL: self.database_url, config.KAFKA_BOOTSTRAP: self.kafka_bootstrap,
                   config.SPARK_REMOTE: remote, config.SPARK_JARS: ",".join(self.spark_jars)}
        if self.schema_registry_url:
            exports[SCHEMA_REGISTRY_URL] = self.schema_registry_url
        return exports


def _parts(root: Path, brokers: int | None = None) -> tuple[KafkaCluster, PostgresCluster, SparkConnectServer]:
    return (kafka_of(root, brokers), PostgresCluster(root, _port("EOSBATCH_POSTGRES_PORT", 15432)),
            SparkConnectServer(root, _port("EOSBATCH_SPARK_CONNECT_PORT", 15002)))


def cluster_wanted() -> bool:
    return _flag(SPARK_CLUSTER)


def registry_wanted() -> bool:
    return _flag(SCHEMA_REGISTRY)


def registry_server(root: Path | None = None) -> SchemaRegistryServer:
    """The stack's schema registry (by default on port 18081; EOSBATCH_SCHEMA_REGISTRY_PORT)."""
    # its Confluent API's port on 127.0.0.1 (its management interface, health and metrics, on the next one)
    return SchemaRegistryServer(root or home(), _port("EOSBATCH_SCHEMA_REGISTRY_PORT", 18081))


def registry_up(log=print) -> str:  # type: ignore[no-untyped-def]
    """Fetch (once), start (when stopped) and wait for the schema registry; its Confluent API's URL."""
    root = home()
    server = registry_server(root)
    started = time.monotonic()
    server.start(server.install(root / "cache"))
    server.wait_ready()
    log(f"schema-registry: ready on {server.url} ({time.monotonic() - started:.1f}s)")
    return server.url


def registry_down(log=print) -> bool:  # type: ignore[no-untyped-def]
    stopped = registry_server().stop()
    if stopped:
        log("schema-registry: stopped")
    return stopped


def _cluster_parts(root: Path) -> tuple[SparkCluster, SparkConnectServer]:
    """The cluster (worker i on the master's port + i, its web UI on the master's web UI port + i) and the
    Connect server on it (by default on the stack's Connect port + 1)."""
    cluster = SparkCluster(root, _port("EOSBATCH_SPARK_CLUSTER_PORT", 17077),
                           _port("EOSBATCH_SPARK_CLUSTER_WEBUI_PORT", 17080))
    connect_port = _port("EOSBATCH_SPARK_CLUSTER_CONNECT_PORT", _port("EOSBATCH_SPARK_CONNECT_PORT", 15002) + 1)
    # One 1 GB executor per one-core worker; a task lost with its worker is retried on another (4 tries is
    # Spark's default on a cluster: said here because exactly-once under retries is what the cluster tests).
    return cluster, SparkConnectServer(root, connect_port, master=cluster.master_url, folder="spark-cluster-connect",
                                       conf={"spark.executor.memory": "1g", "spark.task.maxFailures": "4"})


def add_password_role(role: str, password: str, database: str) -> str:
    """On the running embedded PostgreSQL: a non-superuser role authenticated with SCRAM-SHA-256 and a
    database it may create its ledger and sinks in (PostgresCluster.add_password_role); its URL, without the
    password (put it in EOSBATCH_DATABASE_URL with the password, or in the Airflow connection)."""
    return _parts(home())[1].add_password_role(role, password, database)


# The Spark jars a batch needs beyond PySpark's own, by cache folder: the Kafka connector, and spark-avro.
def _jar_sets() -> dict[str, list[str]]:
    return {f"spark-kafka-{PYSPARK_VERSION}": SPARK_KAFKA_CONNECTOR, f"spark-avro-{PYSPARK_VERSION}": SPARK_AVRO}


def connector_jars(root: Path | None = None) -> list[Path]:
    """The spark-sql-kafka connector and its dependencies, and spark-avro (eosbatch.formats.Avro), minus what
    PySpark already ships."""
    root = root or home()
    cache = root / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    folders = [maven.resolve(name, coordinates, cache, cache / "maven.log", transitive=False)
               for name, coordinates in _jar_sets().items()]
    import pyspark

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [jar for folder in folders for jar in maven.jars(folder) if _artifact(jar.name) not in shipped]


def _artifact(file_name: str) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients`: the name without its version."""
    stem = file_name.removesuffix(".jar")
    parts = stem.split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts) or stem


def up(log=print, spark_cluster: bool | None = None,  # type: ignore[no-untyped-def]
       schema_registry: bool | None = None, postgres_replica: str | None = None,
       kafka_brokers: int | None = None, warm_up_records: int = 0) -> StackInfo:
    """Install what is missing, start what is stopped, and return once every service is usable; Kafka with
    `kafka_brokers` nodes (None: EOSBATCH_KAFKA_BROKERS, else as formatted before, else 1); with
    `spark_cluster` (None: EOSBATCH_SPARK_CLUSTER decides) the cluster too, and the exports point at it; with
    `schema_registry` (None: EOSBATCH_SCHEMA_REGISTRY decides) the schema registry too, and its URL is exported;
    with `postgres_replica` "sync" or "async" (None: EOSBATCH_POSTGRES_REPLICA decides; "": none) a streaming
    replica of PostgreSQL too, and the exported URL names both servers. A Connect server started by this call
    first runs `warm_up_records` records through a batch's read, parse and staging paths (eosbatch.engine.warm_up;
    0: none), so that the first batch meets a server past its JIT's first minutes."""
    with_replica = replica_wanted() if postgres_replica is None else postgres_replica
    on_cluster = cluster_wanted() if spark_cluster is None else spark_cluster
    with_registry = registry_wanted() if schema_registry is None else schema_registry
    root = home()
    root.mkdir(parents=True, exist_ok=True)
    kafka, postgres, connect = _parts(root, kafka_brokers)
    kafka.check_shape()  # before anything starts
    started = time.monotonic()
    bindir = postgres.install()
    postgres.start(bindir)
    log(f"postgres: running on 127.0.0.1:{postgres.port} ({time.monotonic() - started:.1f}s)")
    jars = kafka.install(root / "cache")
    kafka.start(jars)
    starting = connect.pid() is None and connect.supervisor_pid() is None
    connect.start(connector_jars(root))  # starts alongside the broker: both take a JVM's start
    postgres.wait_ready()
    if with_replica:
        replica_up(with_replica, log)
    else:
        no_waiting_for_a_stopped_replica(log)
    kafka.wait_ready()
    nodes = f" ({kafka.brokers} nodes)" if kafka.brokers > 1 else ""
    log(f"kafka: ready on {kafka.bootstrap}{nodes} ({time.monotonic() - started:.1f}s)")
    connect.wait_ready()
    log(f"spark-connect: ready on {connect.url} ({time.monotonic() - started:.1f}s)")
    if connect.supervisor_pid() is None:
        # its supervisor was killed: the server runs on, but nothing restarts it when it dies
        log(f"spark-connect: running without its supervisor (pid {connect.pid()}); `stack down` then `stack up` "
            "supervises it again")
    if on_cluster:
        cluster_up(log)
    if with_registry:
        registry_up(log)
    info = status(on_cluster, with_registry, bool(with_replica), kafka.brokers)
    if starting and warm_up_records > 0:
        warm_engine(info, warm_up_records, log)
    return info


def warm_engine(info: StackInfo, records: int, log=print) -> None:  # type: ignore[no-untyped-def]
    """Warm the stack's Spark Connect server (eosbatch.engine.warm_up) with `records` records, over its Kafka."""
    from eosbatch.engine import warm_up

    started = time.monotonic()
    settings = config.load({**os.environ, **info.env(), config.SPARK_REMOTE: info.spark_remote})
    warm_up.warm(settings, records, log=log)
    log(f"spark-connect: warmed up ({time.monotonic() - started:.1f}s)")


def wait_for_engine(timeout: float = 120.0) -> None:
    """Return once the stack's Spark Connect server listens (after its supervisor restarted it, say)."""
    _parts(home())[2].wait_ready(timeout)


def cluster_up(log=print) -> ClusterStatus:  # type: ignore[no-untyped-def]
    """Start what is stopped of the Spark cluster and its Connect server; return once a batch can run there."""
    root = home()
    cluster, connect = _cluster_parts(root)
    started = time.monotonic()
    if "master" in cluster.start() and connect.stop():
        # Without a standby master an application never re-registers with a new one: it would wait forever.
        log("spark-cluster-connect: stopped, its master was restarted")
    cluster.wait_ready()
    log(f"spark-cluster: master {cluster.master_url} with {cluster.workers} workers alive, UI {cluster.web_ui} "
        f"({time.monotonic() - started:.1f}s)")
    connect.start(connector_jars(root))
    connect.wait_ready()
    log(f"spark-cluster-connect: ready on {connect.url}, master {cluster.master_url} "
        f"({time.monotonic() - started:.1f}s)")
    return cluster.status()


def cluster_down(log=print) -> None:  # type: ignore[no-untyped-def]
    """Stop the cluster's Connect server, then its workers and master; silent about what was not running."""
    cluster, connect = _cluster_parts(home())
    if connect.stop():
        log("spark-cluster-connect: stopped")
    if cluster.stop():
        log("spark-cluster: stopped")


def down(log=print) -> None:  # type: ignore[no-untyped-def]
    cluster_down(log)
    registry_down(log)
    kafka, postgres, connect = _parts(home())
    log("spark-connect: stopped" if connect.stop() else "spark-connect: was not running")
    nodes = f" ({kafka.brokers} nodes)" if kafka.brokers > 1 else ""
    log(f"kafka: stopped{nodes}" if kafka.stop() else "kafka: was not running")
    standby = postgres_servers()[1]
    if standby.stop(find_bindir()):  # a replica waits for the primary's shutdown checkpoint; harmless either way
        log("postgres-replica: stopped")
    log("postgres: stopped" if postgres.stop(find_bindir()) else "postgres: was not running")


def status(on_cluster: bool | None = None, schema_registry: bool | None = None,
           postgres_replica: bool | None = None, kafka_brokers: int | None = None) -> StackInfo:
    """What runs; `on_cluster` (None: EOSBATCH_SPARK_CLUSTER decides): whether the exports (env()) point at
    the cluster's Connect server instead of the local one; the schema registry's URL is there when it is wanted
    (`schema_registry`, None: EOSBATCH_SCHEMA_REGISTRY decides) or runs; the database URL names both PostgreSQL
    servers when a replica is wanted (`postgres_replica`, None: EOSBATCH_POSTGRES_REPLICA decides) or its
    folder holds a server (it was made once), and the roles say which one is the primary."""
    root = home()
    on_cluster = cluster_wanted() if on_cluster is None else on_cluster
    registry = registry_server(root)
    registry_pid = registry.pid()
    with_registry = registry_wanted() if schema_registry is None else schema_registry
    kafka, postgres, connect = _parts(root, kafka_brokers)
    cluster, cluster_connect = _cluster_parts(root)
    found = cluster.status()
    bindir = find_bindir()
    versions = {"kafka": KAFKA_VERSION, "pyspark": PYSPARK_VERSION,
                "postgres": postgres.version(bindir) if bindir else "not installed",
                "schema-registry": APICURIO_REGISTRY_VERSION}
    first, second = postgres_servers(root)
    with_replica = bool(replica_wanted()) if postgres_replica is None else postgres_replica
    paired = with_replica or second.pid() is not None
    url = replica.multi_host_url([first.port, second.port]) if paired else postgres.url
    roles = tuple((server.port, replica.role(server)) for server in (first, second)) if paired else ()
    primary = next((server for server, (_, found) in zip((first, second), roles, strict=False)
                    if found == "primary"), None)
    mode = ("sync" if replica.synchronous(primary) else "async") if primary is not None else ""
    return StackInfo(root, url, kafka.bootstrap, kafka.pid(), postgres.pid(), versions, connect.url,
                     connect.pid(), tuple(str(j) for j in resolved_connector_jars(root)),
                     found if on_cluster or found.running or cluster_connect.pid() else None, cluster_connect.url,
                     cluster_connect.pid(), on_cluster, connect.supervisor_pid(),
                     registry.url if with_registry or registry_pid else "", registry_pid,
                     second.pid() if paired else None, roles, mode,
                     tuple(KafkaNode(node.node_id, node.bootstrap, node.pid()) for node in kafka.nodes))


def resolved_connector_jars(root: Path) -> list[Path]:
    """The connector jars once `up` fetched them (without asking Maven); [] before."""
    done = all((root / "cache" / name / maven.DONE).exists() for name in _jar_sets())
    return connector_jars(root) if done else []
