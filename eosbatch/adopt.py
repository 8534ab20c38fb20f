"""`eosbatch adopt-published PIPELINE`: the way out when the ledger is behind the output (eosbatch.protocol.lost).
Kafka's output already holds the lost range; the ledger's database (sink rows, dead letters, coverage) does
not. The range is processed again into the sink, exactly it (a batch of its own, from the ledger's next offsets
to the marker's), committed like any batch, then finalized as published without producing anything: its
output records are the ones already in the topic, with the lost batch's headers (its id and commit sequence,
which the ledger may since have handed out again; docs/design.md, failure matrix)."""

from __future__ import annotations

from eosbatch import lease as leases
from eosbatch import steps
from eosbatch.context import Context
from eosbatch.exceptions import TerminalError
from eosbatch.ledger import lanes, positions, store
from eosbatch.lost_output import lost_and_marked, lost_output
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.protocol.recovery import recovery_action
from eosbatch.steps.aborting import abort_in


def lost(ctx: Context) -> list[OffsetRange]:
    """What `adopt` would adopt: the ranges the output holds and the ledger does not."""
    return lost_output(ctx.settings, ctx.pipeline)


def adopt(ctx: Context, owner: str | None = None) -> store.Batch | None:
    """Take the regular lane (its lease, a new epoch), abort its unfinished batches, finalize its committed ones
    without producing (the marker, past them, proves Kafka published them), then process and commit the lost
    range as one batch and finalize it as published. None when nothing is lost."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    found, named = lost_and_marked(settings, pipeline)
    if not found:
        log(f"pipeline {pipeline.name}: the ledger is not behind the output; nothing to adopt")
        return None
    owner = owner or leases.runner_id()
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline.name, "regular")
        leases.acquire(cur, settings, pipeline.name, "regular", owner, log)
        epoch = lanes.bump_epoch(cur, pipeline.name, "regular")
        pending = store.open_batches(cur, pipeline.name, "regular")
        for batch in pending:
            if recovery_action(batch.state) == "abort":
                abort_in(cur, pipeline, batch, "aborted by adopt-published")
                log(f"batch {batch.id}: was {batch.state}, aborted")
    try:
        for batch in pending:
            if batch.state == "committed":  # below the lost range, which the marker passed: Kafka published it
                steps.finalize(ctx, batch.id)
        with store.transaction(settings) as cur:
            lanes.hold_lane(cur, pipeline.name, "regular", epoch)
            starts = positions.next_offsets(cur, pipeline.name, lock=True)
            off = [f"{r.topic}:{r.partition} next offset {starts.get(r.tp)}, lost range from {r.start}"
                   for r in found if starts.get(r.tp) != r.start]
            if off:
                raise TerminalError(f"pipeline {pipeline.name}: the lost range does not start at the ledger's next "
                                    f"offset ({'; '.join(off)}), after a reset: adopt it by hand")
            # The id the output's records carry (the marker names the last lost batch), when the ledger has not
            # handed it out again: then `eosbatch verify` finds them as this batch's. Several lost batches, or
            # an id taken since: a new id, and verify names the output's ids as unknown batches (the failure
            # matrix says so).
            reuse = next(iter(named)) if len(named) == 1 else None
            if reuse is not None and store.batch_exists(cur, reuse):
                reuse = None
            batch = store.create_batch(cur, pipeline.name, "regular", epoch, found, pipeline.marker_group,
                                       batch_id=reuse)
        log(f"batch {batch.id}: adopting {', '.join(map(str, batch.ranges))}, published already")
        steps.process(ctx, batch.id)
        steps.commit(ctx, batch.id)
        return steps.finalize(ctx, batch.id)
    finally:
        leases.release(settings, pipeline.name, "regular", owner)
