"""The soak's fault kinds. Each is an object with a `name`, a `weight` (how often it is drawn), a one-line
`confirmation` (what outside evidence proves it happened), and `inject(world)`, which does the damage, waits
(bounded) until the service is back, and returns that evidence: a changed process id, a new partition leader, a
promoted primary. A kind that cannot act now (no runner running) raises NotNow; a confirmation that fails raises
AssertionError, and the soak counts the fault as unconfirmed.

A new kind is a class here (or anywhere) with those four members, added to `available()`'s list when the stack
it needs is there."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any, Protocol

from eosbatch.stack.processes import alive
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
    cluster: Any = None   # tests/chaos/cluster's handle on a three-broker cluster, when the stack has one


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


class PostgresCrash:
    name = "postgres_immediate_stop"
    weight = 2.0
    confirmation = "a new postmaster pid, and the restart ran crash recovery (the server log says so)"

    def inject(self, world: World) -> str:
        before = world.services.postgres.pid()
        world.services.crash_postgres()  # pg_ctl stop -m immediate, start; asserts crash recovery in the log
        after = world.services.postgres.pid()
        assert after is not None and after != before, f"postmaster pid {before} -> {after}"
        return f"postmaster {before} -> {after}, crash recovery logged"


class ConnectKill:
    name = "spark_connect_sigkill"
    weight = 1.0
    confirmation = "the stack's supervisor restarted the server: a new pid that answers"

    def inject(self, world: World) -> str:
        killed = world.services.kill_spark_connect()
        restarted = world.services.spark_connect_restarted(killed)
        return f"Connect server {killed} SIGKILLed; supervisor restarted it as {restarted}"


class BrokerKill:
    """The single broker of the one-node stack: SIGKILLed and started again."""

    name = "broker_sigkill"
    weight = 1.0
    confirmation = "a new broker pid that answers"

    def inject(self, world: World) -> str:
        before = world.services.kafka.pid()
        world.services.kill_broker()
        after = world.services.kafka.pid()
        assert after is not None and after != before, f"broker pid {before} -> {after}"
        return f"broker {before} -> {after}"


def available(world: World) -> list[FaultKind]:
    """The kinds this stack supports."""
    return [RunnerKill(), PostgresCrash(), ConnectKill(), BrokerKill()]
