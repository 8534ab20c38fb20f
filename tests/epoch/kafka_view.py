"""Kafka's own view of a transactional id: its producer id, epoch and state, from the broker's Java Admin API
(`Admin.describeTransactions`, what `kafka-transactions.sh describe` prints), run from the stack's broker jars.
The judge of the epochs is not the client that bumped them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from eosbatch import stack
from eosbatch.stack.versions import KAFKA_VERSION

SOURCE = Path(__file__).with_name("DescribeTransactions.java")


class ProducerState(NamedTuple):
    producer_id: int
    epoch: int
    state: str  # the coordinator's: Empty, Ongoing, PrepareCommit, CompleteCommit, CompleteAbort, ...

    def __str__(self) -> str:
        return f"producer id {self.producer_id} epoch {self.epoch} ({self.state})"


def broker_jars() -> Path:
    """The embedded stack's broker jars (`eosbatch stack up` fetched them): kafka-clients holds the Admin API."""
    jars = stack.home() / "cache" / f"kafka-{KAFKA_VERSION}"
    if not (jars / f"kafka-clients-{KAFKA_VERSION}.jar").exists():
        raise RuntimeError(f"no Kafka jars in {jars}: run `eosbatch stack up` once (it fetches them)")
    return jars


def _java(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise RuntimeError(f"`{tool}` is not on PATH (the embedded stack's broker needs a JDK too)")
    return found


def _compiled(jars: Path) -> Path:
    """The program's class folder, compiled once per source (a JVM that compiles first takes ~1.5 s more)."""
    classes = stack.home() / "cache" / "describe-transactions"
    marker = classes / f"{int(SOURCE.stat().st_mtime)}.done"
    if not marker.exists():
        classes.mkdir(parents=True, exist_ok=True)
        for stale in classes.glob("*.done"):
            stale.unlink()
        subprocess.run([_java("javac"), "-cp", f"{jars}/*", "-d", str(classes), str(SOURCE)], check=True,
                       capture_output=True, timeout=120)
        marker.touch()
    return classes


class KafkaView:
    """One JVM asked about transactional ids one at a time (a JVM with the Admin client starts in ~3 s here);
    a context manager: the JVM ends with it."""

    def __init__(self, bootstrap: str) -> None:
        jars = broker_jars()
        self._jvm = subprocess.Popen([_java("java"), "-cp", f"{_compiled(jars)}:{jars}/*", SOURCE.stem, bootstrap],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def describe(self, transactional_id: str) -> ProducerState:
        """The id's state as its transaction coordinator holds it."""
        assert self._jvm.stdin is not None and self._jvm.stdout is not None
        self._jvm.stdin.write(transactional_id + "\n")
        self._jvm.stdin.flush()
        line = self._jvm.stdout.readline()
        if not line:
            raise RuntimeError(f"describeTransactions failed: {self.close()}")
        tid, producer_id, epoch, state, _coordinator = line.split()
        assert tid == transactional_id, line
        return ProducerState(int(producer_id), int(epoch), state)

    def close(self) -> str:
        """End the JVM; its stderr (the cause, when it failed)."""
        _, err = self._jvm.communicate(timeout=60)  # closes stdin: the program's loop ends
        return err[-2000:]

    def __enter__(self) -> KafkaView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
