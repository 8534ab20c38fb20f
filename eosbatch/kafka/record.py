"""The output record's contract, written once: what eosbatch publishes to a pipeline's output topic (a key, a
value and these headers) and how a reader tells a record's pipeline, batch and place. The publisher, the
early path and verify all go through this module; tests keep their own literal names as the independent
count."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

Headers = list[tuple[str, str | bytes | None]]  # what confluent_kafka's Producer.produce takes
Outgoing = tuple[bytes | None, bytes | None, Headers]  # key, value (None: a tombstone), the record's headers

PIPELINE = "eosbatch.pipeline"
BATCH = "eosbatch.batch"
COMMIT_SEQ = "eosbatch.commit_seq"      # per pipeline, in commit order: orders records across lanes
SEQ = "eosbatch.seq"                    # the record's place in its batch's outbox
ATTEMPT = "eosbatch.attempt"            # the Kafka transaction it was produced in: "<transactional id>/<uuid>"
SOURCE_TOPIC = "eosbatch.source_topic"  # where the row came from, when the transform kept it
SOURCE_PARTITION = "eosbatch.source_partition"
SOURCE_OFFSET = "eosbatch.source_offset"


def batch_headers(pipeline: str, batch_id: int, commit_seq: int, attempt: str = "") -> Headers:
    """The headers every record of one batch carries; with `attempt` (TransactionalPublisher.attempt) the
    transaction it is produced in, so that a reader can tell the records of an aborted attempt apart."""
    headers: Headers = [(PIPELINE, pipeline.encode()), (BATCH, str(batch_id).encode()),
                        (COMMIT_SEQ, str(commit_seq).encode())]
    return [*headers, (ATTEMPT, attempt.encode())] if attempt else headers


def outgoing(chunks: Iterator[list[tuple[Any, ...]]], source_topics: Sequence[str], common: Headers,
             copied: Sequence[str] = (), encode: Callable[[Sequence[Any]], bytes] | None = None
             ) -> Iterator[Outgoing]:
    """Rows of (seq, key, source topic, partition, offset, the copied headers' values, the value), text as
    bytes, as records to produce: each with the batch's `common` headers, its own, and the headers named in
    `copied` whose value is not NULL. The value is one column of JSON text, or with `encode` the columns it
    encodes (kafka/avro.py). A row without a source position (an aggregate) carries its seq alone; with one
    source topic the topic is named even when the row did not keep it."""
    single_topic = source_topics[0].encode() if len(source_topics) == 1 else None
    if copied or encode is not None:
        yield from _shaped(chunks, single_topic, common, copied, encode)
        return
    for rows in chunks:  # inlined: a call per record costs on a million of them
        for seq, key, topic, partition, offset, value in rows:
            if partition is None:
                yield key, value, [*common, (SEQ, seq)]
            elif topic is None and single_topic is None:
                yield key, value, [*common, (SEQ, seq), (SOURCE_PARTITION, partition), (SOURCE_OFFSET, offset)]
            else:
                yield key, value, [*common, (SEQ, seq), (SOURCE_PARTITION, partition), (SOURCE_OFFSET, offset),
                                   (SOURCE_TOPIC, topic if topic is not None else single_topic)]


def _own(common: Headers, seq: Any, topic: Any, partition: Any, offset: Any, single_topic: bytes | None) -> Headers:
    """A record's own headers, as `outgoing`'s loop makes them."""
    if partition is None:
        return [*common, (SEQ, seq)]
    if topic is None and single_topic is None:
        return [*common, (SEQ, seq), (SOURCE_PARTITION, partition), (SOURCE_OFFSET, offset)]
    return [*common, (SEQ, seq), (SOURCE_PARTITION, partition), (SOURCE_OFFSET, offset),
            (SOURCE_TOPIC, topic if topic is not None else single_topic)]


def _shaped(chunks: Iterator[list[tuple[Any, ...]]], single_topic: bytes | None, common: Headers,
            copied: Sequence[str], encode: Callable[[Sequence[Any]], bytes] | None) -> Iterator[Outgoing]:
    """`outgoing` for records that copy headers or whose value is encoded here."""
    first = 5 + len(copied)
    for rows in chunks:
        for row in rows:
            seq, key, topic, partition, offset = row[:5]
            headers = _own(common, seq, topic, partition, offset, single_topic)
            headers += [(name, bytes(v) if isinstance(v, memoryview) else v)
                        for name, v in zip(copied, row[5:first], strict=True) if v is not None]
            yield key, (encode(row[first:]) if encode is not None else row[first]), headers


# ---------------------------------------------------------------- reading records back

def is_from(headers: Mapping[str, bytes], pipeline: str) -> bool:
    return headers.get(PIPELINE) == pipeline.encode()


def batch_of(headers: Mapping[str, bytes]) -> str:
    """The batch id a record of ours carries, as text."""
    return headers[BATCH].decode()


def is_of_batch(headers: Mapping[str, bytes], batch_id: int) -> bool:
    return headers.get(BATCH) == str(batch_id).encode()


def seq_of(headers: Mapping[str, bytes]) -> bytes | None:
    """The record's place in its batch's outbox; None for a batch published before the outbox."""
    return headers.get(SEQ)


def commit_order(headers: Mapping[str, bytes]) -> tuple[int, int]:
    """Where the record falls in the pipeline's commit order: (commit_seq, seq)."""
    return int(headers.get(COMMIT_SEQ, b"0")), int(headers.get(SEQ, b"0"))
