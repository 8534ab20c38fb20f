"""The soak's fault kinds. Each is an object with a `name`, a `weight` (how often it is drawn), a one-line
`confirmation` (what outside evidence proves it happened), and `inject(world)`, which does the damage, waits
(bounded) until the service is back, and returns that evidence: a changed process id, a new partition leader, a
promoted primary. A kind that cannot act now (no runner running) raises NotNow; a confirmation that fails raises
AssertionError, and the soak counts the fault as unconfirmed.

A new kind is a class here (or anywhere) with those four members, added to `available()`'s list when the stack
it needs is there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import Any, Protocol

from eosbatch.stack.exceptions import StackError
from eosbatch.stack.processes import alive
from eosbatch.stack.supervisor import HEALTHY_SECONDS
from tests.chaos.control import Services, wait_until
from tests.soak.runners import RunnerLoop


class NotNow(Exception):
    """The fault cannot act at this moment (nothing to hit): drawn again later, not counted."""


@dataclass
class World:
    """What a fault acts on: the stack's services, the runner loop, and a random generator of the soak's seed."""

    services: Services
    runners: RunnerLoop
    rng: Random
    scenario: Any = None  # tests.scenario.Scenario: the pipeline, its topics
    cluster: Any = None   # tests/chaos/cluster.BrokerCluster over the stack's Kafka when it has three nodes
    replica: bool = False  # the stack has a synchronous PostgreSQL replica


class FaultKind(Protocol):
    name: str
    weight: float
    confirmation: str

    def inject(self, world: World) -> str: ...


class RunnerKill:
    name = "runner_sigkill"
    weight = 3.0
    confirmation = "the runner's pid is gone and the next runner runs under another pid"

    def inject(self, world: World) -> str:
        runner = world.runners.current()
        if runner is None:
            raise NotNow("no runner is running")
        pid = runner.pid
        runner.kill()  # its whole session: the CLI and anything it started
        assert not alive(pid), f"runner {pid} still alive after SIGKILL"
        following = wait_until(lambda: world.runners.started_after(pid), 120,
                               f"a runner started after the killed runner {pid}")
        return f"runner {pid} SIGKILLed; next runner pid {following}"


def process_age(pid: int) -> float:
    """Seconds since the process started (/proc/<pid>/stat's starttime against the uptime); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as uptime:
            return float(uptime.read().split()[0]) - started
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def port_holders(port: int) -> str:
    """Who holds `port` on 127.0.0.1 (`ss`), to name it when a restart finds it taken."""
    done = subprocess.run(["ss", "-Htanp", f"( sport = :{port} )"], capture_output=True, text=True, check=False)
    return " | ".join(" ".join(line.split()) for line in done.stdout.splitlines()[:3]) or "nobody now"


def started(start: Callable[[], None], what: str, port: int, attempts: int = 6) -> int:
    """start() until it succeeds; the number of failed tries. Our ports lie in the kernel's ephemeral range, so
    while a server is down a client's outgoing connection may take its port: the bind fails until that
    connection closes, and the start is tried again."""
    for attempt in range(attempts):
        try:
            start()
            return attempt
        except (StackError, AssertionError) as exc:
            holders = port_holders(port)
            print(f"[soak] {what} did not start (try {attempt + 1}): port {port}: {holders}", file=sys.stderr,
                  flush=True)
            if attempt == attempts - 1:
                raise AssertionError(f"{what} did not start in {attempts} tries; port {port}: {holders}; {exc}") \
                    from exc
            time.sleep(2 + 2 * attempt)  # the connection holding the port closes on its own: give it time
    return attempts


class PostgresCrash:
    name = "postgres_immediate_stop"
    weight = 2.0
    confirmation = "a new postmaster pid, and the restart ran crash recovery (the server log says so)"

    def inject(self, world: World) -> str:
        services = world.services
        postgres = services.postgres
        before = postgres.pid()
        assert before is not None and services.bindir is not None, "postgres is not running"
        logged = postgres.log.stat().st_size
        command = postgres._as_owner([str(services.bindir / "pg_ctl"), "-D", str(postgres.data), "-m", "immediate",
                                      "-w", "-t", "60", "stop"])
        done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
        assert done.returncode == 0, f"pg_ctl stop -m immediate: {done.stdout}{done.stderr}"
        wait_until(lambda: not alive(before), 60, f"the postmaster {before} to exit")
        retries = started(services.start_postgres, "postgres", postgres.port)
        after = postgres.pid()
        assert after is not None and after != before, f"postmaster pid {before} -> {after}"
        with postgres.log.open("rb") as log_file:
            log_file.seek(logged)
            log = log_file.read().decode(errors="replace")
        assert "database system was interrupted" in log or "not properly shut down" in log, \
            "the restart did not run crash recovery: the stop was not a crash"
        return f"postmaster {before} -> {after}, crash recovery logged" + (f" ({retries} start retries)"
                                                                           * bool(retries))


class ConnectKill:
    name = "spark_connect_sigkill"
    weight = 0.5  # its JVM's start takes 15-30 s of both cores here
    confirmation = "the stack's supervisor restarted the server: a new pid that answers"

    def inject(self, world: World) -> str:
        pid = world.services.spark.pid()
        if pid is None or process_age(pid) < HEALTHY_SECONDS:  # its supervisor gives up on a server dying young
            raise NotNow(f"the Connect server {pid} is younger than {HEALTHY_SECONDS:.0f}s")
        killed = world.services.kill_spark_connect()
        restarted = world.services.spark_connect_restarted(killed)
        return f"Connect server {killed} SIGKILLed; supervisor restarted it as {restarted}"


class BrokerKill:
    """The single broker of the one-node stack: SIGKILLed and started again."""

    name = "broker_sigkill"
    weight = 1.0
    confirmation = "a new broker pid that answers"

    def inject(self, world: World) -> str:
        kafka = world.services.kafka
        before = kafka.pid()
        assert before is not None, "kafka is not running"
        os.kill(before, signal.SIGKILL)
        wait_until(lambda: not alive(before), 60, f"the broker {before} to die")
        retries = started(world.services.start_broker, "the broker", kafka.nodes[0].port)
        after = kafka.pid()
        assert after is not None and after != before, f"broker pid {before} -> {after}"
        return f"broker {before} -> {after}" + (f" ({retries} start retries)" * bool(retries))


def restore(world: World) -> None:
    """Whatever a fault left down, started again (a taken port retried); the Connect server is its supervisor's
    to restart, unless the supervisor gave up."""
    services = world.services
    if world.replica:
        from tests.soak.pg_faults import Failover

        Failover().restore()
    elif services.postgres.pid() is None:
        started(services.start_postgres, "postgres", services.postgres.port)
    if world.cluster is not None:
        world.cluster.restore()
    elif services.kafka.pid() is None:
        started(services.start_broker, "the broker", services.kafka.nodes[0].port)
    if services.spark.pid() is None and services.spark.supervisor_pid() is None:
        started(services.start_spark_connect, "the Spark Connect server", services.spark.port)


def available(world: World) -> list[FaultKind]:
    """The kinds this stack supports: the broker faults of a three-node cluster instead of the single broker's
    kill, and the synchronous failover when there is a replica."""
    kinds: list[FaultKind] = [RunnerKill(), PostgresCrash(), ConnectKill()]
    if world.cluster is not None:
        from tests.soak import broker_faults

        kinds += broker_faults.kinds()
    else:
        kinds.append(BrokerKill())
    if world.replica:
        from tests.soak.pg_faults import SyncFailover

        kinds.append(SyncFailover())
    return kinds
