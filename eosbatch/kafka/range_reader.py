"""Exact offset ranges read with one librdkafka consumer, read_committed: what the Python Kafka reader of the
process step (eosbatch.spark.kafka_datasource) runs in each Spark task, over many partitions at once.

A range is half-open, [start, end), and planned at or below the last stable offset, so the read of each range
ends for sure; but read_committed never delivers its last offsets when they are a transaction's marker or
aborted records, so the end is not always a record. A partition's range is done when:
- a record at end - 1 or later arrives (a later one, past the range, is dropped), or
- the consumer reports the end of the partition (`enable.partition.eof`) at or past `end`: its fetch position
  went over the markers and aborted records the broker skipped for it, or
- the consumer's position (asked when nothing arrived for a while) is at or past `end`.
Nothing arriving for `stall_s` seconds while some range is not done is a transient error naming those ranges;
a range whose first offsets are gone (deleted by retention) is a terminal one. No group is joined and nothing
is committed: the consumer is assigned the exact start offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaPartition

from eosbatch.config import Settings
from eosbatch.kafka import clients
from eosbatch.kafka.errors import UNREACHABLE, describe, to_eosbatch
from eosbatch.kafka.exceptions import KafkaUnavailable, RangeUnreadable, TopicMissing
from eosbatch.protocol.ranges import OffsetRange, TopicPartition

CHUNK = 10_000  # records handed to the caller at a time (one Arrow batch)
POLL_S = 0.1  # one consume() call's wait when nothing is there
POSITION_AFTER_S = 1.0  # nothing arrived for this long: ask the consumer's positions
# The consumer: read_committed, assigned (no group membership, no commit), an end-of-partition event, an error
# rather than a silent jump when a start offset is out of the log, and fetches that return at once at the end.
CONSUMER = {"isolation.level": "read_committed", "enable.auto.commit": False, "enable.auto.offset.store": False,
            "enable.partition.eof": True, "auto.offset.reset": "error", "fetch.wait.max.ms": 5}


class _Pending:
    """The ranges not read to their end yet, by partition."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        self.ranges = {r.tp: r for r in ranges if r.end > r.start}
        self.reached: dict[TopicPartition, int] = {}  # the furthest offset known to be behind each partition

    def advance(self, tp: TopicPartition, offset: int) -> bool:
        """Note that everything before `offset` of `tp` was read; whether its range is done now."""
        r = self.ranges.get(tp)
        if r is None:
            return False
        self.reached[tp] = max(self.reached.get(tp, r.start), offset)
        if offset < r.end:
            return False
        del self.ranges[tp]
        return True

    def describe(self, most: int = 5) -> str:
        left = sorted(self.ranges.values())
        shown = ", ".join(f"{r} (read up to {self.reached.get(r.tp, r.start)})" for r in left[:most])
        return shown + (f" and {len(left) - most} more" if len(left) > most else "")


def read_exact(settings: Settings, ranges: Sequence[OffsetRange], group_id: str, stall_s: float,
               chunk: int = CHUNK) -> Iterator[list[Message]]:
    """The committed records of `ranges` (at most one range per partition), in chunks of at most `chunk`,
    each partition's in offset order. Kafka's errors leave as eosbatch errors."""
    pending = _Pending(ranges)
    if not pending.ranges:
        return
    consumer = clients.consumer(settings, **{"group.id": group_id, **CONSUMER})
    doing = f"reading {len(pending.ranges)} offset range(s) read_committed"
    try:
        _check_partitions(consumer, pending.ranges, settings.connect_timeout_s, doing, settings.kafka_bootstrap)
        consumer.assign([KafkaPartition(r.topic, r.partition, r.start) for r in pending.ranges.values()])
        yield from _consume(consumer, pending, stall_s, chunk, doing, settings.kafka_bootstrap)
    except KafkaException as exc:
        raise to_eosbatch(exc, doing, settings.kafka_bootstrap) from None
    finally:
        consumer.close()


def _consume(consumer: Any, pending: _Pending, stall_s: float, chunk: int, doing: str,
             bootstrap: str) -> Iterator[list[Message]]:
    out: list[Message] = []
    last_arrival = time.monotonic()
    last_problem = ""
    while pending.ranges:
        messages = consumer.consume(num_messages=chunk, timeout=POLL_S)
        done: list[KafkaPartition] = []
        for m in messages:
            tp = TopicPartition(m.topic(), m.partition())
            r = pending.ranges.get(tp)
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if r is not None and pending.advance(tp, m.offset()):
                        done.append(KafkaPartition(tp.topic, tp.partition))
                elif error.code() in UNREACHABLE:  # librdkafka reconnects by itself; the stall bound holds
                    last_problem = describe(error)
                else:
                    raise _error(error, tp, r, doing, bootstrap)
                continue
            if r is None:
                continue  # fetched past a range already done
            if m.offset() < r.end:
                out.append(m)
            if pending.advance(tp, m.offset() + 1):
                done.append(KafkaPartition(tp.topic, tp.partition))
        if done:
            consumer.pause(done)  # no fetch past their ranges
        if len(out) >= chunk:
            yield out
            out = []
        now = time.monotonic()
        if messages:
            last_arrival = now
        elif now - last_arrival >= POSITION_AFTER_S:
            _positions(consumer, pending)
            if pending.ranges and now - last_arrival >= stall_s:
                why = f"; last problem: {last_problem}" if last_problem else ""
                raise KafkaUnavailable(f"kafka at {bootstrap}: {doing}: nothing arrived for {stall_s:g} s and "
                                       f"these ranges did not reach their end: {pending.describe()}{why}")
    if out:
        yield out


def _check_partitions(consumer: Any, ranges: dict[TopicPartition, OffsetRange], timeout: float, doing: str,
                      bootstrap: str) -> None:
    """A topic or partition that is not there fails at once (TopicMissing), not after the stall bound: a consumer
    assigned to it would only wait."""
    for topic in sorted({tp.topic for tp in ranges}):
        found = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        error = found.error if found is not None else None
        if found is None or (error is not None and error.code() != KafkaError.NO_ERROR):
            reason = describe(error) if error is not None else "not in the cluster's metadata"
            raise TopicMissing(f"kafka at {bootstrap}: {doing}: topic {topic}: {reason}")
        missing = sorted(tp.partition for tp in ranges if tp.topic == topic and tp.partition not in found.partitions)
        if missing:
            raise TopicMissing(f"kafka at {bootstrap}: {doing}: topic {topic} has no partition {missing[0]} "
                               f"({len(found.partitions)} partitions)")


def _positions(consumer: Any, pending: _Pending) -> None:
    """Mark done the ranges whose consumer position is at or past their end (the records and markers the
    broker skipped for read_committed count as read)."""
    asked = [KafkaPartition(tp.topic, tp.partition) for tp in pending.ranges]
    done = [p for p in consumer.position(asked)
            if p.offset >= 0 and pending.advance(TopicPartition(p.topic, p.partition), p.offset)]
    if done:
        consumer.pause(done)


def _error(error: KafkaError, tp: TopicPartition, r: OffsetRange | None, doing: str, bootstrap: str) -> Exception:
    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        where = f"range {r}" if r is not None else f"partition {tp}"
        return RangeUnreadable(f"kafka at {bootstrap}: {doing}: {where} is no longer in the log (deleted by "
                               f"retention?): {describe(error)}")
    return to_eosbatch(KafkaException(error), f"{doing} ({tp})", bootstrap)
