"""Where a pipeline reads each partition, in the ledger: its next offset and incarnation, the source topics'
IDs, and the resets that moved them. Every function takes an open cursor: the caller owns the transaction."""

from __future__ import annotations

from datetime import datetime

import psycopg2.extras

from eosbatch.ledger.connection import Cursor
from eosbatch.ledger.exceptions import StaleEpoch
from eosbatch.protocol.ranges import TopicPartition
from eosbatch.protocol.sources import Incarnation, Reset, SourceTopic, TopicReset


def next_offsets(cur: Cursor, pipeline: str, lock: bool = False) -> dict[TopicPartition, int]:
    query = "SELECT topic, partition, next_offset FROM eosbatch.partition_offsets WHERE pipeline = %s"
    cur.execute(query + (" FOR UPDATE" if lock else ""), (pipeline,))
    return {TopicPartition(t, p): int(o) for t, p, o in cur.fetchall()}


def ledger_ends(cur: Cursor, pipeline: str) -> dict[TopicPartition, int]:
    """Per tracked partition, the furthest offset the ledger holds: its next offset, or the end of its committed
    coverage in any incarnation when that is further (a reset moved the next offset back). The regular lane's
    marker is never past it (eosbatch.protocol.lost)."""
    cur.execute("SELECT o.topic, o.partition, GREATEST(o.next_offset, COALESCE(max(upper(c.offsets)), 0)) "
                "FROM eosbatch.partition_offsets o LEFT JOIN eosbatch.committed_ranges c ON c.pipeline = o.pipeline "
                "AND c.topic = o.topic AND c.partition = o.partition WHERE o.pipeline = %s "
                "GROUP BY o.topic, o.partition, o.next_offset", (pipeline,))
    return {TopicPartition(t, p): int(o) for t, p, o in cur.fetchall()}


def set_next_offsets(cur: Cursor, pipeline: str, ends: dict[TopicPartition, int]) -> None:
    """What a commit does to the offsets: each partition's next offset moves to its range's end."""
    for tp, end in ends.items():
        cur.execute("UPDATE eosbatch.partition_offsets SET next_offset = %s "
                    "WHERE pipeline = %s AND topic = %s AND partition = %s", (end, pipeline, tp.topic, tp.partition))


def add_partitions(cur: Cursor, pipeline: str, starts: dict[TopicPartition, int]) -> None:
    """Start tracking partitions seen for the first time (new pipeline, new partitions), in their topic's
    current incarnation (a partition added after a topic reset belongs to the new topic)."""
    if starts:
        psycopg2.extras.execute_values(
            cur, "INSERT INTO eosbatch.partition_offsets (pipeline, topic, partition, next_offset, incarnation) "
                 "SELECT v.pipeline, v.topic, v.partition, v.next_offset, COALESCE(s.incarnation, 0) "
                 "FROM (VALUES %s) AS v (pipeline, topic, partition, next_offset) "
                 "LEFT JOIN eosbatch.source_topics s ON s.pipeline = v.pipeline AND s.topic = v.topic "
                 "ON CONFLICT DO NOTHING",
            [(pipeline, tp.topic, tp.partition, offset) for tp, offset in starts.items()],
            template="(%s, %s, %s::integer, %s::bigint)",
        )


def incarnations(cur: Cursor, pipeline: str, lock: bool = False) -> dict[TopicPartition, Incarnation]:
    """Per tracked partition: the incarnation it is read in and its next offset."""
    query = "SELECT topic, partition, incarnation, next_offset FROM eosbatch.partition_offsets WHERE pipeline = %s"
    cur.execute(query + (" FOR UPDATE" if lock else ""), (pipeline,))
    return {TopicPartition(t, p): Incarnation(int(i), int(o)) for t, p, i, o in cur.fetchall()}


def source_topics(cur: Cursor, pipeline: str) -> dict[str, SourceTopic]:
    cur.execute("SELECT topic, topic_id, incarnation FROM eosbatch.source_topics WHERE pipeline = %s", (pipeline,))
    return {t: SourceTopic(i, int(n)) for t, i, n in cur.fetchall()}


def record_topic_ids(cur: Cursor, pipeline: str, ids: dict[str, str]) -> None:
    """Learn the topic IDs of topics new to the pipeline, or recorded before the ledger kept IDs. Never
    overwrites a known ID: only a reset (`apply_topic_reset`) moves to another topic."""
    for topic, topic_id in sorted(ids.items()):
        cur.execute("INSERT INTO eosbatch.source_topics (pipeline, topic, topic_id) VALUES (%s, %s, %s) "
                    "ON CONFLICT (pipeline, topic) DO UPDATE SET topic_id = EXCLUDED.topic_id, updated_at = now() "
                    "WHERE eosbatch.source_topics.topic_id IS NULL", (pipeline, topic, topic_id))


def _record_reset(cur: Cursor, pipeline: str, reset: Reset, reason: str) -> None:
    cur.execute("INSERT INTO eosbatch.source_resets (pipeline, topic, partition, from_incarnation, from_offset, "
                "to_incarnation, to_offset, from_topic_id, to_topic_id, reason) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", (pipeline, *reset, reason))


def apply_reset(cur: Cursor, pipeline: str, reset: Reset, reason: str) -> None:
    """Move one partition as `reset` says, and record it (the pipeline row is locked by the caller)."""
    cur.execute("UPDATE eosbatch.partition_offsets SET next_offset = %s, incarnation = %s "
                "WHERE pipeline = %s AND topic = %s AND partition = %s AND next_offset = %s AND incarnation = %s",
                (reset.to_offset, reset.to_incarnation, pipeline, reset.topic, reset.partition, reset.from_offset,
                 reset.from_incarnation))
    if cur.rowcount != 1:
        raise StaleEpoch(f"pipeline {pipeline!r}: {reset.tp} moved while the reset was decided; run it again")
    if reset.to_incarnation != reset.from_incarnation:  # the topic's counter: numbers are never given twice
        cur.execute("INSERT INTO eosbatch.source_topics (pipeline, topic, topic_id, incarnation) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (pipeline, topic) DO UPDATE SET updated_at = now(), "
                    "incarnation = GREATEST(eosbatch.source_topics.incarnation, EXCLUDED.incarnation)",
                    (pipeline, reset.topic, reset.to_topic_id, reset.to_incarnation))
    _record_reset(cur, pipeline, reset, reason)


def apply_topic_reset(cur: Cursor, pipeline: str, change: TopicReset, reason: str) -> None:
    """Read the recreated topic from now on: its ID, a new incarnation for every partition, recorded resets."""
    cur.execute("INSERT INTO eosbatch.source_topics (pipeline, topic, topic_id, incarnation) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (pipeline, topic) DO UPDATE SET topic_id = EXCLUDED.topic_id, "
                "incarnation = EXCLUDED.incarnation, updated_at = now()",
                (pipeline, change.topic, change.topic_id, change.incarnation))
    for reset in change.resets:
        _record_reset(cur, pipeline, reset, reason)
    cur.execute("DELETE FROM eosbatch.partition_offsets WHERE pipeline = %s AND topic = %s", (pipeline, change.topic))
    add_partitions(cur, pipeline, change.starts)  # in the topic's new incarnation


def resets(cur: Cursor, pipeline: str) -> list[tuple[int, datetime, str, Reset]]:
    """Every recorded reset of the pipeline: (id, when, reason, what), oldest first."""
    cur.execute("SELECT id, created_at, reason, topic, partition, from_incarnation, from_offset, to_incarnation, "
                "to_offset, from_topic_id, to_topic_id FROM eosbatch.source_resets WHERE pipeline = %s ORDER BY id",
                (pipeline,))
    return [(int(row[0]), row[1], row[2], Reset(*row[3:])) for row in cur.fetchall()]
