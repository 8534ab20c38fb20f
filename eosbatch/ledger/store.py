"""Ledger reads and writes. Every function takes an open cursor: the caller owns the transaction."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, NamedTuple, TypeAlias

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from eosbatch.config import Settings, redact
from eosbatch.ledger.exceptions import BatchNotFound, LedgerUnavailable, StaleEpoch
from eosbatch.protocol.lease import Lease
from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.states import BatchKind, BatchState, Lane, check_transition, claims_coverage, lane

# Each lane's epoch column; fixed names, never input.
_EPOCH_COLUMN: dict[Lane, str] = {"regular": "epoch", "backfill": "backfill_epoch"}

Cursor: TypeAlias = psycopg2.extensions.cursor


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
    ranges: tuple[OffsetRange, ...]

    def writer_tags(self, kind: str) -> list[str]:
        return list((self.writers or {}).get(kind, []))


_BATCH_COLUMNS = ("id, pipeline, kind, state, epoch, publish, marker_group, replay_of, writers, records_read, "
                  "sink_rows, dead_letters, published_records, error, created_at, updated_at")


def connect(settings: Settings) -> psycopg2.extensions.connection:
    try:
        return psycopg2.connect(settings.psycopg_dsn, connect_timeout=10, application_name="eosbatch")
    except psycopg2.OperationalError as exc:
        # libpq's message can include the URL; say where without the password.
        raise LedgerUnavailable(f"cannot connect to PostgreSQL at {redact(settings.database_url)}: "
                                f"{str(exc).strip().splitlines()[0]}") from None


@contextlib.contextmanager
def transaction(settings: Settings) -> Iterator[Cursor]:
    """One PostgreSQL transaction: committed when the block ends, rolled back on any exception."""
    connection = connect(settings)
    try:
        with connection, connection.cursor() as cursor:
            yield cursor
    except psycopg2.OperationalError as exc:
        raise LedgerUnavailable(f"PostgreSQL: {str(exc).strip().splitlines()[0]}") from exc
    finally:
        connection.close()


def lock_pipeline(cur: Cursor, name: str, lane: Lane = "regular") -> int:
    """Create the pipeline's row if new and lock it for this transaction; returns the lane's epoch."""
    cur.execute("INSERT INTO eosbatch.pipelines (name) VALUES (%s) ON CONFLICT DO NOTHING", (name,))
    cur.execute(f"SELECT {_EPOCH_COLUMN[lane]} FROM eosbatch.pipelines WHERE name = %s FOR UPDATE",  # noqa: S608
                (name,))
    return int(cur.fetchone()[0])


def hold_lane(cur: Cursor, name: str, in_lane: Lane, epoch: int) -> None:
    """Lock the pipeline and check this runner still owns the lane (nobody recovered it since)."""
    if lock_pipeline(cur, name, in_lane) != epoch:
        raise StaleEpoch(f"pipeline {name!r}: another runner took over the {in_lane} lane (epoch {epoch} is stale)")


def bump_epoch(cur: Cursor, name: str, lane: Lane = "regular") -> int:
    column = _EPOCH_COLUMN[lane]
    cur.execute(f"UPDATE eosbatch.pipelines SET {column} = {column} + 1 WHERE name = %s "  # noqa: S608
                f"RETURNING {column}", (name,))
    return int(cur.fetchone()[0])


def read_lease(cur: Cursor, name: str, in_lane: Lane) -> tuple[Lease, datetime]:
    """The lane's lease, locked for this transaction, and the database's clock (never the client's).
    The pipeline's row must exist (lock_pipeline first)."""
    cur.execute("INSERT INTO eosbatch.lane_leases (pipeline, lane) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (name, in_lane))
    cur.execute("SELECT owner, expires_at, clock_timestamp() FROM eosbatch.lane_leases "
                "WHERE pipeline = %s AND lane = %s FOR UPDATE", (name, in_lane))
    owner, expires_at, now = cur.fetchone()
    return Lease(owner, expires_at), now


def take_lease(cur: Cursor, name: str, in_lane: Lane, owner: str, seconds: float, takeover: bool) -> Lease:
    """Give the lane to `owner` (read_lease locked it); `takeover`: from a holder that did not release it."""
    cur.execute("UPDATE eosbatch.lane_leases SET owner = %s, "
                "expires_at = clock_timestamp() + %s * interval '1 second', taken_at = clock_timestamp(), "
                "takeovers = takeovers + %s WHERE pipeline = %s AND lane = %s "
                "RETURNING owner, expires_at", (owner, seconds, int(takeover), name, in_lane))
    return Lease(*cur.fetchone())


def renew_lease(cur: Cursor, name: str, in_lane: Lane, owner: str, seconds: float) -> Lease | None:
    """Extend `owner`'s lease; None when the lane is no longer `owner`'s (taken over or released).
    A renewal never takes the lane: that is recovery's job, with an epoch bump."""
    cur.execute("UPDATE eosbatch.lane_leases SET expires_at = clock_timestamp() + %s * interval '1 second' "
                "WHERE pipeline = %s AND lane = %s AND owner = %s RETURNING owner, expires_at",
                (seconds, name, in_lane, owner))
    row = cur.fetchone()
    return None if row is None else Lease(*row)


def release_lease(cur: Cursor, name: str, in_lane: Lane, owner: str) -> bool:
    """Free the lane now if `owner` still holds it, so the next runner need not wait for the expiry."""
    cur.execute("UPDATE eosbatch.lane_leases SET owner = NULL, expires_at = NULL "
                "WHERE pipeline = %s AND lane = %s AND owner = %s", (name, in_lane, owner))
    return cur.rowcount == 1


def lane_leases(cur: Cursor, name: str) -> dict[str, tuple[Lease, int]]:
    """Each lane's lease and its takeover count, for status and tests."""
    cur.execute("SELECT lane, owner, expires_at, takeovers FROM eosbatch.lane_leases WHERE pipeline = %s",
                (name,))
    return {row[0]: (Lease(row[1], row[2]), int(row[3])) for row in cur.fetchall()}


def check_epoch(cur: Cursor, batch: Batch, lock: bool = False) -> None:
    """Refuse to act for a batch planned under an older epoch of its lane: a newer runner owns the lane."""
    column = _EPOCH_COLUMN[lane(batch.kind)]
    cur.execute(f"SELECT {column} FROM eosbatch.pipelines WHERE name = %s"  # noqa: S608
                + (" FOR UPDATE" if lock else ""), (batch.pipeline,))
    row = cur.fetchone()
    if row is None or int(row[0]) != batch.epoch:
        raise StaleEpoch(f"batch {batch.id} was planned in {lane(batch.kind)} epoch {batch.epoch}; pipeline "
                         f"{batch.pipeline!r} is now in epoch {row[0] if row else '?'}")


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
    found = _batches(cur, "pipeline = %s AND state IN ('planned', 'staged', 'committed') ORDER BY id",
                     (pipeline,))
    return [b for b in found if in_lane is None or lane(b.kind) == in_lane]


def recent_batches(cur: Cursor, pipeline: str, limit: int = 10) -> list[Batch]:
    return _batches(cur, "pipeline = %s ORDER BY id DESC LIMIT %s", (pipeline, limit))


def create_batch(cur: Cursor, pipeline: str, kind: BatchKind, epoch: int, ranges: list[OffsetRange],
                 marker_group: str | Callable[[int], str], publish: bool = True, replay_of: int | None = None
                 ) -> Batch:
    """A planned batch; `marker_group` may depend on the new batch's id (backfill batches have their own)."""
    cur.execute("SELECT nextval(pg_get_serial_sequence('eosbatch.batches', 'id'))")
    batch_id = int(cur.fetchone()[0])
    group = marker_group(batch_id) if callable(marker_group) else marker_group
    cur.execute(
        "INSERT INTO eosbatch.batches (id, pipeline, kind, state, epoch, publish, marker_group, replay_of) "
        "VALUES (%s, %s, %s, 'planned', %s, %s, %s, %s)",
        (batch_id, pipeline, kind, epoch, publish, group, replay_of),
    )
    psycopg2.extras.execute_values(
        cur, "INSERT INTO eosbatch.batch_ranges (batch_id, topic, partition, start_offset, end_offset) VALUES %s",
        [(batch_id, r.topic, r.partition, r.start, r.end) for r in ranges],
    )
    return get_batch(cur, batch_id)


def set_state(cur: Cursor, batch: Batch, target: BatchState, **fields: Any) -> Batch:
    """Move a batch to `target` if the protocol allows it and nobody moved it first."""
    check_transition(batch.id, batch.state, target)
    assignments = ", ".join(f"{name} = %s" for name in fields)  # names are this module's callers', not input
    values = [json.dumps(v) if name == "writers" else v for name, v in fields.items()]
    cur.execute(
        f"UPDATE eosbatch.batches SET state = %s, updated_at = now(){', ' if fields else ''}{assignments} "  # noqa: S608
        "WHERE id = %s AND state = %s",
        (target, *values, batch.id, batch.state),
    )
    if cur.rowcount != 1:
        current = get_batch(cur, batch.id)
        check_transition(batch.id, current.state, target)
    return batch._replace(state=target, **fields)


def next_offsets(cur: Cursor, pipeline: str, lock: bool = False) -> dict[TopicPartition, int]:
    query = "SELECT topic, partition, next_offset FROM eosbatch.partition_offsets WHERE pipeline = %s"
    cur.execute(query + (" FOR UPDATE" if lock else ""), (pipeline,))
    return {TopicPartition(t, p): int(o) for t, p, o in cur.fetchall()}


def add_partitions(cur: Cursor, pipeline: str, starts: dict[TopicPartition, int]) -> None:
    """Start tracking partitions seen for the first time (new pipeline, new partitions)."""
    if starts:
        psycopg2.extras.execute_values(
            cur, "INSERT INTO eosbatch.partition_offsets (pipeline, topic, partition, next_offset) VALUES %s "
                 "ON CONFLICT DO NOTHING",
            [(pipeline, tp.topic, tp.partition, offset) for tp, offset in starts.items()],
        )


def in_flight(cur: Cursor, pipeline: str) -> list[OffsetRange]:
    """Ranges of batches not yet committed that will claim coverage: no other batch may plan them meanwhile.
    (A committed batch's ranges are in the committed coverage already.)"""
    return [r for b in open_batches(cur, pipeline) if b.state != "committed" and claims_coverage(b.kind)
            for r in b.ranges]


def committed_coverage(cur: Cursor, pipeline: str) -> list[OffsetRange]:
    cur.execute("SELECT topic, partition, lower(offsets), upper(offsets) FROM eosbatch.committed_ranges "
                "WHERE pipeline = %s ORDER BY topic, partition, lower(offsets)", (pipeline,))
    return [OffsetRange(*row) for row in cur.fetchall()]


def delete_staging(cur: Cursor, batch_id: int, stage_table: Any | None) -> None:
    from psycopg2 import sql

    cur.execute("DELETE FROM eosbatch.staged_dead_letters WHERE batch_id = %s", (batch_id,))
    if stage_table is not None and table_exists(cur, stage_table):
        cur.execute(sql.SQL("DELETE FROM {} WHERE _eosbatch_batch = %s").format(stage_table), (batch_id,))


def table_exists(cur: Cursor, table: Any) -> bool:
    schema, name = table.strings
    cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (schema, name))
    return cur.fetchone() is not None
