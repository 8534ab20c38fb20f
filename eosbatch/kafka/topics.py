"""Topics as a user makes them: create one (the embedded broker does not create topics on first use), read
how many partitions each of some topics has, None for a topic that does not exist, and what the broker lets
this client do with them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from eosbatch.config import Settings
from eosbatch.exceptions import ConfigError
from eosbatch.kafka import clients, offsets
from eosbatch.kafka.errors import describe, error_of, to_eosbatch
from eosbatch.kafka.exceptions import TopicExists, TopicMissing

TIMEOUT = 30.0
BROKER_DEFAULT = -1  # a replication factor of -1 asks for the broker's default.replication.factor (KIP-464)
# The broker refused the request itself: asking again the same way is refused again (the option to change).
REFUSED = {KafkaError.INVALID_REPLICATION_FACTOR: "--replication-factor",
           KafkaError.INVALID_PARTITIONS: "--partitions", KafkaError.TOPIC_EXCEPTION: "NAME",
           KafkaError.POLICY_VIOLATION: "topic create", KafkaError.INVALID_CONFIG: "topic create"}


class CreatedTopic(NamedTuple):
    name: str
    partitions: int
    created: bool  # False: it existed already, with these partitions


def create(settings: Settings, name: str, partitions: int = 1, replication_factor: int | None = None) -> CreatedTopic:
    """Create `name` with `partitions` and `replication_factor` replicas (None: the broker's
    default.replication.factor, so the same call makes one replica on a one-node broker and three on the
    embedded three-node cluster, whose min.insync.replicas is then the broker's too). A topic of that name with
    the same partitions is fine (created=False); with other partitions it is TopicExists, naming both counts."""
    client = clients.admin(settings)
    future = client.create_topics([NewTopic(name, partitions, BROKER_DEFAULT if replication_factor is None
                                            else replication_factor)],
                                  request_timeout=TIMEOUT)[name]
    try:
        future.result(timeout=TIMEOUT + 5)
    except KafkaException as exc:
        error = error_of(exc)
        code = error.code() if error is not None else None
        if code in REFUSED:
            raise ConfigError(REFUSED[code], f"the broker refused topic {name!r}: {describe(error)}") from None
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            found = partition_counts(settings, [name])[name]
            if found == partitions:
                return CreatedTopic(name, partitions, created=False)
            raise TopicExists(f"topic {name!r} exists with {found} partition(s), not the {partitions} asked "
                              "for") from None
        raise to_eosbatch(exc, f"creating topic {name!r}", settings.kafka_bootstrap,
                          needs=f"CREATE on Topic {name}") from exc
    return CreatedTopic(name, partitions, created=True)


def partition_counts(settings: Settings, topics: Iterable[str]) -> dict[str, int | None]:
    """Each topic's number of partitions; None for a topic that does not exist."""
    client = clients.admin(settings)
    counts: dict[str, int | None] = {}
    for name in dict.fromkeys(topics):
        try:
            described = offsets.describe(client, [name], bootstrap=settings.kafka_bootstrap)
        except TopicMissing:
            counts[name] = None
            continue
        counts[name] = len(described[name].partitions)
    return counts


def authorized_operations(settings: Settings, names: Iterable[str]) -> dict[str, frozenset[str]] | None:
    """What the broker lets this client's principal do with each existing topic ("READ", "WRITE", ...), as the
    broker itself reports it (KIP-430); None when the broker has no authorizer, so that every client may do
    everything (describing ACLs is refused with SECURITY_DISABLED). A topic that does not exist is left out."""
    client = clients.admin(settings)
    # None matches any name, principal and host (the stubs say str)
    everything = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                  AclOperation.ANY, AclPermissionType.ANY)
    try:
        client.describe_acls(everything, request_timeout=TIMEOUT).result(timeout=TIMEOUT + 5)
    except KafkaException as exc:
        error = error_of(exc)
        if error is not None and error.code() == KafkaError.SECURITY_DISABLED:
            return None
        # Any other refusal (no DESCRIBE on the cluster) still leaves the topics' own answer below.
    found: dict[str, frozenset[str]] = {}
    for name, future in client.describe_topics(TopicCollection(sorted(set(names))), request_timeout=TIMEOUT,
                                               include_authorized_operations=True).items():
        try:
            described = future.result(timeout=TIMEOUT + 5)
        except KafkaException as exc:
            error = error_of(exc)
            if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                found[name] = frozenset()
                continue
            raise to_eosbatch(exc, f"describing topic {name!r}", settings.kafka_bootstrap,
                              needs=f"DESCRIBE on Topic {name}") from exc
        if described.authorized_operations is not None:  # None: this broker does not say
            found[name] = frozenset(op.name for op in described.authorized_operations)
    return found
