"""The output record's contract, written once: what eosbatch publishes to a pipeline's output topic (a key, a
value and these headers) and how a reader tells a record's pipeline, batch and place. The publisher, the
early path and verify all go through this module; tests keep their own literal names as the independent
count."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

Headers = list[tuple[str, str | bytes | None]]  # what confluent_kafka's Producer.produce takes
Outgoing = tuple[bytes | None, bytes | None, Headers]  # key, value (None: a tombstone), the record's headers

PIPELINE = "eosbatch.pipeline"
BATCH = "eosbatch.batch"
COMMIT_SEQ = "eosbatch.commit_seq"      # per pipeline, in commit order: orders records across lanes
SEQ = "eosbatch.seq"                    # the record's place in its batch's outbox
SOURCE_TOPIC = "eosbatch.source_topic"  # where the row came from, when the transform kept it
SOURCE_PARTITION = "eosbatch.source_partition"
SOURCE_OFFSET = "eosbatch.source_offset"


def batch_headers(pipeline: str, batch_id: int, commit_seq: int) -> Headers:
    """The headers every record of one batch carries."""
    return [(PIPELINE, pipeline.encode()), (BATCH, str(batch_id).encode()), (COMMIT_SEQ, str(commit_seq).encode())]


def outgoing(chunks: Iterator[list[tuple[Any, ...]]], source_topics: Sequence[str], common: Headers
             ) -> Iterator[Outgoing]:
    """Rows of (seq, key, value, source topic, partition, offset), text as bytes, as records to produce: each
    with the batch's `common` headers and its own. A row without a source position (an aggregate) carries its
    seq alone; with one source topic the topic is named even when the row did not keep it."""
    single_topic = source_topics[0].encode() if len(source_topics) == 1 else None
    for rows in chunks:
        for seq, key, value, topic, partition, offset in rows:
            if partition is None:
                yield key, value, [*common, (SEQ, seq)]
            elif topic is None and single_topic is None:
                yield key, value, [*common, (SEQ, seq), (SOURCE_PARTITION, partition), (SOURCE_OFFSET, offset)]
            else:
                yield key, value, [*common, (SEQ, seq), (SOURCE_PARTITION, partition), (SOURCE_OFFSET, offset),
                                   (SOURCE_TOPIC, topic if topic is not None else single_topic)]


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
