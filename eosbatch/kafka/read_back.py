"""Reading a topic back as a consumer would (read_committed by default): every record to the end offsets,
after waiting for the transactions open below the log end. What eosbatch.verify and the tests check."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from confluent_kafka import TopicPartition as KafkaTP

from eosbatch.config import Settings
from eosbatch.kafka import clients
from eosbatch.kafka.offsets import admin, partitions


class OpenTransaction(TimeoutError):
    """A read_committed read cannot reach the log end: a transaction is open below it."""


class Record(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topic(settings: Settings, topic: str, isolation: str = "read_committed", timeout: float = 120.0,
               since_ms: int | None = None, stable_timeout: float | None = 30.0) -> list[Record]:
    """Every record of `topic` that a consumer with `isolation` sees, from the start (or the first record
    stamped at or after `since_ms`) to the end offsets. read_committed first waits up to `stable_timeout` for
    the transactions open below the log end to end (OpenTransaction after that); None reads to the last
    stable offset as it is now, which is what a read_committed consumer sees at this moment."""
    client = clients.consumer(settings, **{"group.id": "eosbatch-verify", "enable.auto.commit": False,
                                           "isolation.level": isolation, "enable.partition.eof": True})
    tps = partitions(admin(settings), [topic])
    if isolation == "read_committed" and stable_timeout is not None:
        try:
            _await_stable(settings, client, topic, [tp.partition for tp in tps], time.monotonic() + stable_timeout)
        except BaseException:
            client.close()
            raise
    deadline = time.monotonic() + timeout
    ends = {tp.partition: client.get_watermark_offsets(KafkaTP(topic, tp.partition), timeout=30)
            for tp in tps}
    if since_ms is not None:
        found = client.offsets_for_times([KafkaTP(topic, p, since_ms) for p in ends], timeout=30)
        # -1: no record that recent; the partition has nothing to read
        ends = {t.partition: (t.offset if t.offset >= 0 else ends[t.partition][1], ends[t.partition][1])
                for t in found}
    assigned = [KafkaTP(topic, p, low) for p, (low, high) in ends.items() if high > low]
    records: list[Record] = []
    if not assigned:
        client.close()
        return records
    client.assign(assigned)
    done: set[int] = set()
    while len(done) < len(assigned):
        message = client.poll(1)
        if message is None:
            if time.monotonic() > deadline:  # a partial read would make the check wrong: say so instead
                client.close()
                raise TimeoutError(f"read_topic({topic!r}): partitions {sorted(done)} of "
                                   f"{[tp.partition for tp in assigned]} read to their end in {timeout:.0f} s")
            continue
        partition, offset, error = message.partition(), message.offset(), message.error()
        assert partition is not None, "a consumed message or partition EOF names its partition"
        if error is not None:
            if error.code() == -191:  # _PARTITION_EOF: this partition is read to its end
                done.add(partition)
            continue
        assert offset is not None
        raw = message.headers() or []
        pairs = raw.items() if isinstance(raw, dict) else raw
        headers = {name: value if isinstance(value, bytes) else (value or "").encode() for name, value in pairs}
        records.append(Record(partition, offset, message.key(), message.value(), headers))
    client.close()
    return records


def _await_stable(settings: Settings, client: Any, topic: str, partitions: list[int], deadline: float) -> None:
    """Wait until no transaction is open below the log end of now. A read_committed consumer reads to the
    last stable offset: below an open transaction it stops, and every record committed after it would go
    unread, so unchecked (a duplicate there would pass, a record there would look lost). A transaction ends
    when its producer commits or aborts, when the lane's next publisher fences it, or at its
    transaction.timeout.ms; past the deadline the read fails naming where it is held."""
    log_end = clients.consumer(settings, **{"group.id": "eosbatch-verify", "enable.auto.commit": False,
                                             "isolation.level": "read_uncommitted"})
    try:
        ends = {p: log_end.get_watermark_offsets(KafkaTP(topic, p), timeout=30)[1] for p in partitions}
    finally:
        log_end.close()
    while True:
        # a read_committed consumer's high watermark is the last stable offset
        held = {p: (stable, ends[p]) for p in partitions
                if (stable := client.get_watermark_offsets(KafkaTP(topic, p), timeout=30)[1]) < ends[p]}
        if not held:
            return
        if time.monotonic() > deadline:
            where = ", ".join(f"partition {p} at offset {stable} (log end {end})" for p, (stable, end) in held.items())
            raise OpenTransaction(
                f"read_topic({topic!r}): an open transaction holds {where}: the records after it cannot be read "
                "with read_committed, so they cannot be checked yet. It ends when its producer commits or aborts, "
                "when the lane's next publish fences it, or at its transaction.timeout.ms; check again then")
        time.sleep(0.5)
