"""`eosbatch produce`: a file of JSON lines into a topic, in Kafka transactions.

The whole input is read and checked first (`parse`, pure): a line that is not a JSON object, or lacks the
key field, refuses the input naming its line number, and nothing is produced. Then the records go out in
transactions of `per_transaction` lines each; a failure aborts the open transaction, and the transactions
committed before it stay (the count says how many records those held)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from eosbatch.config import Settings
from eosbatch.exceptions import ConfigError, TerminalError
from eosbatch.kafka import topics
from eosbatch.kafka.exceptions import TopicMissing
from eosbatch.kafka.publisher import TransactionalPublisher


class BadLine(TerminalError):
    """A line of the input is not a JSON object (or lacks the key field); nothing was produced."""


Record = tuple[bytes | None, bytes]  # key, value


def default_transactional_id(topic: str) -> str:
    """The producer's default transactional.id: one per topic, so a run that died with a transaction open
    is settled by the next run (its init_transactions aborts it) instead of holding back read_committed
    readers until the transaction times out. Two runs into one topic at once fence each other: give one
    its own --transactional-id."""
    return f"eosbatch-produce.{topic}"


def _key_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


def parse(lines: Iterable[str], key_field: str | None = None) -> list[Record]:
    """The records of JSON lines, each value the line as written; blank lines are skipped. BadLine names
    the first line (1-based) that is not a JSON object, or whose `key_field` is missing or null."""
    records: list[Record] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise BadLine(f"line {number}: not JSON ({exc.args[0] if exc.args else exc}); nothing produced") \
                from None
        if not isinstance(document, dict):
            raise BadLine(f"line {number}: a JSON {type(document).__name__}, not an object; nothing produced")
        key = None
        if key_field is not None:
            if document.get(key_field) is None:
                raise BadLine(f"line {number}: no value for the key field {key_field!r}; nothing produced")
            key = _key_bytes(document[key_field])
        records.append((key, text.encode()))
    return records


def produce(settings: Settings, topic: str, records: list[Record], per_transaction: int = 1000,
            transactional_id: str | None = None) -> int:
    """Produce `records` into `topic`, `per_transaction` to a Kafka transaction; the number committed."""
    if per_transaction < 1:
        raise ConfigError("--per-transaction", f"must be at least 1, got {per_transaction}")
    if topics.partition_counts(settings, [topic])[topic] is None:  # else librdkafka waits for it to appear
        raise TopicMissing(f"topic {topic!r} does not exist in Kafka; create it: eosbatch topic create {topic}")
    tid = transactional_id or default_transactional_id(topic)
    committed = 0
    with TransactionalPublisher(settings, tid, owner=f"eosbatch produce into {topic}") as publisher:
        publisher.init()
        for start in range(0, len(records), per_transaction):
            publisher.begin()
            count = publisher.produce(topic, records[start:start + per_transaction], [])
            publisher.commit_records()
            committed += count
    return committed
