"""Backfill, replay and coverage: the history side of a pipeline, run in the backfill lane.

Every decision is made by `eosbatch.protocol.backfill` from what Kafka and the ledger say; this module only
reads them, asks, and runs the resulting batches through the same steps as regular batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Literal, NamedTuple

from eosbatch import config, running, steps
from eosbatch import lease as leases
from eosbatch.context import Context
from eosbatch.exceptions import ConfigError
from eosbatch.kafka import offsets
from eosbatch.ledger import claims, lanes, positions, store
from eosbatch.ledger.exceptions import BatchNotFound, OffsetMismatch, RangeConflict
from eosbatch.pipeline import Pipeline
from eosbatch.progress import Progress
from eosbatch.protocol.backfill import (
    MODES,
    BackfillPlan,
    Mode,
    ReplayDecision,
    parse_range,
    plan_backfill,
    replay_decision,
    size,
)
from eosbatch.protocol.exceptions import InvalidRange
from eosbatch.protocol.ranges import (
    OffsetRange,
    PartitionBounds,
    TopicPartition,
    merge,
    split,
    subtract,
    validate_request,
)
from eosbatch.protocol.states import BatchKind

Log = Callable[[str], None]
MAX_CONFLICTS = 3  # a batch lost a race with another runner: plan again, a few times


# ---------------------------------------------------------------- the request

def parse_time(field: str, text: str) -> int:
    """An ISO 8601 time (UTC when it names no zone) as epoch milliseconds."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(field, f"{text!r} is not an ISO 8601 time, e.g. 2026-11-22T03:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def resolve_request(settings: config.Settings, pipeline: Pipeline, ranges: Iterable[str] | None,
                    time_from: str | None, time_to: str | None,
                    bounds: dict[TopicPartition, PartitionBounds]) -> list[OffsetRange]:
    """The offset ranges a request names: given as ranges, or a time window resolved per partition."""
    ranges = list(ranges or [])
    if ranges and (time_from or time_to):
        raise ConfigError("--range", "give offset ranges or --from/--to, not both")
    if ranges:
        parsed = [parse_range(text) for text in ranges]
        for r in parsed:
            if r.topic not in pipeline.source.topics:
                raise InvalidRange(f"{r}: {r.topic!r} is not a source topic of {pipeline.name} "
                                   f"({', '.join(pipeline.source.topics)})")
        return parsed
    if not (time_from and time_to):
        raise ConfigError("--from/--to", "give both times (or offset ranges with --range)")
    start_ms, end_ms = parse_time("--from", time_from), parse_time("--to", time_to)
    if start_ms >= end_ms:
        raise ConfigError("--from", f"{time_from} must be before --to {time_to}")
    starts = offsets.at_time(settings, pipeline.source.topics, start_ms, bounds)
    ends = offsets.at_time(settings, pipeline.source.topics, end_ms, bounds)
    return [OffsetRange(tp.topic, tp.partition, starts[tp], ends[tp]) for tp in sorted(bounds)
            if starts[tp] < ends[tp]]


def _next_offsets(cur: store.Cursor, pipeline: Pipeline, bounds: dict[TopicPartition, PartitionBounds],
                  topic_ids: dict[str, str], track: bool) -> dict[TopicPartition, int]:
    """The regular lane's next offsets; partitions it has not seen yet start where its first plan would.
    A source topic that changed under the pipeline stops a backfill as it stops a regular plan."""
    if track:
        steps.track_partitions(cur, pipeline, bounds, topic_ids)
        return positions.next_offsets(cur, pipeline.name)
    known = positions.next_offsets(cur, pipeline.name)
    steps.check_sources(cur, pipeline, bounds, topic_ids, known)
    return {**steps.starting_offsets(pipeline, bounds, known), **known}


def _plan(cur: store.Cursor, pipeline: Pipeline, requested: list[OffsetRange],
          bounds: dict[TopicPartition, PartitionBounds], topic_ids: dict[str, str], mode: Mode, track: bool
          ) -> BackfillPlan:
    return plan_backfill(requested, bounds, _next_offsets(cur, pipeline, bounds, topic_ids, track),
                         claims.committed_coverage(cur, pipeline.name), claims.in_flight(cur, pipeline.name),
                         mode, pipeline.source.max_records_per_batch)


# ---------------------------------------------------------------- backfill

class BackfillReport(NamedTuple):
    plan: BackfillPlan
    dry_run: bool
    batches: int = 0
    records: int = 0
    sink_rows: int = 0
    dead_letters: int = 0
    published: int = 0


def describe(plan: BackfillPlan) -> list[str]:
    """The plan as lines for a person: what runs, and why the rest does not."""
    def ranges(found: Iterable[OffsetRange]) -> str:
        return ", ".join(map(str, found)) or "none"

    lines = [f"requested: {ranges(plan.requested)}"]
    if plan.skipped:
        why = "already committed" if plan.mode == "fill" else "not committed, left alone (use --mode fill)"
        lines.append(f"skipped ({why}): {ranges(plan.skipped)}")
    if plan.in_flight:
        lines.append(f"skipped (being processed by unfinished batches): {ranges(plan.in_flight)}")
    if plan.regular:
        lines.append(f"left to the regular runs (at or past their next offset): {ranges(plan.regular)}")
    kind = "backfill" if plan.mode == "fill" else "reprocess"
    lines.append(f"plan: {len(plan.batches)} {kind} batch(es), {plan.offsets:,} offsets")
    lines.extend(f"  batch {i + 1}: {ranges(b)}" for i, b in enumerate(plan.batches))
    return lines


def backfill(ctx: Context, ranges: Iterable[str] | None = None, time_from: str | None = None,
             time_to: str | None = None, mode: str = "fill", publish: bool | None = None,
             dry_run: bool = False, progress: Progress | None = None) -> BackfillReport:
    """Run `backfill` batches over the requested ranges' holes (fill), or re-run their committed parts
    into an idempotent sink (reprocess). Asking twice for a fill plans nothing the second time."""
    settings, pipeline = ctx.settings, ctx.pipeline
    if mode not in MODES:
        raise ConfigError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "reprocess" and pipeline.sink.mode == "accumulate":  # replace and append are idempotent
        raise ConfigError("mode", f"reprocess is refused for {pipeline.name}: its sink accumulates, so running "
                                  "committed ranges again would count them twice (use fill)")
    publish = (mode == "fill") if publish is None else publish
    kind: BatchKind = "backfill" if mode == "fill" else "reprocess"
    if publish:
        steps.check_output_topic(settings, pipeline)
    topic_ids, bounds = offsets.source_state(settings, pipeline.source.topics)
    requested = resolve_request(settings, pipeline, ranges, time_from, time_to, bounds)
    if not requested:
        raise InvalidRange(f"the window {time_from} .. {time_to} holds no records in "
                           f"{', '.join(pipeline.source.topics)}")
    if dry_run:
        with store.transaction(settings) as cur:
            return BackfillReport(_plan(cur, pipeline, requested, bounds, topic_ids, mode, track=False), dry_run=True)

    owner = leases.runner_id()
    try:
        return _run_backfill(ctx, requested, bounds, topic_ids, mode, kind, publish, owner, progress)
    finally:
        steps.release_publishers()
        leases.release(settings, pipeline.name, "backfill", owner)


def _run_backfill(ctx: Context, requested: list[OffsetRange], bounds: dict[TopicPartition, PartitionBounds],
                  topic_ids: dict[str, str], mode: Mode, kind: BatchKind, publish: bool, owner: str,
                  progress: Progress | None) -> BackfillReport:
    """The backfill lane's work, its lease held by `owner` (taken by recover, renewed by each batch)."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    epoch = steps.recover(ctx, "backfill", owner)
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline.name, "backfill")
        first_plan = _plan(cur, pipeline, requested, bounds, topic_ids, mode, track=True)
    for line in describe(first_plan):
        log(line)
    bar = progress or Progress(first_plan.offsets, enabled=False)
    bar.total = first_plan.offsets
    queue = list(first_plan.batches)  # reprocess works from the first plan: it changes no coverage
    summary = running.RunSummary(0, 0, 0, 0, 0)
    conflicts = 0
    while True:
        with store.transaction(settings) as cur:
            lanes.hold_lane(cur, pipeline.name, "backfill", epoch)
            if mode == "fill":  # plan again each time: whatever another runner committed meanwhile drops out
                queue = list(_plan(cur, pipeline, requested, bounds, topic_ids, mode, track=True).batches)
            if not queue:
                break
            chosen = queue.pop(0)
            batch = store.create_batch(cur, pipeline.name, kind, epoch, list(chosen),
                                       steps.marker_group(pipeline, "backfill"), publish=publish)
        log(f"batch {batch.id}: planned {kind} {', '.join(map(str, batch.ranges))}")
        try:
            done = running.run_batch(ctx, batch, owner)
        except (OffsetMismatch, RangeConflict) as exc:
            conflicts += 1
            if conflicts > MAX_CONFLICTS:
                raise
            log(f"batch {batch.id}: lost a race ({exc}); planning again")
            continue
        summary = summary.add(done)
        bar.advance(size(batch.ranges), done.records_read or 0)
    bar.close()
    return BackfillReport(first_plan, False, *summary)


# ---------------------------------------------------------------- replay

class ReplayReport(NamedTuple):
    action: Literal["replayed", "published", "nothing"]
    message: str
    batches: tuple[int, ...] = ()


def replay(ctx: Context, batch_id: int) -> ReplayReport:
    """Aborted and uncovered -> replay batches over the same ranges; committed -> publish it; published or
    covered by later batches -> say so and change nothing."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log

    def decide(cur: store.Cursor) -> tuple[store.Batch, ReplayDecision]:
        batch = store.get_batch(cur, batch_id)
        if batch.pipeline != pipeline.name:
            raise BatchNotFound(f"batch {batch_id} belongs to pipeline {batch.pipeline}, not {pipeline.name}")
        return batch, replay_decision(batch.id, batch.state, batch.kind, batch.ranges,
                                      claims.committed_coverage(cur, pipeline.name),
                                      claims.in_flight(cur, pipeline.name))

    with store.transaction(settings) as cur:
        batch, first = decide(cur)
        stale = claims.stale_ranges(cur, batch.id) if first.action == "replay" else []
    if stale:  # offsets of an incarnation left by a reset name records that are gone (or other records now)
        reason = (f"batch {batch_id} read {', '.join(map(str, stale))} in an incarnation of its source that a reset "
                  "has left since (eosbatch status shows the resets); nothing to replay")
        log(reason)
        return ReplayReport("nothing", reason)
    log(first.reason)
    if first.action == "nothing":
        return ReplayReport("nothing", first.reason)
    if first.action == "publish":
        steps.publish(ctx, batch.id)
        return ReplayReport("published", first.reason, (batch.id,))
    owner = leases.runner_id()
    try:
        return _run_replay(ctx, decide, owner)
    finally:
        steps.release_publishers()
        leases.release(settings, pipeline.name, "backfill", owner)


def _run_replay(ctx: Context, decide: Callable[[store.Cursor], tuple[store.Batch, ReplayDecision]], owner: str
                ) -> ReplayReport:
    """The replay batches, in the backfill lane, its lease held by `owner`."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    epoch = steps.recover(ctx, "backfill", owner)
    bounds = offsets.bounds(settings, pipeline.source.topics)
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline.name, "backfill")
        batch, decided = decide(cur)  # again: recovery may have changed what is in flight
    if decided.action != "replay":  # published meanwhile, or covered: nothing to do
        log(decided.reason)
        return ReplayReport("nothing", decided.reason)
    wanted = merge(decided.ranges)
    validate_request(wanted, bounds)  # retention may have deleted them since
    replays: list[int] = []
    for chunk in split(wanted, pipeline.source.max_records_per_batch):
        with store.transaction(settings) as cur:
            lanes.hold_lane(cur, pipeline.name, "backfill", epoch)
            created = store.create_batch(cur, pipeline.name, "replay", epoch, chunk,
                                         steps.marker_group(pipeline, "backfill"), publish=batch.publish,
                                         replay_of=batch.id)
        log(f"batch {created.id}: replays batch {batch.id}: {', '.join(map(str, created.ranges))}")
        running.run_batch(ctx, created, owner)
        replays.append(created.id)
    return ReplayReport("replayed", decided.reason, tuple(replays))


# ---------------------------------------------------------------- coverage

class PartitionCoverage(NamedTuple):
    partition: TopicPartition
    log_start: int
    last_stable: int
    next_offset: int | None
    committed: tuple[OffsetRange, ...]   # merged, in the incarnation read now
    holes: tuple[OffsetRange, ...]       # between the log start and the next offset, neither committed nor declared
    in_flight: tuple[OffsetRange, ...]
    incarnation: int = 0
    declared: tuple[OffsetRange, ...] = ()   # skipped on purpose by a recorded reset (eosbatch reset)


def coverage(ctx: Context) -> list[PartitionCoverage]:
    """Per partition, in the incarnation it is read in now: committed coverage, declared gaps (resets) and the
    holes left between the log start and the next offset."""
    settings, pipeline = ctx.settings, ctx.pipeline
    bounds = offsets.bounds(settings, pipeline.source.topics)
    with store.transaction(settings) as cur:
        where = positions.incarnations(cur, pipeline.name)
        committed = merge(claims.committed_coverage(cur, pipeline.name))
        busy = merge(claims.in_flight(cur, pipeline.name))
        resets = [r for _, _, _, r in positions.resets(cur, pipeline.name)]
    report = []
    for tp, bound in sorted(bounds.items()):
        mine = [r for r in committed if r.tp == tp]
        now = where.get(tp)
        at = now.next_offset if now is not None else None
        declared = merge(r.skipped for r in resets if r.skipped is not None and r.tp == tp
                         and now is not None and r.from_incarnation == now.incarnation)
        span = [OffsetRange(tp.topic, tp.partition, bound.low, at)] if at is not None and at > bound.low else []
        report.append(PartitionCoverage(tp, bound.low, bound.stable, at, tuple(mine),
                                        tuple(subtract(span, mine + declared)), tuple(r for r in busy if r.tp == tp),
                                        now.incarnation if now is not None else 0, tuple(declared)))
    return report
