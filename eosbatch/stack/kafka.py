"""A real Apache Kafka broker (KRaft, broker and controller in one process) run from the official jars: the
stack's single node, or one node of a cluster (eosbatch.stack.kafka_cluster)."""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from eosbatch.stack import maven, processes
from eosbatch.stack.exceptions import StackError, StackNotReady
from eosbatch.stack.versions import KAFKA_BROKER, KAFKA_VERSION

# One broker cannot host replicas: without RF 1 and min ISR 1 for the internal topics,
# init_transactions() and offset commits time out instead of failing.
_PROPERTIES = """\
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
inter.broker.listener.name=PLAINTEXT
# The secured listener: SCRAM-SHA-512 users (add_scram_user) and ACLs. The open listener's ANONYMOUS
# principal is a super user, so the development stack stays open there.
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=\\
  org.apache.kafka.common.security.scram.ScramLoginModule required;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=false
log.dirs={data}
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
"""


def render(template: str, overrides: Mapping[str, str]) -> str:
    """`template`'s lines with each key of `overrides` set to its value: in place where the template has
    the key, appended after it otherwise."""
    left = dict(overrides)
    lines = []
    for line in template.splitlines():
        key = line.partition("=")[0].strip()
        if not line.startswith(("#", " ")) and key in left:
            line = f"{key}={left.pop(key)}"
        lines.append(line)
    lines += [f"{key}={value}" for key, value in left.items()]
    return "\n".join(lines) + "\n"


class KafkaBroker:
    """One node. Alone (the defaults): node 1 in `home`/kafka, its own single voter. In a cluster: node
    `node_id` in its own `folder`, `voters` naming every node's controller listener, `overrides` the
    cluster's settings over the template's (replication of the internal topics, timeouts)."""

    def __init__(self, home: Path, port: int, node_id: int = 1, folder: str = "kafka", voters: str = "",
                 overrides: Mapping[str, str] | None = None) -> None:
        self.home = home / folder
        self.port = port
        self.node_id = node_id
        self.controller_port = port + 1
        self.sasl_port = port + 2
        self.voters = voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.overrides = dict(overrides or {})
        self.log = self.home / "kafka.log"
        self.pid_file = self.home / "kafka.pid"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT listener (SCRAM-SHA-512, ACLs enforced)."""
        return f"127.0.0.1:{self.sasl_port}"

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    def install(self, cache: Path) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        return maven.resolve(f"kafka-{KAFKA_VERSION}", KAFKA_BROKER, cache, self.home / "maven.log")

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise StackError("kafka: `java` is not on PATH (install a JDK 17)")
        return java

    def formatted(self) -> bool:
        return (self.home / "data" / "meta.properties").exists()

    def start(self, jars: Path, cluster_id: str = "") -> None:
        """Start the node (formatting its storage first, with `cluster_id` or a new one); nothing if it runs."""
        if self.pid() is not None:
            return
        self.home.mkdir(parents=True, exist_ok=True)
        data = self.home / "data"
        config = self.home / "server.properties"
        config.write_text(render(
            _PROPERTIES.format(port=self.port, controller_port=self.controller_port, sasl_port=self.sasl_port,
                               data=data, node_id=self.node_id, voters=self.voters),
            self.overrides))
        classpath = f"{jars}/*"
        if not self.formatted():
            cluster_id = cluster_id or new_cluster_id()
            with self.log.open("ab") as out:
                formatted = subprocess.run(
                    [self._java(), "-cp", classpath, "kafka.tools.StorageTool", "format",
                     "-t", cluster_id, "-c", str(config)],
                    stdout=out, stderr=subprocess.STDOUT, check=False,
                )
            if formatted.returncode != 0:
                raise StackError(f"kafka: formatting storage failed; see {self.log}")
        processes.spawn(
            [self._java(), "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
             "-cp", classpath, "kafka.Kafka", str(config)],
            self.log, self.pid_file,
        )

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Ready means a transactional producer can init_transactions(), the call every batch depends on."""
        deadline = time.monotonic() + timeout
        try:
            wait_transactions(self.bootstrap, deadline, self._check_alive)
        except StackNotReady as exc:
            raise StackNotReady(f"{exc} after {timeout:.0f}s; see {self.log}") from None

    def _check_alive(self) -> None:
        if self.pid() is None:
            raise StackError(f"kafka: the broker exited during start; see {self.log}:\n{processes.tail(self.log)}")

    def stop(self) -> bool:
        """SIGTERM (a controlled shutdown: its leaderships move first), SIGKILL after 30 s; True when it ran."""
        return processes.stop(self.pid_file, timeout=30)


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def wait_transactions(bootstrap: str, deadline: float, check: Callable[[], None]) -> None:
    """Until a transactional producer can init_transactions() against `bootstrap` (the state log exists, its
    partitions have leaders and enough in-sync replicas), calling `check` (raises when a node died) between
    tries; StackNotReady at `deadline` (time.monotonic())."""
    from confluent_kafka import KafkaException, Producer

    last = "no answer"
    while time.monotonic() < deadline:
        check()
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eosbatch.stack-probe",
                             "log_level": 0, "logger": _silent})
        try:
            producer.init_transactions(10)
            return
        except KafkaException as exc:
            last = str(exc)
            time.sleep(0.5)
    raise StackNotReady(f"kafka: transactions not ready ({last})")


def add_scram_user(bootstrap: str, name: str, password: str) -> None:
    """A SCRAM-SHA-512 user on the broker at `bootstrap` (the open listener, as its super user); setting the
    password again is allowed. ACLs are the caller's (AdminClient.create_acls)."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)


class _Silent:
    def log(self, *args: object) -> None:  # librdkafka logs connection refusals while the broker starts
        pass


_silent = _Silent()
