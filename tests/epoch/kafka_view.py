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


def describe(bootstrap: str, *transactional_ids: str) -> dict[str, ProducerState]:
    """Each id's state as its transaction coordinator holds it (a plaintext bootstrap: the embedded stack's)."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("`java` is not on PATH (the embedded stack's broker needs it too)")
    done = subprocess.run([java, "-cp", f"{broker_jars()}/*", str(SOURCE), bootstrap, *transactional_ids],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"describeTransactions failed ({done.returncode}): {done.stderr[-2000:]}")
    found = {}
    for line in done.stdout.splitlines():
        tid, producer_id, epoch, state, _coordinator = line.split(" ")
        found[tid] = ProducerState(int(producer_id), int(epoch), state)
    assert set(found) == set(transactional_ids), done.stdout
    return found
