"""A Spark Connect server (the long-lived engine) run from PySpark's own jars, with the Kafka connector."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from eosbatch.engine.log4j import LEVELS, LOG_FILES, LOG_MIB, TO_STDERR, to_file
from eosbatch.spark_kafka_options import REDACTION_REGEX
from eosbatch.stack import processes
from eosbatch.stack.exceptions import StackError, StackNotReady

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# The server's garbage collector: Parallel, not G1 (the JVM's default). A Connect server running batches is
# throughput work on few cores. With G1 and a 2 GB heap (1 MB regions), its allocations of half a megabyte
# or more (Kafka's fetch buffers, the row queue of a Python UDF's input) each start a concurrent cycle. Five
# 1M-record batches on a fresh server, the process step after the first: 2.97-3.12 s with G1 (one G1 server ran
# 140 such cycles in ten minutes and drifted from 3.07 to 3.53 s), 2.80-2.89 s with Parallel, whose GC took
# 0.85 s in all (bench/RESULTS.md).
JAVA_OPTIONS = "-XX:+UseParallelGC"
# local[2,3]: both cores of this machine, and 3 tries per task, as a cluster would retry a lost task.
MASTER = "local[2,3]"


class SparkConnectServer:
    def __init__(self, home: Path, port: int, master: str = MASTER, folder: str = "spark-connect",
                 conf: dict[str, str] | None = None) -> None:
        """`folder`: its own under `home` (log, pid file, artifacts), for a second server on another master;
        `conf`: more of spark-submit's --conf, for that master."""
        self.home = home / folder
        self.port = port
        self.master = master
        self.conf = conf or {}
        self.log = self.home / "spark-connect.log"  # log4j2's, rolled over by size
        self.output = self.home / "spark-connect.out"  # the JVM's stdout and stderr: what log4j2 does not see
        self.pid_file = self.home / "spark-connect.pid"  # the server's (its JVM's)
        self.supervisor_file = processes.supervisor_pid_file(self.pid_file)  # the process that restarts it when it dies

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    def supervisor_pid(self) -> int | None:
        return processes.read_pid(self.supervisor_file)

    def start(self, jars: list[Path]) -> None:
        """Start the server under its supervisor (eosbatch.stack.supervisor), which restarts it when it dies;
        nothing when either runs (a supervisor between two runs of the server is about to restart it)."""
        if self.supervisor_pid() is not None or self.pid() is not None:
            return
        import pyspark

        self.home.mkdir(parents=True, exist_ok=True)
        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        driver_log, executor_log = self.home / "log4j2.properties", self.home / "log4j2-executor.properties"
        # A long-lived server must not fill the disk: log4j2 writes its log and rolls it over by size.
        driver_log.write_text(LEVELS + to_file(self.log))
        executor_log.write_text(LEVELS + TO_STDERR)
        # Bound to loopback: a Connect server runs any code its clients send, and reaches the database.
        command = [str(submit), "--class", SERVER_CLASS, "--name", "eosbatch-connect", "--master", self.master,
                   "--jars", ",".join(map(str, jars)),
                   "--driver-java-options", f"-Dlog4j2.configurationFile=file:{driver_log} {JAVA_OPTIONS}",
                   "--conf", f"spark.executor.extraJavaOptions=-Dlog4j2.configurationFile=file:{executor_log}",
                   "--conf", "spark.executor.logs.rolling.strategy=size",
                   "--conf", f"spark.executor.logs.rolling.maxSize={LOG_MIB * 1024 * 1024}",
                   "--conf", f"spark.executor.logs.rolling.maxRetainedFiles={LOG_FILES}",
                   "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                   "--conf", f"spark.connect.grpc.binding.port={self.port}",
                   "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=2g",
                   "--conf", "spark.sql.shuffle.partitions=4",
                   # the Kafka reader's JAAS line (a password) out of plans, the UI and logs (by key name)
                   "--conf", f"spark.redaction.regex={REDACTION_REGEX}",
                   "--conf", f"spark.sql.redaction.options.regex={REDACTION_REGEX}",
                   "--conf", f"spark.local.dir={self.home / 'tmp'}"]
        for key, value in self.conf.items():
            command += ["--conf", f"{key}={value}"]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        # Faults travel with each batch, never here; and this server is a classic Spark application.
        for name in ("EOSBATCH_FAULT", "EOSBATCH_FAULT_FIRED", "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
            env.pop(name, None)
        # Its working folder: the server writes its session artifacts there (`artifacts/`).
        supervised = [sys.executable, "-m", "eosbatch.stack.supervisor", "--pid-file", str(self.pid_file), "--",
                      *command]
        processes.spawn(supervised, self.output, self.supervisor_file, env=env, cwd=self.home)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Ready when its gRPC port accepts connections (it opens once the SparkContext is up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pid() is None and self.supervisor_pid() is None:
                raise StackError(f"spark-connect: the server exited during start and its supervisor gave up; "
                                 f"see {self.output} and {self.log}:\n{processes.tail(self.output)}\n"
                                 f"{processes.tail(self.log)}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        raise StackNotReady(f"spark-connect: not listening on {self.port} after {timeout:.0f}s; see {self.log} "
                            f"and {self.output}")

    def stop(self) -> bool:
        """The supervisor first (it stops the server and restarts nothing), then a server it left behind."""
        supervised = processes.stop(self.supervisor_file, timeout=40)
        return processes.stop(self.pid_file, timeout=30) or supervised
