"""Partition bounds: the log start offset and the last stable offset (LSO), read as read_committed sees them."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import IsolationLevel, KafkaException
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, OffsetSpec

from eosbatch.config import Settings
from eosbatch.kafka import clients
from eosbatch.kafka.errors import to_eosbatch
from eosbatch.kafka.exceptions import TopicMissing
from eosbatch.protocol.ranges import PartitionBounds, TopicPartition

TIMEOUT = 30.0


def admin(settings: Settings) -> AdminClient:
    return clients.admin(settings)


def _where(client: AdminClient) -> str:
    # librdkafka's client does not say its bootstrap list; eosbatch's admin clients carry it for messages.
    return client.bootstrap if isinstance(client, clients.Admin) else "the configured bootstrap servers"


def partitions(client: AdminClient, topics: Iterable[str], field: str = "source.topics") -> list[TopicPartition]:
    try:
        metadata = client.list_topics(timeout=TIMEOUT)
    except KafkaException as exc:
        raise to_eosbatch(exc, "listing topics", _where(client)) from exc
    found: list[TopicPartition] = []
    for topic in topics:
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None:
            raise TopicMissing(f"{field}: topic {topic!r} does not exist in Kafka")
        found.extend(TopicPartition(topic, p) for p in sorted(meta.partitions))
    return found


def bounds(settings: Settings, topics: Iterable[str]) -> dict[TopicPartition, PartitionBounds]:
    """Log start and last stable offset of every partition of `topics`.

    The LSO (ListOffsets latest with READ_COMMITTED) stops before the first open transaction, so a range
    that ends there never waits on, or reads around, an undecided transaction."""
    client = admin(settings)
    tps = partitions(client, topics)
    if not tps:
        return {}

    def query(spec: OffsetSpec) -> dict[TopicPartition, int]:
        request = {KafkaTP(tp.topic, tp.partition): spec for tp in tps}
        futures = client.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                      request_timeout=TIMEOUT)
        try:
            return {TopicPartition(k.topic, k.partition): f.result().offset for k, f in futures.items()}
        except KafkaException as exc:
            raise to_eosbatch(exc, "listing offsets", settings.kafka_bootstrap) from exc

    low, stable = query(OffsetSpec.earliest()), query(OffsetSpec.latest())
    return {tp: PartitionBounds(low[tp], stable[tp]) for tp in tps}


def at_time(settings: Settings, topics: Iterable[str], timestamp_ms: int,
            bounds_now: dict[TopicPartition, PartitionBounds]) -> dict[TopicPartition, int]:
    """Per partition, the first offset whose record timestamp is at or after `timestamp_ms`; the last
    stable offset when no record is that recent (Kafka answers -1 then)."""
    client = admin(settings)
    request = {KafkaTP(tp.topic, tp.partition): OffsetSpec.for_timestamp(timestamp_ms) for tp in bounds_now}
    if not request:
        return {}
    futures = client.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=TIMEOUT)
    found: dict[TopicPartition, int] = {}
    try:
        for k, f in futures.items():
            tp = TopicPartition(k.topic, k.partition)
            offset = f.result().offset
            found[tp] = bounds_now[tp].stable if offset < 0 else min(offset, bounds_now[tp].stable)
    except KafkaException as exc:
        raise to_eosbatch(exc, "listing offsets by timestamp", settings.kafka_bootstrap) from exc
    return found
