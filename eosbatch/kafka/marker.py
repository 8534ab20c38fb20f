"""The marker: the batch's end offsets, committed to the marker group inside the publish transaction.

Because Kafka commits them atomically with the output records, "the marker group is at the batch's
end offsets" proves the output was published; it also lets standard lag tools show the pipeline's lag.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from eosbatch.config import Settings
from eosbatch.kafka import clients
from eosbatch.kafka.errors import to_eosbatch
from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.recovery import MarkerEntry

_COORDINATOR_ERRORS = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT}


def consumer(settings: Settings, group: str) -> Consumer:
    # read_committed makes OffsetFetch wait for pending transactional offsets (require_stable).
    return clients.consumer(settings, **{"group.id": group, "enable.auto.commit": False,
                                         "isolation.level": "read_committed"})


def read(settings: Settings, group: str, tps: Iterable[TopicPartition], timeout: float = 60.0
         ) -> dict[TopicPartition, MarkerEntry]:
    client = consumer(settings, group)
    wanted = [KafkaTP(tp.topic, tp.partition) for tp in tps]
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                found = client.committed(wanted, timeout=30)
                break
            except KafkaException as exc:
                # The group coordinator moves or loads (first use of __consumer_offsets, broker restart).
                if not exc.args[0].retriable() and exc.args[0].code() not in _COORDINATOR_ERRORS \
                        or time.monotonic() > deadline:
                    raise to_eosbatch(exc, f"reading marker group {group}", settings.kafka_bootstrap) from exc
                time.sleep(0.5)
    finally:
        client.close()
    return {TopicPartition(p.topic, p.partition): MarkerEntry(p.offset if p.offset >= 0 else None, p.metadata or "")
            for p in found}


def delete_group(settings: Settings, group: str, log: Callable[[str], None]) -> bool:
    """Delete a marker group that is no longer needed; best effort (a failure leaves only clutter)."""
    client = clients.admin(settings)  # held until the answer: a dropped client never resolves its futures
    future = client.delete_consumer_groups([group], request_timeout=30)[group]
    try:
        future.result(timeout=60)
    except TimeoutError:
        log(f"marker group {group} not deleted (no answer in 60 s); it is safe to delete it by hand")
        return False
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return True
        log(f"marker group {group} not deleted ({exc}); it is safe to delete it by hand")
        return False
    return True


def offsets_for(ranges: Iterable[OffsetRange], metadata: str) -> list[KafkaTP]:
    """The marker: each range's end offset, with metadata naming the batch (so it is matched, not trusted)."""
    return [KafkaTP(r.topic, r.partition, r.end, metadata=metadata) for r in ranges]
