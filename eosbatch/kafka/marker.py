"""The marker: the batch's end offsets, committed to the marker group inside the publish transaction.

Because Kafka commits them atomically with the output records, "the marker group is at the batch's
end offsets" proves the output was published; it also lets standard lag tools show the pipeline's lag.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from eosbatch.config import Settings
from eosbatch.kafka import clients
from eosbatch.kafka.errors import to_eosbatch
from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.recovery import MarkerEntry

_COORDINATOR_ERRORS = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT}


_KEPT = 4  # marker consumers kept per process: a runner's lanes (a backfill batch has a group of its own)
_lock = threading.Lock()
_kept: OrderedDict[tuple[Any, ...], Consumer] = OrderedDict()
_inherited: list[Any] = []  # a forked child's copies of its parent's consumers: never closed, never freed


def _after_fork() -> None:
    # Closing (or freeing) a parent's librdkafka client in a child would wait for threads the child lacks.
    _inherited.append(dict(_kept))
    _kept.clear()


os.register_at_fork(after_in_child=_after_fork)


def consumer(settings: Settings, group: str) -> Consumer:
    """A consumer of the marker group (it never subscribes: it only reads and names the group's offsets),
    kept for the process's further batches: each new one costs a client and a coordinator lookup."""
    key = clients.kept_key(settings, group)
    with _lock:
        if key in _kept:
            _kept.move_to_end(key)
            return _kept[key]
    # read_committed makes OffsetFetch wait for pending transactional offsets (require_stable).
    made = clients.consumer(settings, **{"group.id": group, "enable.auto.commit": False,
                                         "isolation.level": "read_committed"})
    with _lock:
        _kept[key] = made
        while len(_kept) > _KEPT:
            _, old = _kept.popitem(last=False)
            old.close()
    return made


def forget(settings: Settings, group: str) -> None:
    """Close the kept consumer of `group` (after a failure, or when the group is deleted)."""
    key = clients.kept_key(settings, group)
    with _lock:
        found = _kept.pop(key, None)
    if found is not None:
        found.close()


def read(settings: Settings, group: str, tps: Iterable[TopicPartition], timeout: float = 60.0
         ) -> dict[TopicPartition, MarkerEntry]:
    client = consumer(settings, group)
    wanted = [KafkaTP(tp.topic, tp.partition) for tp in tps]
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                found = client.committed(wanted, timeout=30)
                # A partition the broker could not answer for comes back with offset -1001 and its error:
                # read as "no marker", it would publish a batch again. Retried or raised like the call's.
                refused = next((p.error for p in found if p.error is not None), None)
                if refused is not None:
                    raise KafkaException(refused)
                break
            except KafkaException as exc:
                # The group coordinator moves or loads (first use of __consumer_offsets, broker restart).
                if not exc.args[0].retriable() and exc.args[0].code() not in _COORDINATOR_ERRORS \
                        or time.monotonic() > deadline:
                    raise to_eosbatch(exc, f"reading marker group {group}", settings.kafka_bootstrap,
                                      needs=f"DESCRIBE on Group {group}") from exc
                time.sleep(0.5)
    except BaseException:
        forget(settings, group)
        raise
    return {TopicPartition(p.topic, p.partition): MarkerEntry(p.offset if p.offset >= 0 else None, p.metadata or "")
            for p in found}


def delete_group(settings: Settings, group: str, log: Callable[[str], None]) -> bool:
    """Delete a marker group that is no longer needed; best effort (a failure leaves only clutter)."""
    forget(settings, group)
    client = clients.admin(settings)  # held until the answer: a dropped client never resolves its futures
    try:
        client.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
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
