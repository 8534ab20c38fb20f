"""Commit: the decision point. One PostgreSQL transaction moves a staged batch's results, dead letters,
outbox and offsets together; after it the batch can only be rolled forward."""

from __future__ import annotations

import psycopg2.errors

from eosbatch import faults
from eosbatch.context import Context, quiet
from eosbatch.kafka import offsets
from eosbatch.ledger import claims, commits, lanes, positions, redrive, sinks, store
from eosbatch.ledger.exceptions import NotStaged, OffsetMismatch, RangeConflict, StagingLost
from eosbatch.protocol.backfill import offset_moves
from eosbatch.protocol.states import claims_coverage
from eosbatch.steps.aborting import abort


def commit(ctx: Context, batch_id: int) -> store.Batch:
    """The decision point: one PostgreSQL transaction moves results, dead letters, the outbox and offsets
    together, after proving that staging still holds every row the batch staged."""
    return commit_once(ctx, batch_id)[0]


def commit_once(ctx: Context, batch_id: int) -> tuple[store.Batch, bool]:
    """`commit`, and whether this call committed the batch (False: it was committed or published already)."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    # Asked before the transaction: a record the output cannot take is caught here, not after COMMIT.
    limit = offsets.max_record_bytes(settings, pipeline.output.topic) if pipeline.output is not None else None
    try:
        with store.transaction(settings) as cur:
            batch = store.get_batch(cur, batch_id, lock=True)
            if batch.state in ("committed", "published"):
                log(f"batch {batch_id}: already {batch.state}")
                return batch, False
            lanes.check_epoch(cur, batch, lock=True)
            if batch.state != "staged":
                raise NotStaged(f"batch {batch_id} is {batch.state}; only a staged batch can be committed")
            moves = offset_moves(batch.kind, batch.ranges, positions.next_offsets(cur, pipeline.name, lock=True))
            if moves.problem:
                raise OffsetMismatch(f"batch {batch_id}: {moves.problem}")
            if batch.kind == "redrive" and (taken := redrive.already_redriven(cur, batch_id)):
                raise RangeConflict(f"batch {batch_id}: dead letters {taken[:5]} were redriven by another batch "
                                    "since it was planned; run the redrive again")
            if missing := sinks.missing_staged(cur, pipeline, batch):
                raise StagingLost(f"batch {batch_id}: its staged rows are gone ({'; '.join(missing[:3])}"
                                  f"{'; ...' if len(missing) > 3 else ''}): PostgreSQL restarted since it was "
                                  "staged (staging is unlogged). Aborted without moving anything; the next run "
                                  "plans the same ranges again")
            try:
                if claims_coverage(batch.kind):
                    claims.claim_coverage(cur, batch)  # in the incarnation each range was planned in
            except psycopg2.errors.ExclusionViolation as exc:
                raise RangeConflict(f"batch {batch_id}: a range overlaps one already committed: "
                                    f"{exc.diag.message_detail}") from None
            moved = sinks.move_to_sink(cur, pipeline, batch, with_outbox=batch.publish, max_record_bytes=limit)
            dead = sinks.copy_dead_letters(cur, pipeline.name, batch_id, batch.writer_tags("dead_letters"))
            dead += moved.too_big
            # A redrive's dead letters that it did not record again went through: marked in this commit.
            redriven = redrive.mark_redriven(cur, batch_id) if batch.kind == "redrive" else None
            positions.set_next_offsets(cur, pipeline.name, moves.moves)
            sequence = store.next_commit_seq(cur, pipeline.name)
            store.set_state(cur, batch, "committed", sink_rows=moved.sink_rows, dead_letters=dead,
                            outbox_records=moved.outbox, commit_seq=sequence,
                            outbox_columns=moved.outbox_columns)
            commits.mark_committed_now(cur, batch_id)
            batch = store.get_batch(cur, batch_id)
            faults.point("commit.before_commit")
    except (OffsetMismatch, RangeConflict, StagingLost) as exc:
        abort(ctx.logging_to(quiet), batch_id, reason=str(exc))  # the error says it
        raise
    faults.point("commit.after_commit")
    ctx.metrics.committed(pipeline.name, batch.kind, batch.records_read or 0, moved.sink_rows, dead)
    log(f"batch {batch_id}: committed {moved.sink_rows} sink rows, {dead} dead letters, "
        f"{moved.outbox} output records (commit #{sequence})"
        + (f"; {redriven} dead letters redriven" if redriven is not None else ""))
    return batch, True
