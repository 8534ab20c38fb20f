"""The offsets a pipeline's batches have claimed, which no other batch may plan again: the committed
coverage (the ranges committed batches read, per partition and incarnation) and the ranges in flight.
Every function takes an open cursor: the caller owns the transaction."""

from __future__ import annotations

from eosbatch.ledger.connection import Cursor
from eosbatch.ledger.exceptions import OffsetMismatch
from eosbatch.ledger.store import Batch, open_batches
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.protocol.states import claims_coverage


def claim_coverage(cur: Cursor, batch: Batch) -> None:
    """Insert the batch's ranges into the committed coverage of the incarnation each was planned in; a range
    planned in an incarnation that a reset has left since is refused (the batch read another topic's data)."""
    cur.execute("SELECT r.topic, r.partition, r.incarnation, o.incarnation FROM eosbatch.batch_ranges r "
                "LEFT JOIN eosbatch.partition_offsets o ON o.pipeline = %s AND o.topic = r.topic "
                "AND o.partition = r.partition WHERE r.batch_id = %s", (batch.pipeline, batch.id))
    stale = [f"{t}:{p} (planned in incarnation {i}, read in {now} now)" for t, p, i, now in cur.fetchall()
             if now is not None and i != now]
    if stale:
        raise OffsetMismatch(f"batch {batch.id}: a reset moved its source since it was planned: {', '.join(stale)}")
    cur.execute("INSERT INTO eosbatch.committed_ranges (pipeline, topic, partition, incarnation, offsets, batch_id) "
                "SELECT %s, topic, partition, incarnation, int8range(start_offset, end_offset), batch_id "
                "FROM eosbatch.batch_ranges WHERE batch_id = %s", (batch.pipeline, batch.id))


def stale_ranges(cur: Cursor, batch_id: int) -> list[OffsetRange]:
    """The batch's ranges planned in an incarnation its partition is no longer read in (after a reset)."""
    cur.execute("SELECT r.topic, r.partition, r.start_offset, r.end_offset FROM eosbatch.batch_ranges r "
                "JOIN eosbatch.batches b ON b.id = r.batch_id "
                "LEFT JOIN eosbatch.partition_offsets o ON o.pipeline = b.pipeline AND o.topic = r.topic "
                "AND o.partition = r.partition WHERE r.batch_id = %s "
                "AND o.incarnation IS DISTINCT FROM r.incarnation", (batch_id,))
    return [OffsetRange(*row) for row in cur.fetchall()]


def in_flight(cur: Cursor, pipeline: str) -> list[OffsetRange]:
    """Ranges of batches not yet committed that will claim coverage: no other batch may plan them meanwhile.
    (A committed batch's ranges are in the committed coverage already.)"""
    return [r for b in open_batches(cur, pipeline) if b.state != "committed" and claims_coverage(b.kind)
            for r in b.ranges]


def committed_coverage(cur: Cursor, pipeline: str) -> list[OffsetRange]:
    """The committed coverage of the incarnation each partition is read in now (what backfill and replay plan
    against: earlier incarnations' offsets name records of a topic that is gone, or that went back)."""
    cur.execute("SELECT c.topic, c.partition, lower(c.offsets), upper(c.offsets) FROM eosbatch.committed_ranges c "
                "JOIN eosbatch.partition_offsets o ON o.pipeline = c.pipeline AND o.topic = c.topic "
                "AND o.partition = c.partition AND o.incarnation = c.incarnation "
                "WHERE c.pipeline = %s ORDER BY c.topic, c.partition, lower(c.offsets)", (pipeline,))
    return [OffsetRange(*row) for row in cur.fetchall()]


def coverage_by_incarnation(cur: Cursor, pipeline: str) -> list[tuple[int, OffsetRange]]:
    """All committed coverage, each range with its incarnation."""
    cur.execute("SELECT incarnation, topic, partition, lower(offsets), upper(offsets) FROM eosbatch.committed_ranges "
                "WHERE pipeline = %s ORDER BY topic, partition, incarnation, lower(offsets)", (pipeline,))
    return [(int(row[0]), OffsetRange(*row[1:])) for row in cur.fetchall()]
