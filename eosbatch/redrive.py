"""Redriving dead letters: after a fix to a transform or a schema, chosen dead letters run through the pipeline
again, in `redrive` batches of the backfill lane, exactly once.

A redrive batch's input is its dead letters' stored bytes (eosbatch.spark.redrive reads them from PostgreSQL:
Kafka may have deleted the records since), fixed when it is planned. It is processed, committed, published and
finalized as any batch; its commit claims no coverage and moves no offset, records again the dead letters
that fail again (with the new reason) and marks the others redriven, in the same transaction, so a second
redrive finds nothing to do. The choices are eosbatch.protocol.redrive's; the SQL is eosbatch.ledger.redrive's.
"""

from __future__ import annotations

from typing import NamedTuple

from eosbatch import lease as leases
from eosbatch import running, steps
from eosbatch.context import Context
from eosbatch.ledger import lanes, redrive, store
from eosbatch.protocol.redrive import DeadLetter, Selection, spans


class RedriveReport(NamedTuple):
    chosen: tuple[DeadLetter, ...]   # the dead letters chosen (a dry run: that would be)
    dry_run: bool
    batches: tuple[int, ...] = ()
    records: int = 0
    sink_rows: int = 0
    dead_letters: int = 0            # of the chosen, those that failed again (still dead letters, new reason)
    published: int = 0


def describe(chosen: tuple[DeadLetter, ...], limit: int) -> list[str]:
    """The chosen dead letters as lines for a person."""
    lines = [f"{len(chosen)} dead letter(s) chosen" + (f" (the cap, --limit {limit}, was reached)"
                                                       if len(chosen) >= limit else "")]
    lines += [f"  {d.id}: {d.topic}:{d.partition}:{d.offset}  {d.error}" for d in chosen[:1000]]
    if len(chosen) > 1000:
        lines.append(f"  ... and {len(chosen) - 1000} more")
    return lines


def preview(ctx: Context, selection: Selection) -> tuple[DeadLetter, ...]:
    """The dead letters the selection chooses now, changing nothing."""
    with store.transaction(ctx.settings) as cur:
        return tuple(redrive.chosen(cur, selection, ctx.pipeline.name, 0, selection.limit))


def redrive_dead_letters(ctx: Context, selection: Selection, dry_run: bool = False, publish: bool = True
                         ) -> RedriveReport:
    """Run the chosen dead letters (at most `selection.limit`, in id order) through the pipeline in redrive
    batches of at most max_records_per_batch each. `dry_run`: only the choice."""
    if dry_run:
        return RedriveReport(preview(ctx, selection), True)
    if publish:
        steps.check_output_topic(ctx.settings, ctx.pipeline)
    owner = leases.runner_id()
    try:
        return _run(ctx, selection, publish, owner)
    finally:
        steps.release_publishers()
        leases.release(ctx.settings, ctx.pipeline.name, "backfill", owner)


def _run(ctx: Context, selection: Selection, publish: bool, owner: str) -> RedriveReport:
    """The redrive batches, in the backfill lane, its lease held by `owner` (taken by recover: an unfinished
    batch of the lane, a redrive one too, is aborted or published first)."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    epoch = steps.recover(ctx, "backfill", owner)
    after, left = 0, selection.limit  # chosen in id order; one that fails again is not chosen again this time
    taken: list[DeadLetter] = []
    batches: list[int] = []
    summary = running.RunSummary(0, 0, 0, 0, 0)
    while left > 0:
        with store.transaction(settings) as cur:
            lanes.hold_lane(cur, pipeline.name, "backfill", epoch)
            chunk = tuple(redrive.chosen(cur, selection, pipeline.name, after,
                                         min(left, pipeline.source.max_records_per_batch)))
            if not chunk:
                break
            batch = store.create_batch(cur, pipeline.name, "redrive", epoch, spans(chunk),
                                       steps.marker_group(pipeline, "backfill"), publish=publish)
            redrive.record_input(cur, batch.id, list(chunk))
        after, left = chunk[-1].id, left - len(chunk)
        taken += chunk
        log(f"batch {batch.id}: redrives {len(chunk)} dead letter(s) ({chunk[0].id}..{chunk[-1].id}) of "
            f"{', '.join(map(str, batch.ranges))}")
        summary = summary.add(running.run_batch(ctx, batch, owner))
        batches.append(batch.id)
    if not batches:
        log(f"{pipeline.name}: no dead letter to redrive")
    return RedriveReport(tuple(taken), False, tuple(batches), *summary[1:])
