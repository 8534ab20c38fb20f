"""A Spark standalone cluster on loopback: one master and two one-core workers, run with PySpark's own
`spark-class`.

A local[N] master runs the executors inside the driver's JVM, so it hides what a cluster does to a batch:
executors in JVMs of their own that fetch the connector jars and the pipelines' code from the driver, shuffle
files lost with a worker, a lost task rescheduled on another worker. Each worker starts in a session of its
own (processes.spawn) and its executor JVM and their Python workers stay in it: killing that session is a
machine dying.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

from eosbatch.stack import processes
from eosbatch.stack.exceptions import StackError, StackNotReady

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
WORKERS = 2
WORKER_MEMORY = "1g"    # what a worker offers its executors: one executor of spark.executor.memory=1g
DAEMON_MEMORY = "512m"  # the master's and workers' own heaps: they only schedule


class ClusterStatus(NamedTuple):
    master_url: str
    web_ui: str
    master_pid: int | None
    worker_pids: tuple[int | None, ...]
    alive_workers: int | None  # as the master counts them; None when it does not answer

    @property
    def running(self) -> bool:
        return self.master_pid is not None or any(pid is not None for pid in self.worker_pids)


class SparkCluster:
    """Worker i (from 1) listens on `port + i` and shows its web UI on `webui_port + i`."""

    def __init__(self, home: Path, port: int, webui_port: int, workers: int = WORKERS) -> None:
        self.home = home / "spark-cluster"
        self.port = port
        self.webui_port = webui_port
        self.workers = workers
        self.master_url = f"spark://127.0.0.1:{port}"
        self.web_ui = f"http://127.0.0.1:{webui_port}"

    def names(self) -> list[str]:
        return ["master", *self.worker_names()]

    def worker_names(self) -> list[str]:
        return [f"worker-{i}" for i in range(1, self.workers + 1)]

    def pid_file(self, name: str) -> Path:
        return self.home / f"{name}.pid"

    def log(self, name: str) -> Path:
        return self.home / f"{name}.log"

    def pid(self, name: str) -> int | None:
        return processes.read_pid(self.pid_file(name))

    def worker_pids(self) -> tuple[int | None, ...]:
        return tuple(self.pid(name) for name in self.worker_names())

    def start(self, timeout: float = 60.0) -> list[str]:
        """Start what is not running (the master first: a worker that cannot reach it retries only after
        5-15 s); the names of what was started."""
        started = []
        self.home.mkdir(parents=True, exist_ok=True)
        if self.pid("master") is None:
            self._spawn("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                                   "--webui-port", str(self.webui_port)], {})
            started.append("master")
        self._wait_listening("master", self.port, timeout)
        for i, name in enumerate(self.worker_names(), start=1):
            if self.pid(name) is not None:
                continue
            folder = self.home / name
            (folder / "tmp").mkdir(parents=True, exist_ok=True)
            self._spawn(name, [WORKER_CLASS, "--host", "127.0.0.1", "--port", str(self.port + i),
                               "--webui-port", str(self.webui_port + i), "--cores", "1",
                               "--memory", WORKER_MEMORY, "--work-dir", str(folder / "work"), self.master_url],
                        # executors' shuffle and spill files, next to the worker's, not in /tmp
                        {"SPARK_LOCAL_DIRS": str(folder / "tmp")})
            started.append(name)
        return started

    def _spawn(self, name: str, arguments: list[str], extra_env: dict[str, str]) -> None:
        import pyspark

        spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        # Loopback only: a worker runs whatever code an application sends it. The executors' Python is this
        # one (it has eosbatch's dependencies), whichever interpreter the driver names.
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
               "SPARK_DAEMON_MEMORY": DAEMON_MEMORY, **extra_env}
        for variable in ("EOSBATCH_FAULT", "EOSBATCH_FAULT_FIRED", "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
            env.pop(variable, None)  # faults travel with a batch; these daemons are not Connect clients
        processes.spawn([str(spark_class), *arguments], self.log(name), self.pid_file(name), env=env, cwd=self.home)

    def _wait_listening(self, name: str, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pid(name) is None:
                raise StackError(f"spark-cluster: the {name} exited during start; see {self.log(name)}:\n"
                                 f"{processes.tail(self.log(name))}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.3)
        raise StackNotReady(f"spark-cluster: the {name} is not listening on {port} after {timeout:.0f}s; "
                            f"see {self.log(name)}")

    def master_state(self) -> dict[str, Any] | None:
        """The master's own report (its web UI's /json/): its URL, workers and applications; None when it
        does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=2) as answer:
                found: dict[str, Any] = json.load(answer)
                return found
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def alive_workers(self, state: dict[str, Any] | None = None) -> int | None:
        state = self.master_state() if state is None else state
        if state is None:
            return None
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Ready when the master is the one we started (a busy port makes Spark take the next one silently) and
        counts every worker ALIVE."""
        deadline = time.monotonic() + timeout
        alive: int | None = None
        while time.monotonic() < deadline:
            for name in self.names():
                if self.pid(name) is None:
                    raise StackError(f"spark-cluster: the {name} exited during start; see {self.log(name)}:\n"
                                     f"{processes.tail(self.log(name))}")
            state = self.master_state()
            if state is not None and state.get("url") != self.master_url:
                raise StackError(f"spark-cluster: the master answering on {self.web_ui} is {state.get('url')}, "
                                 f"not {self.master_url} (is the port taken?); see {self.log('master')}")
            alive = self.alive_workers(state) if state is not None else None
            if alive == self.workers:
                return
            time.sleep(0.5)
        raise StackNotReady(f"spark-cluster: {alive if alive is not None else 'no answer'} of {self.workers} "
                            f"workers alive after {timeout:.0f}s; see the logs in {self.home}")

    def stop(self) -> bool:
        """Workers first (each stops its executors), then the master; True when something was running."""
        stopped = [processes.stop(self.pid_file(name), timeout=30) for name in self.worker_names()]
        return processes.stop(self.pid_file("master"), timeout=30) or any(stopped)

    def status(self) -> ClusterStatus:
        master = self.pid("master")
        return ClusterStatus(self.master_url, self.web_ui, master, self.worker_pids(),
                             self.alive_workers() if master is not None else None)
