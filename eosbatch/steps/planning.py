"""Recover and plan: take the lane over, settle what its last runner left, plan the next batch."""

from __future__ import annotations

from typing import Any

from eosbatch import faults
from eosbatch import lease as leases
from eosbatch.context import Context
from eosbatch.kafka import offsets
from eosbatch.ledger import lanes, positions, store
from eosbatch.lost_output import check_not_behind
from eosbatch.pipeline import Pipeline
from eosbatch.protocol import ranges as plan_ranges
from eosbatch.protocol import sources
from eosbatch.protocol.exceptions import SourceChanged
from eosbatch.protocol.recovery import recovery_action
from eosbatch.protocol.states import ABORTABLE, Lane
from eosbatch.steps.aborting import abort_in
from eosbatch.steps.publishing import publish
from eosbatch.steps.shared import Log, check_output_topic
from eosbatch.steps.shared import quiet as _quiet


def recover(ctx: Context, in_lane: Lane = "regular", owner: str | None = None) -> int:
    """Take the lane over (its lease, then bump its epoch), abort its unfinished batches, roll its committed
    ones forward. Raises LaneBusy, changing nothing, while another runner holds the lane's lease.

    `owner` names the runner (default: this process, as the CLI); the lease stays with it until released
    or expired. Every recovery bumps the epoch, the holder's own too: a new plan fences anything older,
    even a zombie attempt of the same owner (an Airflow task retried while its first attempt lives on)."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    owner = owner or leases.runner_id()
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline.name, in_lane)
        leases.acquire(cur, settings, pipeline.name, in_lane, owner, log)
        epoch = lanes.bump_epoch(cur, pipeline.name, in_lane)
        pending = store.open_batches(cur, pipeline.name, in_lane)
        for batch in pending:
            if recovery_action(batch.state) == "abort":
                abort_in(cur, pipeline, batch, "aborted by recovery: its runner did not finish")
                log(f"batch {batch.id}: was {batch.state}, aborted; its ranges will be planned again")
    for batch in pending:
        if recovery_action(batch.state) == "roll_forward":
            log(f"batch {batch.id}: committed but not published; rolling forward")
            publish(ctx, batch.id, epoch=epoch)
    return epoch


def plan(ctx: Context, owner: str | None = None, epoch: int | None = None) -> store.Batch | None:
    """Recover, then plan the next regular batch up to the last stable offset; None when caught up.
    The lane's lease stays with `owner` (see recover): release it when the work is done.

    `epoch`: continue this runner's own run in that epoch of the lane, with batches of it still in flight
    (planned or staged, not committed: an overlapped run, eosbatch.running.overlapped). Then nothing is
    recovered and the epoch stays (a bump would fence those batches); the new batch starts where they end, and
    the commit's compare-and-set holds it back until they have all committed.

    Measured (eosbatch.metrics): the step's duration, a terminal error, and each partition's lag as planned."""
    with ctx.metrics.step(ctx.pipeline.name, "plan"):
        return _plan(ctx, owner, epoch)


def _plan(ctx: Context, owner: str | None, epoch: int | None) -> store.Batch | None:
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    # first: a committed batch that cannot publish says so on the batch
    continuing = epoch is not None
    # Before recovery can publish anything (init_transactions): a ledger behind the output stops here, terminal.
    check_not_behind(settings, pipeline)
    if epoch is None:
        epoch = recover(ctx, owner=owner)
    check_output_topic(settings, pipeline)
    topic_ids, bounds = offsets.source_state(settings, pipeline.source.topics)
    with store.transaction(settings) as cur:
        lanes.hold_lane(cur, pipeline.name, "regular", epoch)
        track_partitions(cur, pipeline, bounds, topic_ids, log)  # locks the next offsets: no commit meanwhile
        starts = positions.next_offsets(cur, pipeline.name)
        for tp, bound in bounds.items():
            if tp in starts:  # the lag `eosbatch status` shows: the ledger's next offset to the last stable one
                ctx.metrics.lag(pipeline.name, tp.topic, tp.partition, max(0, bound.stable - starts[tp]))
        if continuing:
            in_flight = [r for b in store.open_batches(cur, pipeline.name, "regular")
                         if b.state in ABORTABLE and b.epoch == epoch for r in b.ranges]
            starts = plan_ranges.after_in_flight(starts, in_flight)
        ranges = plan_ranges.plan_next(starts, bounds, pipeline.source.max_records_per_batch)
        if not ranges:
            return None
        batch = store.create_batch(cur, pipeline.name, "regular", epoch, ranges, pipeline.marker_group)
    log(f"batch {batch.id}: planned {plan_ranges.summarize(batch.ranges)}")
    faults.point("plan.after_commit")
    return batch


def track_partitions(cur: store.Cursor, pipeline: Pipeline, bounds: dict[Any, plan_ranges.PartitionBounds],
                     topic_ids: dict[str, str], log: Log = _quiet) -> None:
    """Check that the source topics are the ones the ledger reads (topic IDs, offsets), then give partitions
    seen for the first time their starting next offset. A source change raises SourceChanged, naming the
    reset that goes on: nothing ever jumps by itself."""
    known = positions.next_offsets(cur, pipeline.name, lock=True)
    check = check_sources(cur, pipeline, bounds, topic_ids, known)
    if check.adopt:
        positions.record_topic_ids(cur, pipeline.name, check.adopt)
    starts = starting_offsets(pipeline, bounds, known)
    if starts:
        log(f"reading new partitions: {', '.join(f'{tp} from {n}' for tp, n in sorted(starts.items()))}")
    positions.add_partitions(cur, pipeline.name, starts)


def check_sources(cur: store.Cursor, pipeline: Pipeline, bounds: dict[Any, plan_ranges.PartitionBounds],
                  topic_ids: dict[str, str], known: dict[Any, int]) -> sources.SourceCheck:
    """SourceChanged when a source topic is not the one the ledger reads any more; else what to record."""
    check = sources.check_sources(positions.source_topics(cur, pipeline.name), topic_ids, known, bounds)
    if check.problems:
        raise SourceChanged(f"pipeline {pipeline.name}: {sources.describe_problems(check.problems, pipeline.name)}")
    return check


def starting_offsets(pipeline: Pipeline, bounds: dict[Any, plan_ranges.PartitionBounds], known: dict[Any, int]
                     ) -> dict[Any, int]:
    """Where the regular lane starts on partitions it has not seen (see sources.starting_offsets: `latest`
    only for the partitions a topic had when the pipeline started reading it)."""
    return sources.starting_offsets(pipeline.source.starting_offsets, bounds, known)
