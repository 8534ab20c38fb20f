"""What bounds the ledger's growth: compaction of published batches' detail, and the deletion of a batch's
rows from staging and the outbox once it is finished. Every function takes an open cursor: the caller owns
the transaction."""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from psycopg2 import errors, sql

from eosbatch.ledger.connection import Cursor
from eosbatch.ledger.lanes import lock_pipeline
from eosbatch.ledger.store import Batch
from eosbatch.protocol.states import OPEN_STATES


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
