"""Partition bounds: the log start offset and the last stable offset (LSO), read as read_committed sees them."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, OffsetSpec, TopicDescription

from eosbatch.config import Settings
from eosbatch.kafka import clients
from eosbatch.kafka.errors import to_eosbatch
from eosbatch.kafka.exceptions import KafkaUnavailable, TopicChanging, TopicMissing
from eosbatch.protocol.ranges import PartitionBounds, TopicPartition

TIMEOUT = 30.0


def admin(settings: Settings) -> AdminClient:
    return clients.admin(settings)


def _where(client: AdminClient) -> str:
    # librdkafka's client does not say its bootstrap list; eosbatch's admin clients carry it for messages.
    return client.bootstrap if isinstance(client, clients.Admin) else "the configured bootstrap servers"


def describe(client: AdminClient, topics: Iterable[str], field: str = "source.topics",
             bootstrap: str | None = None) -> dict[str, TopicDescription]:
    """The topics' descriptions (ID, partitions) in one request that names only them: listing every topic of
    the cluster costs what the cluster holds (thousands of topics), not what the pipeline reads."""
    names = sorted(set(topics))
    if not names:
        return {}
    futures = client.describe_topics(TopicCollection(names), request_timeout=TIMEOUT)
    found: dict[str, TopicDescription] = {}
    for name, future in futures.items():
        try:
            found[name] = future.result()
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise TopicMissing(f"{field}: topic {name!r} does not exist in Kafka") from None
            raise to_eosbatch(exc, f"describing topic {name!r}", bootstrap or _where(client),
                              needs=f"DESCRIBE on Topic {name}") from exc
    return found


def partitions(client: AdminClient, topics: Iterable[str], field: str = "source.topics") -> list[TopicPartition]:
    topics = list(topics)
    return _partitions(describe(client, topics, field), topics)


def _partitions(described: dict[str, TopicDescription], topics: Iterable[str]) -> list[TopicPartition]:
    return [TopicPartition(topic, p.id) for topic in topics
            for p in sorted(described[topic].partitions, key=lambda p: p.id)]


def topic_ids(settings: Settings, topics: Iterable[str], client: AdminClient | None = None) -> dict[str, str]:
    """Each topic's Kafka topic ID (KIP-516), as Kafka prints it (base64): a topic deleted and recreated under
    the same name gets a new one, which is how a plan tells it from the topic it was reading."""
    described = describe(client or admin(settings), topics, bootstrap=settings.kafka_bootstrap)
    return {name: str(d.topic_id) for name, d in described.items()}


def source_state(settings: Settings, topics: Iterable[str]
                 ) -> tuple[dict[str, str], dict[TopicPartition, PartitionBounds]]:
    """Topic IDs and partition bounds read together: the IDs before and after the bounds, so bounds that
    might belong to a topic recreated in between are never used (TopicChanging, transient)."""
    topics = list(topics)
    client = admin(settings)
    described = describe(client, topics, bootstrap=settings.kafka_bootstrap)
    before = {name: str(d.topic_id) for name, d in described.items()}
    found = _bounds(settings, client, _partitions(described, topics))
    after = topic_ids(settings, topics, client)
    if before != after:
        changed = sorted(t for t in before if before[t] != after.get(t))
        raise TopicChanging(f"source topic(s) {', '.join(changed)} were recreated while their offsets were read; "
                            "nothing planned, the next plan reads them again")
    return before, found


def bounds(settings: Settings, topics: Iterable[str]) -> dict[TopicPartition, PartitionBounds]:
    """Log start and last stable offset of every partition of `topics`.

    The LSO (ListOffsets latest with READ_COMMITTED) stops before the first open transaction, so a range
    that ends there never waits on, or reads around, an undecided transaction."""
    client = admin(settings)
    return _bounds(settings, client, partitions(client, topics))


def _bounds(settings: Settings, client: AdminClient, tps: list[TopicPartition]
            ) -> dict[TopicPartition, PartitionBounds]:
    if not tps:
        return {}

    def query(spec: OffsetSpec) -> dict[TopicPartition, int]:
        request = {KafkaTP(tp.topic, tp.partition): spec for tp in tps}
        futures = client.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                      request_timeout=TIMEOUT)
        try:
            found = {TopicPartition(k.topic, k.partition): f.result().offset for k, f in futures.items()}
        except KafkaException as exc:
            raise to_eosbatch(exc, "listing offsets", settings.kafka_bootstrap) from exc
        unknown = sorted(str(tp) for tp, offset in found.items() if offset < 0)
        if unknown:  # -1001 (no offset): a partition whose leader was moving; never a log's start or end
            raise KafkaUnavailable(f"kafka at {settings.kafka_bootstrap}: listing offsets: no offset for "
                                   f"{', '.join(unknown)} (its leader is moving); retry")
        return found

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


# librdkafka refuses a message larger than its `message.max.bytes` (default 1,000,000) before sending it;
# the broker refuses one larger than the topic's `max.message.bytes`. Headers and framing take the rest.
_PRODUCER_DEFAULT_MAX = 1_000_000
RECORD_OVERHEAD = 1024


def max_record_bytes(settings: Settings, topic: str) -> int:
    """The largest key + value that a record of `topic` may carry, as both the producer and the topic see it."""
    from confluent_kafka.admin import ConfigResource

    client = admin(settings)
    futures = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)], request_timeout=TIMEOUT)
    try:
        entries = next(iter(futures.values())).result(timeout=TIMEOUT)
    except KafkaException as exc:
        raise to_eosbatch(exc, f"reading topic {topic!r}'s max.message.bytes", settings.kafka_bootstrap,
                          needs=f"DESCRIBE_CONFIGS on Topic {topic}") from exc
    except TimeoutError:  # no answer at all (a broker lost mid-request): transient, not a raw TimeoutError
        raise KafkaUnavailable(f"kafka at {settings.kafka_bootstrap}: reading topic {topic!r}'s "
                               f"max.message.bytes: no answer within {TIMEOUT:g} s") from None
    topic_max = int(entries["max.message.bytes"].value)
    producer_max = int(settings.kafka_config.get("message.max.bytes", _PRODUCER_DEFAULT_MAX))
    return min(topic_max, producer_max) - RECORD_OVERHEAD
