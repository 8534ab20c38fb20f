"""The batch protocol's steps, each a plain function that the CLI, the Spark app and the DAGs call.

plan -> process -> commit -> publish (-> finalize); abort on failure before the commit. Every step is
safe to re-run: it reads the batch's state first and does only what is left.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import psycopg2
import psycopg2.errors
import psycopg2.extras
from psycopg2 import sql

from eosbatch import config, engine, faults, registry
from eosbatch import lease as leases
from eosbatch.bulk import paused_gc
from eosbatch.exceptions import EosbatchError, Fenced, TerminalError
from eosbatch.kafka import marker, offsets, record
from eosbatch.kafka.exceptions import MarkerExpired
from eosbatch.kafka.publisher import TransactionalPublisher, TxnState, publishing
from eosbatch.kafka.publisher import release as release_publishers
from eosbatch.kafka.record import Headers, Outgoing
from eosbatch.ledger import claims, cleanup, lanes, positions, sinks, store, stream
from eosbatch.ledger.exceptions import NotStaged, OffsetMismatch, RangeConflict, StagingLost
from eosbatch.pipeline import Pipeline
from eosbatch.protocol import ranges as plan_ranges
from eosbatch.protocol import sources
from eosbatch.protocol.backfill import offset_moves
from eosbatch.protocol.exceptions import SourceChanged
from eosbatch.protocol.recovery import marker_metadata, publish_action, recovery_action
from eosbatch.protocol.states import ABORTABLE, Lane, claims_coverage, lane

Log = Callable[[str], None]
OUTBOX_CHUNK = 5_000  # records per fetch from the outbox (bounded memory: one chunk in flight, one in use)


def _quiet(_: str) -> None:
    pass


def transactional_id(pipeline: Pipeline, batch: store.Batch) -> str:
    # Regular batches and backfills run side by side (separate DAGs); each lane fences its own zombies.
    return pipeline.transactional_id if lane(batch.kind) == "regular" else f"{pipeline.transactional_id}.backfill"


def marker_group(pipeline: Pipeline, in_lane: Lane) -> str | Callable[[int], str]:
    """The regular lane's marker group shows the pipeline's lag to standard tools; a backfill batch gets a
    group of its own (deleted after finalize), since its ranges lie behind the regular lane's."""
    if in_lane == "regular":
        return pipeline.marker_group
    return lambda batch_id: f"{pipeline.marker_group}.backfill.{batch_id}"


# ---------------------------------------------------------------- recover and plan

def recover(pipeline_name: str, log: Log = _quiet, in_lane: Lane = "regular", owner: str | None = None) -> int:
    """Take the lane over (its lease, then bump its epoch), abort its unfinished batches, roll its committed
    ones forward. Raises LaneBusy, changing nothing, while another runner holds the lane's lease.

    `owner` names the runner (default: this process, as the CLI); the lease stays with it until released
    or expired. Every recovery bumps the epoch, the holder's own too: a new plan fences anything older,
    even a zombie attempt of the same owner (an Airflow task retried while its first attempt lives on)."""
    settings = config.load()
    pipeline = registry.get(pipeline_name)
    owner = owner or leases.runner_id()
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline.name, in_lane)
        leases.acquire(cur, settings, pipeline.name, in_lane, owner, log)
        epoch = lanes.bump_epoch(cur, pipeline.name, in_lane)
        pending = store.open_batches(cur, pipeline.name, in_lane)
        for batch in pending:
            if recovery_action(batch.state) == "abort":
                _abort(cur, pipeline, batch, "aborted by recovery: its runner did not finish")
                log(f"batch {batch.id}: was {batch.state}, aborted; its ranges will be planned again")
    for batch in pending:
        if recovery_action(batch.state) == "roll_forward":
            log(f"batch {batch.id}: committed but not published; rolling forward")
            publish(pipeline.name, batch.id, log, epoch=epoch)
    return epoch


def plan(pipeline_name: str, log: Log = _quiet, owner: str | None = None, epoch: int | None = None
         ) -> store.Batch | None:
    """Recover, then plan the next regular batch up to the last stable offset; None when caught up.
    The lane's lease stays with `owner` (see recover): release it when the work is done.

    `epoch`: continue this runner's own run in that epoch of the lane, with batches of it still in flight
    (planned or staged, not committed: an overlapped run, eosbatch.overlap). Then nothing is recovered and the
    epoch stays (a bump would fence those batches); the new batch starts where they end, and the commit's
    compare-and-set holds it back until they have all committed."""
    settings = config.load()
    pipeline = registry.get(pipeline_name)
    # first: a committed batch that cannot publish says so on the batch
    continuing = epoch is not None
    if epoch is None:
        epoch = recover(pipeline.name, log, owner=owner)
    check_output_topic(settings, pipeline)
    topic_ids, bounds = offsets.source_state(settings, pipeline.source.topics)
    with store.transaction(settings) as cur:
        lanes.hold_lane(cur, pipeline.name, "regular", epoch)
        track_partitions(cur, pipeline, bounds, topic_ids, log)  # locks the next offsets: no commit meanwhile
        starts = positions.next_offsets(cur, pipeline.name)
        if continuing:
            in_flight = [r for b in store.open_batches(cur, pipeline.name, "regular")
                         if b.state in ABORTABLE and b.epoch == epoch for r in b.ranges]
            starts = plan_ranges.after_in_flight(starts, in_flight)
        ranges = plan_ranges.plan_next(starts, bounds, pipeline.source.max_records_per_batch)
        if not ranges:
            return None
        batch = store.create_batch(cur, pipeline.name, "regular", epoch, ranges, pipeline.marker_group)
    log(f"batch {batch.id}: planned {', '.join(map(str, batch.ranges))}")
    faults.point("plan.after_commit")
    return batch


def check_output_topic(settings: config.Settings, pipeline: Pipeline) -> None:
    """Fail fast, naming the field, when the output topic is missing: the producer would report each failed
    delivery as retriable, and only after the batch was processed and committed."""
    if pipeline.output is not None:
        offsets.partitions(offsets.admin(settings), [pipeline.output.topic], field="output.topic")


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


# ---------------------------------------------------------------- process (Spark)

def process(pipeline_name: str, batch_id: int, log: Log = _quiet) -> None:
    """Stage a planned batch on the Spark engine (eosbatch.engine); it marks the batch staged."""
    settings = config.load()
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
    if batch.state != "planned":
        log(f"batch {batch_id}: already {batch.state}; nothing to process")
        return
    try:
        counts = engine.process(settings, pipeline_name, batch_id, log)
    except EosbatchError:
        with store.transaction(settings) as cur:
            now = store.get_batch(cur, batch_id)
        if now.state != "staged":
            raise
        # Another driver of this batch (a task retried while the killed task's driver lived on) staged it
        # first; its rows and writers are recorded (the commit still checks the epoch): done, not failed.
        log(f"batch {batch_id}: staged by another attempt while this one ran; nothing more to process")
        return
    if counts is not None and engine.kind(settings) == "submit":  # a Connect driver logged it here already
        log(f"batch {batch_id}: read {counts['records_read']} records, staged {counts['sink_rows_staged']} rows "
            f"and {counts['dead_letters']} dead letters")


# ---------------------------------------------------------------- commit

def commit(pipeline_name: str, batch_id: int, log: Log = _quiet) -> store.Batch:
    """The decision point: one PostgreSQL transaction moves results, dead letters, the outbox and offsets
    together, after proving that staging still holds every row the batch staged."""
    return _commit(pipeline_name, batch_id, log)[0]


def _commit(pipeline_name: str, batch_id: int, log: Log) -> tuple[store.Batch, bool]:
    """`commit`, and whether this call committed the batch (False: it was committed or published already)."""
    settings = config.load()
    pipeline = registry.get(pipeline_name)
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
            positions.set_next_offsets(cur, pipeline.name, moves.moves)
            sequence = store.next_commit_seq(cur, pipeline.name)
            store.set_state(cur, batch, "committed", sink_rows=moved.sink_rows, dead_letters=dead,
                            outbox_records=moved.outbox, commit_seq=sequence,
                            outbox_columns=moved.outbox_columns)
            cur.execute("UPDATE eosbatch.batches SET committed_at = now() WHERE id = %s", (batch_id,))
            batch = store.get_batch(cur, batch_id)
            faults.point("commit.before_commit")
    except (OffsetMismatch, RangeConflict, StagingLost) as exc:
        abort(pipeline.name, batch_id, reason=str(exc))
        raise
    faults.point("commit.after_commit")
    log(f"batch {batch_id}: committed {moved.sink_rows} sink rows, {dead} dead letters, "
        f"{moved.outbox} output records (commit #{sequence})")
    return batch, True


# ---------------------------------------------------------------- publish and finalize

def _outbox(settings: config.Settings, pipeline: Pipeline, batch: store.Batch, common: Headers
            ) -> Iterator[Outgoing]:
    """Stream the batch's output records, each with the `common` headers and its own, from the logged outbox,
    a chunk at a time with the next one in flight (bounded memory; ledger.stream). Read in the table's
    order, not seq's: sorting a million rows cost seconds, and nothing needs the order (each record carries
    its seq as a header). Each record's header list is built in one go (see TransactionalPublisher.produce)."""
    if batch.commit_seq is None:  # committed by an older eosbatch: its output is computed from staging
        connection = store.connect(settings)
        try:
            yield from _legacy_outbox(connection, pipeline, batch, common)
        finally:
            connection.close()
        return
    if batch.outbox_columns is not None:
        query: sql.Composable = sinks.outbox_query(pipeline, batch.outbox_columns)
    else:  # committed before the typed outbox (ledger revision 0008): its records are JSON already
        query = sinks.json_outbox_query()
    # Text as bytes, numbers rendered by the server: no decoding and encoding per field here.
    yield from record.outgoing(stream.chunks(settings, query, (batch.id,), OUTBOX_CHUNK, text_as_bytes=True),
                               pipeline.source.topics, common)


def _legacy_outbox(connection: Any, pipeline: Pipeline, batch: store.Batch, common: Headers
                   ) -> Iterator[Outgoing]:
    with connection.cursor() as probe:
        query = sinks.legacy_outbox(probe, pipeline, batch)
    if query is None:
        return
    with connection.cursor(name=f"eosbatch_outbox_{batch.id}") as cursor:
        cursor.itersize = 5_000
        cursor.execute(query, {"batch": batch.id, "writers": batch.writer_tags("sink")})
        for key, value in cursor:
            yield (None if key is None else key.encode()), value.encode(), common


def publish(pipeline_name: str, batch_id: int, log: Log = _quiet, epoch: int | None = None,
            ignore_expired_marker: bool = False) -> store.Batch:
    """Publish a committed batch in one Kafka transaction together with its marker; then finalize."""
    outcome = publish_to_kafka(pipeline_name, batch_id, log, epoch, ignore_expired_marker)
    return finalize(pipeline_name, batch_id, outcome, log)


def commit_and_publish(pipeline_name: str, batch_id: int, log: Log = _quiet) -> store.Batch:
    """commit, publish and finalize a staged batch, its records produced into its open Kafka transaction
    while PostgreSQL commits it (EOSBATCH_EARLY_PUBLISH): the commit holds one core, producing takes the other.

    The order that matters stays: the Kafka transaction commits only after PostgreSQL's COMMIT, and only if
    it holds what the outbox holds. Its records are read from staging as the commit will write them
    (sinks.early_outbox_query, None where that is not exact: then commit and publish as usual). The outbox
    holds a subset of them (the rows the sink stored, each as it came), so equal counts make them the same
    records; with another count (a row the sink refused as older, one too big to publish), another commit
    sequence number (the other lane committed meanwhile), a failed produce or a failed Kafka commit, the
    early transaction is dropped and the batch published from its outbox, as always. A Kafka failure before
    the commit starts costs nothing either: the batch commits, then publishes. A crash before the Kafka commit
    leaves a transaction that the lane's next init_transactions() aborts: before the COMMIT the batch is
    aborted and planned again, after it the batch is published from its outbox (DESIGN.md's failure matrix).
    The transaction stays open for the commit and the publish together: EOSBATCH_TRANSACTION_TIMEOUT_MS must
    cover both."""
    settings = config.load()
    pipeline = registry.get(pipeline_name)
    query = None
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        if batch.state == "staged" and batch.publish and lane(batch.kind) == "regular":
            lanes.check_lane_epoch(cur, batch, batch.epoch)  # a resumed zombie stops before fencing anyone
            query = sinks.early_outbox_query(cur, pipeline, batch)
            cur.execute("SELECT commit_seq + 1 FROM eosbatch.pipelines WHERE name = %s", (pipeline.name,))
            sequence = int(cur.fetchone()[0])
    if query is None or pipeline.output is None:
        commit(pipeline_name, batch_id, log)
        return publish(pipeline_name, batch_id, log)
    check_output_topic(settings, pipeline)
    topic = pipeline.output.topic
    headers = record.batch_headers(pipeline.name, batch_id, sequence)
    params = {"batch": batch.id, "writers": batch.writer_tags("sink")}
    produced: dict[str, Any] = {}

    def produce(publisher: TransactionalPublisher) -> None:
        chunks = stream.chunks(settings, query, params, OUTBOX_CHUNK, text_as_bytes=True)
        try:
            produced["count"] = publisher.produce(topic, record.outgoing(chunks, pipeline.source.topics, headers), [])
        except BaseException as exc:  # noqa: BLE001 - the commit decides; this only drops the early publish
            produced["error"] = f"{type(exc).__name__}: {exc}"  # not the exception: its frames hold the stream
        finally:
            chunks.close()  # its read of staging ends now, not when the garbage collector gets to it

    published = None
    with contextlib.ExitStack() as held:
        try:
            publisher = held.enter_context(publishing(settings, transactional_id(pipeline, batch),
                                                      owner=f"batch {batch_id} of pipeline {pipeline.name!r}"))
            publisher.begin()
        except Fenced:
            raise
        except EosbatchError as exc:  # nothing produced yet: the batch commits, then publishes as usual
            log(f"batch {batch_id}: early publish not started ({exc}); committing, then publishing")
            held.close()
            commit(pipeline_name, batch_id, log)
            return publish(pipeline_name, batch_id, log)
        producer = threading.Thread(target=produce, args=(publisher,), name=f"eosbatch-early-publish-{batch_id}")
        with paused_gc():
            producer.start()
            try:
                committed, by_us = _commit(pipeline_name, batch_id, log)
            except BaseException:
                producer.join()
                if publisher.state is TxnState.IN_TXN:  # a fatal or fenced producer is closed on the way out
                    with contextlib.suppress(EosbatchError):
                        publisher.abort()
                raise
            producer.join()
        why = ("the commit was another run's" if not by_us else
               f"producing failed ({produced['error']})" if "error" in produced else
               f"the outbox holds {committed.outbox_records} records, {produced['count']} were produced"
               if committed.outbox_records != produced["count"] else
               f"the commit took sequence #{committed.commit_seq}, not #{sequence}"
               if committed.commit_seq != sequence else None)
        if why is None:
            try:
                publisher.commit(settings, committed.marker_group, list(committed.ranges), marker_metadata(batch_id))
            except Fenced:
                raise
            except EosbatchError as exc:  # publish settles it: init_transactions, then the marker
                why = f"its Kafka commit failed ({exc})"
            else:
                faults.point("publish.after_kafka_commit")
                published = produced["count"]
                log(f"batch {batch_id}: published {published} records (produced while it committed)")
        if why is not None:
            if publisher.state is TxnState.IN_TXN:
                with contextlib.suppress(EosbatchError):
                    publisher.abort()
            log(f"batch {batch_id}: early publish dropped ({why}); publishing from the outbox")
    if published is None:
        return publish(pipeline_name, batch_id, log)
    return finalize(pipeline_name, batch_id, published, log)


def publish_to_kafka(pipeline_name: str, batch_id: int, log: Log = _quiet, epoch: int | None = None,
                     ignore_expired_marker: bool = False) -> int | None:
    """The Kafka half of publish: see `_publish_to_kafka`. A terminal failure of a committed batch (the output
    topic deleted, no write permission, an expired marker) is recorded on the batch, so `status` shows why
    its lane is stuck until the operator acts; fencing is not a failure of the batch and is not recorded."""
    try:
        return _publish_to_kafka(pipeline_name, batch_id, log, epoch, ignore_expired_marker)
    except TerminalError as exc:
        if not isinstance(exc, Fenced):
            store.record_error(config.load(), batch_id, f"publish: {type(exc).__name__}: {exc}")
        raise


def _publish_to_kafka(pipeline_name: str, batch_id: int, log: Log, epoch: int | None,
                      ignore_expired_marker: bool) -> int | None:
    """The Kafka half of publish: the output and the marker in one transaction; the batch stays committed
    until `finalize`. Returns the records produced, or None when an earlier run had published them.

    `epoch` is the runner's own epoch of the lane (default: the batch's): a runner that was frozen and
    resumed finds a newer epoch here and stops *before* init_transactions(), which would otherwise fence
    the live runner's publisher."""
    settings = config.load()
    pipeline = registry.get(pipeline_name)
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        if batch.state == "committed":
            lanes.check_lane_epoch(cur, batch, batch.epoch if epoch is None else epoch)
            age = store.seconds_since_commit(cur, batch_id)
    if batch.state == "published":
        log(f"batch {batch_id}: already published")
        return None
    if batch.state != "committed":
        raise TerminalError(f"batch {batch_id} is {batch.state}; only a committed batch can be published")
    if pipeline.output is not None and batch.publish:
        check_output_topic(settings, pipeline)
    produced: int | None = None  # unknown when an earlier run published: the ledger keeps it unset
    with publishing(settings, transactional_id(pipeline, batch),
                    owner=f"batch {batch_id} of pipeline {pipeline.name!r}") as publisher:
        found = marker.read(settings, batch.marker_group, [r.tp for r in batch.ranges])
        action = publish_action(batch.id, batch.ranges, found, legacy=batch.commit_seq is None,
                                age_seconds=age, retention_seconds=config.marker_retention_seconds())
        if action == "finalize_only":
            log(f"batch {batch_id}: its marker shows it published already; finalizing only")
        elif action == "marker_expired" and not ignore_expired_marker:
            raise MarkerExpired(
                f"batch {batch_id} was committed {(age or 0) / 3600:.1f} h ago and its marker (group "
                f"{batch.marker_group}) is gone: Kafka expires a group's offsets after offsets.retention.minutes "
                f"({config.marker_retention_seconds() / 60:.0f} min assumed, {config.MARKER_RETENTION}), so "
                "eosbatch cannot tell whether it was published. Look for records with header "
                f"{record.BATCH}={batch_id} in the output topic; then `eosbatch publish {pipeline.name} "
                f"{batch_id} --published` (they are there) or `--republish` (they are not)")
        else:
            publisher.begin()
            produced = 0
            if pipeline.output is not None and batch.publish:
                headers = record.batch_headers(pipeline.name, batch_id, batch.commit_seq or 0)
                with paused_gc():
                    produced = publisher.produce(pipeline.output.topic, _outbox(settings, pipeline, batch, headers), [])
                if batch.outbox_records is not None and produced != batch.outbox_records:
                    publisher.abort()
                    raise TerminalError(f"batch {batch_id}: the outbox held {produced} records, the commit wrote "
                                        f"{batch.outbox_records}; nothing was published")
            publisher.commit(settings, batch.marker_group, list(batch.ranges), marker_metadata(batch_id))
            faults.point("publish.after_kafka_commit")
            log(f"batch {batch_id}: published {produced} records")
    return produced


def finalize(pipeline_name: str, batch_id: int, produced: int | None = None, log: Log = _quiet) -> store.Batch:
    """Mark a published batch so and drop its staging and outbox rows. The published count is the one the
    commit fixed: a batch finalized from its marker (an earlier run produced it) gets it too."""
    settings = config.load()
    pipeline = registry.get(pipeline_name)
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id, lock=True)
        if batch.state == "published":
            return batch
        count = batch.outbox_records if batch.outbox_records is not None else produced
        if not (pipeline.output is not None and batch.publish):
            count = 0
        fields: dict[str, Any] = {} if count is None else {"published_records": count}
        batch = store.set_state(cur, batch, "published", **fields)
        cleanup.delete_staging(cur, batch_id, sinks.stage_table(pipeline), finished=True, pipeline=pipeline.name)
        cleanup.delete_outbox(cur, batch, sinks.outbox_table(pipeline))
    how = "published by an earlier run; " if produced is None else ""
    log(f"batch {batch_id}: finalized ({how}{count if count is not None else '?'} output records)")
    if batch.marker_group != pipeline.marker_group:
        # A backfill batch's own marker group has done its job once the ledger says published. If this
        # deletion is lost, the group is only clutter: nothing reads the marker of a published batch.
        marker.delete_group(settings, batch.marker_group, log)
    if settings.compact_every and batch.commit_seq and batch.commit_seq % settings.compact_every == 0:
        _compact(settings, pipeline, batch.commit_seq, log)
    return batch


COMPACT_LOCK_TIMEOUT = "5s"  # a long commit of another lane holds the pipeline lock: skip, do not stall


def _compact(settings: config.Settings, pipeline: Pipeline, before_seq: int, log: Log) -> None:
    """The ledger's upkeep after a batch is published: its own transaction, so a failure leaves the
    published batch as it is (the next due commit compacts what this one did not). The batch just
    finalized and later ones keep their detail: the task's asset and lineage events read it afterwards."""
    try:
        with store.transaction(settings) as cur:
            cur.execute("SELECT set_config('lock_timeout', %s, true)", (COMPACT_LOCK_TIMEOUT,))
            done = cleanup.compact(cur, pipeline.name, settings.compact_after_days, before_seq=before_seq)
    except EosbatchError as exc:
        log(f"{pipeline.name}: ledger compaction skipped ({exc}); the next one will do it")
        return
    log(f"{pipeline.name}: ledger compacted: {done.batches} published batches older than "
        f"{settings.compact_after_days:g} days, committed ranges {done.committed_before} -> {done.committed_after}")


# ---------------------------------------------------------------- abort

def _abort(cur: store.Cursor, pipeline: Pipeline, batch: store.Batch, reason: str) -> store.Batch:
    batch = store.set_state(cur, batch, "aborted", error=reason[:2000])
    cleanup.delete_staging(cur, batch.id, sinks.stage_table(pipeline))
    return batch


def abort(pipeline_name: str, batch_id: int | None = None, reason: str = "aborted", log: Log = _quiet
          ) -> list[int]:
    """Abort the given batch, or every unfinished one: offsets stay, so the same ranges are planned again.
    A committed batch is never aborted: it can only be rolled forward."""
    settings = config.load()
    pipeline = registry.get(pipeline_name)
    aborted: list[int] = []
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline.name)
        batches = [store.get_batch(cur, batch_id)] if batch_id is not None else store.open_batches(cur, pipeline.name)
        for batch in batches:
            if batch.state in ABORTABLE:
                _abort(cur, pipeline, batch, reason)
                aborted.append(batch.id)
                log(f"batch {batch.id}: aborted ({reason})")
            elif batch.state == "committed":
                log(f"batch {batch.id}: committed, so not aborted; the next run publishes it")
    return aborted


# ---------------------------------------------------------------- the whole loop

class RunSummary(NamedTuple):
    batches: int
    records_read: int
    sink_rows: int
    dead_letters: int
    published: int

    def add(self, done: store.Batch) -> RunSummary:
        """This summary with one more finished batch counted."""
        return RunSummary(self.batches + 1, self.records_read + (done.records_read or 0),
                          self.sink_rows + (done.sink_rows or 0), self.dead_letters + (done.dead_letters or 0),
                          self.published + (done.published_records or 0))


def run_batch(pipeline_name: str, batch: store.Batch, log: Log = _quiet, owner: str | None = None
              ) -> store.Batch:
    """process -> commit -> publish for one planned batch; aborts it if it fails before the commit.
    The lane's lease (held by `owner`, default this process) is renewed before each step and by a
    heartbeat meanwhile; a runner that finds it lost stops with LaneLost."""
    settings = config.load()
    with leases.Heartbeat(settings, pipeline_name, lane(batch.kind), owner or leases.runner_id()) as lease:
        with aborted_on_failure(pipeline_name, batch.id):
            process(pipeline_name, batch.id, log)
            lease.check()
            if settings.early_publish:
                return commit_and_publish(pipeline_name, batch.id, log)  # a committed batch is never aborted
            commit(pipeline_name, batch.id, log)
        lease.check()
        return publish(pipeline_name, batch.id, log)


@contextlib.contextmanager
def aborted_on_failure(pipeline_name: str, batch_id: int) -> Iterator[None]:
    """Around a batch's steps up to its commit: any failure aborts the batch (its ranges are planned again)
    and is raised. A commit that refused the batch (offsets moved, a range overlap) has aborted it itself."""
    try:
        yield
    except (OffsetMismatch, RangeConflict):
        raise
    except Exception as exc:
        abort(pipeline_name, batch_id, reason=f"{type(exc).__name__}: {exc}")
        raise


def run(pipeline_name: str, max_batches: int | None = None, log: Log = _quiet, overlap: bool | None = None
        ) -> RunSummary:
    """Plan and run batches until caught up (or `max_batches`), holding the regular lane's lease
    throughout, and releasing it at the end so that the next runner need not wait for it to expire.
    `overlap` (default: the EOSBATCH_OVERLAP setting) runs consecutive batches' steps side by side
    (eosbatch.overlap); off, each batch is published before the next is planned."""
    if config.load().overlap if overlap is None else overlap:
        from eosbatch import overlap as overlapped  # it builds on this module

        return overlapped.run(pipeline_name, max_batches, log)
    owner = leases.runner_id()
    summary = RunSummary(0, 0, 0, 0, 0)
    try:
        while max_batches is None or summary.batches < max_batches:
            batch = plan(pipeline_name, log, owner)
            if batch is None:
                break
            summary = summary.add(run_batch(pipeline_name, batch, log, owner))
    finally:
        release_publishers()
        with contextlib.suppress(EosbatchError):  # a bad setting was reported by plan already
            leases.release(config.load(), pipeline_name, "regular", owner)
    return summary
