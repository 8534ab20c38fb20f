"""Ledger reads and writes. Every function takes an open cursor: the caller owns the transaction."""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, NamedTuple, TypeAlias

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from eosbatch.config import Settings, redact
from eosbatch.exceptions import EosbatchError
from eosbatch.ledger import errors as ledger_errors
from eosbatch.ledger.exceptions import BatchNotFound, LedgerSchemaMissing, LedgerUnavailable, OffsetMismatch, StaleEpoch
from eosbatch.protocol.exceptions import IllegalTransition
from eosbatch.protocol.lease import Lease
from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.sources import Incarnation, Reset, SourceTopic, TopicReset
from eosbatch.protocol.states import OPEN_STATES, BatchKind, BatchState, Lane, check_transition, claims_coverage, lane

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


def where(settings: Settings) -> str:
    return redact(settings.database_url)  # names the address, never the password


def connect(settings: Settings, check_schema: bool = True, asynchronous: bool = False
            ) -> psycopg2.extensions.connection:
    """A connection to the ledger's database, opened within the connect timeout (EOSBATCH_CONNECT_TIMEOUT_S;
    a connect_timeout in the URL wins). The first connection of a process also checks the ledger's
    revision, so that a database without the ledger, or with an older one, says "run eosbatch db upgrade"
    before anything else happens. `asynchronous`: a psycopg2 asynchronous connection, ready (see
    eosbatch.ledger.stream), without the revision check."""
    timeout = max(2, math.ceil(settings.connect_timeout_s))  # libpq: whole seconds, at least 2
    options: dict[str, Any] = {} if "connect_timeout=" in settings.psycopg_dsn else {"connect_timeout": timeout}
    try:
        if asynchronous:
            from eosbatch.ledger.stream import wait

            connection = psycopg2.connect(settings.psycopg_dsn, application_name="eosbatch", async_=1, **options)
            try:
                wait(connection, timeout)
            except BaseException:
                connection.close()  # its socket, half-connected, would stay open until the object is collected
                raise
            return connection
        connection = psycopg2.connect(settings.psycopg_dsn, application_name="eosbatch", **options)
    except psycopg2.Error as exc:
        # libpq's message can include the URL; say where without the password.
        raise ledger_errors.connect_error(exc, where(settings), timeout) from None
    if check_schema:
        _check_revision_once(connection, settings)
    return connection


def _check_revision_once(connection: psycopg2.extensions.connection, settings: Settings) -> None:
    """The ledger revision check, once per process and database (again after a migration); a connection
    that fails it is closed."""
    if settings.database_url in _schema_checked:
        return
    try:
        _check_revision(connection, settings)
    except BaseException:
        connection.close()
        raise


# Databases whose ledger revision this process has checked (the check costs a query and reading the
# migrations; a migration run from this process clears it).
_schema_checked: set[str] = set()


def forget_schema_check() -> None:
    """Check the ledger's revision again on the next connection (after a migration)."""
    _schema_checked.clear()


def _check_revision(connection: psycopg2.extensions.connection, settings: Settings) -> None:
    from eosbatch.ledger import migrate

    try:
        known = migrate.revisions()
    except Exception:  # noqa: BLE001 - no migrations folder (a trimmed install): the table errors still say it
        _schema_checked.add(settings.database_url)
        return
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT to_regclass(%s) IS NOT NULL", (migrate.VERSION_TABLE,))
            current = None
            if cur.fetchone()[0]:
                cur.execute(f"SELECT version_num FROM {migrate.VERSION_TABLE}")  # noqa: S608 - a constant
                row = cur.fetchone()
                current = row[0] if row else None
        connection.rollback()
    except psycopg2.Error as exc:
        raise (ledger_errors.to_eosbatch(exc, where(settings))
               or LedgerUnavailable(f"PostgreSQL at {where(settings)}: {ledger_errors.first_line(exc)}")) from exc
    problem = ledger_errors.schema_problem(current, known)
    if problem is not None:
        raise LedgerSchemaMissing(f"PostgreSQL at {where(settings)}: {problem}")
    _schema_checked.add(settings.database_url)


# Connections a finished transaction left open, per process and database: a runner makes about a dozen
# short transactions per batch, and a new connection (a backend process) costs ~5 ms of it each time.
_IDLE_KEPT = 2
_idle_lock = threading.Lock()
_idle: dict[tuple[int, str], list[psycopg2.extensions.connection]] = {}
_inherited: list[Any] = []  # a forked child's copies of its parent's connections: never used, never closed


def _after_fork() -> None:
    # Closing (or freeing) a copy would send the server a Terminate on the parent's socket.
    _inherited.extend(_idle.values())
    _idle.clear()


os.register_at_fork(after_in_child=_after_fork)


def _take(settings: Settings) -> psycopg2.extensions.connection:
    """An idle connection that still answers (the server may have restarted since), else a new one."""
    with _idle_lock:
        kept = _idle.get((os.getpid(), settings.psycopg_dsn))
        connection = kept.pop() if kept else None
    if connection is not None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            connection.rollback()
        except psycopg2.Error:
            connection.close()
            return connect(settings)
        _check_revision_once(connection, settings)  # a migration may have run since: as connect does
        return connection
    return connect(settings)


def _give_back(settings: Settings, connection: psycopg2.extensions.connection) -> None:
    if not connection.closed and connection.status == psycopg2.extensions.STATUS_READY:
        with _idle_lock:
            kept = _idle.setdefault((os.getpid(), settings.psycopg_dsn), [])
            if len(kept) < _IDLE_KEPT:
                kept.append(connection)
                return
    connection.close()


@contextlib.contextmanager
def transaction(settings: Settings) -> Iterator[Cursor]:
    """One PostgreSQL transaction: committed when the block ends, rolled back on any exception.

    Errors about the database itself (unreachable, busy, access, no ledger) leave as eosbatch errors;
    constraint violations and data errors stay psycopg2's, for the caller to decide. The connection is
    kept for the process's next transaction when this one ended well, closed otherwise."""
    connection = _take(settings)
    ended_well = False
    try:
        with connection, connection.cursor() as cursor:
            yield cursor
        ended_well = True
    except psycopg2.Error as exc:
        mapped = ledger_errors.to_eosbatch(exc, where(settings))
        if mapped is None:
            raise
        raise mapped from exc
    finally:
        if ended_well:
            _give_back(settings, connection)
        else:
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
        raise StaleEpoch(f"pipeline {name!r}: another runner owns the {in_lane} lane now (this runner's epoch "
                         f"{epoch} is stale); this runner stops")


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
        raise StaleEpoch(f"batch {batch.id}: another runner owns pipeline {batch.pipeline!r} now (the batch was "
                         f"planned in {lane(batch.kind)} epoch {batch.epoch}, the pipeline is in epoch "
                         f"{row[0] if row else '?'}); this runner stops")


def check_lane_epoch(cur: Cursor, batch: Batch, epoch: int) -> None:
    """Refuse to act for a runner whose epoch of the batch's lane is not the current one."""
    column = _EPOCH_COLUMN[lane(batch.kind)]
    cur.execute(f"SELECT {column} FROM eosbatch.pipelines WHERE name = %s", (batch.pipeline,))  # noqa: S608
    row = cur.fetchone()
    if row is None or int(row[0]) != epoch:
        raise StaleEpoch(f"batch {batch.id}: another runner owns pipeline {batch.pipeline!r} now "
                         f"({lane(batch.kind)} epoch {row[0] if row else '?'}, this runner's is {epoch}); it "
                         "publishes the batch, this runner stops")


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


def next_offsets(cur: Cursor, pipeline: str, lock: bool = False) -> dict[TopicPartition, int]:
    query = "SELECT topic, partition, next_offset FROM eosbatch.partition_offsets WHERE pipeline = %s"
    cur.execute(query + (" FOR UPDATE" if lock else ""), (pipeline,))
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


class Compacted(NamedTuple):
    batches: int            # published batches whose detail was compacted
    committed_before: int   # the pipeline's committed_ranges rows before and after
    committed_after: int
    batch_ranges_deleted: int


def compact(cur: Cursor, pipeline: str, older_than_days: float, before_seq: int | None = None) -> Compacted:
    """Bound the ledger's growth: for the published batches committed more than `older_than_days` ago,
    merge their committed ranges that touch (per partition and incarnation) into one row each, named by the
    latest of their batches, and delete their batch_ranges (the committed coverage keeps what backfill,
    replay and verify need: a published batch is never replayed, and its output count stays on its row).
    Recent batches keep their detail for `status`, `verify --batch` and the operator. Dead letters are the
    users' data and stay. Runs under the pipeline's lock, so no commit interleaves. With `before_seq`, only
    the batches committed before that commit sequence number."""
    lock_pipeline(cur, pipeline)
    args = {"p": pipeline, "secs": older_than_days * 86400, "seq": before_seq}
    cur.execute("SELECT count(*) FROM eosbatch.committed_ranges WHERE pipeline = %(p)s", args)
    before = int(cur.fetchone()[0])
    # One statement of data-modifying CTEs, no temporary tables: hardened databases revoke TEMPORARY from
    # PUBLIC. The exclusion constraint sees the old rows gone (deleted by this transaction) as long as every
    # DELETE ran before the first INSERT: the merge reads the DELETE's RETURNING through a window and an
    # aggregate, which both consume all of their input before they emit a row.
    # Islands of touching ranges: a new island starts where a range does not begin at the previous one's end.
    cur.execute(
        "WITH old AS (SELECT id FROM eosbatch.batches WHERE pipeline = %(p)s AND state = 'published' "
        "  AND committed_at < now() - make_interval(secs => %(secs)s) "
        "  AND (%(seq)s::bigint IS NULL OR commit_seq < %(seq)s::bigint)), "
        "removed AS (DELETE FROM eosbatch.committed_ranges c USING old o WHERE c.pipeline = %(p)s "
        "  AND c.batch_id = o.id RETURNING c.topic, c.partition, c.incarnation, c.offsets, c.batch_id), "
        "merged AS (SELECT topic, partition, incarnation, "
        "  int8range(min(lower(offsets)), max(upper(offsets))) AS offsets, max(batch_id) AS batch_id FROM ("
        "    SELECT *, sum(CASE WHEN lower(offsets) = previous_end THEN 0 ELSE 1 END) OVER ("
        "      PARTITION BY topic, partition, incarnation ORDER BY lower(offsets)) AS island FROM ("
        "      SELECT r.*, lag(upper(r.offsets)) OVER ("
        "        PARTITION BY r.topic, r.partition, r.incarnation ORDER BY lower(r.offsets)) AS previous_end "
        "      FROM removed r) ranked) islands "
        "  GROUP BY topic, partition, incarnation, island), "
        "inserted AS (INSERT INTO eosbatch.committed_ranges (pipeline, topic, partition, incarnation, offsets, "
        "  batch_id) SELECT %(p)s, topic, partition, incarnation, offsets, batch_id FROM merged), "
        "details AS (DELETE FROM eosbatch.batch_ranges r USING old o WHERE r.batch_id = o.id RETURNING 1) "
        "SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM details)", args)
    batches, deleted = cur.fetchone()
    cur.execute("SELECT count(*) FROM eosbatch.committed_ranges WHERE pipeline = %(p)s", args)
    return Compacted(int(batches), before, int(cur.fetchone()[0]), int(deleted))


def delete_staging(cur: Cursor, batch_id: int, stage_table: Any | None, finished: bool = False,
                   pipeline: str | None = None) -> None:
    """Delete a batch's staging rows; a `finished` (published) batch's of `pipeline` as delete_batch_rows
    does. An aborted batch's always by DELETE: abort runs inside longer transactions (plan's recovery),
    which must not hold the table's exclusive lock against the other lane's writers."""
    from psycopg2 import sql

    cur.execute("DELETE FROM eosbatch.staged_dead_letters WHERE batch_id = %s", (batch_id,))
    if stage_table is None or not table_exists(cur, stage_table):
        return
    if finished:
        delete_batch_rows(cur, stage_table, "_eosbatch_batch", batch_id, pipeline)
    else:
        cur.execute(sql.SQL("DELETE FROM {} WHERE _eosbatch_batch = %s").format(stage_table), (batch_id,))


def delete_outbox(cur: Cursor, batch: Batch, typed_outbox: Any) -> None:
    """Delete a published batch's outbox rows: from the pipeline's typed outbox, or (committed before it
    existed) from the JSON one, which all pipelines share."""
    from psycopg2 import sql

    if batch.outbox_columns is None:
        delete_batch_rows(cur, sql.Identifier("eosbatch", "outbox"), "batch_id", batch.id)
    elif table_exists(cur, typed_outbox):
        delete_batch_rows(cur, typed_outbox, "_eosbatch_batch", batch.id, batch.pipeline)


# The open batches of a pipeline: only their rows must stay in its staging table and typed outbox.
# Its parameters: open_batch_params().
OPEN_BATCH_IDS = ("ARRAY(SELECT id FROM eosbatch.batches WHERE pipeline = %(pipeline)s "
                  "AND state = ANY(%(open_states)s))")


def open_batch_params(pipeline: str) -> dict[str, object]:
    return {"pipeline": pipeline, "open_states": sorted(OPEN_STATES)}

# Per table, the one published batch whose rows this process left for a later TRUNCATE (delete_batch_rows).
_left_lock = threading.Lock()
_left_behind: dict[tuple[str, ...], int] = {}


def delete_batch_rows(cur: Cursor, table: Any, column: str, batch_id: int, pipeline: str | None = None) -> None:
    """Delete a published batch's rows from a staging table or the outbox, in finalize's short transaction.

    TRUNCATE when no other batch needs the table: normally none does (one batch in flight per lane), and a
    DELETE of a 1M-record batch's rows costs ~0.3 s in staging and ~0.7 s in the logged outbox, then leaves
    as many dead rows for autovacuum to clean while the next batch runs, and for the next scans to wade
    through. TRUNCATE is instant. It needs the table to itself: LOCK ... NOWAIT fails at once if any other
    transaction uses it (a writer staging another batch, a commit or a publish reading it), and under the
    lock no row can be added, so the check that no batch still open has rows there holds until COMMIT.
    (TRUNCATE is not MVCC-safe for older snapshots, but no one needs a finished batch's rows.)

    When it cannot, as under overlapped batches (the next batch is committing): a `pipeline`'s own table
    keeps this batch's rows for a later finalize's TRUNCATE (a run's last one normally can), and the
    finalize after that, if it cannot either, DELETEs every finished batch's rows, so at most one
    published batch's rows wait per table and process. Rows a crashed process left go the same ways; no
    reader is confused by them (every read names its batch). The shared JSON outbox (`pipeline` None)
    keeps only what no other batch has there, by DELETE, as before."""
    from psycopg2 import errors, sql

    key = tuple(table.strings)
    cur.execute("SAVEPOINT eosbatch_truncate")
    try:
        cur.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE NOWAIT").format(table))
        if pipeline is None:
            cur.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {} IS DISTINCT FROM %s)").format(
                table, sql.Identifier(column)), (batch_id,))
            needed = cur.fetchone()[0]
        else:
            cur.execute(f"SELECT {OPEN_BATCH_IDS}", open_batch_params(pipeline))  # noqa: S608 - a constant
            open_ids = cur.fetchone()[0]
            needed = False
            if open_ids:  # none: nothing to look for (an ANY of an empty array would still scan the table)
                cur.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {} = ANY(%s))").format(
                    table, sql.Identifier(column)), (open_ids,))
                needed = cur.fetchone()[0]
        if not needed:
            cur.execute(sql.SQL("TRUNCATE {}").format(table))
            cur.execute("RELEASE SAVEPOINT eosbatch_truncate")
            with _left_lock:
                _left_behind.pop(key, None)
            return
    except (errors.LockNotAvailable, errors.InsufficientPrivilege):
        pass
    cur.execute("ROLLBACK TO SAVEPOINT eosbatch_truncate")  # and so give the lock back before the DELETE
    cur.execute("RELEASE SAVEPOINT eosbatch_truncate")
    if pipeline is None:
        cur.execute(sql.SQL("DELETE FROM {} WHERE {} = %s").format(table, sql.Identifier(column)), (batch_id,))
        return
    with _left_lock:
        if _left_behind.setdefault(key, batch_id) == batch_id:
            return  # left for a later TRUNCATE (or the next DELETE)
    # One statement, one snapshot: a batch whose rows it sees was planned (committed its ledger row) before
    # they were written, so an open batch is never mistaken for a finished one.
    cur.execute(sql.SQL(f"DELETE FROM {{}} WHERE NOT ({{}} = ANY({OPEN_BATCH_IDS}))").format(  # noqa: S608
        table, sql.Identifier(column)), open_batch_params(pipeline))
    with _left_lock:
        _left_behind.pop(key, None)


def table_exists(cur: Cursor, table: Any) -> bool:
    schema, name = table.strings
    cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (schema, name))
    return cur.fetchone() is not None
