"""The exactly-once check, from the outside: read what Kafka and PostgreSQL hold and compare.

Used by the demo, the tests and the benchmark; it reads Kafka with read_committed, as a user would.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import NamedTuple

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from eosbatch.config import Settings
from eosbatch.kafka.offsets import admin, partitions
from eosbatch.ledger import store
from eosbatch.protocol.ranges import OffsetRange, merge


class Record(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topic(settings: Settings, topic: str, isolation: str = "read_committed", timeout: float = 120.0
               ) -> list[Record]:
    """Every record of `topic` that a consumer with `isolation` sees, from the start to the end offsets."""
    client = Consumer(settings.kafka(**{"group.id": "eosbatch-verify", "enable.auto.commit": False,
                                        "isolation.level": isolation, "enable.partition.eof": True}))
    tps = partitions(admin(settings), [topic])
    ends = {tp.partition: client.get_watermark_offsets(KafkaTP(topic, tp.partition), timeout=30)
            for tp in tps}
    assigned = [KafkaTP(topic, p, low) for p, (low, high) in ends.items() if high > low]
    records: list[Record] = []
    if not assigned:
        client.close()
        return records
    client.assign(assigned)
    done: set[int] = set()
    deadline = time.monotonic() + timeout
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


class OutputCheck(NamedTuple):
    records: int
    duplicates: list[tuple[str, bytes | None]]
    unknown_batches: list[str]
    count_mismatches: dict[int, tuple[int | None, int]]

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.unknown_batches or self.count_mismatches)


def check_output(settings: Settings, pipeline: str, topic: str, records: list[Record] | None = None
                 ) -> OutputCheck:
    """Every published batch's records appear exactly once among read_committed records, and no other."""
    records = read_topic(settings, topic) if records is None else records
    ours = [r for r in records if r.headers.get("eosbatch.pipeline") == pipeline.encode()]
    pairs = Counter((r.headers["eosbatch.batch"].decode(), r.key) for r in ours)
    per_batch = Counter(r.headers["eosbatch.batch"].decode() for r in ours)
    with store.transaction(settings) as cur:
        cur.execute("SELECT id, state, published_records FROM eosbatch.batches WHERE pipeline = %s", (pipeline,))
        batches = {str(i): (state, n) for i, state, n in cur.fetchall()}
    unknown = sorted(b for b in per_batch if batches.get(b, ("?",))[0] != "published")
    mismatches = {int(b): (n, per_batch.get(b, 0)) for b, (state, n) in batches.items()
                  if state == "published" and n is not None and n != per_batch.get(b, 0)}
    return OutputCheck(len(ours), [p for p, n in pairs.items() if n > 1], unknown, mismatches)


def coverage_gaps(settings: Settings, pipeline: str) -> dict[str, list[OffsetRange]]:
    """Per partition, the merged committed coverage when it is not one piece ending at the next offset."""
    with store.transaction(settings) as cur:
        covered = merge(store.committed_coverage(cur, pipeline))
        next_offsets = store.next_offsets(cur, pipeline)
    problems: dict[str, list[OffsetRange]] = {}
    for tp, next_offset in next_offsets.items():
        pieces = [r for r in covered if r.tp == tp]
        if pieces and (len(pieces) != 1 or pieces[0].end != next_offset):
            problems[str(tp)] = pieces
    return problems
