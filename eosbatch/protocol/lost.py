"""The ledger never falls behind the output (docs/design.md, invariants). The regular lane's marker group holds,
per source partition, the end offset of the last batch Kafka published; a batch is published only after its
PostgreSQL COMMIT moved the ledger past that end. So a marker offset beyond everything the ledger holds for
the partition means the ledger lost committed batches that Kafka already published: an asynchronous replica,
promoted, that had not received the last commits (or a restore from an older backup).

Offsets, never batch ids: ids and the commit sequence come from the database, so after such a loss they are
handed out again and a marker naming "batch 7" proves nothing."""

from __future__ import annotations

from collections.abc import Mapping

from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.recovery import MarkerEntry


def lost_ranges(marker: Mapping[TopicPartition, MarkerEntry], ledger_ends: Mapping[TopicPartition, int]
                ) -> list[OffsetRange]:
    """Per partition whose marker offset is past the ledger's end (the furthest of its next offset and its
    committed coverage, in any incarnation): the range Kafka's output holds and the ledger does not, sorted.
    A partition the ledger does not track, or without a marker, is not compared."""
    lost = []
    for tp, entry in marker.items():
        end = ledger_ends.get(tp)
        if end is not None and entry.offset is not None and entry.offset > end:
            lost.append(OffsetRange(tp.topic, tp.partition, end, entry.offset))
    return sorted(lost)


def describe_lost(pipeline: str, marker_group: str, lost: list[OffsetRange]) -> str:
    """The terminal error's message: what is lost, why, and the way out."""
    ranges = ", ".join(f"{r.topic}:{r.partition} [{r.start}, {r.end})" for r in lost)
    return (f"pipeline {pipeline}: the ledger is behind the output. Kafka's marker group {marker_group} shows "
            f"published batches the ledger has never heard of: {ranges} ({sum(r.size for r in lost)} offsets). "
            "The ledger's database lost committed batches (an asynchronous replica promoted before it received "
            "them, or a restore from an older backup); their output is in Kafka, their sink rows, dead letters "
            "and ledger records are not. Nothing was planned: running on would publish that range again. Way "
            f"out: `eosbatch adopt-published {pipeline}` processes exactly that range into the sink again and "
            "records it in the ledger as published, without producing it again (docs/design.md, failure matrix)")
