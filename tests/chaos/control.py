"""What the chaos tests do to processes and services: freeze a runner at a fault point, crash PostgreSQL like
a power cut, SIGKILL the Kafka broker, and bring both back. Every wait is bounded and names what it waited
for, so a hung test fails with a reason instead of hanging CI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from eosbatch import faults, stack
from eosbatch.ledger import store
from eosbatch.stack.postgres import find_bindir
from eosbatch.stack.processes import alive
from tests.chaos.judge import assert_exactly_once_judged
from tests.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_until(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `predicate` until it returns something truthy; AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (which may hold spaces): [state, ppid, pgrp, session, ...]."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def state(pid: int) -> str | None:
    """R, S, T (stopped), Z (zombie)...; None once the process is gone."""
    fields = _stat(pid)
    return fields[0] if fields else None


def session(sid: int) -> list[int]:
    """Every process of session `sid`. A runner starts its own session; spark-submit's JVM, the PySpark daemon
    (which moves to a process group of its own, so a killpg would miss it) and its workers all stay in it."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields and int(fields[3]) == sid and fields[0] != "Z":
                members.append(int(entry))
    return members


def fired(path: Path) -> list[tuple[str, int]]:
    """The (point, pid) lines that faults.record appended to an EOSBATCH_FAULT_FIRED file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [(name, int(pid)) for name, pid in (line.split() for line in text.splitlines() if line.strip())]


def wait_for_lease_expiry(settings, pipeline: str, timeout: float = 60, who: str = "the frozen runner") -> None:
    """Until the regular lane's lease of `pipeline` has expired (or is gone): a frozen or killed holder's lane is
    free again."""
    def expired() -> bool:
        with store.transaction(settings) as cur:
            cur.execute("SELECT expires_at < clock_timestamp() FROM eosbatch.lane_leases WHERE pipeline = %s "
                        "AND lane = 'regular'", (pipeline,))
            row = cur.fetchone()
        return row is None or bool(row[0])

    wait_until(expired, timeout, f"{who}'s lease of {pipeline} to expire", interval=0.2)


class Runner:
    """An eosbatch command in a session of its own, its output in files (a stopped process cannot fill a
    pipe, but nothing reads a pipe while the test waits either), with its own fired file."""

    def __init__(self, args: list[str], env: dict[str, str], folder: Path, name: str) -> None:
        self.name = name
        self.fired_file = folder / f"{name}.fired"
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        self.started = time.monotonic()
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "eosbatch.cli", *args], cwd=ROOT,
                                            env={**env, faults.FIRED: str(self.fired_file)},
                                            stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                            start_new_session=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def tail(self) -> str:
        return f"{self.name} (pid {self.pid}, exit {self.process.poll()}) stderr:\n{self.stderr[-3000:]}"

    def stopped_at(self, point: str, timeout: float = 300.0) -> int:
        """Wait until the fault at `point` fired in this runner (or a process it started: the Spark driver, an
        executor's Python worker) and that process is really stopped; its pid."""

        def landed() -> int | None:
            for name, pid in fired(self.fired_file):
                if name == point and state(pid) == "T":
                    return pid
            if self.process.poll() is not None:  # it ended without stopping there: say how
                raise AssertionError(f"{self.name} ended before its fault {point} fired: {self.tail()}\n"
                                     f"fired: {fired(self.fired_file)}")
            return None

        return wait_until(landed, timeout, f"{self.name} to stop at {point}")

    def fired_points(self) -> list[str]:
        return [name for name, _ in fired(self.fired_file)]

    def resume(self, pid: int) -> None:
        os.kill(pid, signal.SIGCONT)

    def freeze(self) -> None:
        """SIGSTOP the whole runner (the CLI with its lease heartbeat, spark-submit and its workers), as a paused
        VM or a machine that stops answering would: its lease is no longer renewed."""
        for pid in session(self.pid):
            os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: all(state(pid) in ("T", None) for pid in session(self.pid)), 30,
                   f"{self.name} to be frozen")

    def thaw(self) -> None:
        for pid in session(self.pid):
            os.kill(pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the runner and everything it started (a crash of the machine running it, as far as this
        pipeline can tell), and a Spark executor's Python worker it froze at a fault point: on Spark Connect
        that worker belongs to the server, not to the runner's session. Stopped processes die from SIGKILL too."""
        for _, pid in fired(self.fired_file):
            if state(pid) == "T" and pid not in session(self.pid):
                os.kill(pid, signal.SIGKILL)
        for _ in range(3):  # a member may fork while we kill; a few rounds catch the stragglers
            members = session(self.pid)
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.poll()
        self.process.wait(timeout=30)
        wait_until(lambda: not session(self.pid), 30, f"{self.name}'s processes to die")

    def wait(self, timeout: float = 600.0) -> int:
        """The exit code; on a timeout the runner is killed and the test fails naming it."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} still running after {timeout:.0f}s: {self.tail()}") from None


class Services:
    """The embedded stack's PostgreSQL and Kafka, as the tests crash and restart them."""

    def __init__(self) -> None:
        self.kafka, self.postgres, self.spark = stack._parts(stack.home())
        self.bindir = find_bindir()

    def embedded(self, database_url: str, bootstrap: str) -> bool:
        """True when the settings point at this stack (not at servers we must not crash): its PostgreSQL's URL, or
        the URL naming it and its replica (`stack up --postgres-replica`)."""
        from eosbatch.stack.replica import multi_host_url

        ours = (self.postgres.url, multi_host_url([self.postgres.port, self.postgres.port + 1]))
        return (database_url in ours and bootstrap == self.kafka.bootstrap
                and self.postgres.pid() is not None and self.kafka.pid() is not None and self.bindir is not None)

    def crash_postgres(self) -> None:
        """A power cut, as PostgreSQL sees it: `pg_ctl stop -m immediate` ends every backend without a
        checkpoint, so the restart runs crash recovery, which empties UNLOGGED tables. Then start it again."""
        pid = self.postgres.pid()
        assert pid is not None and self.bindir is not None, "postgres is not running"
        logged = self.postgres.log.stat().st_size
        command = self.postgres._as_owner([str(self.bindir / "pg_ctl"), "-D", str(self.postgres.data),
                                           "-m", "immediate", "-w", "-t", "60", "stop"])
        done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
        assert done.returncode == 0, f"pg_ctl stop -m immediate: {done.stdout}{done.stderr}"
        wait_until(lambda: not alive(pid), 60, f"the postmaster {pid} to exit")
        self.start_postgres()
        with self.postgres.log.open("rb") as log_file:
            log_file.seek(logged)
            log = log_file.read().decode(errors="replace")
        assert "database system was interrupted" in log or "not properly shut down" in log, \
            "the restart did not run crash recovery: the stop was not a crash"

    def start_postgres(self) -> None:
        assert self.bindir is not None
        self.postgres.start(self.bindir)
        self.postgres.wait_ready()

    def kill_broker(self) -> None:
        """kill -9 the broker (no controlled shutdown, no flush), then start it again from its jars."""
        pid = self.kafka.pid()
        assert pid is not None, "kafka is not running"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not alive(pid), 60, f"the broker {pid} to die")
        self.start_broker()

    def start_broker(self) -> None:
        self.kafka.start(self.kafka.install(stack.home() / "cache"))
        self.kafka.wait_ready()

    def kill_spark_connect(self) -> int:
        """kill -9 the Spark Connect server (its JVM: the driver and, in local mode, the executors); its pid."""
        pid = self.spark.pid()
        assert pid is not None, "the Spark Connect server is not running"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not alive(pid), 60, f"the Spark Connect server {pid} to die")
        return pid

    def spark_connect_restarted(self, killed: int) -> int:
        """Wait, without starting anything, until the stack's supervisor has brought the server back."""
        assert self.spark.supervisor_pid() is not None, "the Spark Connect server runs without its supervisor"
        pid = wait_until(lambda: (found := self.spark.pid()) not in (None, killed) and found, 60,
                         f"the supervisor to restart the Spark Connect server killed as {killed}")
        self.spark.wait_ready()
        return pid

    def start_spark_connect(self) -> None:
        self.spark.start(stack.connector_jars())
        self.spark.wait_ready()

    def restore(self) -> None:
        """Whatever a test did, leave every service running for the next one."""
        if self.postgres.pid() is None:
            self.start_postgres()
        if self.kafka.pid() is None:
            self.start_broker()
        if self.spark.pid() is None:
            self.start_spark_connect()


def verify(scenario: Scenario, recompute: bool = False) -> None:
    """`eosbatch verify PIPELINE` must exit 0, and the history checker (tests/history) must find no anomaly: the
    two judges agree (tests/chaos/judge.py). Beside the independent checks of Scenario.assert_exactly_once. Its
    recompute of the sink from the committed input costs one more spark-submit per test, so it runs only where
    asked: the sink is already compared with the input by Scenario.assert_exactly_once."""
    assert_exactly_once_judged(scenario.settings, scenario.pipeline, scenario.output, scenario.history_sink(),
                               scenario.env(), scenario.history_decoder(), recompute=recompute)


def end_exactly_once(scenario: Scenario, recompute: bool = False) -> None:
    scenario.assert_exactly_once()
    verify(scenario, recompute)
