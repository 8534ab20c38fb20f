"""The ledger's side of the outside check (eosbatch.verify, eosbatch.spark.recompute): what the batches,
the coverage, the sink and the dead letters hold, read as they are. Every function takes an open cursor."""

from __future__ import annotations

from typing import Any, NamedTuple

from psycopg2 import sql

from eosbatch.ledger.cleanup import table_exists
from eosbatch.ledger.sinks import sink_table
from eosbatch.ledger.store import Batch, Cursor, get_batch
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.protocol.redrive import OVERSIZE_PREFIX  # rows too big to publish (ledger.sinks.move_to_sink)


class BatchSummary(NamedTuple):
    id: int
    state: str
    kind: str
    publish: bool


class OutputCounts(NamedTuple):
    """A batch's state and its output records: `fixed` by its commit (the outbox), `published` by the
    publisher (the only count of a batch committed before the outbox)."""
    state: str
    publish: bool
    fixed: int | None
    published: int | None


def batch_summaries(cur: Cursor, pipeline: str) -> list[BatchSummary]:
    """Every batch of the pipeline, oldest first."""
    cur.execute("SELECT id, state, kind, publish FROM eosbatch.batches WHERE pipeline = %s ORDER BY id", (pipeline,))
    return [BatchSummary(*row) for row in cur.fetchall()]


def output_counts(cur: Cursor, pipeline: str) -> dict[str, OutputCounts]:
    """Per batch id (as the output records' header spells it), its state and output counts."""
    cur.execute("SELECT id, state, publish, outbox_records, published_records FROM eosbatch.batches "
                "WHERE pipeline = %s", (pipeline,))
    return {str(i): OutputCounts(state, publish, fixed, published)
            for i, state, publish, fixed, published in cur.fetchall()}


def committed_batches(cur: Cursor, pipeline: str) -> list[Batch]:
    """The committed and published batches, oldest first."""
    cur.execute("SELECT id FROM eosbatch.batches WHERE pipeline = %s AND state IN ('committed', 'published') "
                "ORDER BY id", (pipeline,))
    return [get_batch(cur, row[0]) for row in cur.fetchall()]


def overlapping_ranges(cur: Cursor, pipeline: str) -> int:
    """How many pairs of committed ranges of one partition and incarnation share an offset (0 when sound)."""
    cur.execute("SELECT count(*) FROM eosbatch.committed_ranges a JOIN eosbatch.committed_ranges b "
                "ON a.pipeline = b.pipeline AND a.topic = b.topic AND a.partition = b.partition "
                "AND a.incarnation = b.incarnation "
                "AND a.batch_id < b.batch_id AND a.offsets && b.offsets WHERE a.pipeline = %s", (pipeline,))
    return int(cur.fetchone()[0])


def committed_ranges_of(cur: Cursor, batch_id: int) -> list[OffsetRange]:
    """The ranges one batch holds in the committed coverage, sorted."""
    cur.execute('SELECT topic, partition, lower(offsets), upper(offsets) FROM eosbatch.committed_ranges '
                'WHERE batch_id = %s ORDER BY 1, 2, 3', (batch_id,))
    return sorted(OffsetRange(t, p, lo, hi) for t, p, lo, hi in cur.fetchall())


def dead_letter_count(cur: Cursor, pipeline: str, batch_id: int) -> int:
    """The dead letters one batch left in eosbatch.dead_letters."""
    cur.execute("SELECT count(*) FROM eosbatch.dead_letters WHERE pipeline = %s AND batch_id = %s",
                (pipeline, batch_id))
    return int(cur.fetchone()[0])


def oversize_keys(cur: Cursor, pipeline: str) -> set[str]:
    """The keys of the rows the commit refused to publish as too big (their dead letters)."""
    cur.execute("SELECT convert_from(key, 'UTF8') FROM eosbatch.dead_letters WHERE pipeline = %s AND "
                "starts_with(error, %s) AND key IS NOT NULL", (pipeline, OVERSIZE_PREFIX))
    return {row[0] for row in cur.fetchall()}


def committed_malformed(cur: Cursor, pipeline: str) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of the dead letters of malformed input inside the committed coverage (not
    those a redrive has taken into the sink since: the pipeline, fixed, parses them now)."""
    cur.execute('SELECT d.topic, d.partition, d."offset" FROM eosbatch.dead_letters d WHERE d.pipeline = %s '
                "AND NOT starts_with(d.error, %s) AND d.redriven_by IS NULL "
                "AND EXISTS (SELECT 1 FROM eosbatch.committed_ranges c "
                "WHERE c.pipeline = d.pipeline AND c.topic = d.topic AND c.partition = d.partition "
                'AND c.incarnation = d.incarnation AND c.offsets @> d."offset")', (pipeline, OVERSIZE_PREFIX))
    return {(topic, partition, offset) for topic, partition, offset in cur.fetchall()}


def sink_rows(cur: Cursor, pipeline: Pipeline, columns: list[str]) -> list[dict[str, Any]]:
    """`columns` of every row of the pipeline's sink; none when the sink does not exist yet."""
    if not table_exists(cur, sink_table(pipeline)):
        return []
    cur.execute(sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(map(sql.Identifier, columns)),
                                                    sink_table(pipeline)))
    return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]


def commit_numbers(cur: Cursor, pipeline: str) -> tuple[list[tuple[int, str, int]], int]:
    """(id, kind, commit_seq) of every committed or published batch that has a number, oldest first, and the
    pipeline's counter (its last number handed out)."""
    cur.execute("SELECT id, kind, commit_seq FROM eosbatch.batches WHERE pipeline = %s AND commit_seq IS NOT NULL "
                "AND state IN ('committed', 'published') ORDER BY id", (pipeline,))
    numbered = [(int(i), kind, int(seq)) for i, kind, seq in cur.fetchall()]
    cur.execute("SELECT commit_seq FROM eosbatch.pipelines WHERE name = %s", (pipeline,))
    row = cur.fetchone()
    return numbered, int(row[0]) if row else 0
