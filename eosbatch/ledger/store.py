"""Ledger reads and writes of batches: their rows, ranges and states. Every function takes an open cursor: the
caller owns the transaction (`transaction`, from eosbatch.ledger.connection).

The rest of the ledger's data has modules of its own: lanes (epochs, leases), positions (where each
partition is read: offsets, incarnations, resets), claims (committed coverage, ranges in flight) and cleanup
(compaction, a finished batch's rows)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

import psycopg2
import psycopg2.extras

from eosbatch.config import Settings
from eosbatch.exceptions import EosbatchError
from eosbatch.ledger.connection import Cursor, transaction
from eosbatch.ledger.connection import connect as connect  # re-exported: how callers open the ledger
from eosbatch.ledger.exceptions import BatchNotFound
from eosbatch.ledger.positions import incarnations
from eosbatch.protocol.exceptions import IllegalTransition
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.protocol.states import OPEN_STATES, BatchKind, BatchState, Lane, check_transition, lane


class Batch(NamedTuple):
    id: int
    pipeline: str
    kind: BatchKind
    state: BatchState
    epoch: int
    publish: bool
    marker_group: str
    replay_of: int | None
    writers: dict[str, list[str]] | None
    records_read: int | None
    sink_rows: int | None
    dead_letters: int | None
    published_records: int | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    outbox_records: int | None   # fixed by the commit: what publish must produce, whoever checks it
    commit_seq: int | None       # per pipeline, in commit order; None: committed before eosbatch 0.2
    committed_at: datetime | None
    outbox_columns: list[str] | None  # the typed outbox's record columns; None: JSON in eosbatch.outbox
    ranges: tuple[OffsetRange, ...]

    def writer_tags(self, kind: str) -> list[str]:
        return sorted(self.writer_counts(kind) or (self.writers or {}).get(kind, []))

    def writer_counts(self, kind: str) -> dict[str, int] | None:
        """Rows each successful writer staged; None for a batch staged by an older eosbatch (tags only)."""
        found: Any = (self.writers or {}).get(kind, {})
        return {tag: int(n) for tag, n in found.items()} if isinstance(found, dict) else None

    @property
    def staged_columns(self) -> list[str] | None:
        """The sink columns this batch staged (None: staged by an older eosbatch)."""
        columns = (self.writers or {}).get("columns")
        return list(columns) if columns is not None else None


_BATCH_COLUMNS = ("id, pipeline, kind, state, epoch, publish, marker_group, replay_of, writers, records_read, "
                  "sink_rows, dead_letters, published_records, error, created_at, updated_at, outbox_records, "
                  "commit_seq, committed_at, outbox_columns")


def record_error(settings: Settings, batch_id: int, error: str) -> None:
    """Note why a committed batch cannot be published (best effort: the error is raised anyway, and a failure
    to note it must not take its place)."""
    try:
        with transaction(settings) as cur:
            cur.execute("UPDATE eosbatch.batches SET error = %s, updated_at = now() WHERE id = %s "
                        "AND state = 'committed'", (error[:2000], batch_id))
    except (EosbatchError, psycopg2.Error):
        pass


def next_commit_seq(cur: Cursor, pipeline: str) -> int:
    """The pipeline's next commit sequence number (the pipeline row is locked by the commit's epoch check)."""
    cur.execute("UPDATE eosbatch.pipelines SET commit_seq = commit_seq + 1 WHERE name = %s RETURNING commit_seq",
                (pipeline,))
    return int(cur.fetchone()[0])


def seconds_since_commit(cur: Cursor, batch_id: int) -> float | None:
    cur.execute("SELECT extract(epoch FROM now() - committed_at) FROM eosbatch.batches WHERE id = %s", (batch_id,))
    row = cur.fetchone()
    return None if row is None or row[0] is None else float(row[0])


def _ranges(cur: Cursor, batch_ids: list[int]) -> dict[int, tuple[OffsetRange, ...]]:
    cur.execute("SELECT batch_id, topic, partition, start_offset, end_offset FROM eosbatch.batch_ranges "
                "WHERE batch_id = ANY(%s) ORDER BY batch_id, topic, partition", (batch_ids,))
    found: dict[int, list[OffsetRange]] = {i: [] for i in batch_ids}
    for batch_id, topic, partition, start, end in cur.fetchall():
        found[batch_id].append(OffsetRange(topic, partition, start, end))
    return {i: tuple(r) for i, r in found.items()}


def _batches(cur: Cursor, where: str, params: tuple[Any, ...]) -> list[Batch]:
    cur.execute(f"SELECT {_BATCH_COLUMNS} FROM eosbatch.batches WHERE {where}", params)  # noqa: S608
    rows = cur.fetchall()
    ranges = _ranges(cur, [r[0] for r in rows]) if rows else {}
    return [Batch._make((*row, ranges[row[0]])) for row in rows]


def get_batch(cur: Cursor, batch_id: int, lock: bool = False) -> Batch:
    found = _batches(cur, "id = %s" + (" FOR UPDATE" if lock else ""), (batch_id,))
    if not found:
        raise BatchNotFound(f"no batch {batch_id}")
    return found[0]


def open_batches(cur: Cursor, pipeline: str, in_lane: Lane | None = None) -> list[Batch]:
    """Unfinished batches (planned, staged, committed), of one lane or of both."""
    found = _batches(cur, "pipeline = %s AND state = ANY(%s) ORDER BY id", (pipeline, sorted(OPEN_STATES)))
    return [b for b in found if in_lane is None or lane(b.kind) == in_lane]


class Watermark(NamedTuple):
    """Where a pipeline's commits stood: its last commit_seq, and its committed batches not yet published."""

    commit_seq: int
    unpublished: tuple[int, ...]


def watermark(cur: Cursor, pipeline: str) -> Watermark:
    cur.execute("SELECT coalesce((SELECT commit_seq FROM eosbatch.pipelines WHERE name = %s), 0), "
                "ARRAY(SELECT id FROM eosbatch.batches WHERE pipeline = %s AND state = 'committed' ORDER BY id)",
                (pipeline, pipeline))
    seq, unpublished = cur.fetchone()
    return Watermark(int(seq), tuple(unpublished))


def changed_since(cur: Cursor, pipeline: str, mark: Watermark) -> list[Batch]:
    """The batches committed after `mark`, and those committed before it that are published now."""
    return _batches(cur, "pipeline = %s AND (commit_seq > %s OR (id = ANY(%s) AND state = 'published')) "
                         "ORDER BY commit_seq, id", (pipeline, mark.commit_seq, list(mark.unpublished)))


def recent_batches(cur: Cursor, pipeline: str, limit: int = 10) -> list[Batch]:
    return _batches(cur, "pipeline = %s ORDER BY id DESC LIMIT %s", (pipeline, limit))


def last_of_each_lane(cur: Cursor, pipeline: str) -> list[Batch]:
    """The newest batch of each lane (regular; backfill, replay and reprocess), for status."""
    return _batches(cur, "id IN (SELECT max(id) FROM eosbatch.batches WHERE pipeline = %s GROUP BY kind = 'regular') "
                         "ORDER BY id", (pipeline,))


def batch_exists(cur: Cursor, batch_id: int) -> bool:
    cur.execute("SELECT 1 FROM eosbatch.batches WHERE id = %s", (batch_id,))
    return cur.fetchone() is not None


def create_batch(cur: Cursor, pipeline: str, kind: BatchKind, epoch: int, ranges: list[OffsetRange],
                 marker_group: str | Callable[[int], str], publish: bool = True, replay_of: int | None = None,
                 batch_id: int | None = None) -> Batch:
    """A planned batch; `marker_group` may depend on the new batch's id (backfill batches have their own).
    `batch_id`: this id, not the sequence's next (a batch the ledger lost, adopted again: eosbatch.adopt); the
    sequence moves past it."""
    if batch_id is None:
        cur.execute("SELECT nextval(pg_get_serial_sequence('eosbatch.batches', 'id'))")
        batch_id = int(cur.fetchone()[0])
    else:
        cur.execute("SELECT setval(pg_get_serial_sequence('eosbatch.batches', 'id'), GREATEST(last_value, %s)) "
                    "FROM eosbatch.batches_id_seq", (batch_id,))
    group = marker_group(batch_id) if callable(marker_group) else marker_group
    cur.execute(
        "INSERT INTO eosbatch.batches (id, pipeline, kind, state, epoch, publish, marker_group, replay_of) "
        "VALUES (%s, %s, %s, 'planned', %s, %s, %s, %s)",
        (batch_id, pipeline, kind, epoch, publish, group, replay_of),
    )
    # Each range belongs to the incarnation its partition is read in now: the commit claims coverage there,
    # and refuses the batch if a reset started another incarnation meanwhile.
    where = incarnations(cur, pipeline)
    psycopg2.extras.execute_values(
        cur, "INSERT INTO eosbatch.batch_ranges (batch_id, topic, partition, start_offset, end_offset, incarnation) "
             "VALUES %s",
        [(batch_id, r.topic, r.partition, r.start, r.end, where[r.tp].incarnation if r.tp in where else 0)
         for r in ranges],
    )
    return get_batch(cur, batch_id)


def set_state(cur: Cursor, batch: Batch, target: BatchState, **fields: Any) -> Batch:
    """Move a batch to `target` if the protocol allows it and nobody moved it first."""
    check_transition(batch.id, batch.state, target)
    assignments = ", ".join(f"{name} = %s" for name in fields)  # names are this module's callers', not input
    values = [json.dumps(v) if name == "writers" else v for name, v in fields.items()]
    update = (f"UPDATE eosbatch.batches SET state = %s, updated_at = now(){', ' if fields else ''}{assignments} "  # noqa: S608
              "WHERE id = %s AND state = %s")
    cur.execute(update, (target, *values, batch.id, batch.state))
    if cur.rowcount != 1:
        # Moved meanwhile (a Spark driver marked it staged while recovery aborts it): move it from where it
        # is now if the protocol allows that, under its row lock; never report a move that did not happen.
        current = get_batch(cur, batch.id, lock=True)
        check_transition(batch.id, current.state, target)
        cur.execute(update, (target, *values, batch.id, current.state))
        if cur.rowcount != 1:
            raise IllegalTransition(batch.id, current.state, target)
    return batch._replace(state=target, **fields)
